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
* ``pipeline + unnest``: the explicit transaction in psycopg's pipeline mode;
* ``known sids, one each``: :data:`stores.postgres._known.APPEND_KNOWN_ONE_EACH`, what the
  store runs once it knows the sessions' sids (keyed by sid, seqs and heads worked out by
  the client, no join between the row update and the insert);
* ``known sids (grouped)``: :data:`stores.postgres._known.APPEND_KNOWN`, the same for any
  batch of appends to known sessions (several ops of one session update its row once);
* ``no fence (floor)``: the events alone, inserted by sid at the client's seqs, no session
  row touched -- not a correct write (no check, no fence, no head): what the row update
  of every fenced variant costs;
* ``head off the row, ...``: what a format whose head is not on the session row would
  run (the head the last event's seq): each event inserted at ``expected + 1`` where the
  event at ``expected`` exists (the primary key refuses a seq taken), under a lock that a
  takeover, a truncation or a delete would conflict with -- the session row's ``FOR KEY
  SHARE``, a shared advisory lock per session -- or none (not a fence: what the check
  alone costs);
* ``raw (its own table)``: the raw reference's statement (``bench.references.raw_pg``)
  on its own one-index table;
* ``write_batch, 2 ops/session`` and ``..., no heads``: the store's public call with every
  session named twice in the batch, its heads given (one statement) or not (the general
  path: a transaction with a savepoint per op).

With ``--wal`` it also prints the WAL records and bytes one batch writes
(``EXPLAIN (ANALYZE, WAL)`` of the one-statement variants: that statement's own records,
whatever else the server runs).

The store's statements get their columns packed as the store packs them
(:mod:`stores.postgres._packed`); the probe's own arrays go in binary format (``%b``):
psycopg's text format escapes each element of an array of JSON texts with a regular
expression, which costs more than the server's work (``bench/HISTORY.md``). It prints
the median microseconds per batch over ``--rounds`` runs of ``--batches``.
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
from stores.postgres import _known as known
from stores.postgres import _ops as pgops
from stores.postgres import _packed as packed

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
    sql: str, make_args: Callable[..., dict[str, object] | None]
) -> Callable[[psycopg.Connection[Any], list[str]], None]:
    """One of the store's one-statement appends, run as the store runs it (prepared)."""

    def run(conn: psycopg.Connection[Any], ids: list[str]) -> None:
        heads = dict(conn.execute("SELECT id, head FROM sessions").fetchall())
        event = tuple(prepare_events([_new_event()]))
        ops = [AppendOp(i, event, expected_head=heads[i]) for i in ids]
        args = make_args(ops, None, sync=False)
        assert args is not None  # prepare_events' values always pack
        conn.execute(sql, args, prepare=True)

    return run


def via_known(
    sql: str, make_args: Callable[..., Any], sids: dict[str, int]
) -> Callable[[psycopg.Connection[Any], list[str]], None]:
    """One of the store's sid-keyed statements (:mod:`stores.postgres._known`)."""

    def run(conn: psycopg.Connection[Any], ids: list[str]) -> None:
        heads = dict(conn.execute("SELECT id, head FROM sessions").fetchall())
        event = tuple(prepare_events([_new_event()]))
        ops = [AppendOp(i, event, expected_head=heads[i]) for i in ids]
        args, _results = make_args(ops, sids, None, sync=False)
        conn.execute(sql, args, prepare=True)

    return run


_FLOOR = (
    "INSERT INTO events(sid, seq, ts, kind, data, run_id) SELECT e.sid, e.seq,"
    f" {pgops.NOW}, e.kind, e.data, NULL FROM unnest(%b::bigint[], %b::bigint[], %b::text[],"
    " %b::text[]) AS e(sid, seq, kind, data)"
)


def via_floor(sids: dict[str, int]) -> Callable[[psycopg.Connection[Any], list[str]], None]:
    """The events alone at fresh seqs of their own (no row update, no check, no fence)."""
    seq = [10**9]

    def run(conn: psycopg.Connection[Any], ids: list[str]) -> None:
        seq[0] += 1
        data = encode_payload(PAYLOAD)
        n = len(ids)
        args = ([sids[i] for i in ids], [seq[0]] * n, ["message"] * n, [data] * n)
        conn.execute(_FLOOR, args, prepare=True)

    return run


def via_raw() -> Callable[[psycopg.Connection[Any], list[str]], None]:
    """The raw reference's insert into its own table (``bench.references.raw_pg``), at
    seqs counted in the client (a ``max(seq)`` over the table would scan all of it)."""
    seq = [0]

    def run(conn: psycopg.Connection[Any], ids: list[str]) -> None:
        seq[0] += 1
        data = encode_payload(PAYLOAD)
        conn.execute(
            "INSERT INTO raw_events SELECT * FROM unnest(%b::text[], %b::bigint[], %b::text[])",
            (ids, [seq[0]] * len(ids), [data] * len(ids)),
            prepare=True,
        )

    return run


#: The fences a head off the session row could have (see :func:`via_off_row`): the batch
#: as :data:`stores.postgres._known.APPEND_KNOWN_ONE_EACH` packs it, each event inserted
#: at ``expected + 1`` only where ``expected`` is the session's last seq (the events'
#: primary key refuses a seq taken), and a lock against a concurrent takeover, truncation
#: or delete: the session row's (``{lock}``), an advisory lock's, or none. The cost of
#: each, not a design: a correct one would take the lock before the check reads.
_OFF_ROW = """
WITH ops AS MATERIALIZED (
    SELECT o.sid, o.x, o.kind, o.data, o.run_id
    FROM unnest({sids}, {expected}, {kinds}, {datas}, {run_ids}) AS o(sid, x, kind, data, run_id)),
{lock}
ev AS (
    INSERT INTO events(sid, seq, ts, kind, data, run_id)
    SELECT ops.sid, ops.x + 1, {now}, ops.kind, ops.data, ops.run_id FROM ops
    WHERE ops.x = 0 OR EXISTS (SELECT FROM events AS e WHERE e.sid = ops.sid AND e.seq = ops.x)
    RETURNING 1)
SELECT (SELECT count(*) FROM ev){locked}
"""

_LOCKS = {
    "row": "lk AS MATERIALIZED (SELECT s.sid FROM sessions AS s JOIN ops ON s.sid = ops.sid"
    " WHERE (%(owner)s::text IS NULL OR s.owner = %(owner)s::text) FOR KEY SHARE OF s),",
    "advisory": "lk AS MATERIALIZED (SELECT pg_advisory_xact_lock_shared(1, ops.sid::int)"
    " FROM ops),",
    "none": "",
}


_SEED = "INSERT INTO events(sid, seq, ts, kind, data) SELECT unnest(%b::bigint[]), %b, 0, 'k', '0'"


def via_off_row(
    lock: str, sids: dict[str, int], base: int
) -> Callable[[psycopg.Connection[Any], list[str]], None]:
    """A head that is not on the session row, fenced by ``lock`` (a key of
    :data:`_LOCKS`; ``none`` is no fence at all). Its events go to seqs of its own from
    ``base`` up (one event at ``base`` first, for the check to find)."""
    sql = _OFF_ROW.format(
        sids=packed.ints("sids"),
        expected=packed.ints("expected"),
        kinds=packed.texts("kinds"),
        datas=packed.texts("datas"),
        run_ids=packed.nullable_texts("run_ids"),
        lock=_LOCKS[lock],
        locked=", (SELECT count(*) FROM lk)" if _LOCKS[lock] else "",  # else it never runs
        now=pgops.NOW,
    )
    head = [0]

    def run(conn: psycopg.Connection[Any], ids: list[str]) -> None:
        if not head[0]:
            conn.execute(_SEED, ([sids[i] for i in ids], base))
            head[0] = base
        event = tuple(prepare_events([_new_event()]))
        ops = [AppendOp(i, event, expected_head=head[0]) for i in ids]
        made = known.known_one_each_args(ops, sids, None, sync=False)
        assert made is not None
        row = conn.execute(sql, made[0], prepare=True).fetchone()
        assert row is not None and row[0] == len(ids)  # every event passed its check
        head[0] += 1

    return run


def via_store(
    store: PostgresStore, heads: bool
) -> Callable[[psycopg.Connection[Any], list[str]], None]:
    """``store.write_batch`` of two one-event appends per session (heads given or not)."""

    def run(conn: psycopg.Connection[Any], ids: list[str]) -> None:
        found = dict(conn.execute("SELECT id, head FROM sessions").fetchall())
        event = tuple(prepare_events([_new_event()]))
        ops: list[AppendOp] = []
        for i in ids:
            head = found[i] if heads else None
            ops.append(AppendOp(i, event, expected_head=head))
            ops.append(AppendOp(i, event, expected_head=None if head is None else head + 1))
        store.write_batch(ops)

    return run


def _new_event() -> Any:
    from stores import NewEvent

    return NewEvent("message", PAYLOAD)


def measure(
    dsn: str, n: int, batches: int, rounds: int, wal: dict[str, tuple[int, int]] | None = None
) -> dict[str, float]:
    """Median microseconds per batch of each variant (the store's statements and the
    ``write_batch`` rows count one extra head lookup per batch: subtracted). ``wal``,
    if given, gets the WAL records and bytes of one batch of each one-statement
    variant."""
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
            conn.execute(
                'CREATE TABLE raw_events(session text COLLATE "C" NOT NULL, seq bigint NOT NULL,'
                " data text NOT NULL, PRIMARY KEY (session, seq))"
            )
            sids: dict[str, int] = dict(conn.execute("SELECT id, sid FROM sessions").fetchall())
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
                "known sids, one each": via_known(
                    known.APPEND_KNOWN_ONE_EACH, known.known_one_each_args, sids
                ),
                "known sids (grouped)": via_known(known.APPEND_KNOWN, known.known_args, sids),
                "no fence (floor)": via_floor(sids),
                "head off the row, row lock": via_off_row("row", sids, 2 * 10**9),
                "head off the row, advisory lock": via_off_row("advisory", sids, 3 * 10**9),
                "head off the row, no lock (unfenced)": via_off_row("none", sids, 4 * 10**9),
                "raw (its own table)": via_raw(),
                "write_batch, 2 ops/session": via_store(store, heads=True),
                "..., no heads": via_store(store, heads=False),
            }
            if wal is not None:
                _count_wal(conn, variants, ids, wal)
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
    for name in (
        "one statement, one each",
        "one statement (general)",
        "known sids, one each",
        "known sids (grouped)",
        "write_batch, 2 ops/session",
        "..., no heads",
    ):
        medians[name] -= lookup_us
    return medians


#: The variants that are one statement, whose WAL ``--wal`` counts.
_ONE_STATEMENT = (
    "one statement, one each",
    "one statement (general)",
    "known sids, one each",
    "known sids (grouped)",
    "no fence (floor)",
    "head off the row, row lock",
    "head off the row, advisory lock",
    "head off the row, no lock (unfenced)",
    "raw (its own table)",
)


#: The plan nodes that write WAL: row changes, and row locks (``FOR KEY SHARE``).
_WRITING = ("ModifyTable", "LockRows")


def _count_wal(
    conn: psycopg.Connection[Any],
    variants: dict[str, Callable[[psycopg.Connection[Any], list[str]], object]],
    ids: list[str],
    out: dict[str, tuple[int, int]],
) -> None:
    """Run each one-statement variant once under ``EXPLAIN (ANALYZE, WAL)``: the WAL
    records and bytes of its statement (summed over the plan's top nodes that write: a
    CTE's writes and row locks are an init plan of their own)."""

    class Explaining:
        def __init__(self) -> None:
            self.plan: dict[str, Any] = {}

        def execute(self, sql: str, args: Any = None, **_options: Any) -> Any:
            if sql.lstrip().upper().startswith("SELECT ID, HEAD") or sql == _SEED:
                return conn.execute(sql, args)
            row = conn.execute("EXPLAIN (ANALYZE, WAL, FORMAT JSON) " + sql, args).fetchone()
            assert row is not None
            self.plan = row[0][0]["Plan"]
            return conn.execute("SELECT %s::int", (len(ids),))  # a row count, as if done

    for name in _ONE_STATEMENT:
        spy = Explaining()
        variants[name](spy, ids)  # type: ignore[arg-type]
        nodes = [spy.plan, *(p for p in spy.plan.get("Plans", ()) if "InitPlan" in str(p))]
        top = [p for p in nodes if p.get("Parent Relationship") in (None, "InitPlan")]
        writes = [p for p in top if p.get("Node Type") in _WRITING] or [spy.plan]
        out[name] = (
            sum(int(p.get("WAL Records", 0)) for p in writes),
            sum(int(p.get("WAL Bytes", 0)) for p in writes),
        )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.probes.pg_paths", description=__doc__)
    parser.add_argument("dsn", nargs="?", default="dbname=test")
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--wal", action="store_true", help="also count WAL records per batch")
    args = parser.parse_args()
    sizes = (1, 10, 100)
    wal: dict[int, dict[str, tuple[int, int]]] = {n: {} for n in sizes}
    table = {
        n: measure(args.dsn, n, args.batches, args.rounds, wal[n] if args.wal else None)
        for n in sizes
    }
    width = max(map(len, table[1])) + 2
    print(f"{'us per batch':{width}s}" + "".join(f"{f'n={n}':>10s}" for n in sizes))
    for name in table[1]:
        print(f"{name:{width}s}" + "".join(f"{table[n][name]:10.0f}" for n in sizes))
    if args.wal:
        head = "WAL records (bytes) / batch"
        print(f"\n{head:{width}s}" + "".join(f"{f'n={n}':>16s}" for n in sizes))
        for name in _ONE_STATEMENT:
            cells = "".join(f"{f'{wal[n][name][0]} ({wal[n][name][1]})':>16s}" for n in sizes)
            print(f"{name:{width}s}{cells}")


if __name__ == "__main__":
    main()
