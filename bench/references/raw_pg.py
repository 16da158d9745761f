"""PostgreSQL for the benchmarks: where the server is, a fresh schema per measurement, and
the raw psycopg reference.

The server is named by ``TIDELOG_BENCH_PG`` (a libpq DSN or URI; default ``dbname=test``,
the local socket). Every PostgreSQL case runs in a schema of its own, dropped afterwards.
Without a server (or without psycopg) the PostgreSQL cases are reported as not available
(:func:`unavailable`), like an alternative that is not installed.

**The raw reference** is plain psycopg doing the same job with no tidelog code: one table
``events(session text, seq bigint, data text, PRIMARY KEY (session, seq))`` (``session``
``COLLATE "C"``, like tidelog's ids), autocommit connections, ``synchronous_commit``
``on`` (FULL) or ``off`` (NORMAL). A write is one statement -- an ``INSERT ... SELECT FROM
unnest(...)`` of every row, with the arrays in binary format -- and so one round trip and
one transaction, whether it carries one row (per-row commits) or a whole group-commit
batch of many sessions' rows. It is reached from trio through ``trio.to_thread.run_sync``
with a ``CapacityLimiter(1)`` per connection, as the SQLite reference is.
"""

from __future__ import annotations

import functools
import json
import os
import urllib.parse
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal, cast

__all__ = [
    "PgLevel",
    "bench_dsn",
    "create_schema",
    "insert_rows_pg",
    "open_raw_pg",
    "pg_schema",
    "read_last_pg",
    "unavailable",
    "url_of",
]

#: FULL: every commit waits for its WAL flush; NORMAL: asynchronous commits.
PgLevel = Literal["on", "off"]

_DECODER = json.JSONDecoder()


def bench_dsn() -> str:
    """The benchmark server's DSN (``TIDELOG_BENCH_PG``, else ``dbname=test``)."""
    return os.environ.get("TIDELOG_BENCH_PG") or "dbname=test"


@functools.cache
def unavailable() -> str | None:
    """Why the PostgreSQL cases cannot run here (``None``: they can). Probed once."""
    try:
        import psycopg
    except ImportError:
        return "psycopg (pip install -e '.[postgres]')"
    try:
        with psycopg.connect(bench_dsn(), connect_timeout=5, autocommit=True) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return f"a PostgreSQL server at TIDELOG_BENCH_PG ({first})"
    return None


def url_of(dsn: str, schema: str) -> str:
    """A ``postgresql://`` URL naming the server of ``dsn`` and tidelog's ``schema``."""
    from psycopg.conninfo import conninfo_to_dict

    params = {key: str(value) for key, value in conninfo_to_dict(dsn).items()}
    params["schema"] = schema
    return "postgresql://?" + urllib.parse.urlencode(params)


@contextmanager
def pg_schema() -> Iterator[tuple[str, str]]:
    """``(dsn, schema)`` of a new schema name, dropped with everything in it afterwards."""
    import psycopg

    dsn = bench_dsn()
    schema = f"bench_{uuid.uuid4().hex[:16]}"
    try:
        yield dsn, schema
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def create_schema(dsn: str, schema: str) -> None:
    """Create ``schema`` (for a library that does not create its own)."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")


def open_raw_pg(dsn: str, schema: str, synchronous: PgLevel) -> Any:
    """A connection of the raw reference (creating its schema and table if needed); the
    caller closes it."""
    import psycopg

    conn = psycopg.connect(dsn, autocommit=True)
    try:
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
        conn.execute(f"SET search_path = {schema}")
        conn.execute(f"SET synchronous_commit = {synchronous}")
        conn.execute(
            'CREATE TABLE IF NOT EXISTS events(session text COLLATE "C" NOT NULL,'
            " seq bigint NOT NULL, data text NOT NULL, PRIMARY KEY (session, seq))"
        )
    except BaseException:
        conn.close()
        raise
    return conn


def insert_rows_pg(conn: Any, rows: Sequence[tuple[str, int, str]]) -> None:
    """Commit ``rows`` (session, seq, data): one statement, its own transaction."""
    sessions, seqs, datas = zip(*rows, strict=True)
    conn.execute(
        "INSERT INTO events SELECT * FROM unnest(%b::text[], %b::bigint[], %b::text[])",
        (list(sessions), list(seqs), list(datas)),
    )


def read_last_pg(conn: Any, session: str, count: int) -> list[tuple[int, object]]:
    """Read the last ``count`` events of ``session`` and decode them (one statement)."""
    rows = conn.execute(
        "SELECT seq, data FROM (SELECT seq, data FROM events WHERE session = %s"
        " ORDER BY seq DESC LIMIT %s) AS last ORDER BY seq",
        (session, count),
    ).fetchall()
    decode = _DECODER.decode
    return [(cast(int, seq), decode(cast(str, data))) for seq, data in rows]
