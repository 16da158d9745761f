"""Forks through ``export`` and ``import``: a fork imported with its parent shares the
parent's prefix again (stored once, as before the export) on every backend; a fork whose
parent changed after the fork point is imported as a copy of its own; lineage and
contents survive either way."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from cli_support import contents, new_address, tidelog

from runtime import NewEvent, SqliteStore
from stores._urls import open_store
from stores.jsonl._index import FileIndex

KINDS = ["sqlite", "jsonl", "postgres"]


def stored_events(address: str, kind: str) -> int:
    """How many events the store holds itself (what a fork shares with its parent counts
    once), through each backend's own view of its lineage: SQLite's storage figures, the
    rows of the PostgreSQL events table, each JSONL session file's events after its base
    point (the prefix is read through hard links to the parent's files)."""
    if kind == "sqlite":
        store = SqliteStore(address, read_only=True)
        try:
            return store.storage().stored_events
        finally:
            store.close()
    if kind == "postgres":
        import psycopg

        from stores.postgres._connection import split_url

        dsn, schema = split_url(address)
        with psycopg.connect(dsn) as conn:
            row = conn.execute(f"SELECT count(*) FROM {schema}.events").fetchone()
            assert row is not None
            return int(row[0])
    total = 0
    directory = Path(address) / "sessions"
    for name in os.listdir(directory):
        index = FileIndex.open(str(directory / name))
        assert index is not None
        try:
            total += index.head - index.header.base_seq
        finally:
            index.close()
    return total


def seed_forks(address: str) -> None:
    """`zeta` (5 events); `a-fork` of zeta at 3 (+1 own; its id sorts before its
    parent's); `b-chain` of a-fork at 4 (+1 own: a chain); `chat` (3 events) and `moved`,
    forked from chat at 3 before chat was emptied and written again (so moved holds
    its prefix itself, and chat's first 3 events are no longer the ones moved read);
    `talk` (1 + 3 events) and `half`, forked from talk at 3 before talk was cut to 1 and
    written again (half reads its first event through talk and stores the other two)."""
    store = open_store(address)
    try:
        store.append("zeta", [NewEvent("z", {"i": i}) for i in range(5)])
        store.fork("zeta", "a-fork", at_seq=3)
        store.append("a-fork", [NewEvent("own", "a")])
        store.fork("a-fork", "b-chain", at_seq=4)
        store.append("b-chain", [NewEvent("own", "b")])
        store.append("chat", [NewEvent("c", i) for i in range(3)])
        store.fork("chat", "moved", at_seq=3)
        store.truncate("chat", 0)
        store.append("chat", [NewEvent("c2", i) for i in range(3)])
        store.append("talk", [NewEvent("t", i) for i in range(3)])
        store.fork("talk", "half", at_seq=3)
        store.truncate("talk", 1)
        store.append("talk", [NewEvent("t2", i) for i in range(3)])
    finally:
        store.close()


@pytest.mark.parametrize("kind", KINDS)
def test_imported_forks_share_their_parents_prefix(tmp_path: Path, kind: str) -> None:
    """export, then import into a new store of each backend: every session, header,
    time, lineage and event comes back, the forks share their parent's prefix again
    (the target stores 5 + 1 + 1 + 3 + 3 + 4 + 3 = 20 events, not the 27 the sessions
    show), a fork whose parent changed is a copy of its own (`half` then stores all 3 of
    its events: one more than in the source, where it still shares one), and a second
    import changes nothing."""
    with new_address("sqlite", tmp_path, "source") as source, new_address(kind, tmp_path) as db:
        seed_forks(source)
        dump = tmp_path / "dump.jsonl"
        proc = tidelog("export", source, "-o", str(dump), cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        order = [json.loads(x)["id"] for x in dump.read_text().splitlines() if '"session"' in x]
        assert order.index("zeta") < order.index("a-fork") < order.index("b-chain")
        proc = tidelog("import", db, str(dump), "--json", cwd=tmp_path)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert json.loads(proc.stdout)["created"] == 7
        original = contents(source)
        assert contents(db) == original
        assert original["b-chain"][0].parent == ("a-fork", 4)
        assert original["moved"][0].parent == ("chat", 3)
        assert original["half"][0].parent == ("talk", 3)
        assert sum(info.head for info, _ in original.values()) == 27
        assert stored_events(source, "sqlite") == 19
        assert stored_events(db, kind) == 20
        again = tidelog("import", db, str(dump), "--json", cwd=tmp_path)
        assert again.returncode == 0, again.stdout + again.stderr
        assert json.loads(again.stdout)["unchanged"] == 7
        assert stored_events(db, kind) == 20


def test_a_fork_imported_without_its_parent_is_a_copy(tmp_path: Path) -> None:
    """`export DB a-fork` holds the fork alone: imported into a new file it is a whole
    session of its own (lineage recorded, every event stored), and it reads the same."""
    with new_address("sqlite", tmp_path, "source") as source:
        seed_forks(source)
        dump = tidelog("export", source, "a-fork", cwd=tmp_path).stdout
        target = str(tmp_path / "alone.db")
        proc = tidelog("import", target, "-", cwd=tmp_path, stdin=dump)
        assert proc.returncode == 0, proc.stderr
        copied = contents(target)
        assert list(copied) == ["a-fork"]
        assert copied["a-fork"] == contents(source)["a-fork"]
        assert stored_events(target, "sqlite") == 4
