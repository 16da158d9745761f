"""StoreLane: one worker thread per lane, calls in order, never abandoned once started."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator

import pytest
import trio
import trio.testing

from actors._lane import StoreLane
from stores import Capabilities, ClosedError, MemoryStore


class _Blocking(MemoryStore):
    """A MemoryStore the lane treats as blocking, so calls go through its thread."""

    capabilities = Capabilities(durable=False, blocking=True)


@pytest.fixture
async def lane() -> AsyncIterator[StoreLane]:
    lane = StoreLane(_Blocking(), name="test")
    yield lane
    lane.stop()


async def test_calls_run_in_order_on_one_thread_off_the_trio_thread(lane: StoreLane) -> None:
    """Every call runs on the same worker thread (not the trio thread), in call order."""
    seen: list[tuple[int, int]] = []

    def note(i: int) -> int:
        seen.append((i, threading.get_ident()))
        return i * 10

    async with trio.open_nursery() as nursery:
        for i in range(5):
            nursery.start_soon(lane.run, note, i)
            await trio.lowlevel.checkpoint()
    assert await lane.run(note, 5) == 50
    assert [i for i, _ in seen] == list(range(6))
    assert len({ident for _, ident in seen}) == 1
    assert seen[0][1] != threading.get_ident()


async def test_errors_reach_the_caller(lane: StoreLane) -> None:
    """An exception raised by the call is raised by run(), as is."""

    def fail() -> None:
        raise KeyError("boom")

    with pytest.raises(KeyError, match="boom"):
        await lane.run(fail)
    assert await lane.run(int, "7") == 7  # the lane serves on


async def test_cancelled_queued_call_never_runs(lane: StoreLane) -> None:
    """A call cancelled while queued behind another never runs; the lane serves on."""
    started = threading.Event()
    release = threading.Event()
    ran: list[str] = []

    def first() -> None:
        started.set()
        release.wait(10)
        ran.append("first")

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lane.run, first)
            assert await trio.to_thread.run_sync(started.wait, 10)  # running in the thread
            with trio.CancelScope() as queued:
                queued.cancel()
                await lane.run(ran.append, "second")
            assert queued.cancelled_caught
            release.set()
        assert await lane.run(len, ran) == 1
    assert ran == ["first"]


async def test_started_call_is_never_abandoned(lane: StoreLane) -> None:
    """Cancelling a call that has started waits for it: its result is returned and the
    cancellation is raised at the caller's next checkpoint."""
    started = threading.Event()
    release = threading.Event()
    got: list[int] = []

    def slow() -> int:
        started.set()
        release.wait(10)
        return 42

    async def caller(scope: trio.CancelScope) -> None:
        with scope:
            got.append(await lane.run(slow))
            await trio.lowlevel.checkpoint()
            got.append(-1)  # never reached: the deferred cancel is raised above

    with trio.fail_after(10):
        scope = trio.CancelScope()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(caller, scope)
            await trio.to_thread.run_sync(started.wait)
            scope.cancel()
            await trio.testing.wait_all_tasks_blocked()  # the caller had every chance to run
            assert got == []  # still waiting for the call
            release.set()
    assert got == [42]
    assert scope.cancelled_caught


async def test_stop_ends_the_thread_after_queued_calls(lane: StoreLane) -> None:
    """stop() lets queued calls finish, ends the thread, and later calls are refused."""
    ident = await lane.run(threading.get_ident)
    thread = next(t for t in threading.enumerate() if t.ident == ident)
    assert thread.daemon
    assert thread.name == "tidelog test lane"
    lane.stop()
    lane.stop()  # idempotent
    await trio.to_thread.run_sync(thread.join, 10)
    assert not thread.is_alive()
    with pytest.raises(ClosedError):
        await lane.run(int)
