"""rt.fork: lineage, errors, and snapshots around forks."""

from __future__ import annotations

import pytest

from runtime import (
    INTERNAL_PREFIX,
    InvalidArgumentError,
    InvalidSessionIdError,
    NewEvent,
    Runtime,
    SessionExistsError,
    SessionNotFoundError,
    SnapshotExpiredError,
)


def ev(i: int) -> NewEvent:
    return NewEvent("k", {"i": i})


async def test_fork_lineage_and_content(rt: Runtime) -> None:
    """The child holds the source's prefix, names its parent and seed length."""
    async with rt.open_session("p", header={"title": "t"}) as w:
        await w.append([ev(i) for i in range(6)])
    info = await rt.fork("p", "c", at_seq=4)
    assert info.parent == ("p", 4)
    assert info.head == 4
    assert info.header["forked_from"] == "p"
    assert info.header["fork_seq"] == 4
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
        with pytest.raises(InvalidArgumentError, match="at_seq"):
            await rt.fork("p", "new", at_seq=bad)  # type: ignore[arg-type]  # bad input under test
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


async def test_fork_into_the_reserved_namespace_needs_internal(rt: Runtime) -> None:
    """A fork's new id in the reserved namespace is refused as a write open refuses it
    (nothing created), and allowed with ``internal=True``."""
    async with rt.open_session("p") as w:
        await w.append([ev(1)])
    with pytest.raises(InvalidSessionIdError, match="reserved"):
        await rt.fork("p", INTERNAL_PREFIX + "run/zz")
    assert await rt.stat(INTERNAL_PREFIX + "run/zz") is None
    info = await rt.fork("p", INTERNAL_PREFIX + "run/zz", internal=True)
    assert info.parent == ("p", 1)
