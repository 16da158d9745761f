"""Read-only SqliteStores create no file beside the database: a database nobody has open
is read as immutable, and a writer that comes along is noticed at the next call (real
files, real writer connections and threads)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from stores import NewEvent, SqliteStore


def _closed_db(tmp_path: Path) -> Path:
    """A database with session "s" (3 events), closed: no -wal, no -shm beside it."""
    db = tmp_path / "ro.db"
    store = SqliteStore(db)
    store.append("s", [NewEvent("k", {"i": i}) for i in range(3)])
    store.close()
    assert sorted(os.listdir(tmp_path)) == ["ro.db"]
    return db


def test_closed_database_is_read_without_creating_files(tmp_path: Path) -> None:
    """A read-only store of a database nobody has open reads it as immutable: every read
    works, no -wal or -shm appears (the bug: files owned by the inspecting user were left
    beside a service's database), and the database's bytes are unchanged."""
    db = _closed_db(tmp_path)
    before = db.read_bytes()
    store = SqliteStore(db, read_only=True)
    try:
        assert store.immutable is True
        assert [e.seq for e in store.read("s")] == [1, 2, 3]
        assert [i.id for i in store.list_sessions()] == ["s"]
        assert store.list_leases() == []
        assert store.check_integrity() == (True, "ok")
        clone = store.clone()
        assert clone.head("s") == 3
        clone.close()
    finally:
        store.close()
    assert sorted(os.listdir(tmp_path)) == ["ro.db"]
    assert db.read_bytes() == before


def test_a_writer_that_comes_is_seen_at_the_next_call(tmp_path: Path) -> None:
    """A writer that opens the database after the read-only store did: the store's next
    call reads through the writer's -wal (no longer immutable) and sees its commits, and
    data_version changes so a tail wakes up. The -wal and -shm are the writer's."""
    db = _closed_db(tmp_path)
    reader = SqliteStore(db, read_only=True)
    try:
        version = reader.data_version()
        writer = SqliteStore(db)
        try:
            writer.append("s", [NewEvent("k", {"i": 3})])
            assert reader.head("s") == 4
            assert reader.immutable is False
            assert reader.data_version() != version
            writer.append("t", [NewEvent("k")])
            assert [i.id for i in reader.list_sessions()] == ["s", "t"]
        finally:
            writer.close()
    finally:
        reader.close()


def test_a_writer_that_came_and_went_is_seen(tmp_path: Path) -> None:
    """A writer that opens, commits and closes (checkpointing into the database file and
    removing its -wal) between two calls: the next call reads the new state, still as
    immutable, and no file is left beside the database."""
    db = _closed_db(tmp_path)
    reader = SqliteStore(db, read_only=True)
    try:
        assert reader.head("s") == 3
        writer = SqliteStore(db)
        writer.append("s", [NewEvent("k", {"i": 3}), NewEvent("k", {"i": 4})])
        writer.close()
        assert sorted(os.listdir(tmp_path)) == ["ro.db"]
        assert reader.head("s") == 5
        assert reader.immutable is True
        assert [e.data for e in reader.read("s", since_seq=3)] == [{"i": 3}, {"i": 4}]
    finally:
        reader.close()
    assert sorted(os.listdir(tmp_path)) == ["ro.db"]


def test_reads_stay_consistent_while_writers_come_and_go(tmp_path: Path) -> None:
    """While writers open, append, checkpoint and close the database over and over, a
    read-only store's every read is one consistent state: gapless seqs from 1 to the
    head it reports, each event the one written at that seq, heads never going back."""
    db = _closed_db(tmp_path)
    stop = threading.Event()
    errors: list[BaseException] = []

    def write() -> None:
        try:
            for n in range(3, 43):
                store = SqliteStore(db)
                try:
                    store.append("s", [NewEvent("k", {"i": n})])
                finally:
                    store.close()
        except BaseException as exc:  # reported by the test below
            errors.append(exc)
        finally:
            stop.set()

    reader = SqliteStore(db, read_only=True)
    thread = threading.Thread(target=write)
    thread.start()
    try:
        last, reads = 0, 0
        while not stop.is_set() or reads == 0:
            # A writer may come, commit, checkpoint and go during any of these reads.
            events = reader.read("s")
            assert [e.seq for e in events] == list(range(1, len(events) + 1))
            assert [e.data for e in events] == [{"i": i} for i in range(len(events))]
            assert len(events) >= last
            last, reads = len(events), reads + 1
        assert reader.head("s") == 43
    finally:
        thread.join()
        reader.close()
    assert errors == []
