"""W5: bytes on disk per event.

One session of 10,000 events (the payload), appended 100 events per append (tidelog,
``synchronous="normal"``) or per transaction (raw). After the database is closed, a new
connection runs ``PRAGMA wal_checkpoint(TRUNCATE)``, so that everything is in the main
file and the WAL is empty; bytes per event = (main file + WAL) / events. Everything the
file holds counts (schema, session row, free pages).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import apsw
import trio

from runtime import NewEvent, open_runtime

from ..harness.core import (
    PAYLOAD,
    PAYLOAD_BYTES,
    CaseContext,
    Metrics,
    Row,
    Target,
    case,
    encode_payload,
    rows,
)
from ..references.raw_sqlite import insert_rows, open_raw

__all__ = ["on_disk"]

_SESSION = "s"
_BATCH = 100


def _row(conn: apsw.Connection, sql: str) -> tuple[Any, ...]:
    """The one row ``sql`` (a PRAGMA) returns."""
    row = conn.execute(sql).fetchone()
    if row is None:
        raise RuntimeError(f"{sql} returned no row")
    return tuple(row)


def on_disk(path: Path) -> Metrics:
    """Checkpoint the WAL into the main file (TRUNCATE) and measure the files."""
    conn = apsw.Connection(str(path))
    try:
        busy, log, done = _row(conn, "PRAGMA wal_checkpoint(TRUNCATE)")
        if busy:
            raise RuntimeError(f"checkpoint blocked (log {log}, checkpointed {done})")
        [page_size] = _row(conn, "PRAGMA page_size")
        [pages] = _row(conn, "PRAGMA page_count")
        [free] = _row(conn, "PRAGMA freelist_count")
    finally:
        conn.close()
    wal = Path(f"{path}-wal")
    size = os.path.getsize(path) + (os.path.getsize(wal) if wal.exists() else 0)
    return {
        "bytes": float(size),
        "page_size": float(page_size),
        "pages": float(pages),
        "free_pages": float(free),
    }


async def _write_tidelog(path: Path, n: int) -> None:
    async with open_runtime(path) as rt, rt.open_session(_SESSION, mode="write") as w:
        for first in range(0, n, _BATCH):
            await w.append([NewEvent("message", PAYLOAD) for _ in range(min(_BATCH, n - first))])


def _write_raw(path: Path, n: int) -> None:
    conn = open_raw(path, "NORMAL")
    try:
        for first in range(0, n, _BATCH):
            last = min(n, first + _BATCH)
            insert_rows(
                conn,
                [(_SESSION, seq, encode_payload(PAYLOAD)) for seq in range(first + 1, last + 1)],
            )
    finally:
        conn.close()


def _case(system: str) -> Any:
    def run(ctx: CaseContext) -> Metrics:
        n = ctx.n(10_000, minimum=100)
        with ctx.fresh_dir() as d:
            path = d / f"{system}.db"
            if system == "tidelog":
                trio.run(_write_tidelog, path, n)
            else:
                _write_raw(path, n)
            metrics = on_disk(path)
        metrics["bytes_per_event"] = metrics["bytes"] / n
        metrics["payload_bytes"] = float(PAYLOAD_BYTES)
        metrics["events"] = float(n)
        return metrics

    return run


case("W5/raw", system="raw apsw (session, seq, data) WITHOUT ROWID")(_case("raw"))
case("W5/tidelog", system="tidelog")(_case("tidelog"))

_W5 = f"W5 bytes on disk per event, 10,000 events of {PAYLOAD_BYTES} B JSON"
rows(
    Row("W5", _W5, "W5/raw", "bytes_per_event", "B/event", note="reference"),
    Row(
        "W5",
        _W5,
        "W5/tidelog",
        "bytes_per_event",
        "B/event",
        reference=("W5/raw", "bytes_per_event"),
        target=Target("ratio", "<=", 1.3),
    ),
)
