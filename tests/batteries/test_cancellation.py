"""Cancel append, append_nowait+flush and truncate at every checkpoint in turn: each is
all or nothing, the head says which, and the runtime keeps serving."""

from __future__ import annotations

import functools
import pathlib
from collections.abc import Awaitable, Callable

import apsw
import pytest
import trio
import trio.testing
from battery_support import run_cancelled_at
from helpers import RuntimeFactory

from runtime import NewEvent, Runtime, SessionWriter, open_runtime


async def _committed(rt: Runtime, session_id: str) -> list[int]:
    return [e.data["n"] for e in await rt.read(session_id)]  # type: ignore[index]


async def _sweep(
    rt: Runtime, session_id: str, make_op: Callable[[SessionWriter, int], Awaitable[object]]
) -> int:
    """Cancel at step 1, 2, ... until the op completes uncancelled; check every round."""
    async with rt.open_session(session_id) as w:
        expected: list[int] = []
        step = 0
        while True:
            step += 1
            n = step
            before = await w.head()
            cancelled = await run_cancelled_at(step, functools.partial(make_op, w, n))
            await w.flush()
            committed = await _committed(rt, session_id)
            if await w.head() == before:
                assert committed == expected, f"step {step}: a withdrawn write landed"
            else:
                expected.append(n)
                assert committed == expected, f"step {step}: an accepted write was lost"
            # The runtime keeps serving after every cancellation.
            assert await w.append([NewEvent("k", {"n": -step})]) == await w.head()
            expected.append(-step)
            if not cancelled:
                return step
            assert step < 50, "the operation never completed"


async def test_cancel_append_at_every_checkpoint(make_runtime: RuntimeFactory) -> None:
    """A cancelled await append() is all-or-nothing at every checkpoint."""
    async with make_runtime() as rt:
        steps = await _sweep(rt, "s", lambda w, n: w.append([NewEvent("k", {"n": n})]))
        assert steps >= 2


async def test_cancel_flush_at_every_checkpoint(make_runtime: RuntimeFactory) -> None:
    """append_nowait then a cancelled flush(): the accepted events always land."""

    async def op(w: SessionWriter, n: int) -> None:
        w.append_nowait([NewEvent("k", {"n": n})])
        await w.flush()

    async with make_runtime() as rt:
        await _sweep(rt, "s", op)


async def test_cancel_truncate_at_every_checkpoint(make_runtime: RuntimeFactory) -> None:
    """A cancelled truncate() either removed the events or left them all."""
    async with make_runtime() as rt, rt.open_session("t") as w:
        step = 0
        while True:
            step += 1
            await w.append([NewEvent("k", {"n": i}) for i in range(3)])
            before = await w.head()
            cancelled = await run_cancelled_at(step, functools.partial(w.truncate, before - 2))
            committed = await _committed(rt, "t")
            if await w.head() == before:
                assert len(committed) == before
            else:
                assert await w.head() == before - 2
                await w.flush()
                assert len(await _committed(rt, "t")) == before - 2
            if not cancelled:
                break
            assert step < 50


@pytest.mark.parametrize("steps", [1, 2, 3])
async def test_cancel_open_session(make_runtime: RuntimeFactory, steps: int) -> None:
    """Cancelling a write open leaves the session free for the next open."""
    async with make_runtime() as rt:

        async def op() -> None:
            async with rt.open_session("o") as w:
                await w.append([NewEvent("k", {"n": 1})])

        await run_cancelled_at(steps, op)
        async with rt.open_session("o") as w:
            await w.append([NewEvent("k", {"n": 2})])


async def test_cancel_queued_append_withdraws_in_flight_append_lands(
    tmp_path: pathlib.Path,
) -> None:
    """While the writer is stuck on a locked database: a cancelled append still queued is
    withdrawn (head goes back), a cancelled append already in the commit lands."""
    path = tmp_path / "db"
    async with open_runtime(path, busy_timeout_ms=20_000) as rt, rt.open_session("s") as w:
        blocker = apsw.Connection(str(path))
        blocker.execute("BEGIN IMMEDIATE")
        released = False
        try:
            async with trio.open_nursery() as nursery:
                in_flight = trio.CancelScope()
                queued = trio.CancelScope()

                async def append_in(scope: trio.CancelScope, n: int) -> None:
                    with scope:
                        await w.append([NewEvent("k", {"n": n})])

                nursery.start_soon(append_in, in_flight, 1)
                await trio.testing.wait_all_tasks_blocked(0.05)
                nursery.start_soon(append_in, queued, 2)
                await trio.testing.wait_all_tasks_blocked(0.05)
                assert await w.head() == 2
                queued.cancel()
                in_flight.cancel()
                await trio.testing.wait_all_tasks_blocked(0.05)
                assert await w.head() == 1  # the queued one was withdrawn
                blocker.execute("ROLLBACK")
                released = True
            assert await _committed(rt, "s") == [1]
            assert await w.append([NewEvent("k", {"n": 3})]) == 2
        finally:
            if not released:
                blocker.execute("ROLLBACK")
            blocker.close()


async def test_cancel_fork_at_every_checkpoint(make_runtime: RuntimeFactory) -> None:
    """A cancelled fork either created the whole child or nothing; the runtime serves on."""
    async with make_runtime() as rt:
        async with rt.open_session("src") as w:
            await w.append([NewEvent("k", {"n": i}) for i in range(5)])
        step = 0
        while True:
            step += 1
            child = f"child-{step}"
            cancelled = await run_cancelled_at(step, functools.partial(rt.fork, "src", child))
            info = await rt.stat(child)
            if info is not None:
                assert info.head == 5 and info.parent == ("src", 5)
                assert len(await rt.read(child)) == 5
            else:
                assert cancelled
            if not cancelled:
                assert info is not None
                break
            assert step < 50
        async with rt.open_session("src") as w:
            assert await w.append([NewEvent("k", {"n": 99})]) == 6


async def test_append_cancelled_before_it_starts_is_withdrawn(
    make_runtime: RuntimeFactory,
) -> None:
    """An append whose scope was cancelled before the call writes nothing and leaves no
    parked waiter behind."""
    async with make_runtime() as rt, rt.open_session("s") as w:
        await w.append([NewEvent("k", {"n": 1})])
        with trio.CancelScope() as scope:
            scope.cancel()
            await w.append([NewEvent("k", {"n": 2})])
        assert scope.cancelled_caught
        assert await w.head() == 1
        assert not w._actor._parked
        await w.flush()
        assert await _committed(rt, "s") == [1]
        assert await w.append([NewEvent("k", {"n": 3})]) == 2
