"""SQLite-only behaviours of :class:`stores.SqliteStore` (the shared contract is in conformance).

Real files under ``tmp_path``, real threads and subprocesses, raw ``apsw`` connections to play
the other process; no mocks.
"""

from __future__ import annotations

import math
import os
import random
import struct
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import apsw
import pytest
from helpers import num

from stores import (
    AppendOp,
    ClosedError,
    ConflictError,
    InvalidArgumentError,
    InvalidEventError,
    NewEvent,
    OwnershipLostError,
    SqliteStore,
    StoreBusyError,
    StoreCorruptError,
    StoredEvent,
    StoreError,
    StoreIOError,
    TidelogError,
    UnsupportedFormatError,
    prepare_events,
)
from stores.sqlite import _read as sqlite_read
from stores.sqlite import _schema as sqlite_schema

PAGE = 4096


def evs(n: int, kind: str = "k", start: int = 0) -> list[NewEvent]:
    return [NewEvent(kind, {"i": i}) for i in range(start, start + n)]


def op(session_id: str, n: int, **kwargs: Any) -> AppendOp:
    return AppendOp(session_id, tuple(prepare_events(evs(n))), **kwargs)


@pytest.fixture
def db(tmp_path: Path) -> str:
    return str(tmp_path / "t.db")


@pytest.fixture
def open_store(db: str) -> Iterator[Callable[..., SqliteStore]]:
    """Open SqliteStores on the test's file (or another path); all closed at teardown."""
    opened: list[SqliteStore] = []

    def factory(path: str | None = None, **kwargs: Any) -> SqliteStore:
        store = SqliteStore(db if path is None else path, **kwargs)
        opened.append(store)
        return store

    yield factory
    for store in opened:
        store.close()


@pytest.fixture
def raw(db: str) -> Iterator[Callable[..., apsw.Connection]]:
    """Raw apsw connections (the "other process"); all closed at teardown."""
    conns: list[apsw.Connection] = []

    def factory(path: str | None = None) -> apsw.Connection:
        conn = apsw.Connection(db if path is None else path)
        conns.append(conn)
        return conn

    yield factory
    for conn in conns:
        conn.close()


def scalar(conn: apsw.Connection, sql: str) -> object:
    row = conn.execute(sql).fetchone()
    assert row is not None, sql
    return row[0]


def schema_names(conn: apsw.Connection) -> list[str]:
    return sorted(str(r[0]) for r in conn.execute("SELECT name FROM sqlite_schema"))


def dump(conn: apsw.Connection) -> dict[str, list[tuple[object, ...]]]:
    """Every row of every tidelog table, for exact before/after comparison."""
    return {
        table: sorted(tuple(r) for r in conn.execute(f"SELECT * FROM {table}"))
        for table in ("sessions", "events", "cuts", "leases", "meta")
    }


def make_populated_file(path: str, sessions: int = 5, batches: int = 40) -> None:
    store = SqliteStore(path)
    try:
        for i in range(batches):
            store.append(f"s{i % sessions}", [NewEvent("k", {"i": i, "pad": "x" * 300})] * 20)
    finally:
        store.close()
    assert not os.path.exists(path + "-wal")  # fully checkpointed into the main file


# -- 1. several handles on one file ---------------------------------------------------------


def test_two_instances_see_commits_and_detect_stale_head(
    open_store: Callable[..., SqliteStore],
) -> None:
    """Two stores on one file see each other's commits at once; a stale head conflicts."""
    a, b = open_store(), open_store()
    assert a.append("s", evs(2)) == 2
    assert b.head("s") == 2
    assert [e.seq for e in b.read("s")] == [1, 2]
    assert a.append("s", evs(1), expected_head=2) == 3
    with pytest.raises(ConflictError) as info:
        b.append("s", evs(1), expected_head=2)
    assert (info.value.session_id, info.value.expected, info.value.actual) == ("s", 2, 3)
    assert b.head("s") == 3
    assert a.head("s") == 3
    assert b.append("s", evs(1), expected_head=3) == 4
    assert [e.seq for e in a.read("s")] == [1, 2, 3, 4]


# -- 2. waiting for the write lock ----------------------------------------------------------


def test_append_times_out_while_another_connection_holds_write_lock(
    open_store: Callable[..., SqliteStore], raw: Callable[..., apsw.Connection]
) -> None:
    """A writer waits busy_timeout_ms for a held lock, then raises StoreBusyError."""
    store = open_store(busy_timeout_ms=200)
    store.append("s", evs(1))
    other = raw()
    other.execute("BEGIN IMMEDIATE")
    try:
        start = time.monotonic()
        with pytest.raises(StoreBusyError) as info:
            store.append("s", evs(1))
        elapsed = time.monotonic() - start
    finally:
        other.execute("ROLLBACK")
    assert 0.15 <= elapsed < 5
    assert isinstance(info.value.__cause__, apsw.BusyError)
    assert not isinstance(info.value, apsw.Error)
    assert store.head("s") == 1
    assert store.append("s", evs(1)) == 2  # usable again once the lock is free


def test_append_succeeds_when_lock_is_released_within_timeout(
    open_store: Callable[..., SqliteStore], raw: Callable[..., apsw.Connection]
) -> None:
    """A writer blocked on the lock proceeds as soon as the holder commits."""
    store = open_store(busy_timeout_ms=5000)
    other = raw()
    other.execute("BEGIN IMMEDIATE")
    other.execute("INSERT INTO meta(key, value) VALUES ('probe', 1)")
    releaser = threading.Timer(0.1, lambda: other.execute("COMMIT"))
    start = time.monotonic()
    releaser.start()
    try:
        assert store.append("s", evs(3)) == 3
    finally:
        releaser.join()
    assert 0.05 <= time.monotonic() - start < 5
    assert other.get_autocommit()
    assert [e.seq for e in store.read("s")] == [1, 2, 3]


# -- 3, 4. configuration and file markers ---------------------------------------------------


@pytest.mark.parametrize(("synchronous", "level"), [("normal", 1), ("full", 2)])
def test_pragmas_after_open(
    open_store: Callable[..., SqliteStore], synchronous: str, level: int
) -> None:
    """Every store connection runs in WAL with the configured synchronous and busy timeout."""
    store = open_store(synchronous=synchronous, busy_timeout_ms=1234)
    conn = store._conn
    assert conn is not None
    assert scalar(conn, "PRAGMA journal_mode") == "wal"
    assert scalar(conn, "PRAGMA synchronous") == level
    assert scalar(conn, "PRAGMA busy_timeout") == 1234
    clone = store.clone()
    try:
        assert clone._conn is not None
        assert scalar(clone._conn, "PRAGMA synchronous") == level
        assert scalar(clone._conn, "PRAGMA busy_timeout") == 1234
    finally:
        clone.close()


def test_schema_markers(
    open_store: Callable[..., SqliteStore], raw: Callable[..., apsw.Connection]
) -> None:
    """A new file carries tidelog's application_id and the current user_version."""
    store = open_store()
    assert store._conn is not None
    assert scalar(store._conn, "PRAGMA application_id") == sqlite_schema.APPLICATION_ID
    assert scalar(store._conn, "PRAGMA user_version") == sqlite_schema.SCHEMA_VERSION
    other = raw()
    assert scalar(other, "PRAGMA application_id") == 0x74646C67
    assert scalar(other, "PRAGMA user_version") == sqlite_schema.SCHEMA_VERSION


# -- 5. refusing files that are not ours ----------------------------------------------------


def _newer_tidelog(path: str) -> None:
    SqliteStore(path).close()
    conn = apsw.Connection(path)
    conn.execute(f"PRAGMA user_version={sqlite_schema.SCHEMA_VERSION + 1}")
    conn.close()


def _foreign_tables(path: str) -> None:
    conn = apsw.Connection(path)
    conn.execute("CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT)")
    conn.execute("INSERT INTO notes(body) VALUES ('not tidelog')")
    conn.close()


def _foreign_wal(path: str) -> None:
    conn = apsw.Connection(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT)")
    conn.close()


def _other_application_id(path: str) -> None:
    conn = apsw.Connection(path)
    conn.execute("PRAGMA application_id=1234567")
    conn.close()


@pytest.mark.parametrize(
    "make", [_newer_tidelog, _foreign_tables, _foreign_wal, _other_application_id]
)
def test_refuses_newer_or_foreign_file_untouched(db: str, make: Callable[[str], None]) -> None:
    """A newer or foreign file raises UnsupportedFormatError and is left byte-identical."""
    make(db)
    directory = os.path.dirname(db)
    before_files = set(os.listdir(directory))
    with open(db, "rb") as f:
        before = f.read()
    with pytest.raises(UnsupportedFormatError):
        SqliteStore(db)
    with pytest.raises(UnsupportedFormatError):
        SqliteStore(db, integrity_check_on_open=True, synchronous="full")
    with open(db, "rb") as f:
        assert f.read() == before
    assert set(os.listdir(directory)) <= before_files
    assert not os.path.exists(db + "-wal")


# -- 6. migrations --------------------------------------------------------------------------


#: A format 3 file written by the code before format 4 (``tests/stores/fixtures``): alpha
#: (6 events), beta (3, run ``run-1``), alpha-fork (alpha's first 4 shared, then 1 own).
FORMAT3 = Path(__file__).parent / "fixtures" / "sqlite-format3.db"


def test_format_3_file_migrates_to_events_in_commit_order(tmp_path: Path) -> None:
    """A format 3 file (events clustered by session) opens as format 4: every event,
    run and fork read as before, events now a rowid table with its (sid, seq) index, and
    the migration ran once, in one transaction."""
    path = tmp_path / "old.db"
    path.write_bytes(FORMAT3.read_bytes())
    store = SqliteStore(str(path))
    try:
        assert store._conn is not None
        assert scalar(store._conn, "PRAGMA user_version") == 4
        assert [e.data for e in store.read("alpha")] == [
            *({"i": i, "text": "h\u00e9llo"} for i in range(1, 6)),
            {"i": 6},
        ]
        assert [(e.seq, e.run_id) for e in store.read("beta")] == [
            (1, "run-1"),
            (2, "run-1"),
            (3, "run-1"),
        ]
        assert store.find_run("beta", "run-1") == (1, 3)
        fork = store.read("alpha-fork")
        assert [e.seq for e in fork] == [1, 2, 3, 4, 5]
        assert fork[-1].data == {"fork": True}
        assert store.check_lineage("alpha-fork") == []
        sql = str(scalar(store._conn, "SELECT sql FROM sqlite_schema WHERE name = 'events'"))
        assert "WITHOUT ROWID" not in sql
        assert {"events_by_seq", "events_by_run"} <= set(schema_names(store._conn))
        assert store.append("alpha", evs(1)) == 7
        assert store.check_integrity() == (True, "ok")
    finally:
        store.close()


_KILL_AFTER_FORMAT_4 = """
import os, signal, sys
from stores import SqliteStore
from stores.sqlite import _schema as sqlite_schema

def kill(conn):
    os.kill(os.getpid(), signal.SIGKILL)  # the format 4 step ran; its transaction is open

sqlite_schema.MIGRATIONS[4] = kill
sqlite_schema.SCHEMA_VERSION = 5
SqliteStore(sys.argv[1])
"""


@pytest.mark.parametrize("how", ["failing-step", "sigkill"])
def test_format_4_migration_stopped_midway_leaves_format_3(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """The format 4 step done but its transaction not committed -- a later step fails, or
    the process is SIGKILLed: the file is format 3 as it was, every event there, and the
    next open migrates it."""
    path = tmp_path / "old.db"
    path.write_bytes(FORMAT3.read_bytes())
    if how == "sigkill":
        proc = subprocess.run(
            [sys.executable, "-c", _KILL_AFTER_FORMAT_4, str(path)], timeout=60, check=False
        )
        assert proc.returncode == -9
    else:
        with monkeypatch.context() as m:
            m.setattr(sqlite_schema, "SCHEMA_VERSION", 5)
            m.setitem(sqlite_schema.MIGRATIONS, 4, _step_bad_sql)
            with pytest.raises(StoreError):
                SqliteStore(str(path))
    conn = apsw.Connection(str(path))
    try:
        assert scalar(conn, "PRAGMA user_version") == 3
        sql = str(scalar(conn, "SELECT sql FROM sqlite_schema WHERE name = 'events'"))
        assert "WITHOUT ROWID" in sql
        assert scalar(conn, "SELECT count(*) FROM events") == 6 + 3 + 1
    finally:
        conn.close()
    store = SqliteStore(str(path))
    try:
        assert [e.seq for e in store.read("alpha")] == [1, 2, 3, 4, 5, 6]
        assert [e.seq for e in store.read("alpha-fork")] == [1, 2, 3, 4, 5]
        assert store.head("beta") == 3
    finally:
        store.close()


def test_migration_upgrades_existing_file(db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """An older file is migrated step by step: user_version bumped, new schema present."""
    store = SqliteStore(db)
    store.append("s", evs(3))
    store.close()
    current = sqlite_schema.SCHEMA_VERSION
    calls: list[int] = []

    def step(conn: apsw.Connection) -> None:
        calls.append(1)
        conn.execute("CREATE TABLE extra(x INTEGER)")
        conn.execute("ALTER TABLE sessions ADD COLUMN note TEXT")

    with monkeypatch.context() as m:
        m.setattr(sqlite_schema, "SCHEMA_VERSION", current + 1)
        m.setitem(sqlite_schema.MIGRATIONS, current, step)
        store = SqliteStore(db)
        try:
            assert store._conn is not None
            assert scalar(store._conn, "PRAGMA user_version") == current + 1
            assert "extra" in schema_names(store._conn)
            assert [e.seq for e in store.read("s")] == [1, 2, 3]
            assert store.append("s", evs(1)) == 4
        finally:
            store.close()
        SqliteStore(db).close()  # already current: the step does not run again
        assert calls == [1]
    with pytest.raises(UnsupportedFormatError):  # the old code now sees a newer file
        SqliteStore(db)


def _step_bad_sql(conn: apsw.Connection) -> None:
    conn.execute("CREATE TABLE extra(x INTEGER)")
    conn.execute("INSERT INTO no_such_table VALUES (1)")


def _step_raises(conn: apsw.Connection) -> None:
    conn.execute("CREATE TABLE extra(x INTEGER)")
    raise RuntimeError("migration step failed midway")


@pytest.mark.parametrize(
    ("step", "cause"), [(_step_bad_sql, apsw.SQLError), (_step_raises, RuntimeError)]
)
def test_failed_migration_changes_nothing(
    db: str,
    monkeypatch: pytest.MonkeyPatch,
    step: Callable[[apsw.Connection], None],
    cause: type[BaseException],
) -> None:
    """A step failing after some DDL rolls back whole and open raises a chained StoreError."""
    store = SqliteStore(db)
    store.append("s", evs(2))
    store.close()
    current = sqlite_schema.SCHEMA_VERSION
    conn = apsw.Connection(db)
    names_before = schema_names(conn)
    conn.close()
    with monkeypatch.context() as m:
        m.setattr(sqlite_schema, "SCHEMA_VERSION", current + 1)
        m.setitem(sqlite_schema.MIGRATIONS, current, step)
        with pytest.raises(StoreError) as info:
            SqliteStore(db)
    assert isinstance(info.value.__cause__, cause)
    conn = apsw.Connection(db)
    try:
        assert scalar(conn, "PRAGMA user_version") == current
        assert schema_names(conn) == names_before
    finally:
        conn.close()
    store = SqliteStore(db)  # the untouched file still opens with the current code
    try:
        assert store.head("s") == 2
    finally:
        store.close()


def test_multi_step_migration_is_one_transaction(db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """When the second of two steps fails, the first step's changes are rolled back too."""
    SqliteStore(db).close()
    current = sqlite_schema.SCHEMA_VERSION

    def first(conn: apsw.Connection) -> None:
        conn.execute("CREATE TABLE first_step(x)")

    with monkeypatch.context() as m:
        m.setattr(sqlite_schema, "SCHEMA_VERSION", current + 2)
        m.setitem(sqlite_schema.MIGRATIONS, current, first)
        m.setitem(sqlite_schema.MIGRATIONS, current + 1, _step_bad_sql)
        with pytest.raises(StoreError):
            SqliteStore(db)
    conn = apsw.Connection(db)
    try:
        assert scalar(conn, "PRAGMA user_version") == current
        assert "first_step" not in schema_names(conn)
        assert "extra" not in schema_names(conn)
    finally:
        conn.close()


# -- 7. corruption --------------------------------------------------------------------------


def test_random_bytes_file_is_corrupt(db: str) -> None:
    """A file of random bytes is refused with StoreCorruptError (not an apsw error)."""
    with open(db, "wb") as f:
        f.write(os.urandom(8 * PAGE))
    with pytest.raises(StoreCorruptError) as info:
        SqliteStore(db)
    assert "not a database" in str(info.value)
    assert not isinstance(info.value.__cause__, apsw.Error) or isinstance(
        info.value.__cause__, apsw.NotADBError
    )


def test_damaged_middle_pages_found_by_integrity_check(db: str) -> None:
    """Garbage in middle pages: open with integrity check refuses; check_integrity reports it."""
    make_populated_file(db)
    with open(db, "rb") as f:
        data = bytearray(f.read())
    pages = len(data) // PAGE
    assert pages > 30
    for page in range(pages // 3, 2 * pages // 3):
        data[page * PAGE : (page + 1) * PAGE] = os.urandom(PAGE)
    with open(db, "wb") as f:
        f.write(data)

    with pytest.raises(StoreCorruptError):
        SqliteStore(db, integrity_check_on_open=True)
    store = SqliteStore(db)  # the header is intact, so a plain open does not notice
    try:
        ok, detail = store.check_integrity()
        assert ok is False
        assert detail
        assert detail != "ok"
    finally:
        store.close()


def test_check_integrity_on_healthy_store(open_store: Callable[..., SqliteStore]) -> None:
    """check_integrity() on a healthy store returns (True, "ok")."""
    store = open_store(integrity_check_on_open=True)
    store.append("s", evs(50))
    store.truncate("s", 10)
    assert store.check_integrity() == (True, "ok")


@pytest.mark.parametrize("integrity_check", [False, True])
def test_truncated_file_is_corrupt(db: str, integrity_check: bool) -> None:
    """A file cut in half is refused with StoreCorruptError at open, integrity check or not."""
    # SQLite sees the header's page count exceed the file size and reports corruption.
    make_populated_file(db)
    with open(db, "rb") as f:
        data = f.read()
    with open(db, "wb") as f:
        f.write(data[: len(data) // 2])
    with pytest.raises(StoreCorruptError) as info:
        SqliteStore(db, integrity_check_on_open=integrity_check)
    assert isinstance(info.value.__cause__, apsw.CorruptError)


# -- 8. group commit with failing members ---------------------------------------------------


def test_write_batch_conflict_fails_alone(open_store: Callable[..., SqliteStore]) -> None:
    """In a batch, a stale expected_head fails only its own op; the others commit."""
    store = open_store()
    for sid in "abc":
        store.append(sid, evs(1))
    b_before = store.read("b")
    results = store.write_batch(
        [op("a", 2, expected_head=1), op("b", 2, expected_head=0), op("c", 3, expected_head=1)]
    )
    assert results[0] == 3
    assert results[2] == 4
    error = results[1]
    assert isinstance(error, ConflictError)
    assert (error.session_id, error.expected, error.actual) == ("b", 0, 1)
    other = open_store()  # committed: visible to another connection
    assert (other.head("a"), other.head("b"), other.head("c")) == (3, 1, 4)
    assert other.read("b") == b_before


def test_write_batch_fencing_fails_alone(open_store: Callable[..., SqliteStore]) -> None:
    """An op whose owner token does not hold the lease yields OwnershipLostError alone."""
    store = open_store()
    store.acquire_lease("a", "token-1", ttl=60.0, holder="test")
    store.acquire_lease("b", "token-1", ttl=60.0, holder="test")
    results = store.write_batch(
        [op("a", 1, owner="token-1"), op("b", 1, owner="token-2"), op("c", 1, owner="token-1")]
    )
    assert results[0] == 1
    assert isinstance(results[1], OwnershipLostError)
    assert results[1].session_id == "b"
    assert isinstance(results[2], OwnershipLostError)
    assert results[2].session_id == "c"
    assert (store.head("a"), store.head("b"), store.head("c")) == (1, 0, 0)
    assert store.stat("b") is None
    assert store.stat("c") is None


@pytest.mark.parametrize("from_end", [False, True])
def test_packed_windows_read_back_exactly(
    open_store: Callable[..., SqliteStore], from_end: bool
) -> None:
    """A bounded read window (fetched packed, in one step) returns exactly what the
    row-by-row path returns: same events, same ts to the bit, same types."""
    store = open_store()
    payloads: list[Any] = [
        {"a": 1, "b": [1.5, -0.0, 1e300, 5e-324, 2**63, -(2**70)]},
        'quote " backslash \\ tab \t nul \x00 e\u0301 \U0001f600',
        [None, True, False, 0, {}],
        {"nested": {"deep": [[["x"]]]}, "": ""},
        12345678901234567890,
        0.1,
    ]
    store.append(
        "s",
        [
            NewEvent(kind, data, run_id=run)
            for data, kind, run in zip(
                payloads * 3,
                ["msg", "kind with spaces ü", "k"] * 6,
                [None, "run-1", "r\u00e9"] * 6,
                strict=False,
            )
        ],
    )
    full = store.read("s")
    assert len(full) == 18
    for limit in (0, 1, 5, 18, sqlite_read.PACKED_READ_MAX):
        for since in (0, 3):
            got = store.read("s", since_seq=since, until_seq=16, limit=limit, from_end=from_end)
            window = [e for e in full if since < e.seq <= 16]
            want = (window[-limit:] if limit else []) if from_end else window[:limit]
            assert [repr(e) for e in got] == [repr(e) for e in want], (limit, since)
            assert [e.ts.hex() for e in got] == [e.ts.hex() for e in want]


def test_a_window_reads_every_stored_ts_as_the_row_path_does(
    open_store: Callable[..., SqliteStore], raw: Callable[..., apsw.Connection]
) -> None:
    """Whatever a ts holds -- a subnormal, the largest double, an integral value, an
    infinity, a random double -- a bounded window (packed, or row by row for what a
    packed text cannot carry) reads the value a whole read does, to the bit."""
    rnd = random.Random(32)
    randoms = [struct.unpack("<d", struct.pack("<Q", rnd.getrandbits(64)))[0] for _ in range(60)]
    stamps = [
        5e-324,
        2.2250738585072014e-308,
        1.7976931348623157e308,
        0.1,
        1733558400.0,
        2.0**53 + 2,
        -1.5e-7,
        math.inf,
        -math.inf,
        *(x for x in randoms if not math.isnan(x)),
    ]
    store = open_store()
    store.append("s", [NewEvent("k", i) for i in range(len(stamps))])
    conn = raw()
    for seq, ts in enumerate(stamps, start=1):
        conn.execute(
            "UPDATE events SET ts=? WHERE seq=? AND sid=(SELECT sid FROM sessions WHERE id='s')",
            (ts, seq),
        )
    whole = store.read("s")
    assert [e.ts for e in whole] == stamps

    def bits(events: list[StoredEvent]) -> list[tuple[type, str]]:
        return [(type(e.ts), e.ts.hex()) for e in events]

    for since in range(len(stamps)):
        assert bits(store.read("s", since_seq=since, limit=1)) == bits(whole[since : since + 1])
    assert bits(store.read("s", limit=len(stamps))) == bits(whole)
    assert bits(store.read("s", since_seq=9, limit=len(stamps))) == bits(whole[9:])


@pytest.mark.parametrize(
    "text",
    ["{'a':1}", "[1,2,]", "0x10", "{a:1}", '{"a":1', "not json", '1,"x",null],[3', b'{"i":1}'],
    ids=[
        "json5-quotes",
        "json5-comma",
        "json5-hex",
        "json5-key",
        "cut",
        "garbage",
        "splice",
        "blob",
    ],
)
def test_damaged_text_in_a_window_is_store_corrupt(
    open_store: Callable[..., SqliteStore], raw: Callable[..., apsw.Connection], text: str | bytes
) -> None:
    """A stored event text that is not strict JSON -- also one SQLite's own JSON parser
    would accept and rewrite (JSON5), one that would change the packed window's shape if
    it were spliced in unchecked, and a BLOB -- makes a bounded-window read raise
    StoreCorruptError, exactly as a whole read does; the other events are unaffected."""
    store = open_store()
    store.append("s", [NewEvent("k", {"i": i}) for i in range(4)])
    store.append("t", [NewEvent("k", 1)])
    conn = raw()
    conn.execute(
        "UPDATE events SET data=? WHERE seq=2 AND sid=(SELECT sid FROM sessions WHERE id='s')",
        (text,),
    )
    reads: list[Callable[[], object]] = [
        lambda: store.read("s"),
        lambda: store.read("s", limit=3),
        lambda: store.read("s", limit=3, from_end=True),
    ]
    for read in reads:
        with pytest.raises(StoreCorruptError):
            read()
    assert [e.data for e in store.read("s", since_seq=2, limit=5)] == [{"i": 2}, {"i": 3}]
    assert [e.data for e in store.read("t", limit=1)] == [1]


def _warm(store: SqliteStore, session_id: str, owner: str | None = None) -> int:
    """Two fast-path batches on one session, so the second ran on remembered heads."""
    assert store.write_batch([op(session_id, 1, expected_head=0, owner=owner)]) == [1]
    assert store.write_batch([op(session_id, 1, expected_head=1, owner=owner)]) == [2]
    return 2


def test_fast_path_sees_another_connections_append(
    open_store: Callable[..., SqliteStore],
) -> None:
    """The fast path's remembered heads never hide another connection's commit: a stale
    expected_head is a ConflictError with the real head."""
    store, other = open_store(), open_store()
    head = _warm(store, "s")
    assert other.append("s", evs(1)) == head + 1
    (error,) = store.write_batch([op("s", 1, expected_head=head)])
    assert isinstance(error, ConflictError)
    assert (error.expected, error.actual) == (head, head + 1)
    assert store.write_batch([op("s", 1, expected_head=head + 1)]) == [head + 2]


def test_fast_path_sees_a_lease_taken_over(open_store: Callable[..., SqliteStore]) -> None:
    """A lease taken over by another connection fences the next fast-path batch."""
    store, other = open_store(), open_store()
    store.acquire_lease("s", "token-1", ttl=0.05, holder="test")
    head = _warm(store, "s", owner="token-1")
    time.sleep(0.1)  # the lease expires
    other.acquire_lease("s", "token-2", ttl=60.0, holder="test")
    (error,) = store.write_batch([op("s", 1, expected_head=head, owner="token-1")])
    assert isinstance(error, OwnershipLostError)
    assert other.head("s") == head


def test_fast_path_sees_its_own_other_writes(open_store: Callable[..., SqliteStore]) -> None:
    """A truncate through the same handle is seen by the next fast-path batch."""
    store = open_store()
    head = _warm(store, "s")
    assert store.truncate("s", 0) == head
    (error,) = store.write_batch([op("s", 1, expected_head=head)])
    assert isinstance(error, ConflictError)
    assert error.actual == 0
    assert store.write_batch([op("s", 1, expected_head=0)]) == [1]
    assert store.head("s") == 1


# -- 9. sync --------------------------------------------------------------------------------


@pytest.mark.parametrize(("synchronous", "level"), [("normal", 1), ("full", 2)])
def test_sync_keeps_configured_synchronous(
    open_store: Callable[..., SqliteStore], synchronous: str, level: int
) -> None:
    """sync() and write_batch(..., sync=True) work and leave PRAGMA synchronous as configured."""
    store = open_store(synchronous=synchronous)
    assert store._conn is not None
    store.sync()  # nothing written yet
    assert store.write_batch([], sync=True) == []
    store.append("s", evs(2))
    store.sync()
    assert scalar(store._conn, "PRAGMA synchronous") == level
    store.append("s", evs(1))
    assert store.write_batch([], sync=True) == []
    assert scalar(store._conn, "PRAGMA synchronous") == level
    assert store.write_batch([op("s", 2), op("t", 1)], sync=True) == [5, 1]
    assert scalar(store._conn, "PRAGMA synchronous") == level
    store.close()
    reopened = open_store()
    assert (reopened.head("s"), reopened.head("t")) == (5, 1)


def test_sync_blocked_by_lock_restores_synchronous(
    open_store: Callable[..., SqliteStore], raw: Callable[..., apsw.Connection]
) -> None:
    """A sync that times out on the lock raises StoreBusyError and keeps synchronous=NORMAL."""
    store = open_store(busy_timeout_ms=100)
    assert store._conn is not None
    store.append("s", evs(1))
    other = raw()
    other.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StoreBusyError):
            store.sync()
    finally:
        other.execute("ROLLBACK")
    assert scalar(store._conn, "PRAGMA synchronous") == 1
    store.sync()
    assert scalar(store._conn, "PRAGMA synchronous") == 1


# -- 10. failures inside a transaction ------------------------------------------------------


def test_invalid_last_event_writes_nothing(open_store: Callable[..., SqliteStore]) -> None:
    """A batch whose last event is invalid writes nothing; other connections see no commit."""
    store = open_store()
    observer = open_store()
    store.append("s", evs(2))
    version = observer.data_version()
    with pytest.raises(InvalidEventError) as info:
        store.append("s", [*evs(2), NewEvent("bad", {"x": (1, 2)})])  # type: ignore[dict-item]  # bad input under test
    assert (info.value.index, info.value.kind) == (2, "bad")
    with pytest.raises(InvalidEventError):
        store.append("new", [NewEvent("ok"), NewEvent("bad", float("nan"))])
    assert observer.data_version() == version
    assert store.head("s") == 2
    assert store.stat("new") is None


@pytest.fixture
def trap(
    open_store: Callable[..., SqliteStore], raw: Callable[..., apsw.Connection]
) -> tuple[SqliteStore, apsw.Connection]:
    """A store whose file has triggers that abort the 3rd event insert and any cut insert."""
    store = open_store()
    store.append("s", evs(5))
    store.append("t", evs(1))
    conn = raw()
    conn.execute(
        "CREATE TRIGGER trap_events AFTER INSERT ON events WHEN NEW.kind = 'trap' "
        "BEGIN SELECT RAISE(ABORT, 'trapped insert'); END;"
        "CREATE TRIGGER trap_cuts BEFORE INSERT ON cuts "
        "BEGIN SELECT RAISE(ABORT, 'trapped cut'); END;"
    )
    return store, conn


def test_append_failing_midway_leaves_database_unchanged(
    trap: tuple[SqliteStore, apsw.Connection], open_store: Callable[..., SqliteStore]
) -> None:
    """An append whose 3rd insert fails in SQLite rolls back whole: nothing committed."""
    store, conn = trap
    observer = open_store()
    before, version = dump(conn), observer.data_version()
    with pytest.raises(StoreError) as info:
        store.append("s", [*evs(2), NewEvent("trap"), *evs(2)])
    assert isinstance(info.value.__cause__, apsw.ConstraintError)
    with pytest.raises(StoreError):
        store.write_batch([op("t", 2), AppendOp("u", tuple(prepare_events([NewEvent("trap")])))])
    assert dump(conn) == before
    assert observer.data_version() == version
    assert store.head("s") == 5
    assert store.head("t") == 1
    assert store.stat("u") is None
    assert store.append("s", evs(1)) == 6  # the connection is usable afterwards


def test_truncate_failing_midway_leaves_database_unchanged(
    trap: tuple[SqliteStore, apsw.Connection], open_store: Callable[..., SqliteStore]
) -> None:
    """A truncate failing after deleting events rolls back whole: events and head intact."""
    store, conn = trap
    observer = open_store()
    before, version = dump(conn), observer.data_version()
    with pytest.raises(StoreError):
        store.truncate("s", 2)
    assert dump(conn) == before
    assert observer.data_version() == version
    assert [e.seq for e in store.read("s")] == [1, 2, 3, 4, 5]


# -- 11. file permissions -------------------------------------------------------------------


def test_file_created_without_group_or_world_write(tmp_path: Path) -> None:
    """The database file (and its WAL) is created without group/world write permission."""
    path = str(tmp_path / "perm.db")
    old = os.umask(0)
    try:
        store = SqliteStore(path)
        try:
            store.append("s", evs(1))
            for name in (path, path + "-wal"):
                assert os.stat(name).st_mode & 0o022 == 0, name
        finally:
            store.close()
    finally:
        os.umask(old)


# -- 12. errors at the boundary -------------------------------------------------------------


def test_open_errors_are_tidelog_errors(tmp_path: Path) -> None:
    """Bad paths and settings raise tidelog errors, never apsw's, and create no file."""
    with pytest.raises(StoreIOError) as info:
        SqliteStore(tmp_path)
    assert not isinstance(info.value, apsw.Error)
    with pytest.raises(StoreIOError):
        SqliteStore(tmp_path / "missing-dir" / "x.db")
    with pytest.raises(InvalidArgumentError):
        SqliteStore(":memory:")
    with pytest.raises(InvalidArgumentError):
        SqliteStore("")
    with pytest.raises(InvalidArgumentError):
        SqliteStore(tmp_path / "a.db", synchronous="off")  # type: ignore[arg-type]  # bad input under test
    with pytest.raises(InvalidArgumentError):
        SqliteStore(tmp_path / "b.db", busy_timeout_ms=-1)
    with pytest.raises(InvalidArgumentError):
        SqliteStore(42)  # type: ignore[arg-type]  # bad input under test
    assert sorted(os.listdir(tmp_path)) == []


def test_calls_after_close_raise_closed_error(db: str) -> None:
    """After close() every call raises ClosedError; close() itself is idempotent."""
    store = SqliteStore(db)
    store.append("s", evs(1))
    store.close()
    store.close()
    calls: list[Callable[[], object]] = [
        lambda: store.create("x"),
        lambda: store.append("s", evs(1)),
        lambda: store.append("s", []),
        lambda: store.write_batch([]),
        lambda: store.write_batch([op("s", 1)]),
        store.sync,
        lambda: store.read("s"),
        lambda: store.head("s"),
        lambda: store.stat("s"),
        lambda: store.pin("s"),
        store.list_sessions,
        lambda: store.delete("s"),
        lambda: store.truncate("s", 0),
        lambda: store.acquire_lease("s", "o", ttl=1.0, holder="h"),
        lambda: store.renew_lease("s", "o", ttl=1.0),
        lambda: store.release_lease("s", "o"),
        store.check_integrity,
        store.data_version,
        store.clone,
    ]
    for call in calls:
        with pytest.raises(ClosedError):
            call()


# -- 13. another process --------------------------------------------------------------------

CHILD = textwrap.dedent(
    """
    import sys, time
    from stores import NewEvent, SqliteStore

    store = SqliteStore(sys.argv[1])
    for i in range(10):
        batch = [NewEvent("child", {"i": i, "j": j}) for j in (0, 1)]
        store.append("shared", batch)
        time.sleep(0.01)
    store.close()
    print("child done")
    """
)


@pytest.mark.slow
def test_subprocess_appends_are_seen_by_parent(
    open_store: Callable[..., SqliteStore], db: str
) -> None:
    """A child process's commits reach the parent whole, and change its data_version."""
    parent = open_store()
    parent.append("mine", evs(1))
    version = parent.data_version()
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, db],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        seen = 0
        while seen < 20 and time.monotonic() < deadline:
            events = parent.read("shared")
            seen = len(events)
            assert seen % 2 == 0  # a batch is visible whole or not at all
            assert [e.seq for e in events] == list(range(1, seen + 1))
            time.sleep(0.005)
        out, err = child.communicate(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode == 0, err
    assert "child done" in out
    events = parent.read("shared")
    assert [(num(e, "i"), num(e, "j")) for e in events] == [
        (i, j) for i in range(10) for j in (0, 1)
    ]
    assert parent.head("shared") == 20
    assert parent.data_version() != version


def test_errors_are_tidelog_errors() -> None:
    """Every error class the SQLite store raises derives from TidelogError, not apsw.Error."""
    for cls in (StoreBusyError, StoreCorruptError, StoreIOError, UnsupportedFormatError):
        assert issubclass(cls, TidelogError)
        assert not issubclass(cls, apsw.Error)


def test_version_1_file_is_migrated_to_current(tmp_path: Path) -> None:
    """A real version-1 file (no run index) opens, keeps its data and gains the index."""
    from stores.sqlite import _schema as sqlite_schema

    path = tmp_path / "v1.db"
    conn = apsw.Connection(str(path))
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("BEGIN IMMEDIATE")
    sqlite_schema.MIGRATIONS[0](conn)
    conn.execute("INSERT INTO sessions(id, head, created_at, updated_at) VALUES ('s', 1, 1.0, 1.0)")
    conn.execute(
        "INSERT INTO events(sid, seq, ts, kind, data, run_id) VALUES (1, 1, 1.0, 'k', '1', 'r')"
    )
    conn.execute(f"PRAGMA application_id={sqlite_schema.APPLICATION_ID}")
    conn.execute("PRAGMA user_version=1")
    conn.execute("COMMIT")
    conn.close()
    store = SqliteStore(path)
    try:
        assert store.read("s")[0].run_id == "r"
        assert store.find_run("s", "r") == (1, 1)
        assert store._conn is not None
        indexes = [r[0] for r in store._conn.execute("SELECT name FROM sqlite_schema")]
        assert "events_by_run" in indexes
        assert scalar(store._conn, "PRAGMA user_version") == sqlite_schema.SCHEMA_VERSION
    finally:
        store.close()


# -- checkpoints ------------------------------------------------------------------------------


def _fill_wal(store: SqliteStore, frames: int) -> None:
    """Commit ~3 KB events one per transaction until the WAL holds ``frames`` frames."""
    session = "wal-filler"
    blob = "x" * 3000
    for _ in range(100_000):
        store.append(session, [NewEvent("m", blob)])
        if store.wal_pages >= frames:
            return
    raise AssertionError(f"the WAL never reached {frames} frames")


def test_checkpoints_option_is_checked(open_store: Callable[..., SqliteStore]) -> None:
    """checkpoints= takes "auto" or "deferred"; anything else is InvalidArgumentError."""
    for bad in ("never", None, True, "AUTO"):
        with pytest.raises(InvalidArgumentError, match="checkpoints"):
            open_store(checkpoints=bad)


def test_auto_checkpoints_keep_wal_pages_zero(
    open_store: Callable[..., SqliteStore], db: str
) -> None:
    """checkpoints="auto" (the default): SQLite checkpoints at commit, wal_pages stays 0."""
    store = open_store()
    for _ in range(1500):
        store.append("s", [NewEvent("m", "x" * 3000)])
    assert store.wal_pages == 0
    assert os.path.getsize(db + "-wal") < 1300 * PAGE  # restarted after ~1000 frames


def test_deferred_checkpoints_leave_the_wal_to_the_owner(
    open_store: Callable[..., SqliteStore], db: str
) -> None:
    """checkpoints="deferred": commits never checkpoint below the fallback, wal_pages
    counts the frames, and a checkpoint on another handle lets the WAL restart."""
    store = open_store(checkpoints="deferred")
    _fill_wal(store, 1500)
    assert os.path.getsize(db + "-wal") >= 1500 * PAGE  # no commit checkpointed
    other = open_store()
    assert other.checkpoint_wal() >= 1500
    store.append("s", [NewEvent("m", "after")])
    assert store.wal_pages < 10  # the first commit after a full checkpoint restarts the WAL
    assert [e.data for e in other.read("s")] == ["after"]
    assert other.head("wal-filler") == store.head("wal-filler")


def test_deferred_checkpoints_fall_back_when_nobody_checkpoints(
    open_store: Callable[..., SqliteStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With nobody calling checkpoint, a deferred store's own commits checkpoint once the
    WAL passes CHECKPOINT_FALLBACK_PAGES, so it stays bounded."""
    monkeypatch.setattr("stores.sqlite._store.CHECKPOINT_FALLBACK_PAGES", 200)
    store = open_store(checkpoints="deferred")
    peak = 0
    for _ in range(800):
        store.append("s", [NewEvent("m", "x" * 3000)])
        peak = max(peak, store.wal_pages)
    assert 200 <= peak < 220
    assert store.head("s") == 800


def test_deferred_checkpoints_are_inherited_by_clones(
    open_store: Callable[..., SqliteStore],
) -> None:
    """A clone has the same checkpoints setting (like every other setting)."""
    store = open_store(checkpoints="deferred")
    clone = store.clone()
    try:
        assert clone.checkpoints == "deferred"
        clone.append("s", [NewEvent("m", 1)])
        assert clone.wal_pages > 0
    finally:
        clone.close()


def test_checkpoint_while_another_connection_writes(
    open_store: Callable[..., SqliteStore],
) -> None:
    """A checkpoint on one handle runs while another handle keeps committing (PASSIVE: it
    never waits for the writer), and nothing committed is lost."""
    writer = open_store(checkpoints="deferred")
    checkpointer = open_store()
    stop = threading.Event()
    counts: list[int] = []

    def checkpoint_loop() -> None:
        while not stop.is_set():
            counts.append(checkpointer.checkpoint_wal())

    thread = threading.Thread(target=checkpoint_loop)
    thread.start()
    try:
        for i in range(1, 401):
            assert writer.append("s", [NewEvent("m", "x" * 2000)]) == i
    finally:
        stop.set()
        thread.join()
    assert len(counts) > 0
    assert checkpointer.head("s") == 400


KILLED_DURING_CHECKPOINT = textwrap.dedent(
    """
    import sys, threading
    from stores import NewEvent, SqliteStore

    writer = SqliteStore(sys.argv[1], checkpoints="deferred")
    checkpointer = writer.clone()

    def checkpoint_forever():
        while True:
            checkpointer.checkpoint_wal()

    for i in range(1, 3001):
        head = writer.append("s", [NewEvent("m", {"i": i, "pad": "x" * 3000})])
        if i == 1500:
            threading.Thread(target=checkpoint_forever, daemon=True).start()
        print(head, flush=True)
    """
)


@pytest.mark.slow
def test_sigkill_during_checkpoints_loses_nothing(db: str) -> None:
    """A process killed (SIGKILL) while checkpoints run beside its commits loses no
    acknowledged event, and the file reopens intact."""
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_DURING_CHECKPOINT, db],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    acknowledged = 0
    try:
        assert child.stdout is not None
        for line in child.stdout:
            acknowledged = int(line)
            if acknowledged >= 2000:
                break
    finally:
        child.kill()
        child.communicate()
    assert acknowledged >= 2000, "the child stopped early"
    store = SqliteStore(db, integrity_check_on_open=True)
    try:
        events = store.read("s")
        assert len(events) >= acknowledged
        assert [num(e, "i") for e in events] == list(range(1, len(events) + 1))
    finally:
        store.close()
