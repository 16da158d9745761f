"""Test helpers importable from every test module (``from helpers import ...``)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import apsw
import pytest

from runtime import MemoryStore, Runtime
from stores import BatchResult, StoreIOError, WriteOp

RuntimeFactory = Callable[..., AbstractAsyncContextManager[Runtime]]


class FlakyMemoryStore(MemoryStore):
    """A real MemoryStore whose ``write_batch`` can be told to fail.

    ``fail_next`` batches raise ``StoreIOError`` before writing anything;
    ``fail_after_commit`` batches commit and *then* raise (an ambiguous failure, as when
    the disk reports an error after the data reached it).
    """

    def __init__(self) -> None:
        super().__init__()
        self.fail_next = 0
        self.fail_after_commit = 0
        self.batches = 0

    def write_batch(self, ops: Sequence[WriteOp], *, sync: bool = False) -> list[BatchResult]:
        self.batches += 1
        if self.fail_next:
            self.fail_next -= 1
            raise StoreIOError("injected: disk I/O error")
        results = super().write_batch(ops, sync=sync)
        if self.fail_after_commit:
            self.fail_after_commit -= 1
            raise StoreIOError("injected: error after commit")
        return results

    def clone(self) -> FlakyMemoryStore:
        other = FlakyMemoryStore()
        other._state = self._state
        return other


def write_lock_free(db: Path) -> bool:
    """True if a fresh connection can take the database's write lock within 300 ms."""
    conn = apsw.Connection(str(db))
    try:
        conn.set_busy_timeout(300)
        try:
            conn.execute("BEGIN IMMEDIATE")
        except (apsw.BusyError, apsw.LockedError):
            return False
        conn.execute("ROLLBACK")
        return True
    finally:
        conn.close()


def all_threads_stopped(pid: int) -> bool:
    """True if every thread of process ``pid`` is stopped (SIGSTOP took effect)."""
    for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
        with contextlib.suppress(FileNotFoundError):
            if stat.read_text().rsplit(")", 1)[1].split()[0] not in ("T", "t"):
                return False
    return True


def runtime_target(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> object:
    """What ``open_runtime`` takes for a backend ``kind``: ``"memory"`` a new MemoryStore,
    ``"sqlite"`` a file under ``tmp_path``, ``"postgres"`` the URL of a PostgreSQL schema
    of the test's own (the ``pg_schema`` fixture: skipped without a server)."""
    if kind == "memory":
        return MemoryStore()
    if kind == "sqlite":
        return tmp_path / "rt.db"
    from pgtest import url_of

    return url_of(*request.getfixturevalue("pg_schema"))
