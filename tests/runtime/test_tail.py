"""Live tails: order, no gaps or duplicates, prompt wake-ups, bounded memory, expiry."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from runtime import (
    ClosedError,
    MemoryStore,
    NewEvent,
    Runtime,
    SnapshotExpiredError,
    open_runtime,
)
from runtime._tail import PAGE_SIZE


def ev(i: int) -> NewEvent:
    return NewEvent("k", {"i": i})


async def test_tail_replays_then_follows_in_order(rt: Runtime) -> None:
    """A tail yields history after since_seq, then concurrent commits, gapless, once each."""
    seen: list[int] = []
    async with rt.open_session("s") as w:
        await w.append([ev(i) for i in range(5)])

        async def follow() -> None:
            async for event in rt.tail("s", since_seq=2):
                seen.append(event.seq)
                if event.seq == 105:
                    return

        async with trio.open_nursery() as nursery:
            nursery.start_soon(follow)
            for i in range(50):
                await w.append([ev(i), ev(i)])
    assert seen == list(range(3, 106))


async def test_tail_wakes_on_commit_without_time_passing(
    autojump_clock: trio.testing.MockClock,  # noqa: ARG001 (pytest-trio runs the test on it)
) -> None:
    """An in-process commit wakes a waiting tail at once (no polling delay)."""
    async with open_runtime(MemoryStore(), batch_window=0) as rt, rt.open_session("s") as w:
        await w.append([ev(0)])
        got: list[float] = []

        async def follow() -> None:
            async for event in rt.tail("s", since_seq=1):
                got.append(trio.current_time())
                assert event.seq == 2
                return

        async with trio.open_nursery() as nursery:
            nursery.start_soon(follow)
            await trio.testing.wait_all_tasks_blocked()
            start = trio.current_time()
            await w.append([ev(1)])
        assert got == [start]


async def test_slow_tailer_holds_one_page(rt: Runtime) -> None:
    """A slow tailer buffers at most one page, however long the log is."""
    async with rt.open_session("s") as w:
        for chunk in range(10):
            await w.append([ev(chunk * 100 + i) for i in range(100)])
    tail = rt.tail("s")
    count = 0
    async for event in tail:
        count += 1
        assert len(tail._buffer) < PAGE_SIZE
        assert event.seq == count
        if count == 1000:
            break


async def test_truncate_below_tail_position_raises(rt: Runtime) -> None:
    """Truncating below what a tail already yielded raises SnapshotExpiredError, even if
    the log grows past the tail's position again."""
    async with rt.open_session("s") as w:
        await w.append([ev(i) for i in range(10)])
        tail = rt.tail("s")
        for _ in range(10):
            await tail.__anext__()
        await w.truncate(4)
        await w.append([ev(i) for i in range(20)])
        with pytest.raises(SnapshotExpiredError):
            await tail.__anext__()


async def test_truncate_above_tail_position_is_fine(rt: Runtime) -> None:
    """A truncate above the tail's position does not disturb it."""
    async with rt.open_session("s") as w:
        await w.append([ev(i) for i in range(10)])
        tail = rt.tail("s")
        for _ in range(3):
            await tail.__anext__()
        await w.truncate(5)
        await w.append([ev(100)])
        rest = [(await tail.__anext__()).seq for _ in range(3)]
        assert rest == [4, 5, 6]


async def test_tail_of_deleted_session_raises(rt: Runtime) -> None:
    """Deleting a session expires its tails."""
    async with rt.open_session("s") as w:
        await w.append([ev(1)])
    tail = rt.tail("s")
    await tail.__anext__()
    await rt.delete("s")
    with pytest.raises(SnapshotExpiredError):
        await tail.__anext__()


async def test_tail_of_missing_session_waits_for_it(rt: Runtime) -> None:
    """A tail started before its session exists waits for it to be created, then yields
    its events from the first one (subscribers usually start before producers)."""
    seen: list[int] = []

    async def follow(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        tail = rt.tail("later")
        task_status.started()
        async for event in tail:
            seen.append(event.seq)
            if event.seq == 2:
                return

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            await nursery.start(follow)
            await trio.testing.wait_all_tasks_blocked()
            assert await rt.stat("later") is None
            async with rt.open_session("later") as w:
                await w.append([ev(1), ev(2)])
    assert seen == [1, 2]


async def test_runtime_exit_ends_waiting_tail() -> None:
    """A tail waiting for commits gets ClosedError when the runtime closes."""
    errors: list[BaseException] = []
    async with trio.open_nursery() as nursery, open_runtime(MemoryStore()) as rt:
        async with rt.open_session("s") as w:
            await w.append([ev(1)])

        async def follow() -> None:
            try:
                async for _ in rt.tail("s"):
                    pass
            except ClosedError as exc:
                errors.append(exc)

        nursery.start_soon(follow)
        await trio.testing.wait_all_tasks_blocked()
    assert len(errors) == 1
