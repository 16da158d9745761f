"""``WriteTransaction`` (stores/sqlite/_connection.py), the one context manager around
every SQLite write: on a real database file, each way a write can end leaves the
connection out of any transaction, the lock free, and says what happened in tidelog's
errors, as the nested ``map_errors`` / ``transaction`` blocks it replaced did."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import apsw
import pytest

from stores import StoreBusyError, StoreError
from stores.sqlite._connection import WriteTransaction


@pytest.fixture
def conn(tmp_path: Path) -> Iterator[apsw.Connection]:
    connection = apsw.Connection(str(tmp_path / "w.db"))
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("CREATE TABLE t(x INTEGER PRIMARY KEY, v TEXT)")
    connection.execute("CREATE TABLE meta(key TEXT PRIMARY KEY, value INTEGER)")
    connection.execute("INSERT INTO meta VALUES ('sync_epoch', 0)")
    yield connection
    connection.close()


class _Write:
    """A WriteTransaction factory that records its lock's state and its commits."""

    def __init__(self, conn: apsw.Connection) -> None:
        self.conn = conn
        self.lock = threading.Lock()
        self.committed: list[bool] = []

    def __call__(self, *, full: bool = False, touch: bool = False) -> WriteTransaction:
        return WriteTransaction(
            self.lock,
            lambda: self.conn,
            "test write",
            full=full,
            touch=touch,
            committed=lambda _conn, was_full: self.committed.append(was_full),
        )

    def lock_is_free(self) -> bool:
        return _free(self.lock)


def _free(lock: threading.Lock) -> bool:
    """Is ``lock`` (not reentrant) free? (Takes and gives it back if so.)"""
    if not lock.acquire(blocking=False):
        return False
    lock.release()
    return True


def _rows(conn: apsw.Connection) -> list[tuple[int, str]]:
    return [(int(x), str(v)) for x, v in conn.execute("SELECT x, v FROM t ORDER BY x")]


def _assert_rolled_back(write: _Write, conn: apsw.Connection) -> None:
    """Nothing of the block was kept, no transaction is open, the lock is free."""
    assert _rows(conn) == []
    assert conn.get_autocommit()
    assert write.lock_is_free()


def test_a_write_commits_and_reports_it(conn: apsw.Connection) -> None:
    """The block's statements are committed, ``committed`` is called once, the lock is free."""
    write = _Write(conn)
    with write() as c:
        c.execute("INSERT INTO t VALUES (1, 'a')")
    assert _rows(conn) == [(1, "a")]
    assert write.committed == [False]
    assert conn.get_autocommit()
    assert write.lock_is_free()


def test_a_driver_error_in_the_block_rolls_back_and_is_translated(conn: apsw.Connection) -> None:
    """An apsw error raised by the block becomes a StoreError caused by it; nothing is kept."""
    write = _Write(conn)

    def fail() -> None:
        with write() as c:
            c.execute("INSERT INTO t VALUES (1, 'a')")
            c.execute("INSERT INTO nowhere VALUES (1)")

    with pytest.raises(StoreError) as caught:
        fail()
    assert isinstance(caught.value.__cause__, apsw.SQLError)
    assert write.committed == []
    _assert_rolled_back(write, conn)


def test_any_other_exception_rolls_back_and_passes_unchanged(conn: apsw.Connection) -> None:
    """A non-driver exception leaves the block as it is, after the rollback."""
    write = _Write(conn)

    def fail() -> None:
        with write() as c:
            c.execute("INSERT INTO t VALUES (1, 'a')")
            raise KeyError("mine")

    with pytest.raises(KeyError):
        fail()
    _assert_rolled_back(write, conn)


def test_a_busy_database_refuses_the_begin_with_store_busy(
    conn: apsw.Connection, tmp_path: Path
) -> None:
    """BEGIN IMMEDIATE against another connection's write lock raises StoreBusyError; the
    block never runs and the lock is free."""
    other = apsw.Connection(str(tmp_path / "w.db"))
    conn.set_busy_timeout(10)
    conn.execute("PRAGMA synchronous=NORMAL")
    other.execute("BEGIN IMMEDIATE")
    write = _Write(conn)
    ran = False
    try:
        with pytest.raises(StoreBusyError), write(full=True):
            ran = True
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert not ran
    assert conn.get_autocommit()
    assert write.lock_is_free()
    assert conn.execute("PRAGMA synchronous").fetchall() == [(1,)]  # NORMAL, put back
    with write() as c:
        c.execute("INSERT INTO t VALUES (1, 'a')")
    assert _rows(conn) == [(1, "a")]


def test_a_failing_commit_is_translated_and_frees_the_lock(conn: apsw.Connection) -> None:
    """A COMMIT refused by SQLite (a deferred constraint) raises StoreError, not a driver
    error, and releases the lock."""
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute("CREATE TABLE child(p INTEGER REFERENCES t(x) DEFERRABLE INITIALLY DEFERRED)")
    write = _Write(conn)
    with pytest.raises(StoreError) as caught, write() as c:
        c.execute("INSERT INTO child VALUES (42)")  # no t row 42: fails at COMMIT
    assert isinstance(caught.value.__cause__, apsw.ConstraintError)
    assert write.committed == []
    assert write.lock_is_free()
    if not conn.get_autocommit():  # SQLite keeps the transaction open after such a COMMIT
        conn.execute("ROLLBACK")
    assert conn.execute("SELECT count(*) FROM child").fetchall() == [(0,)]


def test_full_sets_the_durability_pragma_only_around_the_transaction(
    conn: apsw.Connection,
) -> None:
    """``full`` runs the transaction at synchronous=FULL and puts NORMAL back after it,
    also when the block fails; ``committed`` learns it was a full commit."""
    conn.execute("PRAGMA synchronous=NORMAL")
    write = _Write(conn)
    seen: list[object] = []
    with write(full=True) as c:
        seen.append(c.execute("PRAGMA synchronous").fetchall())
        c.execute("INSERT INTO t VALUES (1, 'a')")
    assert seen == [[(2,)]]  # FULL
    assert conn.execute("PRAGMA synchronous").fetchall() == [(1,)]  # NORMAL
    assert write.committed == [True]
    with pytest.raises(KeyError), write(full=True):
        raise KeyError("mine")
    assert conn.execute("PRAGMA synchronous").fetchall() == [(1,)]
    assert write.lock_is_free()


def test_touch_bumps_the_counter_in_the_same_transaction(conn: apsw.Connection) -> None:
    """``touch`` writes the sync counter before the COMMIT (a barrier with nothing else to
    write still reaches the WAL); a block that fails writes no bump."""
    write = _Write(conn)
    with write(touch=True):
        pass
    assert conn.execute("SELECT value FROM meta").fetchall() == [(1,)]
    with pytest.raises(KeyError), write(touch=True):
        raise KeyError("mine")
    assert conn.execute("SELECT value FROM meta").fetchall() == [(1,)]
    conn.execute("DROP TABLE meta")
    with pytest.raises(StoreError), write(touch=True) as c:
        c.execute("INSERT INTO t VALUES (1, 'a')")
    _assert_rolled_back(write, conn)  # the failed bump rolled the block back


def test_a_failing_committed_hook_is_reported_after_the_commit(conn: apsw.Connection) -> None:
    """What ``committed`` raises propagates (the write is already committed) and the lock
    is free."""
    lock = threading.Lock()

    def committed(_conn: apsw.Connection, _full: bool) -> None:
        raise RuntimeError("bookkeeping")

    with (
        pytest.raises(RuntimeError),
        WriteTransaction(
            lock, lambda: conn, "test write", full=False, touch=False, committed=committed
        ) as c,
    ):
        c.execute("INSERT INTO t VALUES (1, 'a')")
    assert _rows(conn) == [(1, "a")]
    assert _free(lock)


def test_an_open_that_raises_takes_no_transaction_and_frees_the_lock(
    conn: apsw.Connection,
) -> None:
    """``open_conn`` raising (a closed or read-only handle) is not translated and leaves
    no transaction and no lock behind."""
    lock = threading.Lock()

    def refuse() -> apsw.Connection:
        raise LookupError("closed")

    with (
        pytest.raises(LookupError),
        WriteTransaction(lock, refuse, "test write", full=True, touch=False, committed=print),
    ):
        pass
    assert conn.get_autocommit()
    assert _free(lock)
