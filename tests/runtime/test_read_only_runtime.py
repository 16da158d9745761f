"""A runtime on a read-only store: every read works, nothing is written (no lease, no
file), and a write open fails cleanly with ReadOnlyError."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trio

from runtime import NewEvent, ReadOnlyError, SqliteStore, open_runtime


async def test_runtime_on_a_read_only_store_reads_and_writes_nothing(tmp_path: Path) -> None:
    """open_runtime(SqliteStore(path, read_only=True)) lists, reads, snapshots and tails
    (seeing another connection's later commit), takes no lease and creates no file; a
    write open raises ReadOnlyError and the runtime still closes cleanly."""
    db = tmp_path / "ro.db"
    writer = SqliteStore(db)
    writer.append("s", [NewEvent("k", i) for i in range(3)])
    writer.close()
    before = db.read_bytes()
    store = await trio.to_thread.run_sync(lambda: SqliteStore(db, read_only=True))
    try:
        async with open_runtime(store) as rt:
            assert [i.id for i in await rt.list_sessions()] == ["s"]
            async with rt.snapshot("s") as snap:
                assert [e.data for e in await snap.read()] == [0, 1, 2]
            with pytest.raises(ReadOnlyError):
                async with rt.open_session("s"):
                    pass
            later = SqliteStore(db)
            later.append("s", [NewEvent("k", 3)])
            later.close()
            with trio.fail_after(10):
                async for event in rt.tail("s", since_seq=2):
                    if event.seq == 4:
                        break
            assert os.listdir(tmp_path) == ["ro.db"]
    finally:
        store.close()
    assert os.listdir(tmp_path) == ["ro.db"]
    assert db.read_bytes() != before  # the other connection's commit, checkpointed at close
