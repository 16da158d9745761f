"""W3, W4 and W6 on PostgreSQL (rows ``W3pg``, ``W4pg``, ``W6pg``).

The same workloads as on SQLite (``w3_cold_load``, ``w4_read_while_write``,
``w6_tail_latency``), on a PostgreSQL schema of their own (:mod:`bench.references.raw_pg`),
tidelog running the very same code on ``open_runtime("postgresql://...")``; the raw
reference is plain psycopg:

* **W3pg**: a fresh process opens and reads a 10,000-event session (median of 3):
  ``open_runtime`` + ``read()``, against connect + select + JSON decode in one thread hop.
* **W4pg**: the newest 50 events read back to back while one writer appends flat out
  (NORMAL), against two raw connections doing the same.
* **W6pg**: tail latency across processes -- a child process appends an event stamped with
  ``time.time()`` every 5-15 ms; the parent tails (tidelog: ``rt.tail``, woken by the
  ``NOTIFY`` of the child's commit; raw: a ``LISTEN`` connection in a thread, then a read
  of the new rows on a second connection). Latency = arrival - stamp.
"""

from __future__ import annotations

import functools
import json
import random
import statistics
import time
from typing import Any

import trio

from ..harness.core import PAYLOAD, CaseContext, Metrics, Row, Target, encode_payload, rows
from ..harness.procs import ROOT, child_command, child_env, run_worker, worker
from ..references.raw_pg import insert_rows_pg, open_raw_pg, pg_schema, read_last_pg, url_of
from . import w3_cold_load, w4_read_while_write, w6_tail_latency
from .pg_w1_w2_w9 import pg_case

__all__: list[str] = []

_SESSION = "s"
_DECODER = json.JSONDecoder()


# -- W3pg -----------------------------------------------------------------------------------


def _raw_read(dsn: str, schema: str) -> list[tuple[int, object]]:
    conn = open_raw_pg(dsn, schema, "off")
    try:
        decode = _DECODER.decode
        rows_ = conn.execute(
            "SELECT seq, data FROM events WHERE session = %s ORDER BY seq", (_SESSION,)
        ).fetchall()
        return [(int(seq), decode(data)) for seq, data in rows_]
    finally:
        conn.close()


@worker("w3pg-raw-load")
def w3pg_raw_load(args: dict[str, Any]) -> Metrics:
    """Time connect + read all in this (fresh) process: ``dsn``, ``schema``, ``expected``."""

    async def load() -> Metrics:
        start = time.perf_counter()
        events = await trio.to_thread.run_sync(_raw_read, args["dsn"], args["schema"])
        elapsed = time.perf_counter() - start
        if len(events) != args["expected"]:
            raise RuntimeError(f"read {len(events)} events, expected {args['expected']}")
        return {"load_ms": elapsed * 1000.0}

    return trio.run(load)


def _w3(system: str) -> Any:
    def run(ctx: CaseContext) -> Metrics:
        n = w3_cold_load.events(ctx)
        with pg_schema() as (dsn, schema):
            if system == "tidelog":
                url = url_of(dsn, schema)
                trio.run(w3_cold_load.write_tidelog, url, n)
                name, args = "w3-load", {"system": "tidelog", "path": url, "expected": n}
            else:
                conn = open_raw_pg(dsn, schema, "off")
                try:
                    data = encode_payload(PAYLOAD)
                    for first in range(0, n, 500):
                        last = min(n, first + 500)
                        insert_rows_pg(
                            conn, [(_SESSION, s, data) for s in range(first + 1, last + 1)]
                        )
                finally:
                    conn.close()
                name, args = "w3pg-raw-load", {"dsn": dsn, "schema": schema, "expected": n}
            loads = [run_worker(name, args)["load_ms"] for _ in range(w3_cold_load.PROCESSES)]
        return {"load_ms": statistics.median(loads), "load_min_ms": min(loads), "events": n}

    return run


# -- W4pg -----------------------------------------------------------------------------------


async def _raw_w4(dsn: str, schema: str, count: int, with_reader: bool) -> Metrics:
    wconn = open_raw_pg(dsn, schema, "off")
    rconn = open_raw_pg(dsn, schema, "off")
    try:
        data = encode_payload(PAYLOAD)
        insert_rows_pg(wconn, [(_SESSION, i, data) for i in range(1, w4_read_while_write.SEED + 1)])
        wlimiter, rlimiter = trio.CapacityLimiter(1), trio.CapacityLimiter(1)
        head = w4_read_while_write.SEED

        async def append_one() -> None:
            nonlocal head
            head += 1
            row = [(_SESSION, head, encode_payload(PAYLOAD))]
            await trio.to_thread.run_sync(insert_rows_pg, wconn, row, limiter=wlimiter)

        async def read_loop(state: Any) -> None:
            clock = time.perf_counter
            while not state.stop:
                start = clock()
                events = await trio.to_thread.run_sync(
                    read_last_pg, rconn, _SESSION, w4_read_while_write.LAST, limiter=rlimiter
                )
                end = clock()
                assert len(events) == w4_read_while_write.LAST
                state.record(start, start, end)

        return await w4_read_while_write.phase(
            append_one, read_loop if with_reader else None, count
        )
    finally:
        rconn.close()
        wconn.close()


def _w4(system: str) -> Any:
    def run(ctx: CaseContext) -> Metrics:
        count = w4_read_while_write.writer_count(ctx)
        phases = []
        for with_reader in (False, True):
            with pg_schema() as (dsn, schema):
                if system == "raw":
                    phases.append(trio.run(_raw_w4, dsn, schema, count, with_reader))
                else:
                    phase = w4_read_while_write.tidelog_phase
                    phases.append(trio.run(phase, url_of(dsn, schema), count, with_reader))
        return w4_read_while_write.combine(phases[0], phases[1])

    return run


# -- W6pg -----------------------------------------------------------------------------------


@worker("w6pg-raw-writer")
def w6pg_raw_writer(args: dict[str, Any]) -> Metrics:
    """Insert ``count`` stamped rows, 5-15 ms apart, each committed with a NOTIFY."""
    rng = random.Random(args.get("seed", 7))
    conn = open_raw_pg(args["dsn"], args["schema"], "off")
    try:
        for seq in range(2, args["count"] + 2):
            time.sleep(rng.uniform(0.005, 0.015))
            data = encode_payload(dict(PAYLOAD, t=time.time()))
            conn.execute(
                "WITH ins AS (INSERT INTO events VALUES (%s, %s, %s)) SELECT pg_notify('w6pg', %s)",
                (_SESSION, seq, data, str(seq)),
            )
    finally:
        conn.close()
    return {"appended": float(args["count"])}


def _wait_notification(conn: Any) -> None:
    for _ in conn.notifies(stop_after=1, timeout=10.0):
        return
    raise RuntimeError("no notification within 10 s")


def _rows_after(conn: Any, seq: int) -> list[tuple[int, Any]]:
    found = conn.execute(
        "SELECT seq, data FROM events WHERE session = %s AND seq > %s ORDER BY seq",
        (_SESSION, seq),
    ).fetchall()
    return [(int(s), _DECODER.decode(d)) for s, d in found]


async def _raw_w6(dsn: str, schema: str, n: int) -> Metrics:
    listener = open_raw_pg(dsn, schema, "off")
    reader = open_raw_pg(dsn, schema, "off")
    latencies: list[float] = []
    try:
        insert_rows_pg(reader, [(_SESSION, 1, encode_payload(PAYLOAD))])
        listener.execute("LISTEN w6pg")
        child = functools.partial(
            trio.run_process,
            child_command("w6pg-raw-writer", {"dsn": dsn, "schema": schema, "count": n}),
            cwd=ROOT,
            env=child_env(),
            capture_stdout=True,
            capture_stderr=True,
            check=True,
        )
        async with trio.open_nursery() as nursery:
            nursery.start_soon(child)
            cursor = 1
            with trio.fail_after(60 + n * 0.1):
                while len(latencies) < n:
                    await trio.to_thread.run_sync(_wait_notification, listener)
                    for seq, data in await trio.to_thread.run_sync(_rows_after, reader, cursor):
                        latencies.append(time.time() - data["t"])
                        cursor = seq
    finally:
        reader.close()
        listener.close()
    return w6_tail_latency.latency_metrics(latencies[:n])


def _w6(system: str) -> Any:
    def run(ctx: CaseContext) -> Metrics:
        n = ctx.n(200, minimum=10)
        with pg_schema() as (dsn, schema):
            if system == "raw":
                return trio.run(_raw_w6, dsn, schema, n)
            return trio.run(w6_tail_latency.run_tidelog_cross, url_of(dsn, schema), n)

    return run


# -- registration ---------------------------------------------------------------------------

pg_case("W3pg/raw", "raw psycopg (connect + select + json decode, one thread hop)")(_w3("raw"))
pg_case("W3pg/tidelog", "tidelog on PostgreSQL (open_runtime + read())")(_w3("tidelog"))
pg_case("W4pg/raw", "raw psycopg (NORMAL, 2 connections)")(_w4("raw"))
pg_case("W4pg/tidelog", "tidelog on PostgreSQL (synchronous=normal)")(_w4("tidelog"))
pg_case("W6pg/raw-cross", "raw psycopg (commit + NOTIFY; LISTEN thread, read on a 2nd connection)")(
    _w6("raw")
)
pg_case("W6pg/tidelog-cross", "tidelog rt.tail, writer in another process (NOTIFY)")(_w6("tidelog"))

_W3 = "W3pg cold load of a 10,000-event session (fresh process, import excluded)"
_W4 = "W4pg read last 50 while 1 writer appends"
_W6 = "W6pg tail latency across processes (stamp before append to tailer wake)"
rows(
    Row("W3pg", _W3, "W3pg/raw", "load_ms", "ms", note="reference"),
    Row(
        "W3pg",
        _W3,
        "W3pg/tidelog",
        "load_ms",
        "ms",
        reference=("W3pg/raw", "load_ms"),
        target=Target("ratio", "<=", 1.5),
        higher_is_better=False,
    ),
    Row("W4pg", f"{_W4}: reader p99", "W4pg/raw", "reader_p99_ms", "ms", note="reference"),
    Row(
        "W4pg",
        f"{_W4}: reader p99",
        "W4pg/tidelog",
        "reader_p99_ms",
        "ms",
        reference=("W4pg/raw", "reader_p99_ms"),
        target=Target("value", "<=", 2.0),
        higher_is_better=False,
    ),
    Row("W4pg", "W4pg writer solo (1 event/append)", "W4pg/raw", "writer_solo_per_s", "appends/s"),
    Row(
        "W4pg",
        "W4pg writer solo (1 event/append)",
        "W4pg/tidelog",
        "writer_solo_per_s",
        "appends/s",
        reference=("W4pg/raw", "writer_solo_per_s"),
    ),
    Row("W4pg", "W4pg writer while reader reads (vs own solo)", "W4pg/raw", "writer_vs_solo", "x"),
    Row(
        "W4pg",
        "W4pg writer while reader reads (vs own solo)",
        "W4pg/tidelog",
        "writer_vs_solo",
        "x",
        target=Target("value", ">=", 0.5),
    ),
    Row(
        "W4pg",
        f"{_W4}: loop lag p99",
        "W4pg/tidelog",
        "lag_p99_ms",
        "ms",
        target=Target("value", "<=", 2.0),
        higher_is_better=False,
    ),
    Row("W6pg", f"{_W6}: p50", "W6pg/raw-cross", "latency_p50_ms", "ms", note="reference"),
    Row(
        "W6pg",
        f"{_W6}: p50",
        "W6pg/tidelog-cross",
        "latency_p50_ms",
        "ms",
        reference=("W6pg/raw-cross", "latency_p50_ms"),
        higher_is_better=False,
    ),
    Row("W6pg", f"{_W6}: p99", "W6pg/raw-cross", "latency_p99_ms", "ms", note="reference"),
    Row(
        "W6pg",
        f"{_W6}: p99",
        "W6pg/tidelog-cross",
        "latency_p99_ms",
        "ms",
        reference=("W6pg/raw-cross", "latency_p99_ms"),
        target=Target("value", "<=", 50.0),
        higher_is_better=False,
    ),
)
