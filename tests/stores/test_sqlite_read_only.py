"""Read-only SqliteStores: they never create, migrate or write the file, refuse files they
cannot serve as they are, and fall back to an immutable open where SQLite may not create
the WAL index (real files, real permissions; no mocks)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import apsw
import pytest

from stores import (
    NewEvent,
    ReadOnlyError,
    SqliteStore,
    StoreIOError,
    UnsupportedFormatError,
)
from stores.sqlite import _schema as sqlite_schema


def _populate(path: str) -> None:
    """A current tidelog file with two sessions, closed (so no -wal or -shm is left)."""
    store = SqliteStore(path)
    store.append("s", [NewEvent("k", {"i": i}) for i in range(3)])
    store.create("t", {"title": "x"})
    store.close()


def _snapshot(directory: str) -> dict[str, bytes]:
    """Every file of ``directory`` with its bytes."""
    return {name: Path(directory, name).read_bytes() for name in sorted(os.listdir(directory))}


@pytest.fixture
def db(tmp_path: Path) -> str:
    path = str(tmp_path / "ro.db")
    _populate(path)
    return path


@pytest.fixture
def reader(db: str) -> Iterator[SqliteStore]:
    store = SqliteStore(db, read_only=True)
    yield store
    store.close()


def test_missing_file_is_refused_and_not_created(tmp_path: Path) -> None:
    """A read-only open of a missing file raises StoreIOError and creates nothing."""
    with pytest.raises(StoreIOError, match="no such file"):
        SqliteStore(tmp_path / "absent.db", read_only=True)
    assert os.listdir(tmp_path) == []


def test_file_needing_migration_is_refused_untouched(tmp_path: Path) -> None:
    """A file of an older schema raises UnsupportedFormatError saying a writable open must
    migrate it; the file is byte-for-byte unchanged and no sidecar is left."""
    path = str(tmp_path / "old.db")
    conn = apsw.Connection(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("BEGIN IMMEDIATE")
    sqlite_schema.MIGRATIONS[0](conn)
    conn.execute(f"PRAGMA application_id={sqlite_schema.APPLICATION_ID}")
    conn.execute("PRAGMA user_version=1")
    conn.execute("COMMIT")
    conn.close()
    before = _snapshot(str(tmp_path))
    with pytest.raises(UnsupportedFormatError, match="read_only=False") as info:
        SqliteStore(path, read_only=True)
    assert "migration" in str(info.value)
    after = _snapshot(str(tmp_path))
    assert after["old.db"] == before["old.db"]
    SqliteStore(path).close()  # a writable open migrates it; then a read-only open works
    SqliteStore(path, read_only=True).close()


def test_empty_file_is_refused(tmp_path: Path) -> None:
    """An empty file (no schema yet) is refused read-only: it would need creating."""
    path = tmp_path / "empty.db"
    path.write_bytes(b"")
    with pytest.raises(UnsupportedFormatError, match="read_only=False"):
        SqliteStore(path, read_only=True)
    assert path.read_bytes() == b""


def test_newer_file_is_refused(db: str) -> None:
    """A file of a newer tidelog is refused read-only too, untouched."""
    conn = apsw.Connection(db)
    conn.execute(f"PRAGMA user_version={sqlite_schema.SCHEMA_VERSION + 1}")
    conn.close()
    before = Path(db).read_bytes()
    with pytest.raises(UnsupportedFormatError, match="newer"):
        SqliteStore(db, read_only=True)
    assert Path(db).read_bytes() == before


def test_writes_raise_read_only_and_leave_the_file_unchanged(db: str, reader: SqliteStore) -> None:
    """Every write method raises ReadOnlyError; the database file's bytes do not change."""
    before = Path(db).read_bytes()
    writes: list[Callable[[], object]] = [
        lambda: reader.create("new"),
        lambda: reader.append("s", [NewEvent("k")]),
        lambda: reader.write_batch([]),
        reader.sync,
        lambda: reader.truncate("s", 0),
        lambda: reader.delete("s"),
        lambda: reader.fork("s", "f"),
        lambda: reader.acquire_lease("s", "o", ttl=1.0, holder="h"),
        lambda: reader.renew_leases("o", [], ttl=1.0),
        lambda: reader.release_lease("s", "o"),
        reader.checkpoint_wal,
    ]
    for write in writes:
        with pytest.raises(ReadOnlyError):
            write()
    assert Path(db).read_bytes() == before
    assert reader.read_only is True
    assert reader.immutable is True  # nobody has it open
    assert [e.data for e in reader.read("s")] == [{"i": i} for i in range(3)]
    assert reader.check_integrity() == (True, "ok")


def test_reads_follow_another_connections_writes(db: str, reader: SqliteStore) -> None:
    """While another connection writes (a transaction held open, then committed), the
    read-only store reads the last committed state, then the new one."""
    writer = SqliteStore(db)
    other = apsw.Connection(db)
    try:
        other.execute("BEGIN IMMEDIATE")
        other.execute("UPDATE sessions SET head=head WHERE id='s'")
        assert reader.head("s") == 3  # not blocked by the open write transaction
        other.execute("ROLLBACK")
        writer.append("s", [NewEvent("k", {"i": 3})])
        assert reader.head("s") == 4
        assert reader.read("s", limit=1, from_end=True)[0].data == {"i": 3}
        clone = reader.clone()
        try:
            assert clone.read_only is True
            assert clone.head("s") == 4
            with pytest.raises(ReadOnlyError):
                clone.append("s", [NewEvent("k")])
        finally:
            clone.close()
    finally:
        other.close()
        writer.close()


def _run_unprivileged(code: Callable[[], dict[str, object]]) -> dict[str, object]:
    """Run ``code`` in a forked child that gave up root (uid/gid 65534) when this process
    is root, so file permissions apply to it as to any user; return its JSON result."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        status = 1
        try:
            os.close(read_end)
            if os.geteuid() == 0:
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
            result = code()
            status = 0
        except BaseException as exc:
            result = {"error": f"{type(exc).__name__}: {exc}"}
        finally:
            with os.fdopen(write_end, "w") as out:
                out.write(json.dumps(result))
            os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end) as got:
        text = got.read()
    os.waitpid(pid, 0)
    return dict(json.loads(text))


@pytest.fixture
def read_only_dir() -> Iterator[str]:
    """A directory outside pytest's (root-only) tmp tree holding a tidelog file, made
    read-only (0555) for the test; restored and removed afterwards."""
    directory = tempfile.mkdtemp(prefix="tidelog-ro-")
    os.chmod(directory, 0o755)
    _populate(os.path.join(directory, "ro.db"))
    os.chmod(directory, 0o555)
    yield directory
    os.chmod(directory, 0o755)
    shutil.rmtree(directory)


def test_read_only_directory_is_inspected_without_creating_files(read_only_dir: str) -> None:
    """In a directory the process may not write, SQLite cannot create the WAL index, so
    the store opens the file as immutable (``store.immutable``), reads it whole and
    creates no file.

    The tests run as root, and root writes into a 0555 directory anyway (``os.access``
    says so): checked as root, SQLite would just create the index. So the inspection runs
    in a forked child that gave up root first, for which the permissions are real."""
    before = sorted(os.listdir(read_only_dir))
    path = os.path.join(read_only_dir, "ro.db")

    def inspect() -> dict[str, object]:
        store = SqliteStore(path, read_only=True)
        try:
            return {
                "writable": os.access(read_only_dir, os.W_OK),
                "immutable": store.immutable,
                "heads": [store.head("s"), store.head("t")],
                "ids": sorted(i.id for i in store.list_sessions()),
            }
        finally:
            store.close()

    result = _run_unprivileged(inspect)
    assert result == {"writable": False, "immutable": True, "heads": [3, 0], "ids": ["s", "t"]}
    assert sorted(os.listdir(read_only_dir)) == before == ["ro.db"]


def test_immutable_fallback_refuses_a_wal_holding_commits(read_only_dir: str) -> None:
    """If the WAL beside the file holds commits and its index cannot be created, the
    read-only open fails with StoreIOError rather than read without them (an immutable
    reader ignores the WAL)."""
    path = os.path.join(read_only_dir, "ro.db")
    os.chmod(read_only_dir, 0o755)
    writer = apsw.Connection(path)
    writer.execute("PRAGMA wal_autocheckpoint=0")
    writer.execute("UPDATE sessions SET header='{\"title\":\"y\"}' WHERE id='t'")
    shutil.copy(path + "-wal", path + ".wal-copy")
    writer.close()  # checkpoints and deletes the WAL and its index
    os.rename(path + ".wal-copy", path + "-wal")  # a WAL with commits, no index
    os.chmod(read_only_dir, 0o555)
    before = sorted(os.listdir(read_only_dir))

    def inspect() -> dict[str, object]:
        try:
            SqliteStore(path, read_only=True).close()
        except StoreIOError as exc:
            return {"refused": "WAL holds commits" in str(exc)}
        return {"refused": False}

    assert _run_unprivileged(inspect) == {"refused": True}
    assert sorted(os.listdir(read_only_dir)) == before


def test_writable_directory_reads_without_immutable(db: str) -> None:
    """Where a writer has the database open (its -wal and -shm exist), a read-only store
    reads through them (not immutable) and leaves the database file byte-for-byte
    unchanged."""
    before = Path(db).read_bytes()
    writer = SqliteStore(db)
    store = SqliteStore(db, read_only=True)
    try:
        assert store.immutable is False
        assert store.head("s") == 3
    finally:
        store.close()
        writer.close()
    assert Path(db).read_bytes() == before
