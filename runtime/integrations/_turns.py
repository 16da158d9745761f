"""Turns: first come, first served, in the order tickets were taken (synchronously, at
the call), not in the order trio happens to schedule the waiting tasks."""

from __future__ import annotations

import attrs
import trio

__all__ = ["Turns"]


@attrs.define
class Turns:
    """A queue of tickets. :meth:`take` (not a checkpoint) is called where call order
    is known; :meth:`wait` returns when every earlier ticket is done or abandoned;
    :meth:`done` passes the turn on (the next holder runs only once this task reaches
    a checkpoint, so whatever it does synchronously after :meth:`done` still comes
    first)."""

    _next: int = 0
    _serving: int = 0
    _abandoned: set[int] = attrs.field(factory=set)
    _waiting: dict[int, trio.Event] = attrs.field(factory=dict)

    def take(self) -> int:
        ticket = self._next
        self._next += 1
        return ticket

    @property
    def idle(self) -> bool:
        """No ticket is waiting or being served."""
        return self._serving == self._next

    async def wait(self, ticket: int) -> None:
        """Wait for ``ticket``'s turn. Cancelled: the ticket is abandoned (the caller
        must not call :meth:`done`)."""
        try:
            if self._serving == ticket:
                await trio.lowlevel.checkpoint()
                return
            event = self._waiting[ticket] = trio.Event()
            try:
                await event.wait()
            finally:
                del self._waiting[ticket]
        except BaseException:
            self.abandon(ticket)
            raise

    def done(self, ticket: int) -> None:
        """End ``ticket``'s turn."""
        assert self._serving == ticket
        self._serving += 1
        while self._serving in self._abandoned:
            self._abandoned.discard(self._serving)
            self._serving += 1
        event = self._waiting.get(self._serving)
        if event is not None:
            event.set()

    def abandon(self, ticket: int) -> None:
        """Give ``ticket`` up, served or not."""
        if self._serving == ticket:
            self.done(ticket)
        elif ticket > self._serving:
            self._abandoned.add(ticket)
