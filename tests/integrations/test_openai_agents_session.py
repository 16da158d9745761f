"""The OpenAI Agents SDK session on tidelog: the Session protocol's behaviour, and real
runs of the SDK's Runner (run, run_sync, run_streamed) with its own scripted model."""

from __future__ import annotations

import asyncio
import pathlib
import random
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import trio
from agents import Agent, RunConfig, Runner
from agents.memory import SessionSettings
from agents.testing import ScriptedModel, assistant_message
from helpers import FlakyMemoryStore

from runtime import (
    CommitPendingError,
    InvalidEventError,
    MemoryStore,
    SessionOwnedError,
    open_runtime,
)
from runtime.integrations import Bridge, open_bridge
from runtime.integrations.openai_agents import ITEM, TidelogSession

NO_TRACING = RunConfig(tracing_disabled=True)
SESSION_WORKER = pathlib.Path(__file__).with_name("session_worker.py")


def user(text: object) -> Any:
    return {"role": "user", "content": text}


@pytest.fixture
def bridge(tmp_path: pathlib.Path) -> Iterator[Bridge]:
    """A bridge on a SQLite file (a real thread hop per commit)."""
    with Bridge.start(tmp_path / "sessions.db") as started:
        yield started


def test_protocol_order_limit_pop_clear(bridge: Bridge) -> None:
    """Items come back in append order; get_items(n) is the newest n; session_settings'
    limit is the default; pop_item removes the newest; clear_session empties it."""

    async def main() -> None:
        session = TidelogSession("chat", bridge, session_settings=SessionSettings(limit=2))
        assert await session.get_items() == []
        assert await session.pop_item() is None
        await session.add_items([user("a"), user("b")])
        await session.add_items([user("c")])
        assert await session.get_items(10) == [user("a"), user("b"), user("c")]
        assert await session.get_items() == [user("b"), user("c")]  # the settings' limit
        assert await session.get_items(None) == [user("b"), user("c")]
        assert await session.get_items(1) == [user("c")]
        assert await session.get_items(0) == []
        assert await session.get_items(-1) == [user("a"), user("b"), user("c")]
        assert await session.pop_item() == user("c")
        assert await session.get_items(10) == [user("a"), user("b")]
        await session.clear_session()
        assert await session.get_items(10) == []
        await session.add_items([user("d")])
        assert await session.get_items(10) == [user("d")]
        other = TidelogSession("other", bridge)
        assert await other.get_items() == []
        await other.add_items([user("x")])
        assert await other.get_items() == [user("x")]  # no settings: all items

    asyncio.run(main())


def test_bad_items_store_nothing(bridge: Bridge) -> None:
    """A non-JSON item fails the whole add_items, which stores none of its items."""

    async def main() -> None:
        session = TidelogSession("bad", bridge)
        await session.add_items([user("ok")])
        with pytest.raises(InvalidEventError):
            await session.add_items([user("fine"), user({1, 2})])
        assert await session.get_items() == [user("ok")]

    asyncio.run(main())


def test_concurrent_add_items_keep_call_order(bridge: Bridge) -> None:
    """add_items from many tasks at once: every item is stored once, in call order (the
    bridge admits calls first in, first out)."""

    async def main() -> None:
        session = TidelogSession("busy", bridge)
        await asyncio.gather(
            *(session.add_items([user(f"{i}.0"), user(f"{i}.1")]) for i in range(60))
        )
        items = await session.get_items()
        assert items == [user(f"{i}.{j}") for i in range(60) for j in range(2)]

    asyncio.run(main())


def test_cancelled_saves_are_all_or_nothing(bridge: Bridge) -> None:
    """Cancelling add_items at random points leaves each call's items wholly stored or
    wholly absent, never twice; every call that returned is stored."""

    async def main() -> None:
        session = TidelogSession("cancel", bridge)
        rng = random.Random(7)
        finished: list[int] = []

        async def save(i: int) -> None:
            await session.add_items([user(f"{i}.{j}") for j in range(3)])
            finished.append(i)

        for round_ in range(6):
            tasks = [asyncio.ensure_future(save(round_ * 10 + i)) for i in range(10)]
            for _ in range(rng.randrange(4)):
                await asyncio.sleep(0)
            for task in tasks[rng.randrange(10) :]:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        stored_items: list[Any] = await session.get_items()
        items = [item["content"] for item in stored_items]
        calls = [text.split(".")[0] for text in items]
        groups = [calls[k : k + 3] for k in range(0, len(calls), 3)]
        assert all(len(set(group)) == 1 for group in groups), items
        stored = [int(group[0]) for group in groups]
        assert len(stored) == len(set(stored))
        assert set(finished) <= set(stored)
        assert items == [f"{i}.{j}" for i in stored for j in range(3)]

    asyncio.run(main())


def test_a_failed_commit_is_retried_once() -> None:
    """A store failure during add_items: the call says its items were accepted
    (CommitPendingError) and they are stored exactly once after the retry."""
    store = FlakyMemoryStore()
    with Bridge.start(store) as bridge:

        async def main() -> None:
            session = TidelogSession("flaky", bridge)
            await session.add_items([user("before")])
            store.fail_next = 1
            with pytest.raises(CommitPendingError):
                await session.add_items([user("x"), user("y")])
            await session.add_items([user("after")])
            assert await session.get_items() == [
                user("before"),
                user("x"),
                user("y"),
                user("after"),
            ]

        asyncio.run(main())


def test_runner_run_and_run_sync_and_run_streamed(bridge: Bridge) -> None:
    """The SDK's Runner keeps the conversation in the session: run_sync (on the thread's
    default event loop), then run and run_streamed (on another loop) each see the
    history before their turn."""
    model = ScriptedModel(
        [[assistant_message("one")], [assistant_message("two")], [assistant_message("three")]]
    )
    agent = Agent(name="helper", model=model)
    session = TidelogSession("runner", bridge)
    policy = asyncio.get_event_loop_policy()
    try:
        first = Runner.run_sync(agent, "hi", session=session, run_config=NO_TRACING)
    finally:  # run_sync leaves the thread's default loop open
        policy.get_event_loop().close()
        policy.set_event_loop(None)
    assert first.final_output == "one"

    async def later() -> None:
        second = await Runner.run(agent, "again", session=session, run_config=NO_TRACING)
        assert second.final_output == "two"
        streamed = Runner.run_streamed(agent, "last", session=session, run_config=NO_TRACING)
        kinds = [event.type async for event in streamed.stream_events()]
        assert "raw_response_event" in kinds
        assert streamed.final_output == "three"

    asyncio.run(later())
    assert model.remaining_steps == 0
    last_input: list[Any] = model.last_call.input if model.last_call else []
    said = [item.get("content") for item in last_input if item.get("role") == "user"]
    assert said == ["hi", "again", "last"]
    stored: list[Any] = asyncio.run(session.get_items())
    assert [item.get("role") for item in stored] == ["user", "assistant"] * 3
    assert stored[-1]["content"][0]["text"] == "three"


async def test_native_trio_calls() -> None:
    """A trio program uses the session directly (no thread hop), on a bridge of its own
    runtime; the items are plain events of kind ``item``."""
    async with open_runtime(MemoryStore()) as rt, open_bridge(rt) as bridge:
        session = TidelogSession("native", bridge)
        async with trio.open_nursery() as nursery:
            for i in range(5):
                nursery.start_soon(session.add_items, [user(str(i))])
        items: list[Any] = await session.get_items()
        assert sorted(item["content"] for item in items) == list("01234")
        assert await session.pop_item() is not None
        events = await rt.read(session.tidelog_session_id)
        assert [event.kind for event in events] == [ITEM] * 4


@pytest.mark.slow
def test_two_processes_one_session_single_writer(tmp_path: pathlib.Path) -> None:
    """While another process holds the session, this one's add_items is refused with
    SessionOwnedError and stores nothing; once it lets go, this process writes after
    its items, and the session reads the same from both."""
    db = tmp_path / "shared.db"
    other = subprocess.Popen(
        [sys.executable, str(SESSION_WORKER), str(db), "shared", "from-other"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert other.stdout is not None
        assert other.stdin is not None
        assert other.stdout.readline().strip() == "held"
        with Bridge.start(db) as bridge:
            session = TidelogSession("shared", bridge)

            async def refused() -> None:
                with pytest.raises(SessionOwnedError):
                    await session.add_items([user("from-here")])
                assert await session.get_items() == [user("from-other")]

            asyncio.run(refused())
            other.stdin.write("\n")
            other.stdin.flush()
            assert other.wait(timeout=60) == 0

            async def after() -> None:
                await session.add_items([user("from-here")])
                assert await session.get_items() == [user("from-other"), user("from-here")]

            asyncio.run(after())
    finally:
        other.kill()
        other.wait()
        other.stdin.close()  # type: ignore[union-attr]
        other.stdout.close()  # type: ignore[union-attr]
