"""rt.fork: lineage, errors, and snapshots around forks."""

from __future__ import annotations

import pathlib
from collections.abc import AsyncIterator

import pytest
from helpers import runtime_target

from runtime import (
    NewEvent,
    Runtime,
    SessionExistsError,
    SessionNotFoundError,
    SnapshotExpiredError,
    open_runtime,
)


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def rt(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> AsyncIterator[Runtime]:
    target = runtime_target(request.param, tmp_path, request)
    async with open_runtime(target) as runtime:  # type: ignore[arg-type]
        yield runtime


def ev(i: int) -> NewEvent:
    return NewEvent("k", {"i": i})


async def test_fork_lineage_and_content(rt: Runtime) -> None:
    """The child holds the source's prefix, names its parent and seed length."""
    async with rt.open_session("p", header={"title": "t"}) as w:
        await w.append([ev(i) for i in range(6)])
    info = await rt.fork("p", "c", at_seq=4)
    assert info.parent == ("p", 4) and info.head == 4
    assert info.header["forked_from"] == "p" and info.header["fork_seq"] == 4
    assert info.header["title"] == "t"
    async with rt.open_session("c", mode="read") as r:
        assert [e.data for e in await r.read()] == [{"i": i} for i in range(4)]
    full = await rt.fork("p", "all")
    assert full.parent == ("p", 6)


async def test_default_fork_point_includes_accepted_writes(rt: Runtime) -> None:
    """Without at_seq, the fork includes what this runtime's writer had accepted."""
    async with rt.open_session("p") as w:
        w.append_nowait([ev(1), ev(2)])
        info = await rt.fork("p", "c")
    assert info.head == 2


async def test_fork_errors_in_order(rt: Runtime) -> None:
    """Existing target first, then unknown source, then bad at_seq (ValueError)."""
    async with rt.open_session("p") as w:
        await w.append([ev(1)])
    async with rt.open_session("taken"):
        pass
    with pytest.raises(SessionExistsError):
        await rt.fork("missing", "taken")
    with pytest.raises(SessionNotFoundError):
        await rt.fork("missing", "new")
    for bad in (-1, 2, "1", 0.5):
        with pytest.raises(ValueError):
            await rt.fork("p", "new", at_seq=bad)  # type: ignore[arg-type]
    assert await rt.stat("new") is None


async def test_snapshot_across_fork_and_truncate(rt: Runtime) -> None:
    """A snapshot of the parent taken before a fork stays correct through the fork and
    expires cleanly when the parent is truncated below it; the child is unaffected."""
    async with rt.open_session("p") as w:
        await w.append([ev(i) for i in range(5)])
        async with rt.snapshot("p") as snap:
            before = await snap.read()
            await rt.fork("p", "c", at_seq=5)
            assert await snap.read() == before
            async with rt.snapshot("c") as child_snap:
                await w.truncate(2)
                with pytest.raises(SnapshotExpiredError):
                    await snap.read()
                assert [e.data for e in await child_snap.read()] == [e.data for e in before]
                assert (await child_snap.values(["stats"]))["stats"]["events"] == 5
