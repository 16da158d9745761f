"""The bridge between asyncio (or threads) and the trio runtime: call order kept,
cancellation carried across and settled before it propagates, clear refusals."""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Awaitable, Iterator

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime import ClosedError, InvalidArgumentError, MemoryStore, open_runtime
from runtime.integrations import Bridge, open_bridge
from runtime.integrations._turns import Turns


async def nothing() -> None:
    await trio.lowlevel.checkpoint()


@pytest.fixture
def bridge() -> Iterator[Bridge]:
    with Bridge.start(MemoryStore()) as started:
        yield started


def test_jobs_are_admitted_in_call_order(bridge: Bridge) -> None:
    """Jobs submitted from asyncio tasks and from threads are admitted on the trio
    thread in the order they were submitted by each caller."""
    admitted: list[str] = []

    def job(name: str) -> Awaitable[None]:
        admitted.append(name)  # at admission, on the trio thread
        return nothing()

    async def many() -> None:
        await asyncio.gather(*(bridge.call(functools.partial(job, f"a{i}")) for i in range(100)))

    asyncio.run(many())
    assert admitted == [f"a{i}" for i in range(100)]
    admitted.clear()
    for i in range(20):
        bridge.call_sync(functools.partial(job, f"s{i}"))
    assert admitted == [f"s{i}" for i in range(20)]


def test_asyncio_cancel_reaches_the_trio_side_first(bridge: Bridge) -> None:
    """Cancelling an asyncio caller cancels its job on the trio thread, and the
    CancelledError is raised only once the job has ended."""
    ended = threading.Event()
    started = threading.Event()

    async def work() -> None:
        started.set()
        try:
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                await trio.sleep(0.05)  # the cleanup the caller must wait for
            ended.set()

    async def caller() -> None:
        task = asyncio.ensure_future(bridge.call(work))
        await asyncio.to_thread(started.wait)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert ended.is_set()

    asyncio.run(caller())


def test_refusals(bridge: Bridge) -> None:
    """A closed bridge refuses calls with ClosedError; a sync call on the bridge's own
    trio thread and a call from another trio run are refused with
    InvalidArgumentError."""

    async def on_trio_thread() -> None:
        with pytest.raises(InvalidArgumentError, match="would block"):
            bridge.call_sync(nothing)

    bridge.call_sync(on_trio_thread)

    async def other_run() -> None:
        with pytest.raises(InvalidArgumentError, match="another trio run"):
            await bridge.call(nothing)

    trio.run(other_run)
    bridge.close()
    with pytest.raises(ClosedError):
        bridge.call_sync(nothing)


async def test_open_bridge_needs_a_runtime() -> None:
    """open_bridge refuses what is not a Runtime, and a bridge of open_bridge closes
    with its block, not with close()."""
    with pytest.raises(InvalidArgumentError):
        async with open_bridge("not a runtime"):  # type: ignore[arg-type]
            pass  # pragma: no cover
    async with open_runtime(MemoryStore()) as rt, open_bridge(rt) as native:
        with pytest.raises(InvalidArgumentError):
            native.close()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["take", "serve", "abandon"]), max_size=40))
def test_turns_serve_tickets_in_order(steps: list[str]) -> None:
    """Whatever is taken and abandoned, turns are served in ticket order, each live
    ticket once, and an abandoned one is skipped."""
    turns = Turns()
    waiting: list[int] = []
    served: list[int] = []
    abandoned: set[int] = set()
    for step in steps:
        if step == "take":
            waiting.append(turns.take())
        elif step == "abandon" and waiting:
            ticket = waiting.pop(len(waiting) // 2)
            turns.abandon(ticket)
            abandoned.add(ticket)
        elif step == "serve" and waiting:
            ticket = waiting.pop(0)
            assert turns._serving == ticket  # its turn has come: every earlier one ended
            turns.done(ticket)
            served.append(ticket)
    assert served == sorted(served)
    assert not set(served) & abandoned
    assert turns.idle == (not waiting)
