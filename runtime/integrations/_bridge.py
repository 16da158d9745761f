"""The bridge between asyncio (or plain threads) and the tidelog runtime, which runs on
trio: :class:`Bridge`, made by :meth:`Bridge.start` (a runtime in a thread of its own) or
:func:`open_bridge` (the current trio run's runtime, for trio programs).

A call crosses as a *job*: a synchronous ``admit`` function run on the trio thread in
call order (``TrioToken.run_sync_soon`` runs its callbacks first in, first out, while
tasks woken in one scheduler batch run in any order), which returns the awaitable that
does the work in a task of the bridge's nursery. Whatever must follow call order
(the savers take their write turn there) is done by ``admit``.

Cancellation from asyncio cancels the job's task (tidelog's writes are all or nothing
under cancellation: withdrawn, or committed) and waits for it to end before the
``CancelledError`` propagates, so the outcome is settled when the caller sees it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from typing import Any, TypeVar

import attrs
import outcome
import sniffio
import trio

from runtime import ClosedError, InvalidArgumentError, Runtime, Store, TidelogError, open_runtime

__all__ = ["Bridge", "open_bridge"]

T = TypeVar("T")

#: A job: run on the trio thread, in call order; returns the work to await there.
Admit = Callable[[], Awaitable[T]]


class _Cancelled:
    """The outcome of a job whose task was cancelled (by its caller, or by the bridge's
    shutdown)."""


@attrs.define
class _Job:
    """One call in flight: its cancel scope (made on the trio thread before the task
    starts, so a cancel request, queued after the job, always finds it)."""

    scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)


class Bridge:
    """One tidelog runtime serving callers of any kind: its trio run's own tasks
    natively, asyncio coroutines (on any event loop, including a new loop per call as
    ``asyncio.run`` makes) and plain threads through the trio thread.

    Get one from :meth:`Bridge.start` (a runtime on a thread of its own, for asyncio and
    threaded programs; close it with :meth:`close` or a ``with`` / ``async with`` block)
    or :func:`open_bridge` (inside a trio program). The integrations
    (``runtime.integrations.langgraph``, ``runtime.integrations.openai_agents``) take a
    bridge; everything they hold (writers of threads and sessions) is let go, committed,
    when the bridge closes.
    """

    def __init__(self, runtime: Runtime, token: trio.lowlevel.TrioToken, nursery: trio.Nursery):
        self._runtime = runtime
        self._token = token
        self._nursery = nursery
        self._closers: dict[int, Callable[[], Awaitable[None]]] = {}
        self._next_closer = 0
        self._closed = False
        self._thread: threading.Thread | None = None
        self._stop: trio.Event | None = None
        self._exit_error: BaseException | None = None

    def __repr__(self) -> str:
        kind = "thread" if self._thread is not None else "native"
        return f"<Bridge {kind}{' closed' if self._closed else ''}>"

    # -- starting and stopping ---------------------------------------------------------

    @classmethod
    def start(cls, target: str | os.PathLike[str] | Store, **runtime_options: Any) -> Bridge:
        """Run ``open_runtime(target, **runtime_options)`` on a new thread (its own
        ``trio.run``) and return its bridge once the runtime is open.

        Blocks while the runtime opens (from an event loop, prefer
        ``await asyncio.to_thread(Bridge.start, ...)``). Raises what ``open_runtime``
        raises (nothing stays running)."""
        ready: concurrent.futures.Future[Bridge] = concurrent.futures.Future()

        async def main() -> None:
            stop = trio.Event()
            try:
                async with open_runtime(target, **runtime_options) as rt, open_bridge(rt) as b:
                    b._stop = stop
                    ready.set_result(b)
                    await stop.wait()
            except BaseException as exc:
                if not ready.done():
                    ready.set_exception(exc)
                    return
                raise

        def run() -> None:
            bridge: Bridge | None = None
            try:
                trio.run(main)
            except BaseException as exc:
                if ready.done() and ready.exception() is None:
                    bridge = ready.result()
                    bridge._exit_error = exc

        thread = threading.Thread(target=run, name="tidelog-bridge", daemon=True)
        thread.start()
        bridge = ready.result()
        bridge._thread = thread
        return bridge

    def close(self) -> None:
        """Let go of everything the integrations hold (their accepted writes are
        committed), close the runtime and end its thread. Idempotent. Only for a bridge
        of :meth:`start` (an :func:`open_bridge` one closes with its block).

        Raises: the runtime's exit errors (:class:`~runtime.UnwrittenError` for accepted
        writes that could not be written), once."""
        if self._thread is None:
            raise InvalidArgumentError("a bridge of open_bridge() closes with its block")
        first: BaseException | None = None
        if not self._closed:
            try:
                self.call_sync(lambda: self._aclose_integrations())
            except ClosedError:
                pass
            except BaseException as exc:  # still stop the runtime, then raise it
                first = exc
            stop = self._stop
            assert stop is not None
            with suppress(trio.RunFinishedError):
                self._token.run_sync_soon(stop.set)
            self._closed = True
        self._thread.join()
        error, self._exit_error = self._exit_error, None
        if first is not None:
            if error is not None:
                first.add_note(f"also while closing: {type(error).__name__}: {error}")
            raise first
        if error is not None:
            raise error

    async def aclose(self) -> None:
        """:meth:`close` from an asyncio program, without blocking its loop."""
        await asyncio.to_thread(self.close)

    def __enter__(self) -> Bridge:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> Bridge:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def _aclose_integrations(self) -> None:
        """Run every closer (the last registered first); the first failure is raised
        once all have run."""
        closers, self._closers = self._closers, {}
        errors: list[TidelogError] = []
        for close in reversed(closers.values()):
            try:
                await close()
            except TidelogError as exc:
                errors.append(exc)
        if errors:
            raise errors[0]

    # -- for the integrations ----------------------------------------------------------

    @property
    def runtime(self) -> Runtime:
        """The runtime (its methods are for the bridge's trio thread only)."""
        return self._runtime

    @property
    def nursery(self) -> trio.Nursery:
        """The nursery the integrations start their tasks in (trio thread only)."""
        return self._nursery

    def on_close(self, closer: Callable[[], Awaitable[None]]) -> Callable[[], None]:
        """Have ``closer`` awaited (on the trio thread) when the bridge closes, before
        the runtime does; the last registered runs first. Returns the function that
        forgets it (for an integration object closed earlier)."""
        if self._closed:
            raise ClosedError("the bridge was closed")
        key = self._next_closer
        self._next_closer += 1
        self._closers[key] = closer
        return lambda: self._closers.pop(key, None) and None

    def on_trio_thread(self) -> bool:
        """Whether the caller runs in the bridge's trio run."""
        try:
            return trio.lowlevel.current_trio_token() is self._token
        except RuntimeError:
            return False

    async def call(self, admit: Admit[T]) -> T:
        """Run the job ``admit`` for an async caller and return its result: in the
        bridge's trio run, directly; from asyncio, through the trio thread.

        Cancellation (asyncio): the job is cancelled and waited for, then
        ``CancelledError`` propagates.

        Raises: the job's exception; :class:`~runtime.ClosedError` if the bridge is
        closed; :class:`~runtime.InvalidArgumentError` from another async library, or
        from another trio run."""
        library = sniffio.current_async_library()
        if library == "trio":
            if not self.on_trio_thread():
                raise InvalidArgumentError(
                    "this bridge belongs to another trio run: use a bridge of this run "
                    "(open_bridge) or call from asyncio or a thread"
                )
            return await admit()
        if library != "asyncio":
            raise InvalidArgumentError(f"the bridge serves trio and asyncio, not {library}")
        return await self._call_from_asyncio(admit)

    def call_sync(self, admit: Admit[T]) -> T:
        """Run the job ``admit`` for a synchronous caller (any thread but the bridge's
        trio thread, which it would block) and return its result.

        Raises: as :meth:`call`; :class:`~runtime.InvalidArgumentError` on the trio
        thread itself (use the async method, or ``trio.to_thread``)."""
        if self.on_trio_thread():
            raise InvalidArgumentError(
                "a synchronous call on the bridge's own trio thread would block it: await "
                "the async method, or make the call from trio.to_thread.run_sync"
            )
        done: concurrent.futures.Future[outcome.Outcome[T] | _Cancelled] = (
            concurrent.futures.Future()
        )
        self._submit(admit, _Job(), done.set_result)
        result = done.result()
        if isinstance(result, _Cancelled):
            raise ClosedError("the bridge closed while the call ran")
        return result.unwrap()

    async def _call_from_asyncio(self, admit: Admit[T]) -> T:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[outcome.Outcome[T] | _Cancelled] = loop.create_future()

        def report(result: outcome.Outcome[T] | _Cancelled) -> None:
            def deliver() -> None:
                if not future.done():
                    future.set_result(result)

            with suppress(RuntimeError):  # the caller's loop is gone: nobody waits
                loop.call_soon_threadsafe(deliver)

        job = _Job()
        self._submit(admit, job, report)
        cancelled: asyncio.CancelledError | None = None
        while True:
            try:
                result = await asyncio.shield(future)
                break
            except asyncio.CancelledError as exc:
                if future.done():
                    result = future.result()
                    cancelled = cancelled or exc
                    break
                if cancelled is None:
                    cancelled = exc
                    with suppress(trio.RunFinishedError):
                        self._token.run_sync_soon(job.scope.cancel)
        if cancelled is not None:
            raise cancelled
        if isinstance(result, _Cancelled):
            raise ClosedError("the bridge closed while the call ran")
        return result.unwrap()

    def _submit(
        self,
        admit: Admit[T],
        job: _Job,
        report: Callable[[outcome.Outcome[T] | _Cancelled], None],
    ) -> None:
        """Queue the job on the trio thread (first in, first out)."""

        def start() -> None:
            try:
                if self._closed:
                    raise ClosedError("the bridge was closed")
                work = admit()
            except BaseException as exc:
                report(outcome.Error(exc))
                return
            self._nursery.start_soon(self._run, work, job, report)

        try:
            self._token.run_sync_soon(start)
        except trio.RunFinishedError:
            raise ClosedError("the bridge was closed") from None

    async def _run(
        self,
        work: Awaitable[T],
        job: _Job,
        report: Callable[[outcome.Outcome[T] | _Cancelled], None],
    ) -> None:
        with job.scope:
            try:
                value = await work
            except trio.Cancelled:
                report(_Cancelled())
                raise
            except BaseException as exc:
                report(outcome.Error(exc))
                if not isinstance(exc, Exception):
                    raise
                return
            report(outcome.Value(value))


@asynccontextmanager
async def open_bridge(runtime: Runtime) -> AsyncIterator[Bridge]:
    """A :class:`Bridge` on ``runtime`` in the current trio run, for the ``async with``
    block: trio code calls the integrations directly, and threads this program starts
    (``trio.to_thread.run_sync``) or an asyncio loop on another thread may call them
    too. Leaving the block lets go of what the integrations hold (committed), then ends
    their tasks."""
    if not isinstance(runtime, Runtime):
        raise InvalidArgumentError(f"open_bridge takes a Runtime, not {type(runtime).__name__}")
    async with trio.open_nursery() as nursery:
        bridge = Bridge(runtime, trio.lowlevel.current_trio_token(), nursery)
        try:
            yield bridge
        finally:
            failure: TidelogError | None = None
            with trio.CancelScope(shield=True):
                try:
                    await bridge._aclose_integrations()
                except TidelogError as exc:
                    failure = exc
                bridge._closed = True
                nursery.cancel_scope.cancel()
            if failure is not None:
                raise failure
