"""The tidelog saver's own guarantees beyond LangGraph's suite: the thread's writer is
held (a stale holder is fenced, a live one blocks deletes), writes are all or nothing
under failing stores and cancellation, and maintenance rewrites are atomic."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
import trio
from helpers import FlakyMemoryStore
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)

from runtime import (
    CommitPendingError,
    MemoryStore,
    OwnershipLostError,
    SessionOwnedError,
    open_runtime,
)
from runtime.integrations import Bridge, open_bridge
from runtime.integrations.langgraph import TidelogSaver


async def put(saver: TidelogSaver, thread: str, parent: Any = None, **metadata: Any) -> Any:
    """Put one checkpoint (child of ``parent``'s) with a channel ``v``; its config."""
    config = generate_config(thread)
    if parent is not None:
        config["configurable"]["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
    checkpoint = generate_checkpoint(channel_values={"v": len(metadata)}, channel_versions={})
    checkpoint["channel_versions"] = {"v": checkpoint["id"]}
    return await saver.aput(
        config, checkpoint, generate_metadata(**metadata), {"v": checkpoint["id"]}
    )


async def ids(saver: TidelogSaver, thread: str) -> list[str]:
    return [t.checkpoint["id"] async for t in saver.alist(generate_config(thread))]


async def test_stale_holder_is_fenced_and_takes_the_thread_again() -> None:
    """When another owner takes the thread's lease, the saver's next write raises
    OwnershipLostError and stores nothing; once that owner lets go, the next write
    takes the thread again."""
    store = MemoryStore()
    async with open_runtime(store) as rt, open_bridge(rt) as bridge:
        saver = TidelogSaver(bridge)
        first = await put(saver, "t")
        session_id = saver.session_id("t")
        (lease,) = await trio.to_thread.run_sync(lambda: store.list_leases(prefix=session_id))

        def steal() -> None:
            store.release_lease(session_id, lease.owner)
            store.acquire_lease(session_id, "thief", ttl=60.0, holder="thief")

        await trio.to_thread.run_sync(steal)
        with pytest.raises(OwnershipLostError):
            await put(saver, "t", first)
        assert await ids(saver, "t") == [first["configurable"]["checkpoint_id"]]
        await trio.to_thread.run_sync(store.release_lease, session_id, "thief")
        second = await put(saver, "t", first)
        assert await ids(saver, "t") == [
            second["configurable"]["checkpoint_id"],
            first["configurable"]["checkpoint_id"],
        ]


async def test_live_writer_elsewhere_refuses_writes_and_deletes() -> None:
    """A thread held by another runtime (another process, as far as the lease knows):
    this saver's put, acquire and delete_thread are refused, and nothing changes."""
    store = MemoryStore()
    async with (
        open_runtime(store) as rt_a,
        open_bridge(rt_a) as bridge_a,
        open_runtime(store) as rt_b,
        open_bridge(rt_b) as bridge_b,
    ):
        holder, other = TidelogSaver(bridge_a), TidelogSaver(bridge_b)
        first = await put(holder, "t")
        with pytest.raises(SessionOwnedError):
            await put(other, "t", first)
        with pytest.raises(SessionOwnedError):
            await other.aacquire("t")
        with pytest.raises(SessionOwnedError):
            await other.adelete_thread("t")
        assert await ids(other, "t") == [first["configurable"]["checkpoint_id"]]
        await holder.arelease("t")
        await other.adelete_thread("t")
        assert await ids(holder, "t") == []


async def test_failed_commit_is_accepted_and_stored_once() -> None:
    """A store failure under aput: CommitPendingError says it was accepted; the retry
    stores it, and the session holds each checkpoint exactly once."""
    store = FlakyMemoryStore()
    async with open_runtime(store) as rt, open_bridge(rt) as bridge:
        saver = TidelogSaver(bridge)
        first = await put(saver, "t")
        store.fail_next = 1
        with pytest.raises(CommitPendingError):
            await put(saver, "t", first)
        await put(saver, "t", first)
        events = await rt.read(saver.session_id("t"))
        stored = [str(event.data["id"]) for event in events if isinstance(event.data, dict)]
        assert len(stored) == 3
        assert len(set(stored)) == 3
        assert sorted(await ids(saver, "t")) == sorted(stored)


async def test_failed_prune_leaves_old_or_new_never_a_mix() -> None:
    """prune's rewrite hit by a store failure: the thread reads as before or as pruned,
    never part of each; the accepted rewrite lands once."""
    store = FlakyMemoryStore()
    async with open_runtime(store) as rt, open_bridge(rt) as bridge:
        saver = TidelogSaver(bridge)
        last: Any = None
        for step in range(4):
            last = await put(saver, "t", last, step=step)
        await saver.aput_writes(last, [("ch", "pending")], "task-1")
        every = await ids(saver, "t")
        store.fail_next = 1
        with pytest.raises(CommitPendingError):  # accepted: the retry commits it
            await saver.aprune(["t"])
        assert await ids(saver, "t") in (every, every[:1])
        await saver.aprune(["t"])  # waits for the retried rewrite, then finds it pruned
        assert await ids(saver, "t") == every[:1]
        latest = await saver.aget_tuple(generate_config("t"))
        assert latest is not None
        assert latest.checkpoint["channel_values"] == {"v": 1}
        assert latest.pending_writes == [("task-1", "ch", "pending")]
        assert len(await rt.read(saver.session_id("t"))) == 2


def test_cancelled_puts_are_all_or_nothing() -> None:
    """aput and aput_writes cancelled at random points from asyncio: each is wholly
    stored or wholly absent, never twice; every one that returned is stored."""
    with Bridge.start(MemoryStore()) as bridge:
        saver = TidelogSaver(bridge)

        async def main() -> None:
            rng = random.Random(3)
            base = await put(saver, "t")
            returned: list[str] = []

            async def one(i: int) -> None:
                await saver.aput_writes(base, [(f"c{i}", i), (f"d{i}", i)], f"task-{i}")
                returned.append(f"task-{i}")

            for round_ in range(5):
                tasks = [asyncio.ensure_future(one(round_ * 10 + i)) for i in range(10)]
                for _ in range(rng.randrange(3)):
                    await asyncio.sleep(0)
                for task in tasks[rng.randrange(10) :]:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
            latest = await saver.aget_tuple(base)
            assert latest is not None
            writes = latest.pending_writes or []
            by_task: dict[str, list[str]] = {}
            for task_id, channel, _ in writes:
                by_task.setdefault(task_id, []).append(channel)
            assert all(len(channels) == 2 for channels in by_task.values())
            assert set(returned) <= set(by_task)

        asyncio.run(main())
