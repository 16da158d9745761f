"""Projections read at a snapshot's as_of_seq, their caches, and watching values."""

from __future__ import annotations

import pathlib
from collections.abc import AsyncIterator

import pytest
import trio
import trio.testing
from helpers import runtime_target, share_state

from runtime import (
    JSON,
    InvalidArgumentError,
    MemoryStore,
    NewEvent,
    Projection,
    Runtime,
    StoredEvent,
    StoreIOError,
    open_runtime,
)
from runtime._folding import CACHE_EVERY
from stores import Pin


class Counting(Projection):
    """Counts events, and how many it was asked to apply (to see what a read folded)."""

    name = "counting"
    version = 1
    applied = 0

    def init(self) -> JSON:
        return 0

    def apply(self, state: JSON, event: StoredEvent) -> JSON:  # noqa: ARG002 (it counts)
        Counting.applied += 1
        assert isinstance(state, int)
        return state + 1


@pytest.fixture(params=["sqlite", "postgres"])
async def rt(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> AsyncIterator[Runtime]:
    async with open_runtime(runtime_target(request.param, tmp_path, request)) as runtime:
        yield runtime


async def test_empty_session_gives_initial_views(rt: Runtime) -> None:
    """An empty session's snapshot is at seq 0 and every projection shows its init view."""
    async with rt.open_session("s"), rt.snapshot("s") as snap:
        assert snap.as_of_seq == 0
        values = await snap.values()
    assert list(values) == ["stats"]  # the runtime's built-in projection
    assert values["stats"]["events"] == 0


async def test_values_match_the_snapshot_while_writers_append(rt: Runtime) -> None:
    """values() is folded exactly to as_of_seq, consistent with read(), however the
    session grows after the snapshot was taken."""
    async with rt.open_session("s") as w:
        await w.append([NewEvent("user", {"text": "hi"}), NewEvent("assistant", {"text": "yo"})])
        async with rt.snapshot("s") as snap:
            await w.append([NewEvent("user", {"text": "more"})])
            values = await snap.values()
            events = await snap.read()
            assert values["stats"]["events"] == len(events) == 2
            assert values["stats"]["kinds"] == {"user": 1, "assistant": 1}
            assert values == await snap.values(["stats"])
    with pytest.raises(InvalidArgumentError, match="no projection named 'nope'"):
        async with rt.snapshot("s") as snap:
            await snap.values(["nope"])


async def test_late_registration_folds_existing_log(rt: Runtime) -> None:
    """A projection registered after events exist equals one present from the start."""
    async with rt.open_session("s") as w:
        await w.append([NewEvent("k", i) for i in range(25)])
    rt.register_projection(Counting())
    async with rt.snapshot("s") as snap:
        assert (await snap.values(["counting"]))["counting"] == 25


async def _checkpoint_saved(rt: Runtime, name: str, version: int) -> tuple[int, str] | None:
    store = rt._engine.read_store
    for _ in range(100):
        found = await trio.to_thread.run_sync(store.load_projection, "s", name, version)
        if found is not None:
            return found
        await trio.sleep(0.01)
    return None


async def test_checkpoint_makes_cold_reads_fold_only_the_tail(rt: Runtime) -> None:
    """A long fold leaves a checkpoint; the next read folds only the events after it; a
    changed version ignores it; a truncate below it forces a full refold."""
    rt.register_projection(Counting())
    async with rt.open_session("s") as w:
        await w.append([NewEvent("k", i) for i in range(CACHE_EVERY + 10)])
        async with rt.snapshot("s") as snap:
            assert (await snap.values(["counting"]))["counting"] == CACHE_EVERY + 10
        assert await _checkpoint_saved(rt, "counting", 1) == (
            CACHE_EVERY + 10,
            str(CACHE_EVERY + 10),
        )
        await w.append([NewEvent("k", 0) for _ in range(5)])
        Counting.applied = 0
        async with rt.snapshot("s") as snap:
            assert (await snap.values(["counting"]))["counting"] == CACHE_EVERY + 15
        assert Counting.applied == 5

        class Counting2(Counting):
            version = 2

        rt.register_projection(Counting2())
        Counting.applied = 0
        async with rt.snapshot("s") as snap:
            assert (await snap.values(["counting"]))["counting"] == CACHE_EVERY + 15
        assert Counting.applied == CACHE_EVERY + 15

        rt.register_projection(Counting())
        await w.truncate(100)
        Counting.applied = 0
        async with rt.snapshot("s") as snap:
            assert (await snap.values(["counting"]))["counting"] == 100
        assert Counting.applied == 100


async def test_snapshot_older_than_checkpoint_folds_to_its_own_seq(rt: Runtime) -> None:
    """A snapshot taken before a newer checkpoint still reads exactly its own seq."""
    rt.register_projection(Counting())
    async with rt.open_session("s") as w:
        await w.append([NewEvent("k", i) for i in range(10)])
        async with rt.snapshot("s") as old:
            await w.append([NewEvent("k", i) for i in range(CACHE_EVERY)])
            async with rt.snapshot("s") as new:
                await new.values(["counting"])
            await _checkpoint_saved(rt, "counting", 1)
            assert (await old.values(["counting"]))["counting"] == 10


class FailingCacheStore(MemoryStore):
    """A MemoryStore whose projection checkpoints cannot be written."""

    # Store's signature; this store only fails.
    def save_projection(self, pin: Pin, name: str, version: int, state_json: str) -> None:  # noqa: ARG002
        raise StoreIOError("injected: cannot write the projection cache")

    def clone(self, *, read_only: bool | None = None) -> FailingCacheStore:
        return share_state(self, FailingCacheStore(), read_only=read_only)


async def test_failed_checkpoint_write_never_fails_the_read(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """If saving a projection checkpoint fails, values() still answers (and it is logged)."""
    async with open_runtime(FailingCacheStore()) as rt:
        async with rt.open_session("s") as w:
            await w.append([NewEvent("k", i) for i in range(CACHE_EVERY + 1)])
        async with rt.snapshot("s") as snap:
            values = await snap.values(["stats"])
        assert values["stats"]["events"] == CACHE_EVERY + 1
        await trio.testing.wait_all_tasks_blocked()
    assert "not saved" in caplog.text


async def test_watch_yields_each_change(rt: Runtime) -> None:
    """watch() yields the current value, then a new value after each commit that changes it."""
    async with rt.open_session("s") as w:
        await w.append([NewEvent("user", {"text": "a"})])
        seen: list[int] = []
        watching = trio.Event()

        async def follow() -> None:
            async for stats in rt.watch("s", "stats"):
                seen.append(stats["events"])
                watching.set()
                if stats["events"] == 3:
                    return

        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(follow)
                await watching.wait()  # it yielded the current value: it is watching
                await w.append([NewEvent("assistant", {"text": "b"})])
                await w.append([NewEvent("user", {"text": "c"})])
    assert seen == [1, 2, 3]
    with pytest.raises(InvalidArgumentError, match="no projection named 'nope'"):
        rt.watch("s", "nope")
