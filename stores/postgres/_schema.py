"""The PostgreSQL format of tidelog: one schema per store, its tables, the version table
and the migrations.

A store lives in a schema of its own (``tidelog`` by default), so it can share a
database with an application. The schema holds a one-row table ``tidelog_format``
(``application = 'tidelog'``, ``version``): the store's identity and format version. At
open, a schema that does not exist (or is empty) is created; one with a current
``tidelog_format`` is used as is; one with an older version is migrated, all pending steps
in one transaction under a transaction-level advisory lock (concurrent opens of a new
store wait for one another instead of racing); anything else -- a schema holding other
objects, another application's or a newer version -- is refused with
:class:`~stores._errors.UnsupportedFormatError` and left untouched.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg

from .._errors import StoreError, StoreIOError, TidelogError, UnsupportedFormatError
from ._connection import advisory_key, one, quote_ident

__all__ = [
    "APPLICATION",
    "MIGRATIONS",
    "RETRY_SQLSTATE",
    "SCHEMA_VERSION",
    "open_store_schema",
]

#: The ``application`` of every tidelog schema's ``tidelog_format`` row.
APPLICATION = "tidelog"
#: The format version this code writes.
SCHEMA_VERSION = 2

#: The SQLSTATE of the error :data:`~stores.postgres._ops.APPEND_MANY` raises (through
#: the schema's ``retry_batch()``) to undo itself when an op needs the general path.
RETRY_SQLSTATE = "TL001"


def _create_tables(conn: psycopg.Connection[Any], schema: str) -> None:
    """Version 1: sessions (forks share their parent's prefix through ``base_sid`` /
    ``base_seq``), events keyed by ``(sid, seq)`` with an index of runs, cuts (one per
    destructive change, for pins), leases, projection checkpoints.

    JSON is stored as ``text``, not ``jsonb``: ``jsonb`` would not give back the exact
    text (it reorders keys, drops duplicates, changes ``1.0`` and ``-0.0``, refuses
    ``\\u0000``), and the store never queries inside it. Ids are ``COLLATE "C"``: sorted
    by their bytes, as SQLite sorts them. There is no index on ``updated_at``: every
    append changes it, and an index would make each of those updates write index
    entries (no HOT update) only to speed up ``list_sessions``, which sorts instead.
    """
    s = schema
    conn.execute(
        f"""
        CREATE TABLE {s}.sessions(
            sid bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            id text COLLATE "C" NOT NULL UNIQUE,
            head bigint NOT NULL DEFAULT 0,
            created_at double precision NOT NULL,
            updated_at double precision NOT NULL,
            header text NOT NULL DEFAULT '{{}}',
            parent_id text COLLATE "C",
            parent_seq bigint,
            epoch bigint NOT NULL DEFAULT 0,
            base_sid bigint,
            base_seq bigint NOT NULL DEFAULT 0
        ) WITH (fillfactor = 70);
        CREATE INDEX sessions_by_base ON {s}.sessions(base_sid) WHERE base_sid IS NOT NULL;
        CREATE TABLE {s}.events(
            sid bigint NOT NULL,
            seq bigint NOT NULL,
            ts double precision NOT NULL,
            kind text NOT NULL,
            data text NOT NULL,
            run_id text,
            PRIMARY KEY (sid, seq)
        );
        CREATE INDEX events_by_run ON {s}.events(sid, run_id, seq) WHERE run_id IS NOT NULL;
        CREATE TABLE {s}.cuts(
            sid bigint NOT NULL,
            epoch bigint NOT NULL,
            to_seq bigint NOT NULL,
            PRIMARY KEY (sid, epoch)
        );
        CREATE TABLE {s}.leases(
            id text COLLATE "C" PRIMARY KEY,
            owner text NOT NULL,
            holder text NOT NULL,
            expires double precision NOT NULL,
            locked boolean NOT NULL DEFAULT false
        );
        CREATE TABLE {s}.projections(
            sid bigint NOT NULL,
            name text NOT NULL,
            version bigint NOT NULL,
            seq bigint NOT NULL,
            epoch bigint NOT NULL,
            state text NOT NULL,
            PRIMARY KEY (sid, name)
        );
        """
    )


def _owner_on_session_row(conn: psycopg.Connection[Any], schema: str) -> None:
    """Version 2: the lease's owner is also on the session's row (``sessions.owner``), so
    that the append path's head update is the fence and the row lock in one row operation
    (``UPDATE sessions ... WHERE head = expected AND owner = me``) instead of three (lock
    the lease row, lock the session row, update it).

    ``leases`` stays the lease's truth; triggers keep the copy exact in the very
    transactions that change it: a lease written or deleted updates its session's row
    (which waits for an append in flight on that row: the takeover commits after it, or
    the append sees the new owner), and a new session's row takes its lease's owner,
    reading the lease row ``FOR SHARE`` so a takeover in flight cannot miss the new row.
    ``retry_batch()`` is how the one-statement append path undoes itself.
    """
    s = schema
    conn.execute(
        f"""
        ALTER TABLE {s}.sessions ADD COLUMN owner text;
        UPDATE {s}.sessions AS x SET owner = l.owner FROM {s}.leases AS l WHERE l.id = x.id;
        CREATE FUNCTION {s}.lease_owner_to_session() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
            IF TG_OP = 'DELETE' THEN
                UPDATE {s}.sessions SET owner = NULL WHERE id = OLD.id AND owner IS NOT NULL;
            ELSIF TG_OP = 'INSERT' OR NEW.owner IS DISTINCT FROM OLD.owner THEN
                UPDATE {s}.sessions SET owner = NEW.owner WHERE id = NEW.id;
            END IF;
            RETURN NULL;
        END $$;
        CREATE TRIGGER lease_owner AFTER INSERT OR UPDATE OF owner OR DELETE ON {s}.leases
            FOR EACH ROW EXECUTE FUNCTION {s}.lease_owner_to_session();
        CREATE FUNCTION {s}.session_owner_from_lease() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
            NEW.owner := (SELECT owner FROM {s}.leases WHERE id = NEW.id FOR SHARE);
            RETURN NEW;
        END $$;
        CREATE TRIGGER session_owner BEFORE INSERT ON {s}.sessions
            FOR EACH ROW EXECUTE FUNCTION {s}.session_owner_from_lease();
        CREATE FUNCTION {s}.retry_batch() RETURNS bigint
        LANGUAGE plpgsql VOLATILE AS $$
        BEGIN
            RAISE EXCEPTION 'tidelog: an op of this batch needs the general path'
                USING ERRCODE = '{RETRY_SQLSTATE}';
        END $$;
        """
    )


#: Migration steps: ``MIGRATIONS[v]`` upgrades a version-``v`` schema to ``v + 1``;
#: version 0 is a new (or empty) schema. All pending steps run in one transaction. Each
#: takes the schema's name quoted (:func:`~stores.postgres._connection.quote_ident`).
MIGRATIONS: dict[int, Callable[[psycopg.Connection[Any], str], None]] = {
    0: _create_tables,
    1: _owner_on_session_row,
}


def _inspect(conn: psycopg.Connection[Any], schema: str) -> int | None:
    """The schema's format version; ``None`` if the schema does not exist; raises
    :class:`UnsupportedFormatError` if it is not a tidelog store this code can use."""
    exists, has_format, objects = one(
        conn,
        "SELECT n.oid IS NOT NULL, to_regclass(format('%%I.tidelog_format', %(s)s)) IS NOT NULL,"
        " (SELECT count(*) FROM pg_class WHERE relnamespace = n.oid)"
        " + (SELECT count(*) FROM pg_proc WHERE pronamespace = n.oid)"
        " FROM (SELECT %(s)s::name AS name) AS x LEFT JOIN pg_namespace AS n ON n.nspname = x.name",
        {"s": schema},
    )
    if not exists:
        return None
    if not has_format:
        if objects:
            raise UnsupportedFormatError(
                f"schema {schema!r} is not a tidelog store: it holds {objects} objects of "
                "another application (give tidelog a schema of its own)"
            )
        return 0
    rows = conn.execute(
        f"SELECT application, version FROM {quote_ident(schema)}.tidelog_format"
    ).fetchall()
    if len(rows) != 1 or rows[0][0] != APPLICATION or type(rows[0][1]) is not int:
        raise UnsupportedFormatError(
            f"schema {schema!r} is not a tidelog store: its tidelog_format table holds {rows!r}"
        )
    version = int(rows[0][1])
    if version > SCHEMA_VERSION:
        raise UnsupportedFormatError(
            f"schema {schema!r} has tidelog format version {version}, newer than this "
            f"tidelog (knows up to {SCHEMA_VERSION}); upgrade tidelog"
        )
    return version


def _migrate(conn: psycopg.Connection[Any], schema: str) -> None:
    """Bring the schema to :data:`SCHEMA_VERSION` in one transaction (re-checked inside,
    under an advisory lock that concurrent opens of the same store wait for)."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (advisory_key(schema, "\0migrate"),))
        version = _inspect(conn, schema)
        if version is None:
            conn.execute(f"CREATE SCHEMA {quote_ident(schema)}")
            version = 0
        start = version
        while version < SCHEMA_VERSION:
            try:
                MIGRATIONS[version](conn, quote_ident(schema))
            except (psycopg.Error, TidelogError):
                raise  # psycopg errors are translated by the caller's map_errors
            except Exception as exc:
                raise StoreError(
                    f"migration of schema version {version} to {version + 1} failed: {exc!r}"
                ) from exc
            version += 1
        if start == 0:
            conn.execute(
                f"CREATE TABLE {quote_ident(schema)}.tidelog_format(singleton boolean PRIMARY KEY "
                "DEFAULT true CHECK (singleton), application text NOT NULL, "
                "version integer NOT NULL)"
            )
            conn.execute(
                f"INSERT INTO {quote_ident(schema)}.tidelog_format(application, version) "
                "VALUES (%s, %s)",
                (APPLICATION, SCHEMA_VERSION),
            )
        else:
            conn.execute(
                f"UPDATE {quote_ident(schema)}.tidelog_format SET version = %s",
                (SCHEMA_VERSION,),
            )


def open_store_schema(conn: psycopg.Connection[Any], schema: str, *, read_only: bool) -> None:
    """Check that ``schema`` holds a current tidelog store, creating or migrating it
    first unless ``read_only``. psycopg errors propagate (the caller translates them).

    Raises:
        UnsupportedFormatError: another application's schema, a newer format -- or, read
            only, an older one (it needs a migration, which only a writable open does).
        StoreIOError: read only, and there is no store in ``schema`` (a read-only open
            never creates one).
    """
    try:
        rows = conn.execute(
            f"SELECT application, version FROM {quote_ident(schema)}.tidelog_format"
        ).fetchall()
    except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName):
        rows = []
    if rows == [(APPLICATION, SCHEMA_VERSION)]:
        return  # the usual case: one query
    version = _inspect(conn, schema)
    if read_only:
        if version is None or version == 0:
            raise StoreIOError(
                f"schema {schema!r} holds no tidelog store (a read-only open never creates one)"
            )
        if version < SCHEMA_VERSION:
            raise UnsupportedFormatError(
                f"schema {schema!r} has tidelog format version {version}, older than this "
                f"tidelog's ({SCHEMA_VERSION}); it needs a migration, which a read-only open "
                "never does: open it once with read_only=False"
            )
        return
    _migrate(conn, schema)
