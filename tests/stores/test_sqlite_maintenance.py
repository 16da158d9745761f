"""SqliteStore's operator methods: storage figures, the stored lineage check and the
online backup (real files, a real writer thread, damage made with raw SQL)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import apsw
import pytest

from stores import InvalidArgumentError, NewEvent, SqliteStore
from stores.sqlite._schema import APPLICATION_ID, SCHEMA_VERSION


def _store(tmp_path: Path) -> SqliteStore:
    store = SqliteStore(tmp_path / "m.db")
    store.append("big", [NewEvent("k", "x" * 100) for _ in range(20)])
    store.append("small", [NewEvent("k", "abc")])
    store.fork("big", "child", at_seq=10)
    store.append("child", [NewEvent("k", 2)])
    return store


def test_storage_figures(tmp_path: Path) -> None:
    """storage() names the format and sizes; a fork's shared prefix is stored once;
    largest_sessions ranks what each session stores itself."""
    store = _store(tmp_path)
    try:
        info = store.storage()
        assert (info.application_id, info.schema_version) == (APPLICATION_ID, SCHEMA_VERSION)
        assert info.sessions == 3
        assert info.stored_events == 22
        assert info.page_size * info.page_count <= info.file_bytes + info.wal_bytes
        assert info.wal_bytes == os.path.getsize(tmp_path / "m.db-wal")
        largest = store.largest_sessions(2)
        assert [(s.session_id, s.events) for s in largest] == [("big", 20), ("small", 1)]
        assert largest[0].bytes == 20 * (len('"' + "x" * 100 + '"') + 1)
        with pytest.raises(InvalidArgumentError):
            store.largest_sessions(-1)
    finally:
        store.close()


def test_lineage_check_finds_missing_and_stray_events(tmp_path: Path) -> None:
    """check_lineage is empty for healthy sessions and forks, and names what is wrong
    when an event a fork borrows is gone, one lies past a head, or a base is gone."""
    store = _store(tmp_path)
    store.close()
    store = SqliteStore(tmp_path / "m.db")
    try:
        assert [store.check_lineage(s) for s in ("big", "small", "child", "none")] == [[]] * 4
        conn = apsw.Connection(str(tmp_path / "m.db"))
        try:
            [big] = conn.execute("SELECT sid FROM sessions WHERE id='big'").fetchall()[0]
            [small] = conn.execute("SELECT sid FROM sessions WHERE id='small'").fetchall()[0]
            conn.execute("DELETE FROM events WHERE sid=? AND seq=5", (big,))
            conn.execute(
                "INSERT INTO events(sid, seq, ts, kind, data) VALUES (?, 9, 0, 'k', '1')",
                (small,),
            )
        finally:
            conn.close()
        assert store.check_lineage("big") == ["seqs 1..20: 19 events stored of 20"]
        assert store.check_lineage("child") == ["seqs 1..10, lent by 'big': 9 stored of 10"]
        assert store.check_lineage("small") == ["1 events stored past the head 1"]
        conn = apsw.Connection(str(tmp_path / "m.db"))
        try:
            conn.execute("DELETE FROM sessions WHERE id='big'")
        finally:
            conn.close()
        assert store.check_lineage("child") == [
            "seqs 1..10 are lent by a session that no longer exists"
        ]
    finally:
        store.close()


def test_backup_is_consistent_while_a_writer_appends(tmp_path: Path) -> None:
    """A backup taken while another connection keeps appending is one consistent state
    (integrity ok, every session gapless), reports progress up to the total, and is
    linked into place only when complete: no temporary file is left."""
    store = _store(tmp_path)
    store.append("big", [NewEvent("pad", "y" * 2000) for _ in range(6000)])  # > 2 steps
    stop = threading.Event()

    def write() -> None:
        writer = SqliteStore(tmp_path / "m.db")
        try:
            while not stop.is_set():
                writer.append("live", [NewEvent("k", "z" * 500)])
        finally:
            writer.close()

    thread = threading.Thread(target=write)
    thread.start()
    steps: list[tuple[int, int]] = []
    try:
        reader = SqliteStore(tmp_path / "m.db", read_only=True)
        try:
            reader.backup(
                tmp_path / "copy.db", progress=lambda done, total: steps.append((done, total))
            )
        finally:
            reader.close()
    finally:
        stop.set()
        thread.join()
        store.close()
    assert len(steps) > 1
    assert steps[-1][0] == steps[-1][1]
    assert sorted(os.listdir(tmp_path)) == ["copy.db", "m.db"]
    copy = SqliteStore(tmp_path / "copy.db", read_only=True)
    try:
        assert copy.check_integrity() == (True, "ok")
        for info in copy.list_sessions():
            assert [e.seq for e in copy.read(info.id)] == list(range(1, info.head + 1))
            assert copy.check_lineage(info.id) == []
        assert copy.head("big") == 6020
    finally:
        copy.close()


def test_interrupted_or_refused_backup_leaves_nothing(tmp_path: Path) -> None:
    """A backup stopped by its progress callback leaves neither the destination nor a
    temporary file; an existing destination is refused and left alone."""
    store = _store(tmp_path)
    store.append("big", [NewEvent("pad", "y" * 2000) for _ in range(6000)])  # > 2 steps
    store.close()
    store = SqliteStore(tmp_path / "m.db", read_only=True)

    def stop(done: int, total: int) -> None:  # noqa: ARG001 (the progress callback)
        raise KeyboardInterrupt

    try:
        with pytest.raises(KeyboardInterrupt):
            store.backup(tmp_path / "copy.db", progress=stop)
        assert sorted(os.listdir(tmp_path)) == ["m.db"]
        (tmp_path / "taken.db").write_bytes(b"mine")
        with pytest.raises(InvalidArgumentError, match="already exists"):
            store.backup(tmp_path / "taken.db")
        assert (tmp_path / "taken.db").read_bytes() == b"mine"
    finally:
        store.close()
    assert sorted(os.listdir(tmp_path)) == ["m.db", "taken.db"]
