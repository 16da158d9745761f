"""W7: forking a long session, and cold projection reads with and without a checkpoint.

Setup (untimed): one session of 100,000 events (the payload), written through the store's
batched path. Then, each in a fresh runtime:

* fork: ``rt.fork(source, new)`` -- time, and bytes the file grew by (WAL checkpointed
  into the main file before and after). Reference: the same prefix copied with one
  ``INSERT ... SELECT`` in raw SQL (what a fork without shared prefixes costs).
* cold ``values()`` of the ``stats`` projection: without any checkpoint (a full fold);
  then, after a checkpoint was saved and 1% more events were appended, with the
  checkpoint. Reference: a cold fold of a session holding only those 1% events -- "a fold
  of only the events after the checkpoint's seq". Target: with the checkpoint <= 2x that.
  Every timed read starts after ``gc.collect()`` (see ``_values``).
"""

from __future__ import annotations

import gc
import time
from pathlib import Path
from typing import Any

import apsw
import trio

from runtime import NewEvent, open_runtime
from stores import AppendOp, SqliteStore, prepare_events

from ..harness.core import PAYLOAD, CaseContext, Metrics, Row, Target, case, rows
from .w5_disk import on_disk

__all__: list[str] = []

_SOURCE = "big"
_BATCH = 1000


def _build(path: Path, session: str, n: int) -> None:
    store = SqliteStore(path)
    try:
        event = tuple(prepare_events([NewEvent("message", PAYLOAD)]))
        for first in range(0, n, _BATCH):
            store.write_batch([AppendOp(session, event * min(_BATCH, n - first))])
    finally:
        store.close()


async def _fork(path: Path) -> float:
    async with open_runtime(path) as rt:
        start = time.perf_counter()
        info = await rt.fork(_SOURCE, "child")
        elapsed = time.perf_counter() - start
        assert info.head > 0
    return elapsed


async def _values(path: Path, session: str) -> tuple[float, int]:
    # W7: the full fold before leaves 100k events' worth of garbage; without this, a gen-2
    # collection lands in whichever timed read comes next (bench/HISTORY.md).
    gc.collect()
    async with open_runtime(path) as rt, rt.snapshot(session) as snap:
        start = time.perf_counter()
        values = await snap.values(["stats"])
        elapsed = time.perf_counter() - start
    return elapsed, int(values["stats"]["events"])


async def _append(path: Path, session: str, n: int) -> None:
    async with open_runtime(path) as rt, rt.open_session(session) as w:
        for first in range(0, n, _BATCH):
            await w.append([NewEvent("message", PAYLOAD) for _ in range(min(_BATCH, n - first))])


def _wait_for_checkpoint(path: Path, session: str) -> int:
    store = SqliteStore(path)
    try:
        for _ in range(200):
            found = store.load_projection(session, "stats", 1)
            if found is not None:
                return found[0]
            time.sleep(0.01)
    finally:
        store.close()
    raise RuntimeError("no projection checkpoint was saved")


@case("W7/tidelog", system="tidelog")
def tidelog_w7(ctx: CaseContext) -> Metrics:
    n = ctx.n(100_000, minimum=2_000)
    tail = max(1, n // 100)
    out: dict[str, Any] = {}
    with ctx.fresh_dir() as d:
        path = d / "w7.db"
        _build(path, _SOURCE, n)
        before = on_disk(path)["bytes"]
        out["fork_ms"] = trio.run(_fork, path) * 1000
        out["fork_bytes_added"] = on_disk(path)["bytes"] - before
        full, counted = trio.run(_values, path, _SOURCE)
        assert counted == n
        out["values_no_checkpoint_ms"] = full * 1000
        saved_at = _wait_for_checkpoint(path, _SOURCE)
        assert saved_at == n
        trio.run(_append, path, _SOURCE, tail)
        cached, counted = trio.run(_values, path, _SOURCE)
        assert counted == n + tail
        out["values_with_checkpoint_ms"] = cached * 1000
        trio.run(_append, path, "tail-only", tail)
        only, counted = trio.run(_values, path, "tail-only")
        assert counted == tail
        out["fold_tail_only_ms"] = only * 1000
    out["events"] = float(n)
    return out


@case("W7/raw", system="raw SQL: copy the prefix (INSERT ... SELECT)")
def raw_w7(ctx: CaseContext) -> Metrics:
    n = ctx.n(100_000, minimum=2_000)
    with ctx.fresh_dir() as d:
        path = d / "w7.db"
        _build(path, _SOURCE, n)
        before = on_disk(path)["bytes"]
        conn = apsw.Connection(str(path))
        try:
            start = time.perf_counter()
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                "INSERT INTO sessions(id, head, created_at, updated_at) VALUES ('copy', ?, 0, 0)",
                (n,),
            )
            sid = conn.last_insert_rowid()
            conn.execute(
                "INSERT INTO events(sid, seq, ts, kind, data, run_id) "
                "SELECT ?, seq, ts, kind, data, run_id FROM events "
                "WHERE sid = (SELECT sid FROM sessions WHERE id = ?)",
                (sid, _SOURCE),
            )
            conn.execute("COMMIT")
            elapsed = time.perf_counter() - start
        finally:
            conn.close()
        added = on_disk(path)["bytes"] - before
    return {"fork_ms": elapsed * 1000, "fork_bytes_added": added, "events": float(n)}


_FORK = "W7 fork of a 100k-event session"
_COLD = "W7 cold values() of 100k events"
rows(
    Row("W7", f"{_FORK}: time", "W7/raw", "fork_ms", "ms", note="reference"),
    Row(
        "W7",
        f"{_FORK}: time",
        "W7/tidelog",
        "fork_ms",
        "ms",
        reference=("W7/raw", "fork_ms"),
        target=Target("value", "<=", 50.0),
    ),
    Row("W7", f"{_FORK}: bytes added", "W7/raw", "fork_bytes_added", "B", note="reference"),
    Row(
        "W7",
        f"{_FORK}: bytes added (constant: a session row)",
        "W7/tidelog",
        "fork_bytes_added",
        "B",
        reference=("W7/raw", "fork_bytes_added"),
        target=Target("value", "<=", 8192.0),
    ),
    Row(
        "W7",
        f"{_COLD}: no checkpoint (full fold)",
        "W7/tidelog",
        "values_no_checkpoint_ms",
        "ms",
        note="baseline",
    ),
    Row(
        "W7",
        f"{_COLD}: a fold of only the 1% after the checkpoint",
        "W7/tidelog",
        "fold_tail_only_ms",
        "ms",
        note="reference",
    ),
    Row(
        "W7",
        f"{_COLD}: with a checkpoint, 1% after it",
        "W7/tidelog",
        "values_with_checkpoint_ms",
        "ms",
        reference=("W7/tidelog", "fold_tail_only_ms"),
        target=Target("ratio", "<=", 2.0),
        reference_label="a fold of only the events after the checkpoint",
    ),
)
