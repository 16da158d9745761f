"""StoreLane: one store handle, one thread lane.

Every call into a blocking store (SQLite) runs in a worker thread through a
``CapacityLimiter(1)``: one owner per connection, one call at a time, never on the trio
thread. Callers batch their work so that one call is one thread hop (a hop costs ~150 us).
A non-blocking store (``store.blocking`` is False, e.g. memory) is called inline.

Cancellation: a call that is waiting for the lane can be cancelled (nothing ran); a call
that has started in the thread always runs to completion and its result is delivered --
it is never abandoned (``abandon_on_cancel=False``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import trio

from stores import Store

__all__ = ["StoreLane"]

T = TypeVar("T")


class StoreLane:
    """Serialises all calls on one :class:`~stores.Store` handle through one thread lane."""

    def __init__(self, store: Store, *, name: str) -> None:
        self.store = store
        self.name = name
        self._limiter = trio.CapacityLimiter(1)
        self._inline = not getattr(store, "blocking", True)
        self.calls = 0

    async def run(self, fn: Callable[..., T], *args: object) -> T:
        """Run ``fn(*args)`` on the lane; a checkpoint. See the module doc for cancellation."""
        self.calls += 1
        if self._inline:
            await trio.lowlevel.checkpoint_if_cancelled()
            try:
                return fn(*args)
            finally:
                await trio.lowlevel.cancel_shielded_checkpoint()
        return await trio.to_thread.run_sync(fn, *args, limiter=self._limiter)

    async def aclose(self) -> None:
        """Close the lane's store handle (in the lane, after any running call)."""
        await self.run(self.store.close)
