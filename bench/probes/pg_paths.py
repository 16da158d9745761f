"""``python -m bench.probes.pg_paths [DSN]``: how to send a batch of appends to PostgreSQL.

A measurement behind a design choice of :mod:`stores.postgres._ops`, not part of the
table of ``python -m bench``. Every variant commits the same batch -- ``n`` appends of
one event each to ``n`` distinct existing sessions, heads checked and moved, with
``synchronous_commit = off`` -- into tidelog's own tables, on one connection:

* ``one statement, one each``: :data:`stores.postgres._ops.APPEND_ONE_EACH`, what the store
  runs for the usual batch (one event per op, existing sessions, one owner): the locks,
  the checks and every write in one statement, its own transaction (1 round trip);
* ``one statement (general)``: :data:`stores.postgres._ops.APPEND_MANY`, what it runs for
  any other batch of appends to distinct sessions (several events per op, new sessions);
* ``transaction + executemany``: BEGIN; lock and read the heads; ``executemany`` the
  events and the heads; COMMIT (psycopg sends each statement of ``executemany`` in one
  pipeline);
* ``transaction + unnest``: the same, the events and heads as arrays in one INSERT and
  one UPDATE each;
* ``transaction + COPY``: the same, the events through ``COPY FROM STDIN`` (binary);
* ``pipeline + unnest``: the explicit transaction in psycopg's pipeline mode.

Every parameter is sent in binary format (``%b``): psycopg's text format escapes each
element of an array of JSON texts with a regular expression, which costs more than the
server's work (``bench/HISTORY.md``). It prints the median microseconds per
batch over ``--rounds`` runs of ``--batches``.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

import psycopg

from stores import AppendOp, PostgresStore, prepare_events
from stores.postgres import _ops as pgops

from ..harness.core import PAYLOAD, encode_payload

Batch = list[tuple[str, int]]


def _lock(conn: psycopg.Connection[Any], ids: list[str]) -> dict[str, tuple[int, int]]:
    rows = conn.execute(
        "SELECT id, sid, head FROM sessions WHERE id = ANY(%s) ORDER BY id FOR UPDATE", (ids,)
    ).fetchall()
    return {row[0]: (row[1], row[2]) for row in rows}


def _events(found: dict[str, tuple[int, int]], ids: list[str]) -> list[tuple[Any, ...]]:
    data = encode_payload(PAYLOAD)
    return [(found[i][0], found[i][1] + 1, 0.0, "message", data, None) for i in ids]


def _heads(conn: psycopg.Connection[Any], rows: list[tuple[Any, ...]]) -> None:
    conn.execute(
        "UPDATE sessions AS s SET head = u.h FROM unnest(%b::bigint[], %b::bigint[]) AS u(sid, h)"
        " WHERE s.sid = u.sid",
        ([r[0] for r in rows], [r[1] for r in rows]),
    )


def _unnest_events(conn: psycopg.Connection[Any], rows: list[tuple[Any, ...]]) -> None:
    conn.execute(
        "INSERT INTO events SELECT * FROM unnest(%b::bigint[], %b::bigint[], %b::float8[],"
        " %b::text[], %b::text[], %b::text[])",
        [list(column) for column in zip(*rows, strict=True)],
    )


def via_executemany(conn: psycopg.Connection[Any], ids: list[str]) -> None:
    with conn.transaction():
        rows = _events(_lock(conn, ids), ids)
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO events VALUES (%b, %b, %b, %b, %b, %b)", rows)
            cur.executemany(
                "UPDATE sessions SET head = %b WHERE sid = %b", [(r[1], r[0]) for r in rows]
            )


def via_unnest(conn: psycopg.Connection[Any], ids: list[str]) -> None:
    with conn.transaction():
        rows = _events(_lock(conn, ids), ids)
        _unnest_events(conn, rows)
        _heads(conn, rows)


def via_copy(conn: psycopg.Connection[Any], ids: list[str]) -> None:
    with conn.transaction():
        rows = _events(_lock(conn, ids), ids)
        with conn.cursor().copy("COPY events FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(["int8", "int8", "float8", "text", "text", "text"])
            for row in rows:
                copy.write_row(row)
        _heads(conn, rows)


def via_pipeline(conn: psycopg.Connection[Any], ids: list[str]) -> None:
    with conn.pipeline(), conn.transaction():
        rows = _events(_lock(conn, ids), ids)
        _unnest_events(conn, rows)
        _heads(conn, rows)


def via_statement(
    sql: str, make_args: Callable[..., dict[str, object]]
) -> Callable[[psycopg.Connection[Any], list[str]], None]:
    """One of the store's one-statement appends, run as the store runs it (prepared)."""

    def run(conn: psycopg.Connection[Any], ids: list[str]) -> None:
        heads = dict(conn.execute("SELECT id, head FROM sessions").fetchall())
        event = tuple(prepare_events([_new_event()]))
        ops = [AppendOp(i, event, expected_head=heads[i]) for i in ids]
        conn.execute(sql, make_args(ops, None, sync=False), prepare=True)

    return run


def _new_event() -> Any:
    from stores import NewEvent

    return NewEvent("message", PAYLOAD)


def measure(dsn: str, n: int, batches: int, rounds: int) -> dict[str, float]:
    """Median microseconds per batch of each variant (the store's two statements count
    one extra head lookup per batch, outside the statement: subtracted)."""
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    store = PostgresStore(dsn, schema=schema)
    results: dict[str, list[float]] = {}
    try:
        ids = [f"s{i:04d}" for i in range(n)]
        store.write_batch([AppendOp(i, ()) for i in ids])
        for i in ids:
            store.create(i, exist_ok=True)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"SET search_path = {schema}; SET synchronous_commit = off")
            lookup = lambda c, _ids: c.execute("SELECT id, head FROM sessions").fetchall()  # noqa: E731
            variants: dict[str, Callable[[psycopg.Connection[Any], list[str]], object]] = {
                "one statement, one each": via_statement(
                    pgops.APPEND_ONE_EACH, pgops.append_one_each_args
                ),
                "one statement (general)": via_statement(pgops.APPEND_MANY, pgops.append_many_args),
                "(its head lookup)": lookup,
                "transaction + executemany": via_executemany,
                "transaction + unnest": via_unnest,
                "transaction + COPY": via_copy,
                "pipeline + unnest": via_pipeline,
            }
            for _ in range(rounds):
                for name, run in variants.items():
                    for _ in range(5):
                        run(conn, ids)
                    start = time.perf_counter()
                    for _ in range(batches):
                        run(conn, ids)
                    per = (time.perf_counter() - start) / batches * 1e6
                    results.setdefault(name, []).append(per)
    finally:
        store.close()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
    medians = {name: statistics.median(values) for name, values in results.items()}
    lookup_us = medians.pop("(its head lookup)")
    medians["one statement, one each"] -= lookup_us
    medians["one statement (general)"] -= lookup_us
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.probes.pg_paths", description=__doc__)
    parser.add_argument("dsn", nargs="?", default="dbname=test")
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    sizes = (1, 10, 100)
    table = {n: measure(args.dsn, n, args.batches, args.rounds) for n in sizes}
    print(f"{'us per batch':28s}" + "".join(f"{f'n={n}':>10s}" for n in sizes))
    for name in table[1]:
        print(f"{name:28s}" + "".join(f"{table[n][name]:10.0f}" for n in sizes))


if __name__ == "__main__":
    main()
