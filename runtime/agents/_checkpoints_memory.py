"""The in-memory :class:`~runtime.agents.Checkpointer`, for tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import trio

from runtime import JSON, SessionOwnedError
from stores import prepare_events

from ._checkpoints import (
    RunHead,
    RunInfo,
    RunSnapshot,
    RunStatus,
    check_run_id,
    checkpoint_events,
)
from ._transcript import Entry, entry_from_json, entry_to_json

__all__ = ["MemoryCheckpointer"]


class MemoryCheckpointer:
    """An in-memory :class:`Checkpointer` (gone with the process; claims reach the tasks
    of this process)."""

    def __init__(self) -> None:
        self._runs: dict[str, tuple[list[dict[str, JSON]], dict[str, JSON]]] = {}
        self._claimed: dict[str, trio.Event] = {}

    @asynccontextmanager
    async def claim(self, run_id: str, *, wait: bool = False) -> AsyncIterator[None]:
        """See :meth:`Checkpointer.claim`."""
        check_run_id(run_id)
        while run_id in self._claimed:
            if not wait:
                raise SessionOwnedError(run_id, "another task of this process runs it")
            await self._claimed[run_id].wait()
        await trio.lowlevel.checkpoint()
        released = self._claimed[run_id] = trio.Event()
        try:
            yield
        finally:
            del self._claimed[run_id]
            released.set()

    async def append(self, run_id: str, entries: Sequence[Entry], head: RunHead) -> None:
        """See :meth:`Checkpointer.append`."""
        prepare_events(checkpoint_events(run_id, entries, head))  # its one encoding: a check
        await trio.lowlevel.checkpoint()
        stored, _ = self._runs.get(run_id, ([], {}))
        self._runs[run_id] = (stored + [entry_to_json(e) for e in entries], head.to_json())

    async def load(self, run_id: str) -> RunSnapshot | None:
        """See :meth:`Checkpointer.load`."""
        check_run_id(run_id)
        await trio.lowlevel.checkpoint()
        if run_id not in self._runs:
            return None
        entries, head = self._runs[run_id]
        return RunSnapshot(
            run_id, tuple(entry_from_json(e) for e in entries), RunHead.from_json(head)
        )

    async def delete(self, run_id: str) -> None:
        """See :meth:`Checkpointer.delete`."""
        check_run_id(run_id)
        await trio.lowlevel.checkpoint()
        self._runs.pop(run_id, None)

    async def list(self, *, status: RunStatus | None = None) -> list[RunInfo]:
        """See :meth:`Checkpointer.list`."""
        await trio.lowlevel.checkpoint()
        infos = [
            RunInfo(run_id, RunHead.from_json(head)) for run_id, (_, head) in self._runs.items()
        ]
        infos = [i for i in infos if status is None or i.head.status == status]
        infos.sort(key=lambda i: (-i.head.updated_at, i.run_id))
        return infos

    def home(self, run_id: str) -> None:
        """See :meth:`Checkpointer.home`: in memory, never on a runtime."""
        check_run_id(run_id)
