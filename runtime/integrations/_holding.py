"""A session writer held across calls: opened by the first write, kept (a task of the
bridge's nursery owns it) until let go, so the lease -- one writer per session across
processes -- stays with this holder for the whole run, not for each call."""

from __future__ import annotations

from typing import Any

import attrs
import trio

from runtime import SessionWriter, TidelogError

from ._bridge import Bridge
from ._turns import Turns

__all__ = ["HeldSession"]


@attrs.define(eq=False)
class HeldSession:
    """One session this process writes: its :class:`Turns` (writes are accepted in
    call order) and, while held, its writer. Trio thread only.

    ``errors`` collects what letting go of the writer raised (accepted writes that
    could not be written): the owner reports them at its close."""

    bridge: Bridge
    session_id: str
    internal: bool
    errors: list[TidelogError]
    turns: Turns = attrs.field(factory=Turns)
    _writer: SessionWriter | None = None
    _release: trio.Event | None = None
    _released: trio.Event | None = None

    @property
    def held(self) -> bool:
        return self._writer is not None

    async def writer(self) -> SessionWriter:
        """The writer, opened and held if it is not yet (the caller has the turn).

        Raises: what ``Runtime.open_session`` raises (:class:`~runtime.SessionOwnedError`
        when another writer holds the session); nothing stays open then."""
        if self._writer is not None:
            return self._writer
        if self._released is not None:  # an earlier hold is still letting go
            await self._released.wait()
        writer: SessionWriter = await self.bridge.nursery.start(self._hold)
        return writer

    async def _hold(self, *, task_status: trio.TaskStatus[Any]) -> None:
        release = self._release = trio.Event()
        released = self._released = trio.Event()
        started = False
        try:
            async with self.bridge.runtime.open_session(
                self.session_id, internal=self.internal
            ) as writer:
                self._writer = writer
                started = True
                task_status.started(writer)
                await release.wait()
        except TidelogError as exc:
            if not started:
                raise
            self.errors.append(exc)
        finally:
            if self._release is release:
                self._writer = None
            released.set()

    def drop(self) -> None:
        """Stop holding a writer that failed (ownership lost, broken): the next write
        opens it again."""
        if self._release is not None:
            self._release.set()
        self._writer = None

    async def let_go(self) -> None:
        """Close the writer (its accepted writes committed) and wait for it. Shielded."""
        release, released = self._release, self._released
        self._writer = None
        if release is not None and released is not None:
            release.set()
            with trio.CancelScope(shield=True):
                await released.wait()
