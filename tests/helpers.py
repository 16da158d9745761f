"""Test helpers importable from every test module (``from helpers import ...``)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, TypeVar

import apsw
import pytest

from runtime import JSON, MemoryStore, NewEvent, Runtime, StoredEvent
from stores import BatchResult, StoreIOError, WriteOp

RuntimeFactory = Callable[..., AbstractAsyncContextManager[Runtime]]

_MemoryStoreT = TypeVar("_MemoryStoreT", bound=MemoryStore)


def obj(event: StoredEvent | NewEvent) -> dict[str, JSON]:
    """The event's ``data``, asserted to be a JSON object."""
    assert isinstance(event.data, dict), f"data is not an object: {event.data!r}"
    return event.data


def num(event: StoredEvent | NewEvent, key: str) -> int:
    """``event.data[key]``, asserted to be an int."""
    value = obj(event)[key]
    assert isinstance(value, int), f"data[{key!r}] is not an int: {value!r}"
    return value


def text(event: StoredEvent | NewEvent, key: str) -> str:
    """``event.data[key]``, asserted to be a string."""
    value = obj(event)[key]
    assert isinstance(value, str), f"data[{key!r}] is not a string: {value!r}"
    return value


async def stat_head(rt: Runtime, session_id: str) -> int:
    """The committed head ``rt.stat`` reports for a session asserted to exist."""
    info = await rt.stat(session_id)
    assert info is not None, f"session {session_id!r} does not exist"
    return info.head


def share_state(
    source: MemoryStore, other: _MemoryStoreT, *, read_only: bool | None
) -> _MemoryStoreT:
    """Make ``other`` (a fresh instance of a MemoryStore subclass) a clone of ``source``,
    as ``MemoryStore.clone`` does: the same data, read-only if either asks for it. For
    test stores whose ``clone`` must keep their subclass."""
    other._state = source._state
    other.read_only = source.read_only or bool(read_only)
    return other


class FlakyMemoryStore(MemoryStore):
    """A real MemoryStore whose ``write_batch`` can be told to fail.

    ``fail_next`` batches raise ``StoreIOError`` before writing anything;
    ``fail_after_commit`` batches commit and *then* raise (an ambiguous failure, as when
    the disk reports an error after the data reached it).
    """

    def __init__(self, *, read_only: bool = False) -> None:
        super().__init__(read_only=read_only)
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

    def clone(self, *, read_only: bool | None = None) -> FlakyMemoryStore:
        """A handle on the same data with fault counters of its own."""
        return share_state(self, FlakyMemoryStore(), read_only=read_only)


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


def runtime_target(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Any:
    """What ``open_runtime`` takes for a backend ``kind``: ``"memory"`` a new MemoryStore,
    ``"sqlite"`` a file under ``tmp_path``, ``"jsonl"`` a store directory under it,
    ``"postgres"`` the URL of a PostgreSQL schema of the test's own (the ``pg_schema``
    fixture: skipped without a server)."""
    if kind == "memory":
        return MemoryStore()
    if kind == "sqlite":
        return tmp_path / "rt.db"
    if kind == "jsonl":
        directory = tmp_path / "rt.jsonl"
        directory.mkdir(exist_ok=True)
        return directory
    from pgtest import url_of

    return url_of(*request.getfixturevalue("pg_schema"))
