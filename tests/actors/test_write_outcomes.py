"""What becomes of a write at the edges of the actor's one write path: a cancel pending
before the call withdraws it on every backend and path, and leaving the runtime commits
every accepted write or raises :class:`UnwrittenError` naming it."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager

import pytest
import trio
import trio.testing
from helpers import RuntimeFactory, num

from runtime import (
    InvalidArgumentError,
    MemoryStore,
    NewEvent,
    Runtime,
    SessionWriter,
    StoreIOError,
    UnwrittenError,
    open_runtime,
)
from stores import BatchResult, WriteOp

#: Concurrent appends of the storm; every third one is cancelled before its call.
STORM = 120


def _ev(n: int) -> NewEvent:
    return NewEvent("k", {"n": n})


async def _stored(rt: Runtime, session_id: str) -> list[int]:
    async with rt.open_session(session_id, mode="read") as r:
        return [num(e, "n") for e in await r.read()]


@pytest.mark.parametrize("backend", ["memory", "sqlite", "postgres"])
async def test_a_storm_of_cancels_pending_at_the_call_withdraws_exactly_those(
    make_runtime: RuntimeFactory,
) -> None:
    """Appends whose scope was cancelled before the call are withdrawn (never stored,
    ``head()`` agrees), while the appends around them in the same scheduler rounds, a
    flush and ``append_nowait`` events commit: exactly the others are stored, once each."""
    async with make_runtime() as rt, rt.open_session("s") as w:
        kept: list[int] = []
        withdrawn: list[int] = []

        async def one(n: int) -> None:
            with trio.CancelScope() as scope:
                if n % 3 == 1 and n % 10 != 5:
                    scope.cancel()
                if n % 10 == 5:
                    w.append_nowait([_ev(n)])
                    kept.append(n)
                    await w.flush()
                    return
                await w.append([_ev(n)])
                kept.append(n)
            if scope.cancelled_caught:
                withdrawn.append(n)

        async with trio.open_nursery() as nursery:
            for n in range(STORM):
                nursery.start_soon(one, n)
        assert sorted(withdrawn) == [n for n in range(STORM) if n % 3 == 1 and n % 10 != 5]
        assert await w.head() == len(kept)
        await w.flush()
        stored = await _stored(rt, "s")
        assert sorted(stored) == sorted(kept)
        assert len(stored) == len(set(stored))


async def test_a_cancel_pending_at_the_call_leaves_head_unchanged() -> None:
    """On the MemoryStore leader path (an idle writer: the caller makes the batch), an
    append cancelled before the call raises ``Cancelled`` at once with nothing accepted:
    ``head()`` is unchanged and the next append takes the seq."""
    async with open_runtime(MemoryStore()) as rt, rt.open_session("s") as w:
        await w.append([_ev(0)])
        for _ in range(3):
            with trio.CancelScope() as scope:
                scope.cancel()
                await w.append([_ev(99)])
            assert scope.cancelled_caught
            assert await w.head() == 1
        assert await w.append([_ev(1)]) == 2
        assert await _stored(rt, "s") == [0, 1]


async def test_a_leading_append_is_committed_when_a_flush_batch_runs_during_its_yield(
    autojump_clock: trio.testing.MockClock,  # noqa: ARG001
) -> None:
    """A caller that leads the batch (idle writer, MemoryStore) yields before it accepts
    its append; when a flush asked for in that round makes the writer task run a batch
    first, the leader's write is still taken (it never waits for a batch nobody makes)."""
    async with open_runtime(MemoryStore()) as rt, rt.open_session("s") as w:
        expected: list[int] = []
        # The writer task and the leader resume in one scheduler round, in an order trio
        # picks at random: 64 rounds meet the writer-first order all but surely.
        for n in range(0, 128, 2):

            async def flush_after_nowait(m: int) -> None:
                w.append_nowait([_ev(m)])
                await w.flush()

            with trio.fail_after(5):  # the clock jumps: a stuck write fails at once
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(w.append, [_ev(n)])
                    nursery.start_soon(flush_after_nowait, n + 1)
            expected += [n, n + 1]
        assert sorted(await _stored(rt, "s")) == expected


class FailingStore(MemoryStore):
    """A real MemoryStore whose every ``write_batch`` fails once ``failing`` is set,
    before writing anything: as a whole (a disk that broke for good: retried, then
    dropped by the drain) or, with ``refuse``, each op for good (dropped at once, here
    while the shutdown's drain waits for it)."""

    failing = False

    def __init__(self, *, refuse: bool = False) -> None:
        super().__init__()
        self.refuse = refuse

    def write_batch(self, ops: Sequence[WriteOp], *, sync: bool = False) -> list[BatchResult]:
        if self.failing:
            if self.refuse:
                return [InvalidArgumentError("injected: refused for good") for _ in ops]
            raise StoreIOError("injected: the disk keeps failing")
        return super().write_batch(ops, sync=sync)


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


async def _leave_runtime(
    store: FailingStore, how: str, *, keep_handle: bool
) -> tuple[list[UnwrittenError], list[BaseException]]:
    """Open a writer handle and never exit it (its context manager kept, or dropped for
    the garbage collector), accept events that cannot be written, then leave the runtime
    as ``how`` says; return the UnwrittenErrors raised and the other exceptions."""
    kept: list[AbstractAsyncContextManager[SessionWriter]] = []
    raised: list[BaseException] = []
    with trio.CancelScope() as outer:
        try:
            async with open_runtime(store) as rt:
                cm = rt.open_session("s")
                w = await cm.__aenter__()
                if keep_handle:
                    kept.append(cm)
                del cm  # not kept: collected now, and trio finalizes its generator
                await w.append([_ev(1)])
                store.failing = True
                assert w.append_nowait([_ev(2), _ev(3)]) == (2, 3)
                if how == "raises":
                    raise KeyError("the body failed")
                if how == "cancelled":
                    outer.cancel()
                await trio.sleep(1)
        except BaseException as exc:  # sorted out by the caller
            raised.extend(_leaves(exc))
    for cm in kept:  # exited at last, after the runtime: nothing is left to report
        await cm.__aexit__(None, None, None)
    errors = [e for e in raised if isinstance(e, UnwrittenError)]
    return errors, [e for e in raised if not isinstance(e, UnwrittenError)]


@pytest.mark.filterwarnings("ignore:Async generator:ResourceWarning")  # trio's, on purpose
@pytest.mark.parametrize("keep_handle", [True, False], ids=["kept", "collected"])
@pytest.mark.parametrize("how", ["normal", "raises", "cancelled"])
@pytest.mark.parametrize("refuse", [False, True], ids=["fails", "refuses"])
async def test_leaving_the_runtime_reports_writes_of_a_handle_never_exited(
    how: str,
    keep_handle: bool,
    refuse: bool,
    autojump_clock: trio.testing.MockClock,  # noqa: ARG001
) -> None:
    """An ``append_nowait`` event on a writer handle that is never exited, while every
    commit fails or is refused: leaving ``open_runtime`` (normally, by an exception, by
    a cancel) raises ``UnwrittenError`` naming it -- also when the handle's context
    manager was garbage collected, whose close nobody would see, and when the write is
    dropped while the shutdown's own drain waits for it."""
    store = FailingStore(refuse=refuse)
    errors, others = await _leave_runtime(store, how, keep_handle=keep_handle)
    assert [(e.session_id, e.first, e.last) for e in errors] == [("s", 2, 3)]
    assert [e.data for e in errors[0].events] == [{"n": 2}, {"n": 3}]
    expected = {"normal": [], "raises": [KeyError], "cancelled": [trio.Cancelled]}[how]
    assert [type(e) for e in others] == expected
    assert [e.data for e in store.read("s")] == [{"n": 1}]
