"""The runtime reads a store's declared capabilities: WAL upkeep, backend options."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
import trio
import trio.lowlevel

from runtime import InvalidArgumentError, MemoryStore, NewEvent, open_runtime
from stores import AppendOp, BatchResult, Capabilities, WriteOp


class _Frames:
    """The log a :class:`_LoggedStore` and its clones share: frames written, and the
    checkpoints asked for."""

    def __init__(self) -> None:
        self.written = 0
        self.checkpoints = 0


class _LoggedStore(MemoryStore):
    """A third-party store standing in for one with a write-ahead log: every committed
    event is a frame, and ``checkpoint_wal`` covers them all. Whether it leaves the
    checkpoints to its owner is what it declares."""

    def __init__(self, *, upkeep: bool, frames: _Frames | None = None) -> None:
        super().__init__()
        self.capabilities = Capabilities(durable=False, blocking=False, wal_upkeep=upkeep)
        self.frames = frames or _Frames()

    @property
    def wal_pages(self) -> int:
        return self.frames.written

    def checkpoint_wal(self) -> int:
        self.frames.checkpoints += 1
        return self.frames.written

    def write_batch(self, ops: Sequence[WriteOp], *, sync: bool = False) -> list[BatchResult]:
        results = super().write_batch(ops, sync=sync)
        self.frames.written += sum(len(op.events) for op in ops if isinstance(op, AppendOp))
        return results

    def clone(self, *, read_only: bool | None = None) -> _LoggedStore:
        shared = super().clone(read_only=read_only)
        other = _LoggedStore(upkeep=self.capabilities.wal_upkeep, frames=self.frames)
        other.__dict__.update(shared.__dict__)  # the same data, as MemoryStore.clone shares it
        other.capabilities = self.capabilities
        return other


async def _write_frames(store: _LoggedStore, count: int) -> None:
    async with open_runtime(store) as rt, rt.open_session("s") as writer:
        await writer.append([NewEvent("k", i) for i in range(count)])
        with trio.fail_after(5):
            while store.capabilities.wal_upkeep and rt.statistics().wal_checkpoints == 0:
                await trio.lowlevel.checkpoint()
        assert rt.statistics().wal_checkpoints == store.frames.checkpoints


async def test_wal_upkeep_is_run_for_a_store_that_declares_it() -> None:
    """A store declaring wal_upkeep is checkpointed once its WAL grew past the threshold."""
    store = _LoggedStore(upkeep=True)
    await _write_frames(store, 1100)
    assert store.frames.checkpoints >= 1


async def test_no_wal_upkeep_without_the_capability() -> None:
    """A store declaring no WAL upkeep is never asked to checkpoint, however its log grows."""
    store = _LoggedStore(upkeep=False)
    await _write_frames(store, 1100)
    assert store.frames.written == 1100
    assert store.frames.checkpoints == 0


async def test_the_backend_checks_its_own_options(tmp_path: Path) -> None:
    """A JSONL directory with a bad ``synchronous`` is refused by JsonlStore, untouched."""
    root = trio.Path(tmp_path / "logs")
    await root.mkdir()
    with pytest.raises(InvalidArgumentError, match="synchronous"):
        async with open_runtime(root, synchronous="sometimes"):  # type: ignore[arg-type]
            pass  # pragma: no cover
    assert list(await root.iterdir()) == []


async def test_runtime_options_are_checked_before_the_store_opens(tmp_path: Path) -> None:
    """A bad runtime option is refused before any backend is opened: no file is made."""
    with pytest.raises(InvalidArgumentError, match="lease_ttl"):
        async with open_runtime(tmp_path / "never.db", lease_ttl=0):
            pass  # pragma: no cover
    assert list(await trio.Path(tmp_path).iterdir()) == []
