"""PostgreSQL-only behaviours of :class:`stores.PostgresStore`: its format in a
schema of its own, its options, and its errors when the server refuses, times out or goes
away (the shared contract is in the conformance suite).

The real server (``TIDELOG_TEST_PG``), a schema per test, raw psycopg connections to play
the other host or the database administrator; no mocks.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("psycopg", reason="psycopg is not installed (pip install -e '.[postgres]')")

import psycopg

from stores import (
    AppendOp,
    ConflictError,
    InvalidArgumentError,
    InvalidEventError,
    NewEvent,
    OwnershipLostError,
    PostgresStore,
    PreparedEvent,
    StoreBusyError,
    StoreError,
    StoreIOError,
    TruncateOp,
    UnsupportedFormatError,
    prepare_events,
)
from stores._batching import check_ops
from stores.postgres import _schema as pg_schema

Opener = Callable[..., PostgresStore]


def evs(n: int) -> list[NewEvent]:
    return [NewEvent("k", {"i": i}) for i in range(n)]


def op(session_id: str, n: int, **kwargs: Any) -> AppendOp:
    return AppendOp(session_id, tuple(prepare_events(evs(n))), **kwargs)


def tables(conn: psycopg.Connection[Any], schema: str) -> set[str]:
    rows = conn.execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)
    ).fetchall()
    return {row[0] for row in rows}


# -- the format ------------------------------------------------------------------------------


def test_new_store_creates_its_schema_and_version(
    pg_open: Opener, pg_raw: psycopg.Connection[Any], pg_where: tuple[str, str]
) -> None:
    """Opening a new store creates its schema, its tables and the version row."""
    pg_open().close()
    assert tables(pg_raw, pg_where[1]) == {
        "sessions",
        "events",
        "cuts",
        "leases",
        "projections",
        "tidelog_format",
    }
    row = pg_raw.execute("SELECT application, version FROM tidelog_format").fetchall()
    assert row == [("tidelog", pg_schema.SCHEMA_VERSION)]


def test_store_shares_a_database_with_an_application(
    pg_open: Opener, pg_raw: psycopg.Connection[Any], pg_where: tuple[str, str]
) -> None:
    """An application's tables in another schema of the database are untouched, and a
    table of the same name there does not confuse the store."""
    app = pg_where[1] + "_app"
    pg_raw.execute(f"CREATE SCHEMA {app}")
    try:
        pg_raw.execute(f"CREATE TABLE {app}.sessions(id int PRIMARY KEY, name text)")
        pg_raw.execute(f"INSERT INTO {app}.sessions VALUES (1, 'mine')")
        store = pg_open()
        store.append("s", evs(2))
        assert pg_raw.execute(f"SELECT * FROM {app}.sessions").fetchall() == [(1, "mine")]
        assert store.head("s") == 2
    finally:
        pg_raw.execute(f"DROP SCHEMA {app} CASCADE")


def test_empty_existing_schema_is_used(
    pg_open: Opener, pg_raw: psycopg.Connection[Any], pg_where: tuple[str, str]
) -> None:
    """A schema that exists but holds nothing (made by an administrator) becomes the store."""
    pg_raw.execute(f"CREATE SCHEMA {pg_where[1]}")
    store = pg_open()
    assert store.append("s", evs(1)) == 1


def _foreign_table(conn: psycopg.Connection[Any], schema: str) -> None:
    conn.execute(f"CREATE SCHEMA {schema}")
    conn.execute(f"CREATE TABLE {schema}.orders(id int PRIMARY KEY)")


def _foreign_function(conn: psycopg.Connection[Any], schema: str) -> None:
    conn.execute(f"CREATE SCHEMA {schema}")
    conn.execute(f"CREATE FUNCTION {schema}.f() RETURNS int LANGUAGE sql AS 'SELECT 1'")


def _other_application(conn: psycopg.Connection[Any], schema: str) -> None:
    PostgresStore(f"{conn.info.dsn}", schema=schema).close()
    conn.execute(f"UPDATE {schema}.tidelog_format SET application = 'other'")


def _newer_version(conn: psycopg.Connection[Any], schema: str) -> None:
    PostgresStore(f"{conn.info.dsn}", schema=schema).close()
    conn.execute(f"UPDATE {schema}.tidelog_format SET version = version + 1")


def _two_version_rows(conn: psycopg.Connection[Any], schema: str) -> None:
    PostgresStore(f"{conn.info.dsn}", schema=schema).close()
    conn.execute(f"ALTER TABLE {schema}.tidelog_format DROP CONSTRAINT tidelog_format_pkey")
    conn.execute(f"INSERT INTO {schema}.tidelog_format VALUES (true, 'tidelog', 1)")


def _snapshot(conn: psycopg.Connection[Any], schema: str) -> tuple[object, ...]:
    return (
        tables(conn, schema),
        conn.execute(
            "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
            " WHERE n.nspname = %s",
            (schema,),
        ).fetchone(),
        conn.execute(
            "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = %s",
            (schema,),
        ).fetchone(),
    )


@pytest.mark.parametrize(
    "make",
    [_foreign_table, _foreign_function, _other_application, _newer_version, _two_version_rows],
)
@pytest.mark.parametrize("read_only", [False, True])
def test_foreign_or_newer_schema_refused_untouched(
    pg_raw: psycopg.Connection[Any],
    pg_where: tuple[str, str],
    make: Callable[[psycopg.Connection[Any], str], None],
    read_only: bool,
) -> None:
    """Another application's schema, or a newer tidelog format, raises
    UnsupportedFormatError at open and nothing in the schema changes."""
    dsn, schema = pg_where
    make(pg_raw, schema)
    before = _snapshot(pg_raw, schema)
    format_before = (
        pg_raw.execute(f"SELECT * FROM {schema}.tidelog_format").fetchall()
        if "tidelog_format" in before[0]  # type: ignore[operator]
        else None
    )
    with pytest.raises(UnsupportedFormatError):
        PostgresStore(dsn, schema=schema, read_only=read_only)
    assert _snapshot(pg_raw, schema) == before
    if format_before is not None:
        assert pg_raw.execute(f"SELECT * FROM {schema}.tidelog_format").fetchall() == format_before


def test_read_only_open_never_creates_a_store(
    pg_raw: psycopg.Connection[Any], pg_where: tuple[str, str]
) -> None:
    """A read-only open of a schema without a store raises StoreIOError and creates
    nothing (no schema)."""
    dsn, schema = pg_where
    with pytest.raises(StoreIOError, match="never creates"):
        PostgresStore(dsn, schema=schema, read_only=True)
    found = pg_raw.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone()
    assert found is None


def test_concurrent_opens_of_a_new_store_all_succeed(
    pg_where: tuple[str, str], pg_raw: psycopg.Connection[Any]
) -> None:
    """Several processes' first opens of one new store wait for one migration instead of
    racing: every open succeeds, one version row exists."""
    dsn, schema = pg_where
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def open_one() -> None:
        try:
            barrier.wait(timeout=10)
            store = PostgresStore(dsn, schema=schema)
            store.append(f"s{threading.get_ident()}", evs(1))
            store.close()
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert pg_raw.execute(f"SELECT count(*) FROM {schema}.tidelog_format").fetchone() == (1,)
    assert pg_raw.execute(f"SELECT count(*) FROM {schema}.sessions").fetchone() == (4,)


def test_migration_upgrades_an_older_store(
    pg_open: Opener, pg_raw: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An older store is migrated at open: the step runs once, the version moves, the
    data stays; the old code then refuses the newer store."""
    store = pg_open()
    store.append("s", evs(3))
    store.close()
    current = pg_schema.SCHEMA_VERSION
    calls: list[str] = []

    def step(conn: psycopg.Connection[Any], schema: str) -> None:
        calls.append(schema)
        conn.execute(f"ALTER TABLE {schema}.sessions ADD COLUMN note text")

    with monkeypatch.context() as m:
        m.setattr(pg_schema, "SCHEMA_VERSION", current + 1)
        m.setitem(pg_schema.MIGRATIONS, current, step)
        store = pg_open()
        assert [e.seq for e in store.read("s")] == [1, 2, 3]
        assert store.append("s", evs(1)) == 4
        pg_open().close()  # current now: the step does not run again
        assert len(calls) == 1
    assert pg_raw.execute("SELECT version FROM tidelog_format").fetchone() == (current + 1,)
    with pytest.raises(UnsupportedFormatError):
        pg_open()


def test_version_1_store_gains_the_owner_on_the_session_row(
    pg_open: Opener, pg_raw: psycopg.Connection[Any], pg_where: tuple[str, str]
) -> None:
    """A version-1 store (as the code before the session-row fence wrote it) migrates in
    one step: its data stays, each lease's owner is copied to its session row, and the
    append path fences with it from then on."""
    schema = pg_where[1]
    pg_raw.execute(f"CREATE SCHEMA {schema}")
    pg_schema.MIGRATIONS[0](pg_raw, schema)
    pg_raw.execute(
        "CREATE TABLE tidelog_format(singleton boolean PRIMARY KEY DEFAULT true"
        " CHECK (singleton), application text NOT NULL, version integer NOT NULL);"
        " INSERT INTO tidelog_format VALUES (true, 'tidelog', 1);"
        " INSERT INTO sessions(id, head, created_at, updated_at) VALUES ('a', 1, 0, 0),"
        " ('b', 0, 0, 0);"
        " INSERT INTO events(sid, seq, ts, kind, data) SELECT sid, 1, 0, 'k', '{}'"
        " FROM sessions WHERE id = 'a';"
        " INSERT INTO leases(id, owner, holder, expires) VALUES ('a', 'tok', 'h', 1e12)"
    )
    store = pg_open()
    assert pg_raw.execute("SELECT version FROM tidelog_format").fetchone() == (2,)
    owners = pg_raw.execute("SELECT id, owner FROM sessions ORDER BY id").fetchall()
    assert owners == [("a", "tok"), ("b", None)]
    assert [e.seq for e in store.read("a")] == [1]
    results = store.write_batch([op("a", 1, expected_head=1, owner="tok"), op("b", 1)])
    assert results == [2, 1]
    lost = store.write_batch([op("a", 1, expected_head=2, owner="other")])
    assert isinstance(lost[0], OwnershipLostError)
    assert store.head("a") == 2


def test_session_row_owner_follows_every_lease_change(
    pg_open: Opener, pg_raw: psycopg.Connection[Any]
) -> None:
    """The session row's copy of the owner follows acquire, takeover, release, a lease
    taken before the session exists, and the session's deletion and re-creation."""
    store = pg_open()

    def owner(session_id: str) -> object:
        row = pg_raw.execute("SELECT owner FROM sessions WHERE id = %s", (session_id,)).fetchone()
        return None if row is None else row[0]

    store.acquire_lease("s", "t1", ttl=60, holder="h1")
    assert store.write_batch([op("s", 1, expected_head=0, owner="t1")]) == [1]
    assert owner("s") == "t1"
    store.release_lease("s", "t1")
    assert owner("s") is None
    store.acquire_lease("s", "t2", ttl=60, holder="h2")
    assert owner("s") == "t2"
    stale = store.write_batch([op("s", 1, expected_head=1, owner="t1")])
    assert isinstance(stale[0], OwnershipLostError)
    assert store.delete("s")
    store.acquire_lease("s", "t3", ttl=60, holder="h3")
    assert store.write_batch([op("s", 2, expected_head=0, owner="t3")]) == [2]
    assert owner("s") == "t3"


def _bad_sql(conn: psycopg.Connection[Any], schema: str) -> None:
    conn.execute(f"CREATE TABLE {schema}.extra(x int)")
    conn.execute(f"INSERT INTO {schema}.no_such_table VALUES (1)")


def _raises(conn: psycopg.Connection[Any], schema: str) -> None:
    conn.execute(f"CREATE TABLE {schema}.extra(x int)")
    raise RuntimeError("migration step failed midway")


@pytest.mark.parametrize(
    ("step", "cause"), [(_bad_sql, psycopg.errors.UndefinedTable), (_raises, RuntimeError)]
)
def test_failed_migration_changes_nothing(
    pg_open: Opener,
    pg_raw: psycopg.Connection[Any],
    pg_where: tuple[str, str],
    monkeypatch: pytest.MonkeyPatch,
    step: Callable[[psycopg.Connection[Any], str], None],
    cause: type[BaseException],
) -> None:
    """Two pending steps, the second failing after DDL: everything rolls back (the first
    step's table too), open raises a chained StoreError, and the store still opens."""
    pg_open().append("s", evs(2))
    current = pg_schema.SCHEMA_VERSION
    before = tables(pg_raw, pg_where[1])

    def first(conn: psycopg.Connection[Any], schema: str) -> None:
        conn.execute(f"CREATE TABLE {schema}.first_step(x int)")

    with monkeypatch.context() as m:
        m.setattr(pg_schema, "SCHEMA_VERSION", current + 2)
        m.setitem(pg_schema.MIGRATIONS, current, first)
        m.setitem(pg_schema.MIGRATIONS, current + 1, step)
        with pytest.raises(StoreError) as info:
            pg_open()
    assert isinstance(info.value.__cause__, cause)
    assert tables(pg_raw, pg_where[1]) == before
    assert pg_raw.execute("SELECT version FROM tidelog_format").fetchone() == (current,)
    assert pg_open().head("s") == 2


# -- options and opening -----------------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        {"dsn": 5},
        {"dsn": "nonsense"},
        {"dsn": "postgresql://h/db?no_such_option=1"},
        {"dsn": "dbname=te\x00st"},
        {"schema": "Upper"},
        {"schema": "has-dash"},
        {"schema": "1starts_with_digit"},
        {"schema": "x" * 64},
        {"schema": ""},
        {"schema": None},
        {"synchronous": "off"},
        {"busy_timeout_ms": -1},
        {"busy_timeout_ms": 2.5},
        {"statement_timeout_ms": 2**31},
        {"connect_timeout": True},
        {"read_only": 1},
        {"notify": "yes"},
    ],
    ids=lambda o: "-".join(f"{k}={v!r}"[:30] for k, v in o.items()),
)
def test_bad_options_refused_before_connecting(
    pg_open: Opener, pg_raw: psycopg.Connection[Any], pg_where: tuple[str, str], options: Any
) -> None:
    """A bad option or DSN raises InvalidArgumentError, and no schema is created."""
    with pytest.raises(InvalidArgumentError):
        pg_open(**options)
    found = pg_raw.execute(
        "SELECT 1 FROM pg_namespace WHERE nspname = %s", (pg_where[1],)
    ).fetchone()
    assert found is None


@pytest.mark.parametrize(
    "dsn",
    [
        "host=127.0.0.1 port=1 dbname=test user=u password=s3cret connect_timeout=5",
        "postgresql://u:s3cret@127.0.0.1:1/test?connect_timeout=5",
    ],
    ids=["keywords", "uri"],
)
def test_refused_connection_is_store_io_error_without_password(pg_open: Opener, dsn: str) -> None:
    """A server that refuses the connection raises StoreIOError naming the host, never
    the password; the psycopg error is its cause."""
    with pytest.raises(StoreIOError) as info:
        pg_open(dsn=dsn)
    assert "127.0.0.1" in str(info.value)
    assert "s3cret" not in str(info.value)
    assert isinstance(info.value.__cause__, psycopg.OperationalError)


def test_missing_database_is_store_io_error(pg_open: Opener, pg_where: tuple[str, str]) -> None:
    """A database that does not exist raises StoreIOError."""
    from psycopg.conninfo import make_conninfo

    with pytest.raises(StoreIOError, match="does not exist"):
        pg_open(dsn=make_conninfo(pg_where[0], dbname="tidelog_no_such_database"))


# -- the server refuses, times out, goes away ------------------------------------------------


def _lock_session_row(dsn: str, schema: str, session_id: str) -> psycopg.Connection[Any]:
    """A connection holding ``session_id``'s row locked in an open transaction."""
    holder = psycopg.connect(dsn)
    holder.execute(f"SELECT 1 FROM {schema}.sessions WHERE id = %s FOR UPDATE", (session_id,))
    return holder


@pytest.mark.parametrize("which", ["lock_timeout", "statement_timeout"])
def test_blocked_write_times_out_as_busy(
    pg_open: Opener, pg_where: tuple[str, str], which: str
) -> None:
    """A write blocked by another connection's lock past busy_timeout_ms (or past
    statement_timeout_ms) raises StoreBusyError and writes nothing; once the lock is
    gone the same write succeeds."""
    options = (
        {"busy_timeout_ms": 100}
        if which == "lock_timeout"
        else {"busy_timeout_ms": 60_000, "statement_timeout_ms": 100}
    )
    store = pg_open(**options)
    store.append("s", evs(1))
    holder = _lock_session_row(*pg_where, "s")
    try:
        with pytest.raises(StoreBusyError):
            store.append("s", evs(1))
        with pytest.raises(StoreBusyError):
            store.write_batch([op("s", 1), op("t", 1)])
        with pytest.raises(StoreBusyError):
            store.truncate("s", 0)
    finally:
        holder.close()
    assert store.head("s") == 1
    assert store.stat("t") is None
    assert store.write_batch([op("s", 1), op("t", 1)]) == [2, 1]


def test_terminated_connection_is_reopened(
    pg_open: Opener, pg_raw: psycopg.Connection[Any]
) -> None:
    """A connection the server ends (pg_terminate_backend) fails the call that meets it
    with StoreIOError; the next call reconnects and nothing acknowledged is lost."""
    store = pg_open()
    assert store.append("s", evs(2)) == 2
    pid = store.backend_pid
    assert pid is not None
    pg_raw.execute("SELECT pg_terminate_backend(%s)", (pid,))
    with pytest.raises(StoreIOError):
        store.append("s", evs(1), expected_head=2)
    assert store.head("s") == 2  # reconnected: the failed append wrote nothing
    assert store.backend_pid not in (None, pid)
    assert store.append("s", evs(1), expected_head=2) == 3
    assert [e.seq for e in store.read("s")] == [1, 2, 3]


def test_reads_reconnect_without_an_error(pg_open: Opener, pg_raw: psycopg.Connection[Any]) -> None:
    """A read meeting a connection the server ended is run again on a new connection: the
    reader sees no error (a read has nothing to undo)."""
    store = pg_open(read_only=False)
    store.append("s", evs(3))
    pin = store.pin("s")
    assert pin is not None
    reads: tuple[Callable[[], bool], ...] = (
        lambda: [e.seq for e in store.read("s")] == [1, 2, 3],
        lambda: store.head("s") == 3,
        lambda: store.refresh_pin(pin) == pin,
        lambda: [i.id for i in store.list_sessions()] == ["s"],
        lambda: isinstance(store.data_version(), int),
    )
    for read in reads:
        pg_raw.execute("SELECT pg_terminate_backend(%s)", (store.backend_pid,))
        assert read()


def test_terminated_connection_in_a_transaction_rolls_it_back(
    pg_open: Opener, pg_raw: psycopg.Connection[Any], pg_where: tuple[str, str]
) -> None:
    """A connection ended while its write transaction waits for a lock fails that write
    with StoreIOError, the write is not applied, and the store carries on."""
    store = pg_open(busy_timeout_ms=60_000)
    store.append("s", evs(1))
    holder = _lock_session_row(*pg_where, "s")
    failure: list[BaseException] = []

    def truncate() -> None:
        try:
            store.truncate("s", 0)
        except BaseException as exc:  # checked below
            failure.append(exc)

    pid = store.backend_pid
    thread = threading.Thread(target=truncate)
    thread.start()
    try:
        for _ in range(200):  # wait until the truncate waits for the lock
            row = pg_raw.execute(
                "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)
            ).fetchone()
            if row is not None and row[0] == "Lock":
                break
            threading.Event().wait(0.01)
        pg_raw.execute("SELECT pg_terminate_backend(%s)", (pid,))
        thread.join(timeout=30)
    finally:
        holder.close()
    assert len(failure) == 1
    assert isinstance(failure[0], StoreIOError)
    assert store.head("s") == 1


def test_nul_in_a_hand_built_event_fails_its_op_alone(pg_open: Opener) -> None:
    """A PreparedEvent built by hand with a NUL character (PostgreSQL text cannot hold
    one) fails its op with InvalidEventError naming it; the batch's other ops commit."""
    store = pg_open()
    bad = (PreparedEvent("ok", "1"), PreparedEvent("nul", '"a\x00b"'))
    results = store.write_batch([AppendOp("a", bad), op("b", 2), op("a", 1)])
    assert isinstance(results[0], InvalidEventError)
    assert (results[0].index, results[0].kind) == (1, "nul")
    assert results[1] == 2
    assert results[2] is results[0]
    assert store.stat("a") is None
    assert store.head("b") == 2


def one_event_ops(store: PostgresStore, ids: list[str], owner: str | None) -> list[AppendOp]:
    """One-event appends to existing sessions, each expecting its committed head."""
    return [op(i, 1, expected_head=store.head(i), owner=owner) for i in ids]


def event_counts(conn: psycopg.Connection[Any]) -> dict[str, int]:
    rows = conn.execute(
        "SELECT s.id, count(e.seq) FROM sessions AS s LEFT JOIN events AS e ON e.sid = s.sid"
        " GROUP BY s.id"
    ).fetchall()
    return {row[0]: row[1] for row in rows}


def test_one_event_each_statement_commits_or_undoes_itself(
    pg_open: Opener, pg_raw: psycopg.Connection[Any]
) -> None:
    """APPEND_ONE_EACH, run as the store runs it, returns the new heads and writes one
    event per session; with one op that does not pass (a stale head, another owner, a
    missing session) it raises the retry SQLSTATE and writes nothing at all."""
    from stores.postgres import _ops as pgops

    store = pg_open()
    ids = ["a", "b", "c"]
    for i in ids:
        store.acquire_lease(i, "me", ttl=60, holder="h")
        assert store.write_batch([op(i, 2, expected_head=0, owner="me")]) == [2]
    ops = one_event_ops(store, ids, "me")
    assert check_ops(ops)
    assert pgops.distinct_sessions(ops)
    assert pgops.one_each(ops)
    row = pg_raw.execute(
        pgops.APPEND_ONE_EACH, pgops.append_one_each_args(ops, None, sync=False)
    ).fetchone()
    assert row is not None
    assert list(row[1]) == [3, 3, 3]
    assert event_counts(pg_raw) == {"a": 3, "b": 3, "c": 3}
    assert [e.seq for e in store.read("b")] == [1, 2, 3]

    stale = [*one_event_ops(store, ["a", "b"], "me"), op("c", 1, expected_head=2, owner="me")]
    other = one_event_ops(store, ids, "someone else")
    missing = [*one_event_ops(store, ["a"], "me"), op("nobody", 1, expected_head=4, owner="me")]
    for batch in (stale, other, missing):
        assert pgops.one_each(batch)
        with pytest.raises(psycopg.DatabaseError) as info:
            pg_raw.execute(
                pgops.APPEND_ONE_EACH, pgops.append_one_each_args(batch, None, sync=False)
            )
        assert info.value.sqlstate == pg_schema.RETRY_SQLSTATE
        assert event_counts(pg_raw) == {"a": 3, "b": 3, "c": 3}


def test_one_event_each_batch_needing_the_general_path_gets_per_op_results(
    pg_open: Opener,
) -> None:
    """A batch of one-event appends to existing sessions where some ops fail (stale
    head, lost lease) falls back to the general path: each op gets its own result and
    the log holds exactly the accepted events, once each."""
    store = pg_open()
    for i in ("a", "b", "c", "d"):
        store.acquire_lease(i, "me", ttl=60, holder="h")
        assert store.write_batch([op(i, 1, expected_head=0, owner="me")]) == [1]
    store.release_lease("d", "me")
    store.acquire_lease("d", "thief", ttl=60, holder="h2")
    ops = [
        op("a", 1, expected_head=1, owner="me"),
        op("b", 1, expected_head=7, owner="me"),  # stale: the head is 1
        op("c", 1, expected_head=1, owner="me"),
        op("d", 1, expected_head=1, owner="me"),  # the lease moved to another owner
    ]
    results = store.write_batch(ops)
    assert results[0] == 2
    assert results[2] == 2
    assert isinstance(results[1], ConflictError)
    assert (results[1].expected, results[1].actual) == (7, 1)
    assert isinstance(results[3], OwnershipLostError)
    assert [store.head(i) for i in "abcd"] == [2, 1, 2, 1]
    assert [len(store.read(i)) for i in "abcd"] == [2, 1, 2, 1]


def test_json_nul_escape_round_trips(pg_open: Opener) -> None:
    """Data holding U+0000 is stored as JSON text (``\\u0000``) and reads back exactly."""
    store = pg_open()
    store.append("s", [NewEvent("k", {"a\x00": "b\x00c"})])
    assert store.read("s")[0].data == {"a\x00": "b\x00c"}


def test_nul_in_projection_state_is_invalid_argument(pg_open: Opener) -> None:
    """A projection state with a NUL character raises InvalidArgumentError; nothing saved."""
    store = pg_open()
    store.append("s", evs(1))
    pin = store.pin("s")
    assert pin is not None
    with pytest.raises(InvalidArgumentError):
        store.save_projection(pin, "p", 1, "a\x00b")
    assert store.load_projection("s", "p", 1) is None


# -- durability ------------------------------------------------------------------------------


def _lsn(conn: psycopg.Connection[Any], what: str) -> int:
    row = conn.execute(f"SELECT pg_{what}_lsn() - '0/0'").fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.parametrize("barrier", ["sync", "write_batch", "failing_batch", "full"])
def test_flush_barrier_makes_earlier_commits_durable(
    pg_open: Opener, pg_raw: psycopg.Connection[Any], barrier: str
) -> None:
    """When a flush barrier returns (sync(), write_batch(sync=True) -- even one whose ops
    all fail -- or any commit with synchronous="full"), the WAL is flushed past every
    earlier commit."""
    store = pg_open(synchronous="full" if barrier == "full" else "normal")
    for round_ in range(20):
        store.append("s", evs(3))
        written = _lsn(pg_raw, "current_wal_insert")
        if barrier == "sync":
            store.sync()
        elif barrier == "write_batch":
            store.write_batch([op(f"t{round_}", 1)], sync=True)
        elif barrier == "failing_batch":
            stale = store.write_batch([op("s", 1, expected_head=0), TruncateOp("s", 0)], sync=True)
            assert isinstance(stale[0], ConflictError)
            assert stale[1] is stale[0]
        else:
            store.append("s", evs(1))
        assert _lsn(pg_raw, "current_wal_flush") >= written
