"""Conversation history (lovia's Session) on the event log, and in memory.

A conversation is a tidelog session; a *segment* is one run's entries in it. Appending a
segment is one atomic append of the run's entries (each event tagged with the run_id)
followed by a ``tidelog.segment`` marker holding the run's meta -- so a run is in the
history whole or not at all. Appends are idempotent per ``(session, run_id)``: the first
write wins, a repeat is a no-op (replays re-apply their append safely).

Maintenance rewrites the tail of the log in one atomic step (a ``ReplaceOp``):
``trim_tool_results`` shortens old tool outputs, ``rewind`` cuts the conversation back.
Snapshots covering what they change expire instead of mixing versions.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import attrs
import trio

from actors import SessionActor
from stores import (
    JSON,
    InvalidArgumentError,
    NewEvent,
    PreparedEvent,
    StoredEvent,
    prepare_events,
    validate_session_id,
)
from stores.records import decode_json, encode_json

from .checkpoints import Checkpointer, check_run_id
from .transcript import (
    Entry,
    ToolResult,
    drop_dangling_tool_calls,
    entry_from_event,
    entry_from_stored,
    entry_to_event,
    entry_to_json,
)

if TYPE_CHECKING:
    from .runtime import Runtime

__all__ = [
    "SEGMENT_KIND",
    "History",
    "MemoryHistory",
    "RuntimeHistory",
    "Segment",
    "trim_marker",
]

#: Event kind of the marker that closes a segment (reserved ``tidelog.`` prefix).
SEGMENT_KIND = "tidelog.segment"
#: Event kind of an archived tool output (in the archive session).
ARCHIVED_KIND = "tidelog.archived"
_RESERVED = "tidelog."
_MARKER = re.compile(r"\n\[tidelog: trimmed \d+ of \d+ characters of tool result .*\]\Z", re.S)


@attrs.frozen
class Segment:
    """One run's entries in a conversation, with the run's opaque ``meta``."""

    run_id: str
    entries: tuple[Entry, ...]
    meta: dict[str, JSON] | None = None


@runtime_checkable
class History(Protocol):
    """The conversation-history contract (every method is an async checkpoint)."""

    async def segments(self, session_id: str) -> list[Segment]:
        """The stored runs, in order."""
        ...

    async def load(self, session_id: str) -> list[Entry]:
        """All entries of all segments, flat, runs in order."""
        ...

    async def append(
        self,
        session_id: str,
        entries: Sequence[Entry],
        *,
        run_id: str | None = None,
        meta: dict[str, JSON] | None = None,
    ) -> str:
        """Store a run's entries as a segment; return its run_id (generated if None).
        A run_id already stored in this session makes it a no-op (first write wins)."""
        ...

    async def clear(self, session_id: str) -> None:
        """Remove every segment."""
        ...


def trim_marker(call_id: str, cut: int, total: int) -> str:
    """The honest marker appended to a trimmed tool output."""
    return (
        f"\n[tidelog: trimmed {cut} of {total} characters of tool result {call_id}; "
        "recall_tool_result() returns the full output if it was archived]"
    )


def _check_entries(entries: object) -> list[Entry]:
    if isinstance(entries, str | bytes) or not isinstance(entries, Sequence):
        raise InvalidArgumentError("entries must be a sequence of transcript entries")
    events = [entry_to_event(e) for e in entries]  # validates each entry
    for index, event in enumerate(events):
        if event.kind.startswith(_RESERVED):
            raise InvalidArgumentError(f"entry {index}: kind {event.kind!r} is reserved")
    return list(entries)


def _check_meta(meta: object) -> dict[str, JSON] | None:
    if meta is None:
        return None
    if not isinstance(meta, dict):
        raise InvalidArgumentError(f"meta must be a dict or None, not {type(meta).__name__}")
    copy = decode_json(encode_json(meta))
    assert isinstance(copy, dict)
    return copy


def _check_count(value: object, name: str) -> int:
    if type(value) is not int or value < 0:
        raise InvalidArgumentError(f"{name} must be an int >= 0, not {value!r}")
    return value


def _segment_events(
    entries: Sequence[Entry], run_id: str, meta: dict[str, JSON] | None
) -> list[NewEvent]:
    events = [entry_to_event(e, run_id=run_id) for e in entries]
    events.append(NewEvent(SEGMENT_KIND, {"meta": meta, "entries": len(entries)}, run_id=run_id))
    return events


def _trimmed(result: ToolResult, keep_chars: int) -> ToolResult | None:
    """The trimmed version of ``result``, or None if it must be left alone."""
    output = result.output
    if _MARKER.search(output):
        return None  # already trimmed: idempotent
    cut = len(output) - keep_chars
    if cut <= 0:
        return None
    marker = trim_marker(result.call_id, cut, len(output))
    if keep_chars + len(marker) >= len(output):
        return None  # would not shrink by more than the marker costs
    return ToolResult(result.call_id, output[:keep_chars] + marker, result.is_error)


def _plan_rewind(
    segments: Sequence[Segment], keep_entries: int
) -> tuple[int, int, list[Entry], list[str]] | None:
    """Where a rewind cuts: ``(segment index k, removed count, entries kept of segment k,
    run_ids rewound)``; None if nothing is removed."""
    total = sum(len(s.entries) for s in segments)
    if keep_entries >= total:
        return None
    seen = 0
    for k, segment in enumerate(segments):
        if seen + len(segment.entries) > keep_entries:
            kept = drop_dangling_tool_calls(segment.entries[: keep_entries - seen])
            removed = total - seen - len(kept)
            return k, removed, kept, [s.run_id for s in segments[k:]]
        seen += len(segment.entries)
    raise AssertionError("unreachable")  # pragma: no cover


# -- in memory ----------------------------------------------------------------------------


class MemoryHistory:
    """An in-memory :class:`History` for tests and throwaway chats (dies with the process).

    ``checkpointer``: rewinding a run deletes its checkpoint there. Trimmed outputs are
    archived in memory, so :meth:`recall_tool_result` returns them.
    """

    def __init__(self, *, checkpointer: Checkpointer | None = None) -> None:
        self.checkpointer = checkpointer
        self._sessions: dict[str, list[dict[str, JSON]]] = defaultdict(list)
        self._archive: dict[tuple[str, str], str] = {}

    @staticmethod
    def _segment(raw: dict[str, JSON]) -> Segment:
        stored = raw["events"]
        assert isinstance(stored, list)
        entries: list[Entry] = []
        for event in stored:
            assert isinstance(event, dict) and isinstance(event["kind"], str)
            entries.append(entry_from_event(event["kind"], event["data"]))
        meta = raw["meta"]
        return Segment(str(raw["run_id"]), tuple(entries), _check_meta(meta))

    @staticmethod
    def _raw(segment: Segment) -> dict[str, JSON]:
        events: list[JSON] = []
        for entry in segment.entries:
            event = entry_to_event(entry)
            events.append({"kind": event.kind, "data": event.data})
        return {"run_id": segment.run_id, "events": events, "meta": segment.meta}

    async def segments(self, session_id: str) -> list[Segment]:
        """See :meth:`History.segments`."""
        validate_session_id(session_id)
        await trio.lowlevel.checkpoint()
        return [self._segment(r) for r in self._sessions.get(session_id, [])]

    async def load(self, session_id: str) -> list[Entry]:
        """See :meth:`History.load`."""
        return [e for s in await self.segments(session_id) for e in s.entries]

    async def append(
        self,
        session_id: str,
        entries: Sequence[Entry],
        *,
        run_id: str | None = None,
        meta: dict[str, JSON] | None = None,
    ) -> str:
        """See :meth:`History.append`."""
        validate_session_id(session_id)
        checked = _check_entries(entries)
        run_id = uuid.uuid4().hex if run_id is None else check_run_id(run_id)
        meta = _check_meta(meta)
        prepare_events(_segment_events(checked, run_id, meta))
        await trio.lowlevel.checkpoint()
        stored = self._sessions[session_id]
        if all(r["run_id"] != run_id for r in stored):
            stored.append(self._raw(Segment(run_id, tuple(checked), meta)))
        return run_id

    async def clear(self, session_id: str) -> None:
        """See :meth:`RuntimeHistory.clear`."""
        await self.rewind(session_id, 0)

    async def trim_tool_results(
        self, session_id: str, keep_chars: int = 400, keep_runs: int = 1
    ) -> int:
        """See :meth:`RuntimeHistory.trim_tool_results`."""
        validate_session_id(session_id)
        _check_count(keep_chars, "keep_chars")
        _check_count(keep_runs, "keep_runs")
        segments = await self.segments(session_id)
        old = len(segments) - keep_runs
        trimmed = 0
        new: list[Segment] = []
        for index, segment in enumerate(segments):
            entries = list(segment.entries)
            if index < old:
                for i, entry in enumerate(entries):
                    if isinstance(entry, ToolResult):
                        short = _trimmed(entry, keep_chars)
                        if short is not None:
                            self._archive[(session_id, entry.call_id)] = entry.output
                            entries[i] = short
                            trimmed += 1
            new.append(Segment(segment.run_id, tuple(entries), segment.meta))
        if trimmed:
            self._sessions[session_id] = [self._raw(s) for s in new]
        return trimmed

    async def rewind(self, session_id: str, keep_entries: int) -> int:
        """See :meth:`RuntimeHistory.rewind`."""
        validate_session_id(session_id)
        _check_count(keep_entries, "keep_entries")
        segments = await self.segments(session_id)
        plan = _plan_rewind(segments, keep_entries)
        if plan is None:
            return 0
        k, removed, kept, rewound = plan
        new = list(segments[:k])
        if kept:
            new.append(Segment(segments[k].run_id, tuple(kept), None))
        self._sessions[session_id] = [self._raw(s) for s in new]
        if self.checkpointer is not None:
            for run_id in rewound:
                await self.checkpointer.delete(run_id)
        return removed

    async def recall_tool_result(self, session_id: str, call_id: str) -> str | None:
        """The full output of a trimmed tool result, if archived."""
        validate_session_id(session_id)
        await trio.lowlevel.checkpoint()
        return self._archive.get((session_id, call_id))


# -- on a runtime -------------------------------------------------------------------------


@attrs.frozen
class _Parsed:
    segment: Segment
    first_seq: int
    events: tuple[StoredEvent, ...]


def _parse(events: Sequence[StoredEvent]) -> list[_Parsed]:
    """Group a session's events into segments (events of a run up to its marker)."""
    open_runs: dict[str, list[StoredEvent]] = defaultdict(list)
    out: list[_Parsed] = []
    for event in events:
        if event.run_id is None:
            continue
        if event.kind != SEGMENT_KIND:
            open_runs[event.run_id].append(event)
            continue
        stored = open_runs.pop(event.run_id, [])
        data = event.data if isinstance(event.data, dict) else {}
        meta = data.get("meta")
        segment = Segment(
            event.run_id,
            tuple(entry_from_stored(e) for e in stored),
            meta if isinstance(meta, dict) else None,
        )
        out.append(_Parsed(segment, stored[0].seq if stored else event.seq, (*stored, event)))
    return out


class RuntimeHistory:
    """:class:`History` on a tidelog runtime: each conversation is a tidelog session.

    Writes go through the session's actor (single writer, group commit, leases);
    ``append`` returns once the segment is committed. Concurrent appends of one run_id --
    from tasks of this runtime or from other processes -- store it once: the check and the
    append run under the session's lease and a per-session lock.

    ``archive``: when True (default), ``trim_tool_results`` first copies every full output
    it cuts into an archive session in the same database, and :meth:`recall_tool_result`
    returns it. With ``archive=False`` a trimmed output is gone for good: only the kept
    prefix and the marker remain. ``checkpointer``: rewinding runs deletes their
    checkpoints there (else a later resume would write the undone tail back).
    """

    def __init__(
        self,
        runtime: Runtime,
        *,
        checkpointer: Checkpointer | None = None,
        archive: bool = True,
    ) -> None:
        self.runtime = runtime
        self.checkpointer = checkpointer
        self.archive = archive
        self._locks: dict[str, trio.Lock] = {}

    @asynccontextmanager
    async def locked(self, session_id: str) -> AsyncIterator[None]:
        """Hold this history's lock for ``session_id`` (serialises check-then-write)."""
        lock = self._locks.setdefault(session_id, trio.Lock())
        async with lock:
            yield

    async def _parsed(self, session_id: str) -> list[_Parsed]:
        validate_session_id(session_id)
        return _parse(await self.runtime._read_all(session_id))

    async def segments(self, session_id: str) -> list[Segment]:
        """See :meth:`History.segments`."""
        return [p.segment for p in await self._parsed(session_id)]

    async def load(self, session_id: str) -> list[Entry]:
        """See :meth:`History.load`."""
        return [e for s in await self.segments(session_id) for e in s.entries]

    def segment_events(
        self, entries: Sequence[Entry], run_id: str, meta: dict[str, JSON] | None
    ) -> list[PreparedEvent]:
        """Validate a segment and encode its events (entries then the marker)."""
        return prepare_events(_segment_events(_check_entries(entries), run_id, meta))

    async def append(
        self,
        session_id: str,
        entries: Sequence[Entry],
        *,
        run_id: str | None = None,
        meta: dict[str, JSON] | None = None,
    ) -> str:
        """See :meth:`History.append`.

        Cancellation: all or nothing (the segment is committed whole or not at all).
        Raises: :class:`InvalidArgumentError` (bad entries, run_id or meta; nothing
        written), store errors, :class:`OwnershipLostError`."""
        validate_session_id(session_id)
        run_id = uuid.uuid4().hex if run_id is None else check_run_id(run_id)
        prepared = self.segment_events(entries, run_id, _check_meta(meta))
        async with self.locked(session_id), self.runtime._using(session_id) as actor:
            await actor.wait_committed(actor.assigned, actor.failures)
            if await self.has_run(session_id, run_id):
                return run_id
            await actor.append(prepared, None)
        return run_id

    async def has_run(self, session_id: str, run_id: str) -> bool:
        """True if a segment of ``run_id`` is stored in the session."""
        lane = self.runtime._read_lane
        found = await lane.run(lane.store.find_run, session_id, run_id)
        if found is None:
            return False
        tail = await self.runtime._read(session_id, found[1] - 1, found[1], None)
        return bool(tail) and tail[-1].kind == SEGMENT_KIND

    async def clear(self, session_id: str) -> None:
        """Remove every segment (``rewind(session_id, 0)``): runs lose their checkpoints
        too, and snapshots of the session expire."""
        await self.rewind(session_id, 0)

    async def _rewrite(
        self, actor: SessionActor, from_seq: int | None, events: Sequence[PreparedEvent]
    ) -> None:
        """Replace everything after ``from_seq`` with ``events`` (one atomic step)."""
        if from_seq is None:
            return
        await actor.wait_committed(actor.assigned, actor.failures)
        failures = actor.failures
        write = actor.enqueue_replace(from_seq, events)
        await actor.wait_write(write, failures)

    async def trim_tool_results(
        self, session_id: str, keep_chars: int = 400, keep_runs: int = 1
    ) -> int:
        """Shorten the tool outputs of all but the last ``keep_runs`` runs.

        Each output longer than ``keep_chars`` keeps its first ``keep_chars`` characters
        plus an honest marker naming how much was cut and the call id -- unless that would
        not make it shorter. Structure, order and call ids are unchanged. Idempotent (a
        second call trims 0). All or nothing: one atomic rewrite of the log's tail; with
        the archive on, the full outputs are archived (committed) before the cut. Returns
        how many results were trimmed.

        Raises: :class:`InvalidArgumentError` (also ``ValueError``) for negative counts.
        """
        validate_session_id(session_id)
        _check_count(keep_chars, "keep_chars")
        _check_count(keep_runs, "keep_runs")
        if await self.runtime.stat(session_id) is None:
            return 0
        async with self.locked(session_id), self.runtime._using(session_id) as actor:
            await actor.wait_committed(actor.assigned, actor.failures)
            parsed = await self._parsed(session_id)
            changed: dict[int, ToolResult] = {}
            archived: list[NewEvent] = []
            for p in parsed[: max(0, len(parsed) - keep_runs)]:
                for event, entry in zip(p.events, p.segment.entries, strict=False):
                    if isinstance(entry, ToolResult):
                        short = _trimmed(entry, keep_chars)
                        if short is not None:
                            changed[event.seq] = short
                            archived.append(
                                NewEvent(
                                    ARCHIVED_KIND,
                                    {"call_id": entry.call_id, "output": entry.output},
                                )
                            )
            if not changed:
                return 0
            if self.archive:
                await self._archive(session_id, archived)
            first = min(changed)
            tail = await self.runtime._read_all(session_id, since_seq=first - 1)
            rewritten = [
                entry_to_event(changed[e.seq], run_id=e.run_id)
                if e.seq in changed
                else NewEvent(e.kind, e.data, run_id=e.run_id)
                for e in tail
            ]
            await self._rewrite(actor, first - 1, prepare_events(rewritten))
            return len(changed)

    @staticmethod
    def archive_session(session_id: str) -> str:
        """The session that archives ``session_id``'s trimmed outputs."""
        digest = hashlib.sha256(session_id.encode("utf-8")).hexdigest()[:40]
        return f"archive:{digest}"

    async def _archive(self, session_id: str, events: list[NewEvent]) -> None:
        header: dict[str, JSON] = {"tidelog": "archive", "session": session_id}
        async with self.runtime._using(self.archive_session(session_id), header=header) as a:
            await a.append(prepare_events(events), None)

    async def recall_tool_result(self, session_id: str, call_id: str) -> str | None:
        """The full output of a tool result that ``trim_tool_results`` cut, or ``None``
        (never trimmed, or trimmed with the archive off: then it is lost)."""
        validate_session_id(session_id)
        found: str | None = None
        for event in await self.runtime._read_all(self.archive_session(session_id)):
            data = event.data
            if isinstance(data, dict) and data.get("call_id") == call_id:
                output = data.get("output")
                found = output if isinstance(output, str) else found
        return found

    async def rewind(self, session_id: str, keep_entries: int) -> int:
        """Cut the conversation back to its first ``keep_entries`` entries (counted in the
        flat :meth:`load` view); return how many entries were removed.

        Runs after the cut are deleted whole. The run the cut falls in is truncated, its
        tool calls left without results are dropped, and its meta is cleared (it described
        the whole run). ``keep_entries=0`` empties the history; at or past the end it is a
        no-op returning 0. One atomic rewrite; snapshots of the cut part expire. Rewound
        runs lose their checkpoints (with a ``checkpointer``).

        Raises: :class:`InvalidArgumentError` (also ``ValueError``) for a negative count.
        """
        validate_session_id(session_id)
        _check_count(keep_entries, "keep_entries")
        if await self.runtime.stat(session_id) is None:
            return 0
        async with self.locked(session_id), self.runtime._using(session_id) as actor:
            await actor.wait_committed(actor.assigned, actor.failures)
            parsed = await self._parsed(session_id)
            plan = _plan_rewind([p.segment for p in parsed], keep_entries)
            if plan is None:
                return 0
            k, removed, kept, rewound = plan
            events: list[PreparedEvent] = []
            if kept:
                events = prepare_events(_segment_events(kept, parsed[k].segment.run_id, None))
            await self._rewrite(actor, parsed[k].first_seq - 1, events)
        if self.checkpointer is not None:
            for run_id in rewound:
                await self.checkpointer.delete(run_id)
        return removed


def entries_json(entries: Sequence[Entry]) -> list[JSON]:
    """Entries as JSON objects (for printing and export)."""
    return [entry_to_json(e) for e in entries]
