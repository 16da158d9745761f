"""StoreLane: one store handle, one thread lane.

Every call into a blocking store (SQLite) runs in the lane's own worker thread, one call
at a time, never on the trio thread: one owner per connection. Callers batch their work
so that one call is one thread hop. The lane keeps one thread for its whole life instead
of borrowing one per call (``trio.to_thread``): a hop then costs a queue put, a park and
one wake-up, less than ``to_thread.run_sync`` with a ``CapacityLimiter(1)`` and mostly
off the trio thread, which matters when every awaited append is a hop of its own (W2).
A non-blocking store (``store.capabilities.blocking`` is False, e.g. memory) is called
inline.

Cancellation: a call still queued can be cancelled (it never runs); a call that has
started in the thread always runs to completion and its result (or exception) is
delivered -- it is never abandoned -- and the cancellation is raised at the caller's next
checkpoint (like ``abandon_on_cancel=False``).

Lifetime: the thread starts at the first call, in the trio run that makes it, and ends
at :meth:`StoreLane.aclose` or :meth:`StoreLane.stop`. It is a daemon thread, so a lane
that was never stopped does not keep the process alive.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import outcome
import trio

from stores import ClosedError, Store

__all__ = ["StoreLane"]

T = TypeVar("T")


class _Call:
    """One queued call; ``state`` moves from "queued" to "running" (in the thread) or to
    "cancelled" (by the caller's abort) exactly once, under ``lock``."""

    __slots__ = ("args", "fn", "lock", "state", "task")

    def __init__(self, fn: Callable[..., Any], args: tuple[object, ...]) -> None:
        self.fn = fn
        self.args = args
        self.task = trio.lowlevel.current_task()
        self.lock = threading.Lock()
        self.state = "queued"


def _serve(calls: queue.SimpleQueue[_Call | None], token: trio.lowlevel.TrioToken) -> None:
    """The lane's thread: run queued calls in order until the stop sentinel (None)."""
    while (call := calls.get()) is not None:
        with call.lock:
            if call.state == "cancelled":
                continue
            call.state = "running"
        result = outcome.capture(call.fn, *call.args)
        try:
            token.run_sync_soon(trio.lowlevel.reschedule, call.task, result)
        except trio.RunFinishedError:
            return  # the trio run is gone: nobody is waiting any more


class StoreLane:
    """Serialises all calls on one :class:`~stores.Store` handle through one thread."""

    def __init__(self, store: Store, *, name: str) -> None:
        self.store = store
        self.name = name
        self._inline = not store.capabilities.blocking
        self._calls: queue.SimpleQueue[_Call | None] | None = None
        self._stopped = False
        self.calls = 0

    def _start(self) -> queue.SimpleQueue[_Call | None]:
        if self._stopped:
            raise ClosedError(f"the {self.name} lane was stopped")
        calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        token = trio.lowlevel.current_trio_token()
        threading.Thread(
            target=_serve, args=(calls, token), name=f"tidelog {self.name} lane", daemon=True
        ).start()
        self._calls = calls
        return calls

    async def run(self, fn: Callable[..., T], *args: object) -> T:
        """Run ``fn(*args)`` on the lane; a checkpoint. See the module doc for cancellation.

        Raises whatever ``fn`` raises; :class:`~stores.ClosedError` after :meth:`stop`
        (for a lane whose thread never started; calls queued before ``stop`` still run)."""
        self.calls += 1
        if self._inline:
            await trio.lowlevel.checkpoint_if_cancelled()
            try:
                return fn(*args)
            finally:
                await trio.lowlevel.cancel_shielded_checkpoint()
        calls = self._calls or self._start()
        call = _Call(fn, args)
        calls.put(call)

        def abort(_: object) -> trio.lowlevel.Abort:
            with call.lock:
                if call.state == "running":
                    return trio.lowlevel.Abort.FAILED  # its result will be delivered
                call.state = "cancelled"
            return trio.lowlevel.Abort.SUCCEEDED

        result: T = await trio.lowlevel.wait_task_rescheduled(abort)
        return result

    def stop(self) -> None:
        """End the lane's thread after the calls already queued. Idempotent; the store
        stays open (see :meth:`aclose`)."""
        self._stopped = True
        if self._calls is not None:
            self._calls.put(None)
            self._calls = None

    async def aclose(self) -> None:
        """Close the lane's store handle (in the lane, after any running call), then stop
        the lane."""
        try:
            await self.run(self.store.close)
        finally:
            self.stop()
