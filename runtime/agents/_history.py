"""Conversation history (lovia's Session -- lovia being the Python agent framework whose
Session/Checkpoint/Runner design this layer follows) on the event log, and in memory.

A conversation is a tidelog session; a *segment* is one run's entries in it. Appending a
segment is one atomic append of the run's entries (each event tagged with the run_id)
followed by a ``tidelog.segment`` marker holding the run's meta -- so a run is in the
history whole or not at all. Appends are idempotent per ``(session, run_id)``: the first
write wins, a repeat is a no-op (replays re-apply their append safely). The check and the
write need no lock: the write carries the head the check saw (``expected_head``), so a
concurrent writer makes it fail with a conflict and the check runs again.

Maintenance rewrites the tail of the log in one atomic step (a ``ReplaceOp``):
``trim_tool_results`` shortens old tool outputs, ``rewind`` cuts the conversation back.
Snapshots covering what they change expire instead of mixing versions.
"""

from __future__ import annotations

import re
import uuid
from collections import defaultdict
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import attrs
import trio

from runtime import (
    JSON,
    InvalidArgumentError,
    NewEvent,
)
from stores import prepare_events, validate_session_id
from stores._records import decode_json, encode_json

from ._checkpoints import Checkpointer, check_run_id
from ._transcript import (
    Entry,
    ToolResult,
    drop_dangling_tool_calls,
    entry_from_event,
    entry_to_event,
    entry_to_json,
)

__all__ = [
    "SEGMENT_KIND",
    "History",
    "MemoryHistory",
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

    ``checkpointer``: rewinding a run of this conversation deletes its checkpoint there.
    Trimmed outputs are archived in memory, so :meth:`recall_tool_result` returns them.
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
        await _forget_runs(self.checkpointer, session_id, rewound)
        return removed

    async def recall_tool_result(self, session_id: str, call_id: str) -> str | None:
        """The full output of a trimmed tool result, if archived."""
        validate_session_id(session_id)
        await trio.lowlevel.checkpoint()
        return self._archive.get((session_id, call_id))


# -- on a runtime -------------------------------------------------------------------------


async def _forget_runs(
    checkpointer: Checkpointer | None, session_id: str, run_ids: Sequence[str]
) -> None:
    """Delete the checkpoints of the rewound runs that belong to ``session_id``."""
    if checkpointer is None:
        return
    for run_id in run_ids:
        snapshot = await checkpointer.load(run_id)
        if snapshot is not None and snapshot.head.session_id == session_id:
            await checkpointer.delete(run_id)


def entries_json(entries: Sequence[Entry]) -> list[JSON]:
    """Entries as JSON objects (for printing and export)."""
    return [entry_to_json(e) for e in entries]
