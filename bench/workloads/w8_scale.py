"""W8: behaviour at scale.

**Append latency vs stored events.** A database holds 100 sessions of 100 events (10k
stored events) or of 10,000 events (1M stored events, ~390 MB). It is built in a setup
phase that is not timed, straight through tidelog's store (``SqliteStore.write_batch``,
one transaction per 100 events x 100 sessions). Then a runtime (``synchronous="normal"``)
opens the 100 sessions for writing, appends one event to each (warm-up), and times 5,000
awaited appends of one event, round-robin over the sessions, one at a time. Target: p99
with 1M stored events <= 1.5x p99 with 10k.

**RSS with 10k idle sessions.** A fresh process opens a runtime and, with 20 concurrent
tasks, opens each of 10,000 sessions for writing, appends one event and closes it. Then it
reads its own ``VmRSS`` (``/proc/self/status``) with the runtime still open. Target:
<= 100 MB. The JSON also keeps the RSS before the sessions and the peak (``VmHWM``).
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

import trio

from runtime import NewEvent, SessionWriter, open_runtime
from stores import AppendOp, SqliteStore, prepare_events

from ..harness.core import PAYLOAD, CaseContext, Metrics, Row, Target, case, percentile, rows
from ..harness.procs import run_worker, worker

__all__ = ["SESSIONS", "build"]

#: Sessions of the append-latency databases.
SESSIONS = 100
_CHUNK = 100
_RSS_CONCURRENCY = 20


def build(path: Path, per_session: int, sessions: int = SESSIONS) -> None:
    """Fill a new tidelog database through the store: ``sessions`` x ``per_session``."""
    store = SqliteStore(path)
    try:
        events = tuple(prepare_events([NewEvent("message", PAYLOAD)] * _CHUNK))
        done = 0
        while done < per_session:
            k = min(_CHUNK, per_session - done)
            ops = [AppendOp(f"session-{i}", events[:k]) for i in range(sessions)]
            for result in store.write_batch(ops):
                if not isinstance(result, int):
                    raise result
            done += k
    finally:
        store.close()


async def _append_latency(path: Path, count: int) -> Metrics:
    clock = time.perf_counter
    async with open_runtime(path) as rt, contextlib.AsyncExitStack() as stack:
        writers: list[SessionWriter] = []
        for i in range(SESSIONS):
            w = await stack.enter_async_context(rt.open_session(f"session-{i}", mode="write"))
            writers.append(w)
        for w in writers:  # warm-up
            await w.append([NewEvent("message", PAYLOAD)])
        latencies = []
        start = clock()
        for i in range(count):
            w = writers[i % SESSIONS]
            t0 = clock()
            await w.append([NewEvent("message", PAYLOAD)])
            latencies.append((clock() - t0) * 1000.0)
        elapsed = clock() - start
    return {
        "append_p50_ms": percentile(latencies, 50),
        "append_p99_ms": percentile(latencies, 99),
        "append_max_ms": max(latencies),
        "appends_per_s": count / elapsed,
    }


def _latency_case(per_session_base: int) -> Any:
    def run(ctx: CaseContext) -> Metrics:
        per_session = ctx.n(per_session_base)
        with ctx.fresh_dir() as d:
            path = d / "tidelog.db"
            start = time.perf_counter()
            build(path, per_session)
            built = time.perf_counter() - start
            metrics = trio.run(_append_latency, path, ctx.n(5000, minimum=50))
            metrics["db_mb"] = path.stat().st_size / 1e6
        metrics["stored_events"] = float(SESSIONS * per_session)
        metrics["build_s"] = built
        return metrics

    return run


case("W8/tidelog-10k", system="tidelog, 10k stored events (100 sessions)")(_latency_case(100))
case("W8/tidelog-1m", system="tidelog, 1M stored events (100 sessions)")(_latency_case(10_000))


# -- RSS ------------------------------------------------------------------------------------


def _status_mb(field: str) -> float:
    """A ``/proc/self/status`` memory field (``VmRSS``, ``VmHWM``) in MB (NaN elsewhere)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024 / 1e6
    except OSError:
        pass
    return float("nan")


@worker("w8-rss")
def w8_rss(args: dict[str, Any]) -> Metrics:
    """Open ``count`` sessions of ``path`` once each (write, one append, close); RSS."""
    count: int = args["count"]
    imported = _status_mb("VmRSS")

    async def main() -> Metrics:
        async with open_runtime(args["path"]) as rt:
            before = _status_mb("VmRSS")

            async def open_some(ids: list[str]) -> None:
                for session_id in ids:
                    async with rt.open_session(session_id, mode="write") as w:
                        await w.append([NewEvent("message", PAYLOAD)])

            ids = [f"session-{i}" for i in range(count)]
            start = time.perf_counter()
            async with trio.open_nursery() as nursery:
                for k in range(_RSS_CONCURRENCY):
                    nursery.start_soon(open_some, ids[k::_RSS_CONCURRENCY])
            elapsed = time.perf_counter() - start
            stats = rt.statistics()
            return {
                "rss_mb": _status_mb("VmRSS"),
                "hwm_mb": _status_mb("VmHWM"),
                "rss_imported_mb": imported,
                "rss_runtime_open_mb": before,
                "open_append_close_per_s": count / elapsed,
                "live_actors": float(stats.sessions),
                "sessions": float(count),
            }

    return trio.run(main)


@case("W8/tidelog-rss", system="tidelog (runtime open, sessions closed)")
def tidelog_rss(ctx: CaseContext) -> Metrics:
    with ctx.fresh_dir() as d:
        return run_worker("w8-rss", {"path": str(d / "tidelog.db"), "count": ctx.n(10_000)})


_W8 = "W8 awaited append of 1 event, 100 sessions"
rows(
    Row(
        "W8",
        f"{_W8}: p50 at 10k vs 1M stored",
        "W8/tidelog-10k",
        "append_p50_ms",
        "ms",
        note="baseline",
    ),
    Row(
        "W8",
        f"{_W8}: p50 at 10k vs 1M stored",
        "W8/tidelog-1m",
        "append_p50_ms",
        "ms",
        reference=("W8/tidelog-10k", "append_p50_ms"),
    ),
    Row(
        "W8",
        f"{_W8}: p99 at 10k vs 1M stored",
        "W8/tidelog-10k",
        "append_p99_ms",
        "ms",
        note="baseline",
    ),
    Row(
        "W8",
        f"{_W8}: p99 at 10k vs 1M stored",
        "W8/tidelog-1m",
        "append_p99_ms",
        "ms",
        reference=("W8/tidelog-10k", "append_p99_ms"),
        target=Target("ratio", "<=", 1.5),
    ),
    Row(
        "W8",
        "W8 RSS after 10,000 sessions opened once (write, 1 append, close)",
        "W8/tidelog-rss",
        "rss_mb",
        "MB",
        target=Target("value", "<=", 100.0),
    ),
    Row(
        "W8",
        "W8 RSS with the runtime open, before any session",
        "W8/tidelog-rss",
        "rss_runtime_open_mb",
        "MB",
        note="baseline",
    ),
)
