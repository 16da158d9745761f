"""The LangGraph saver on the trio thread, writing: each thread's held writer, admission
of every call synchronously in call order (:class:`~runtime.integrations._turns.Turns`),
and the work -- writes, deletes, forks and the atomic rewrites of ``prune`` and
``delete_for_runs``; the middle layer of
:class:`~runtime.integrations.langgraph.TidelogSaver`, over ``_langgraph_reads``.
"""

from __future__ import annotations

import builtins
import functools
from collections.abc import Awaitable, Callable

import trio

from runtime import (
    BrokenError,
    ClosedError,
    NewEvent,
    OwnershipLostError,
    SessionExistsError,
    SessionNotFoundError,
    TidelogError,
)

from ._checkpoint_log import ThreadLog, rewrite_events
from ._holding import HeldSession
from ._langgraph_reads import ThreadReads

__all__ = ["ThreadWrites"]


class ThreadWrites(ThreadReads):
    """The saver's writes on the bridge's trio thread (state set by ``TidelogSaver``)."""

    _threads: dict[str, HeldSession]
    _errors: builtins.list[TidelogError]
    _closed: bool
    _forget: Callable[[], None]

    # -- on the trio thread: admission (synchronous, in call order) -----------------------

    def _thread(self, thread_id: str) -> HeldSession:
        if self._closed:
            raise ClosedError("the saver was closed")
        session_id = self.session_id(thread_id)
        thread = self._threads.get(session_id)
        if thread is None:
            thread = HeldSession(self._bridge, session_id, self._internal, self._errors)
            self._threads[session_id] = thread
        return thread

    def _t_admit_write(self, thread_id: str, event: NewEvent) -> Awaitable[None]:
        thread = self._thread(thread_id)
        return self._t_write(thread, thread.turns.take(), event)

    def _t_admit_delete(self, thread_id: str) -> Awaitable[None]:
        thread = self._thread(thread_id)
        return self._t_delete(thread, thread.turns.take())

    def _t_admit_acquire(self, thread_id: str) -> Awaitable[None]:
        thread = self._thread(thread_id)

        async def acquire(thread: HeldSession) -> None:
            await thread.writer()

        return self._t_turn(thread, thread.turns.take(), acquire)

    def _t_admit_release(self, thread_id: str) -> Awaitable[None]:
        thread = self._thread(thread_id)
        return self._t_turn(thread, thread.turns.take(), self._t_let_go)

    def _t_admit_many(
        self,
        thread_ids: builtins.list[str],
        operation: Callable[[HeldSession, int], Awaitable[None]],
    ) -> Awaitable[None]:
        threads = [self._thread(thread_id) for thread_id in thread_ids]
        tickets = [thread.turns.take() for thread in threads]

        async def run() -> None:
            pending = list(zip(threads, tickets, strict=True))
            try:
                while pending:
                    thread, ticket = pending.pop(0)
                    await operation(thread, ticket)
            finally:
                for thread, ticket in pending:
                    thread.turns.abandon(ticket)

        return run()

    # -- on the trio thread: the work ----------------------------------------------------

    async def _t_turn(
        self, thread: HeldSession, ticket: int, work: Callable[[HeldSession], Awaitable[None]]
    ) -> None:
        await thread.turns.wait(ticket)
        try:
            await work(thread)
        finally:
            thread.turns.done(ticket)

    async def _t_write(self, thread: HeldSession, ticket: int, event: NewEvent) -> None:
        await thread.turns.wait(ticket)
        try:
            writer = await thread.writer()
        finally:
            thread.turns.done(ticket)
        # Accepted synchronously at the call, before the next turn's task can run.
        try:
            await writer.append([event])
        except (OwnershipLostError, BrokenError, ClosedError):
            thread.drop()
            raise

    async def _t_let_go(self, thread: HeldSession) -> None:
        await thread.let_go()
        self._cache.pop(thread.session_id, None)

    async def _t_delete(self, thread: HeldSession, ticket: int) -> None:
        async def delete(thread: HeldSession) -> None:
            await self._t_let_go(thread)
            await self._rt.delete(thread.session_id)
            self._cache.pop(thread.session_id, None)

        await self._t_turn(thread, ticket, delete)

    async def _t_keep_latest(self, thread: HeldSession, ticket: int) -> None:
        def keep(log: ThreadLog) -> set[tuple[str, str]]:
            latest = (ns_log.latest() for ns_log in log.namespaces.values())
            return {(stored.ns, stored.id) for stored in latest if stored is not None}

        await self._t_turn(thread, ticket, functools.partial(self._t_rewrite, keep=keep))

    async def _t_rewrite(
        self, thread: HeldSession, *, keep: Callable[[ThreadLog], set[tuple[str, str]]]
    ) -> None:
        """Rewrite the thread keeping ``keep(log)``'s checkpoints (the caller has the
        turn): one atomic ``replace`` of the whole session."""
        if await self._rt.stat(thread.session_id) is None:
            return
        held = thread.held
        writer = await thread.writer()
        try:
            await writer.wait_committed()
            head = await writer.head()
            log = await self._t_fold(thread.session_id)
            kept = keep(log)
            every = {
                (stored.ns, stored.id)
                for ns_log in log.namespaces.values()
                for stored in ns_log.checkpoints.values()
            }
            if kept != every:
                await writer.replace(0, rewrite_events(log, kept), expected_head=head)
                self._cache.pop(thread.session_id, None)
        finally:
            if not held:
                await self._t_let_go(thread)

    async def _t_delete_runs(self, run_ids: builtins.list[str]) -> None:
        if not run_ids:
            await trio.lowlevel.checkpoint()
            return
        doomed: set[str] = set(run_ids)
        for session_id in await self._t_thread_sessions():
            hits = [await self._rt.find_run(session_id, run_id) for run_id in run_ids]
            if not any(hits):
                continue
            thread = self._thread(session_id[len(self._prefix) :])

            def keep(log: ThreadLog) -> set[tuple[str, str]]:
                return {
                    (stored.ns, stored.id)
                    for ns_log in log.namespaces.values()
                    for stored in ns_log.checkpoints.values()
                    if stored.run_id not in doomed
                }

            await self._t_turn(
                thread, thread.turns.take(), functools.partial(self._t_rewrite, keep=keep)
            )

    async def _t_copy(self, source: str, target: str) -> None:
        source_id, target_id = self.session_id(source), self.session_id(target)
        try:
            await self._rt.fork(source_id, target_id, internal=True)
        except SessionNotFoundError:
            return
        except SessionExistsError:
            raise
        self._cache.pop(target_id, None)

    async def _t_close(self) -> None:
        """Let go of every writer (the bridge's close, or :meth:`close`)."""
        if self._closed:
            return
        self._closed = True
        self._forget()
        for thread in list(self._threads.values()):
            await self._t_let_go(thread)
        self._threads.clear()
        self._cache.clear()
        errors, self._errors = self._errors, []
        if errors:
            raise errors[0]
