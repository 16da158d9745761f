"""The engine behind the handles: handles are made by the runtime only."""

from __future__ import annotations

import pytest

from runtime import (
    NewEvent,
    Runtime,
    SessionReader,
    SessionWriter,
    Snapshot,
    Tail,
    Watch,
)


@pytest.mark.parametrize("cls", [Runtime, SessionWriter, SessionReader, Snapshot, Tail, Watch])
def test_handles_have_no_public_constructor(cls: type) -> None:
    """Calling a handle class raises TypeError naming it: only the runtime makes them."""
    with pytest.raises(TypeError, match=f"{cls.__qualname__} has no public constructor"):
        cls()


async def test_snapshot_reads_through_its_pin_after_later_writes(rt: Runtime) -> None:
    """A snapshot's read goes to the store through its own pin: later appends stay out."""
    async with rt.open_session("s") as writer:
        await writer.append([NewEvent("k", 1), NewEvent("k", 2)])
        async with rt.snapshot("s") as snap:
            await writer.append([NewEvent("k", 3)])
            assert [e.data for e in await snap.read()] == [1, 2]
            assert [e.data for e in await rt.read("s")] == [1, 2, 3]
