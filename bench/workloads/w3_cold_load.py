"""W3: cold load of a 10,000-event session in a fresh process.

The parent writes one session of 10,000 events (the payload; not timed) and closes the
database. Then a fresh Python process imports everything first (tidelog, trio, apsw: the
import is not timed), and times opening the database plus reading every event of the
session, decoded:

* ``tidelog``: inside ``trio.run``, ``open_runtime(path)``, ``rt.open_session(id,
  mode="read")`` and one ``await r.read()`` (all events, :class:`StoredEvent` objects).
* ``raw apsw``: inside ``trio.run``, one thread hop that opens the connection (WAL), runs
  ``SELECT seq, data ... ORDER BY seq`` and decodes each row's JSON.

"Cold" means a new process (no connection, cache or actor yet); the file itself is in
the OS page cache in both cases. Each measurement runs :data:`PROCESSES` fresh processes
one after another and keeps their median.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

import trio

from runtime import NewEvent, open_runtime

from ..harness.core import PAYLOAD, CaseContext, Metrics, Row, Target, case, encode_payload, rows
from ..harness.procs import run_worker, worker
from ..references.raw_sqlite import insert_rows, open_raw

__all__ = ["PROCESSES"]

#: Fresh processes per measurement (their median is the round's value).
PROCESSES = 3
_SESSION = "s"
_BATCH = 500
_DECODER = json.JSONDecoder()


def events(ctx: CaseContext) -> int:
    return ctx.n(10_000, minimum=100)


# -- the children ---------------------------------------------------------------------------


async def _tidelog_load(path: str, expected: int) -> Metrics:
    start = time.perf_counter()
    async with open_runtime(path) as rt, rt.open_session(_SESSION, mode="read") as r:
        events = await r.read()
        elapsed = time.perf_counter() - start
    if len(events) != expected:
        raise RuntimeError(f"read {len(events)} events, expected {expected}")
    return {"load_ms": elapsed * 1000.0}


def _raw_read(path: str) -> list[tuple[int, object]]:
    conn = open_raw(Path(path), "NORMAL")
    try:
        decode = _DECODER.decode
        # (seq INTEGER, data TEXT) rows: apsw types a row as any SQLite value per column.
        rows: list[Any] = conn.execute(
            "SELECT seq, data FROM events WHERE session=? ORDER BY seq", (_SESSION,)
        ).fetchall()
        return [(int(seq), decode(data)) for seq, data in rows]
    finally:
        conn.close()


async def _raw_load(path: str, expected: int) -> Metrics:
    start = time.perf_counter()
    events = await trio.to_thread.run_sync(_raw_read, path)
    elapsed = time.perf_counter() - start
    if len(events) != expected:
        raise RuntimeError(f"read {len(events)} events, expected {expected}")
    return {"load_ms": elapsed * 1000.0}


@worker("w3-load")
def w3_load(args: dict[str, Any]) -> Metrics:
    """Time open + read all in this (fresh) process: ``system``, ``path``, ``expected``."""
    load = _tidelog_load if args["system"] == "tidelog" else _raw_load
    return trio.run(load, args["path"], args["expected"])


# -- the parent -----------------------------------------------------------------------------


async def write_tidelog(path: Path | str, n: int) -> None:
    async with open_runtime(path) as rt, rt.open_session(_SESSION, mode="write") as w:
        for first in range(0, n, _BATCH):
            count = min(_BATCH, n - first)
            await w.append([NewEvent("message", PAYLOAD) for _ in range(count)])


def _write_raw(path: Path, n: int) -> None:
    conn = open_raw(path, "NORMAL")
    try:
        data = encode_payload(PAYLOAD)
        for first in range(0, n, _BATCH):
            insert_rows(
                conn,
                [(_SESSION, seq, data) for seq in range(first + 1, min(n, first + _BATCH) + 1)],
            )
    finally:
        conn.close()


def _case(system: str) -> Any:
    def run(ctx: CaseContext) -> Metrics:
        n = events(ctx)
        with ctx.fresh_dir() as d:
            path = d / f"{system}.db"
            if system == "tidelog":
                trio.run(write_tidelog, path, n)
            else:
                _write_raw(path, n)
            loads = [
                run_worker("w3-load", {"system": system, "path": str(path), "expected": n})[
                    "load_ms"
                ]
                for _ in range(PROCESSES)
            ]
        return {"load_ms": statistics.median(loads), "load_min_ms": min(loads), "events": n}

    return run


case("W3/raw", system="raw apsw (select + json decode, one thread hop)")(_case("raw"))
case("W3/tidelog", system="tidelog (open_runtime + read())")(_case("tidelog"))

_W3 = "W3 cold load of a 10,000-event session (fresh process, import excluded)"
rows(
    Row("W3", _W3, "W3/raw", "load_ms", "ms", note="reference"),
    Row(
        "W3",
        _W3,
        "W3/tidelog",
        "load_ms",
        "ms",
        reference=("W3/raw", "load_ms"),
        target=Target("ratio", "<=", 1.0),  # the speed issue's (was 1.5x)
    ),
)
