"""The in-memory :class:`~runtime.agents.History`, for tests and throwaway chats."""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Sequence

import trio

from runtime import JSON
from stores import prepare_events, validate_session_id

from ._checkpoints import Checkpointer, check_run_id
from ._history import (
    Segment,
    check_count,
    check_entries,
    check_meta,
    forget_runs,
    plan_rewind,
    segment_events,
    trimmed_result,
)
from ._transcript import Entry, ToolResult, entry_from_event, entry_to_event

__all__ = ["MemoryHistory"]


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
        return Segment(str(raw["run_id"]), tuple(entries), check_meta(meta))

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
        checked = check_entries(entries)
        run_id = uuid.uuid4().hex if run_id is None else check_run_id(run_id)
        meta = check_meta(meta)
        prepare_events(segment_events(checked, run_id, meta))
        await trio.lowlevel.checkpoint()
        stored = self._sessions[session_id]
        if all(r["run_id"] != run_id for r in stored):
            stored.append(self._raw(Segment(run_id, tuple(checked), meta)))
        return run_id

    async def has_run(self, session_id: str, run_id: str) -> bool:
        """See :meth:`History.has_run`."""
        validate_session_id(session_id)
        await trio.lowlevel.checkpoint()
        return any(r["run_id"] == run_id for r in self._sessions.get(session_id, []))

    def home(self, session_id: str) -> None:
        """See :meth:`History.home`: in memory, never on a runtime."""
        validate_session_id(session_id)

    async def clear(self, session_id: str) -> None:
        """See :meth:`RuntimeHistory.clear`."""
        await self.rewind(session_id, 0)

    async def trim_tool_results(
        self, session_id: str, keep_chars: int = 400, keep_runs: int = 1
    ) -> int:
        """See :meth:`RuntimeHistory.trim_tool_results`."""
        validate_session_id(session_id)
        check_count(keep_chars, "keep_chars")
        check_count(keep_runs, "keep_runs")
        segments = await self.segments(session_id)
        old = len(segments) - keep_runs
        trimmed = 0
        new: list[Segment] = []
        for index, segment in enumerate(segments):
            entries = list(segment.entries)
            if index < old:
                for i, entry in enumerate(entries):
                    if isinstance(entry, ToolResult):
                        short = trimmed_result(entry, keep_chars)
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
        check_count(keep_entries, "keep_entries")
        segments = await self.segments(session_id)
        plan = plan_rewind(segments, keep_entries)
        if plan is None:
            return 0
        k, removed, kept, rewound = plan
        new = list(segments[:k])
        if kept:
            new.append(Segment(segments[k].run_id, tuple(kept), None))
        self._sessions[session_id] = [self._raw(s) for s in new]
        await forget_runs(self.checkpointer, session_id, rewound)
        return removed

    async def recall_tool_result(self, session_id: str, call_id: str) -> str | None:
        """The full output of a trimmed tool result, if archived."""
        validate_session_id(session_id)
        await trio.lowlevel.checkpoint()
        return self._archive.get((session_id, call_id))
