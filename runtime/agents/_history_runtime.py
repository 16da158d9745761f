"""Conversation history on a tidelog runtime: :class:`RuntimeHistory`.

Each conversation is a session; segments are appended through a shared writer of it.
Check-then-write (idempotency per run_id, trim, rewind) runs optimistically: the write
carries the head the check saw, so a concurrent writer makes it fail with a conflict and
the check run again -- no lock, no per-session state.
"""

from __future__ import annotations

import hashlib
import uuid
from collections import defaultdict
from collections.abc import Sequence

import attrs

from runtime import INTERNAL_PREFIX, JSON, NewEvent, Runtime, StoredEvent
from stores import prepare_events, validate_session_id

from ._checkpoints import Checkpointer, check_run_id
from ._history import (
    ARCHIVED_KIND,
    SEGMENT_KIND,
    Segment,
    check_count,
    check_entries,
    check_meta,
    forget_runs,
    plan_rewind,
    segment_events,
    trimmed_result,
)
from ._home import SessionHome, optimistic
from ._transcript import Entry, ToolResult, entry_from_stored, entry_to_event

__all__ = ["RuntimeHistory"]


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
    """:class:`History` on a tidelog runtime: each conversation is a tidelog session (get
    the runtime's one with :func:`runtime.agents.history`).

    Writes go through a shared writer of the session (one lease and one seq order with
    any other writer of it in this runtime); ``append`` returns once the segment is
    committed. Concurrent appends of one run_id -- from tasks of this runtime or from
    other processes -- store it once (see the module doc).

    ``archive``: when True (default), ``trim_tool_results`` first copies every full output
    it cuts into an internal archive session in the same database, and
    :meth:`recall_tool_result` returns it. With ``archive=False`` a trimmed output is gone
    for good: only the kept prefix and the marker remain. ``checkpointer``: rewinding runs
    deletes their checkpoints there -- only those of runs that belong to this
    conversation, never those a fork inherited from its parent (else a later resume would
    write the undone tail back).
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

    async def _parsed(self, session_id: str, *, since_seq: int = 0) -> list[_Parsed]:
        validate_session_id(session_id)
        return _parse([e async for e in self.runtime.iter_events(session_id, since_seq=since_seq)])

    async def segments(self, session_id: str) -> list[Segment]:
        """See :meth:`History.segments`."""
        return [p.segment for p in await self._parsed(session_id)]

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
        """See :meth:`History.append`.

        Cancellation: all or nothing (the segment is committed whole or not at all).
        Raises: :class:`InvalidArgumentError` (bad entries, run_id or meta; nothing
        written), :class:`SessionOwnedError` (another process writes the conversation),
        :class:`CommitPendingError` (the segment was accepted; its commit is retried),
        store errors (nothing accepted)."""
        validate_session_id(session_id)
        run_id = uuid.uuid4().hex if run_id is None else check_run_id(run_id)
        events = segment_events(check_entries(entries), run_id, check_meta(meta))
        # The open below creates the conversation: refuse bad data before it.
        prepare_events(events)
        async with self.runtime.open_session(session_id, shared=True) as writer:

            async def attempt(head: int) -> None:
                if not await self.has_run(session_id, run_id):
                    await writer.append(events, expected_head=head)

            await optimistic(writer, attempt)
        return run_id

    async def has_run(self, session_id: str, run_id: str) -> bool:
        """See :meth:`History.has_run` (a committed segment)."""
        found = await self.runtime.find_run(session_id, run_id)
        if found is None:
            return False
        tail = await self.runtime.read(session_id, since_seq=found[1] - 1, until_seq=found[1])
        return bool(tail) and tail[-1].kind == SEGMENT_KIND

    def home(self, session_id: str) -> SessionHome:
        """See :meth:`History.home`: the conversation is the session ``session_id``."""
        validate_session_id(session_id)
        return SessionHome(
            runtime=self.runtime,
            session_id=session_id,
            open_writer=lambda: self.runtime.open_session(session_id, shared=True),
        )

    async def clear(self, session_id: str) -> None:
        """Remove every segment (``rewind(session_id, 0)``): runs lose their checkpoints
        too, and snapshots of the session expire."""
        await self.rewind(session_id, 0)

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
        check_count(keep_chars, "keep_chars")
        check_count(keep_runs, "keep_runs")
        if await self.runtime.stat(session_id) is None:
            return 0
        async with self.runtime.open_session(session_id, shared=True) as writer:

            async def attempt(head: int) -> int:
                parsed = await self._parsed(session_id)
                changed: dict[int, ToolResult] = {}
                archived: list[NewEvent] = []
                for p in parsed[: max(0, len(parsed) - keep_runs)]:
                    for event, entry in zip(p.events, p.segment.entries, strict=False):
                        if isinstance(entry, ToolResult):
                            short = trimmed_result(entry, keep_chars)
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
                first = min(changed)
                tail = [e async for e in self.runtime.iter_events(session_id, since_seq=first - 1)]
                rewritten = [
                    entry_to_event(changed[e.seq], run_id=e.run_id)
                    if e.seq in changed
                    else NewEvent(e.kind, e.data, run_id=e.run_id)
                    for e in tail
                ]
                if self.archive:
                    await self._archive(session_id, archived)
                await writer.replace(first - 1, rewritten, expected_head=head)
                return len(changed)

            return await optimistic(writer, attempt)

    @staticmethod
    def archive_session(session_id: str) -> str:
        """The internal session that archives ``session_id``'s trimmed outputs."""
        digest = hashlib.sha256(session_id.encode("utf-8")).hexdigest()[:40]
        return f"{INTERNAL_PREFIX}archive/{digest}"

    async def _archive(self, session_id: str, events: list[NewEvent]) -> None:
        header: dict[str, JSON] = {"tidelog": "archive", "session": session_id}
        async with self.runtime.open_session(
            self.archive_session(session_id), header=header, shared=True, internal=True
        ) as writer:
            await writer.append(events)

    async def recall_tool_result(self, session_id: str, call_id: str) -> str | None:
        """The full output of a tool result that ``trim_tool_results`` cut, or ``None``
        (never trimmed, or trimmed with the archive off: then it is lost)."""
        validate_session_id(session_id)
        found: str | None = None
        async for event in self.runtime.iter_events(self.archive_session(session_id)):
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
        runs that belong to this conversation lose their checkpoints (with a
        ``checkpointer``); a fork's inherited runs keep their parent's.

        Raises: :class:`InvalidArgumentError` (also ``ValueError``) for a negative count.
        """
        validate_session_id(session_id)
        check_count(keep_entries, "keep_entries")
        if await self.runtime.stat(session_id) is None:
            return 0
        async with self.runtime.open_session(session_id, shared=True) as writer:

            async def attempt(head: int) -> tuple[int, list[str]]:
                parsed = await self._parsed(session_id)
                plan = plan_rewind([p.segment for p in parsed], keep_entries)
                if plan is None:
                    return 0, []
                k, removed, kept, rewound = plan
                events: list[NewEvent] = []
                if kept:
                    events = segment_events(kept, parsed[k].segment.run_id, None)
                await writer.replace(parsed[k].first_seq - 1, events, expected_head=head)
                return removed, rewound

            removed, rewound = await optimistic(writer, attempt)
        await forget_runs(self.checkpointer, session_id, rewound)
        return removed
