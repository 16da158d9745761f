"""The events-table layout, chosen by measurement (it chose SQLite format 4).

``python -m bench.probes.layout`` builds the same data under several SQLite layouts with plain
apsw (no tidelog code, so only the layout differs) and measures, for each, in one run:

* **W2 shape**: 100 sessions x 50 one-event appends, committed 100 appends per
  ``BEGIN IMMEDIATE`` transaction (what tidelog's group commit sends), ``synchronous``
  FULL and NORMAL, WAL mode: events/s, and WAL bytes written per event;
* **W3 shape**: cold load of a 10,000-event session (a new connection, every row in seq
  order): ms;
* **W4 shape**: the last 50 events of that session, one query: us (median of 2,000);
* **W5 shape**: database bytes per event after a WAL checkpoint (the W2 data);
* **W3, interleaved**: the cold load of one of 20 sessions of 2,000 events each, written
  one event per session per transaction (as agent sessions are written: side by side),
  where a layout that appends rows in commit order scatters each session's rows.

Layouts (the columns are tidelog's: ``sid, seq, ts, kind, data, run_id``):

* ``v3`` -- format 3, the one before format 4: events clustered by ``(sid, seq)``
  (``WITHOUT ROWID``), the session row's ``head`` and ``updated_at`` updated by every
  batch, page size 4096;
* ``rowid`` -- events in a rowid table with a unique index on ``(sid, seq)``;
* ``derived-head`` -- as ``v3`` without the session row update: the head would be the
  largest seq (an index seek); what the update costs;
* ``v3-8k``, ``v3-16k`` -- as ``v3`` with 8 or 16 KiB pages.

Rounds alternate the layouts (``--rounds``, median reported) so drift hits them alike.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import apsw

from ..harness.core import PAYLOAD

SESSIONS = 100
APPENDS = 50
COLD_EVENTS = 10_000
LAST = 50
READS = 2_000
MIXED = 20
MIXED_EVENTS = 2_000

_EVENTS_CLUSTERED = """
CREATE TABLE events(sid INTEGER NOT NULL, seq INTEGER NOT NULL, ts REAL NOT NULL,
    kind TEXT NOT NULL, data TEXT NOT NULL, run_id TEXT, PRIMARY KEY(sid, seq)) WITHOUT ROWID;
"""
_EVENTS_ROWID = """
CREATE TABLE events(sid INTEGER NOT NULL, seq INTEGER NOT NULL, ts REAL NOT NULL,
    kind TEXT NOT NULL, data TEXT NOT NULL, run_id TEXT);
CREATE UNIQUE INDEX events_by_seq ON events(sid, seq);
"""
_COMMON = """
CREATE TABLE sessions(sid INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE,
    head INTEGER NOT NULL DEFAULT 0, created_at REAL NOT NULL, updated_at REAL NOT NULL);
CREATE INDEX events_by_run ON events(sid, run_id, seq) WHERE run_id IS NOT NULL;
"""


class Layout:
    """One layout: its DDL, page size, and whether a batch updates the session rows."""

    def __init__(self, name: str, events_ddl: str, *, page: int = 4096, head: bool = True):
        self.name = name
        self.ddl = events_ddl + _COMMON
        self.page = page
        self.head = head

    def open(self, path: Path, synchronous: str) -> apsw.Connection:
        conn = apsw.Connection(str(path))
        new = not conn.execute("SELECT count(*) FROM sqlite_schema").fetchone()[0]  # type: ignore[index]
        if new:
            conn.execute(f"PRAGMA page_size={self.page}")
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={synchronous}")
        if new:
            conn.execute(self.ddl)
        return conn


LAYOUTS = [
    Layout("v3", _EVENTS_CLUSTERED),
    Layout("rowid", _EVENTS_ROWID),
    Layout("derived-head", _EVENTS_CLUSTERED, head=False),
    Layout("v3-8k", _EVENTS_CLUSTERED, page=8192),
    Layout("v3-16k", _EVENTS_CLUSTERED, page=16384),
]

DATA = json.dumps(PAYLOAD, separators=(",", ":"))


def _commit(conn: apsw.Connection, layout: Layout, batch: list[tuple[int, int]]) -> None:
    """One group-commit transaction: each ``(sid, seq)`` one event, then the heads."""
    now = time.time()
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany(
        "INSERT INTO events(sid, seq, ts, kind, data) VALUES (?,?,?,?,?)",
        [(sid, seq, now, "message", DATA) for sid, seq in batch],
    )
    if layout.head:
        conn.executemany(
            "UPDATE sessions SET head=?, updated_at=? WHERE sid=?",
            [(seq, now, sid) for sid, seq in batch],
        )
    conn.execute("COMMIT")


def _wal_bytes(path: Path) -> int:
    wal = Path(f"{path}-wal")
    return wal.stat().st_size if wal.exists() else 0


def w2(layout: Layout, d: Path, synchronous: str) -> dict[str, float]:
    path = d / f"{layout.name}-{synchronous}.db"
    conn = layout.open(path, synchronous)
    conn.execute("PRAGMA wal_autocheckpoint=0")  # measure what the commits write
    conn.executemany(
        "INSERT INTO sessions(id, created_at, updated_at) VALUES (?, 0, 0)",
        [(f"session-{i}",) for i in range(SESSIONS)],
    )
    sids = [row[0] for row in conn.execute("SELECT sid FROM sessions ORDER BY sid")]
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    start = time.perf_counter()
    for seq in range(1, APPENDS + 1):
        _commit(conn, layout, [(sid, seq) for sid in sids])
    elapsed = time.perf_counter() - start
    events = SESSIONS * APPENDS
    wal = _wal_bytes(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return {
        "events_per_s": events / elapsed,
        "wal_bytes_per_event": wal / events,
        "db_bytes_per_event": path.stat().st_size / events,
    }


def w3_w4(layout: Layout, d: Path) -> dict[str, float]:
    path = d / f"{layout.name}-cold.db"
    conn = layout.open(path, "normal")
    conn.execute("INSERT INTO sessions(id, created_at, updated_at) VALUES ('s', 0, 0)")
    for first in range(1, COLD_EVENTS + 1, 100):
        _commit(conn, layout, [(1, seq) for seq in range(first, first + 100)])
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    start = time.perf_counter()
    conn = apsw.Connection(str(path))
    rows = conn.execute(
        "SELECT seq, ts, kind, data, run_id FROM events WHERE sid=1 ORDER BY seq"
    ).fetchall()
    decode = json.JSONDecoder().decode
    loaded = [decode(str(row[3])) for row in rows]
    cold_ms = (time.perf_counter() - start) * 1000
    assert len(loaded) == COLD_EVENTS
    samples = []
    for _ in range(READS):
        t = time.perf_counter()
        last = conn.execute(
            "SELECT seq, ts, kind, data, run_id FROM events WHERE sid=1 ORDER BY seq DESC LIMIT ?",
            (LAST,),
        ).fetchall()
        samples.append(time.perf_counter() - t)
        assert len(last) == LAST
    conn.close()
    return {"cold_load_ms": cold_ms, "last50_us": statistics.median(samples) * 1e6}


def interleaved(layout: Layout, d: Path) -> dict[str, float]:
    """W3 and W4 on a session written the way agent sessions are: interleaved with
    others (``MIXED`` sessions, one event each per batch, ``MIXED_EVENTS`` each)."""
    path = d / f"{layout.name}-mixed.db"
    conn = layout.open(path, "normal")
    conn.executemany(
        "INSERT INTO sessions(id, created_at, updated_at) VALUES (?, 0, 0)",
        [(f"m-{i}",) for i in range(MIXED)],
    )
    sids = [row[0] for row in conn.execute("SELECT sid FROM sessions ORDER BY sid")]
    for seq in range(1, MIXED_EVENTS + 1):
        _commit(conn, layout, [(sid, seq) for sid in sids])
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    target = sids[MIXED // 2]
    start = time.perf_counter()
    conn = apsw.Connection(str(path))
    rows = conn.execute(
        "SELECT seq, ts, kind, data, run_id FROM events WHERE sid=? ORDER BY seq", (target,)
    ).fetchall()
    decode = json.JSONDecoder().decode
    loaded = [decode(str(row[3])) for row in rows]
    cold_ms = (time.perf_counter() - start) * 1000
    assert len(loaded) == MIXED_EVENTS
    conn.close()
    return {"mixed_cold_load_ms": cold_ms}


def measure(rounds: int) -> dict[str, dict[str, float]]:
    runs: dict[str, list[dict[str, float]]] = {layout.name: [] for layout in LAYOUTS}
    for r in range(rounds):
        for layout in LAYOUTS if r % 2 == 0 else reversed(LAYOUTS):
            with tempfile.TemporaryDirectory(dir=os.environ.get("TIDELOG_BENCH_DIR")) as tmp:
                d = Path(tmp)
                full = w2(layout, d, "full")
                normal = w2(layout, d, "normal")
                metrics = {
                    "w2_full_events_per_s": full["events_per_s"],
                    "w2_normal_events_per_s": normal["events_per_s"],
                    "wal_bytes_per_event": full["wal_bytes_per_event"],
                    "db_bytes_per_event": full["db_bytes_per_event"],
                    **w3_w4(layout, d),
                    **interleaved(layout, d),
                }
            runs[layout.name].append(metrics)
    return {
        name: {key: statistics.median(m[key] for m in ms) for key in ms[0]}
        for name, ms in runs.items()
    }


_COLUMNS: list[tuple[str, str, Callable[[float], str]]] = [
    ("w2_full_events_per_s", "W2 FULL events/s", lambda v: f"{v:,.0f}"),
    ("w2_normal_events_per_s", "W2 NORMAL events/s", lambda v: f"{v:,.0f}"),
    ("wal_bytes_per_event", "WAL bytes/event", lambda v: f"{v:,.0f}"),
    ("db_bytes_per_event", "W5 bytes/event", lambda v: f"{v:,.0f}"),
    ("cold_load_ms", "W3 cold load ms", lambda v: f"{v:.1f}"),
    ("last50_us", "W4 last 50 us", lambda v: f"{v:.0f}"),
    ("mixed_cold_load_ms", "W3 interleaved ms", lambda v: f"{v:.1f}"),
]


def table(results: dict[str, dict[str, float]]) -> str:
    """Markdown: each layout's medians, and its ratio to ``v3`` in brackets."""
    head = "| Layout | " + " | ".join(title for _, title, _ in _COLUMNS) + " |"
    lines = [head, "|---" * (len(_COLUMNS) + 1) + "|"]
    base = results["v3"]
    for name, metrics in results.items():
        cells = []
        for key, _, fmt in _COLUMNS:
            ratio = metrics[key] / base[key] if base[key] else float("nan")
            cells.append(f"{fmt(metrics[key])} ({ratio:.2f}x)")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.probes.layout", description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(table(measure(args.rounds)))


if __name__ == "__main__":
    main()
