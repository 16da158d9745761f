"""Leaving the runtime for any reason keeps every accepted write; no cancellation hangs
the exit; a writer opened while the previous one closes is alive; closing names what it
could not write."""

from __future__ import annotations

import random
from collections.abc import Sequence
from contextlib import AsyncExitStack
from pathlib import Path

import pytest
import trio
import trio.lowlevel
import trio.testing

from runtime import (
    CommitPendingError,
    MemoryStore,
    NewEvent,
    Runtime,
    SessionOwnedError,
    SqliteStore,
    StoreIOError,
    UnwrittenError,
    open_runtime,
)
from stores import BatchResult, WriteOp


def ev(i: int) -> NewEvent:
    return NewEvent("k", {"i": i})


class CancelAfterSteps(trio.abc.Instrument):
    """Cancel ``scope`` after the scheduler ran ``steps`` task steps (of any task)."""

    def __init__(self, steps: int, scope: trio.CancelScope) -> None:
        self.steps = steps
        self.scope = scope

    def after_task_step(self, task: trio.lowlevel.Task) -> None:  # noqa: ARG002 (counts steps)
        self.steps -= 1
        if self.steps == 0:
            self.scope.cancel()


@pytest.mark.parametrize("seed", range(12))
async def test_outer_cancel_keeps_every_accepted_write(seed: int, tmp_path: Path) -> None:
    """An enclosing scope cancelled at a random moment (Ctrl-C, a timeout: the normal way
    a trio program stops) while append_nowait calls are being accepted: afterwards the
    store holds exactly the accepted events -- the runtime's tasks are shielded from the
    outer cancel until the drain committed them."""
    rng = random.Random(seed)
    path = tmp_path / "c.db"
    accepted: dict[str, int] = {}
    with trio.move_on_after(rng.uniform(0.0, 0.05)):
        async with open_runtime(path, batch_window=0.01) as rt, AsyncExitStack() as stack:
            writers = [await stack.enter_async_context(rt.open_session(f"s{k}")) for k in range(3)]
            while True:
                for w in writers:
                    _, last = w.append_nowait([ev(n) for n in range(rng.randint(1, 5))])
                    accepted[w.session_id] = last
                await trio.lowlevel.checkpoint()
    store = SqliteStore(path)
    try:
        for sid, last in accepted.items():
            assert store.head(sid) == last, (sid, store.head(sid), last)
    finally:
        store.close()


@pytest.mark.parametrize("step", range(1, 60, 2))
async def test_outer_cancel_while_a_writer_opens_never_hangs(step: int, tmp_path: Path) -> None:
    """Cancelling the scope around open_runtime at any scheduler step of opening a writer,
    appending and closing never hangs the exit, and leaves the session free and
    consistent: another runtime takes its lease at once and reads a gapless prefix."""
    path = tmp_path / "h.db"
    with trio.fail_after(20):
        with trio.CancelScope() as scope:
            instrument = CancelAfterSteps(step, scope)
            trio.lowlevel.add_instrument(instrument)
            try:
                async with open_runtime(path) as rt, rt.open_session("s") as w:
                    await w.append([ev(1)])
                    w.append_nowait([ev(2)])
            finally:
                trio.lowlevel.remove_instrument(instrument)
        async with open_runtime(path, lease_ttl=60.0) as rt, rt.open_session("s") as w:
            head = await w.head()
            assert head in (0, 1, 2)
            assert [e.data for e in await w.read()] == [{"i": i} for i in range(1, head + 1)]


async def test_reopening_while_closing_gives_a_live_writer(
    autojump_clock: trio.testing.MockClock,  # noqa: ARG001 (pytest-trio runs the test on it)
) -> None:
    """A writer opened while the previous one is closing (200 handoffs, the open retried
    while the old handle is still open) is never dead on arrival: its append works, and
    it holds the lease while open -- another runtime cannot open the session."""
    store = MemoryStore()
    async with open_runtime(store) as rt, open_runtime(store) as other:
        for i in range(200):
            handed = trio.Event()
            appended: list[int] = []

            async def closer(n: int = i, handed: trio.Event = handed) -> None:
                async with rt.open_session("s") as w:
                    await w.append([ev(n)])
                    handed.set()  # the opener runs in the same tick as this close

            async def opener(
                n: int = i, handed: trio.Event = handed, appended: list[int] = appended
            ) -> None:
                await handed.wait()
                while True:
                    try:
                        async with rt.open_session("s") as w:
                            appended.append(await w.append([ev(1000 + n)]))
                            with pytest.raises(SessionOwnedError):
                                async with other.open_session("s"):
                                    pass  # pragma: no cover
                        return
                    except SessionOwnedError:
                        await trio.lowlevel.checkpoint()  # the old handle is still open

            async with trio.open_nursery() as nursery:
                nursery.start_soon(closer)
                nursery.start_soon(opener)
            assert len(appended) == 1
    assert store.head("s") == 400


class Breakable(MemoryStore):
    """A real MemoryStore whose writes all fail while ``broken`` is set."""

    broken = False

    def write_batch(self, ops: Sequence[WriteOp], *, sync: bool = False) -> list[BatchResult]:
        if self.broken:
            raise StoreIOError("injected: the disk is gone")
        return super().write_batch(ops, sync=sync)


async def test_close_that_cannot_commit_names_what_it_dropped(
    autojump_clock: trio.testing.MockClock,  # noqa: ARG001 (pytest-trio runs the test on it)
) -> None:
    """close() whose final drain keeps failing raises UnwrittenError naming the seq range
    and carrying the events; a new writer then starts at the committed head (reusing
    those seqs only because the error was raised)."""
    store = Breakable()
    async with open_runtime(store) as rt:
        async with rt.open_session("s") as w:
            await w.append([ev(1)])

        async def accept_then_break() -> None:
            async with rt.open_session("s") as w:
                w.append_nowait([ev(2), ev(3)])
                store.broken = True

        with pytest.raises(UnwrittenError) as info:
            await accept_then_break()
        assert (info.value.first, info.value.last) == (2, 3)
        assert [e.data for e in info.value.events] == [{"i": 2}, {"i": 3}]
        store.broken = False
        async with rt.open_session("s") as again:
            assert await again.head() == 1
            assert await again.append([ev(2)]) == 2
    assert [e.data for e in store.read("s")] == [{"i": 1}, {"i": 2}]


async def test_exit_that_cannot_commit_raises_with_the_body_error(
    autojump_clock: trio.testing.MockClock,  # noqa: ARG001 (pytest-trio runs the test on it)
) -> None:
    """Leaving open_runtime because the body raised, while accepted writes (of a shared
    writer already closed) cannot be committed: the body's error and the UnwrittenError
    are raised together (a group), so neither hides the other."""
    store = Breakable()

    async def leave_pending(rt: Runtime) -> None:
        async with rt.open_session("s", shared=True) as w:
            w.append_nowait([ev(1)])
            store.broken = True

    async def body() -> None:
        async with open_runtime(store) as rt:
            with pytest.raises(CommitPendingError):
                await leave_pending(rt)
            raise KeyError("the body failed")

    with pytest.raises(BaseExceptionGroup) as info:
        await body()
    assert info.group_contains(KeyError)
    assert info.group_contains(UnwrittenError)


async def test_writer_block_error_and_close_error_are_both_raised(
    autojump_clock: trio.testing.MockClock,  # noqa: ARG001 (pytest-trio runs the test on it)
) -> None:
    """A writer block that raises while its accepted writes cannot be committed raises
    both its own error and the close's UnwrittenError."""
    store = Breakable()
    async with open_runtime(store) as rt:

        async def block() -> None:
            async with rt.open_session("s") as w:
                w.append_nowait([ev(1)])
                store.broken = True
                raise KeyError("the block failed")

        with pytest.raises(BaseExceptionGroup) as info:
            await block()
        assert info.group_contains(KeyError)
        assert info.group_contains(UnwrittenError)
        store.broken = False
