"""W1 and W1b: one session, appends one after another.

W1: 5,000 appends of one event (the payload) at scale 1, each awaited until committed and
fsynced (tidelog ``synchronous="full"``; raw ``PRAGMA synchronous=FULL``, from trio with a
thread hop per commit, and for context called directly with no trio and no hop, which is
what the synchronous alternatives do). Also at NORMAL (committed, no fsync per commit) for
context. The alternatives (the optional extra ``bench``) run the same loop through their
own APIs.

Fair to a trio program: the synchronous alternatives called directly stall the
event loop for every call, fsync included. So W1 also runs each of them in a trio worker
thread per append (off the loop, as a trio service must run them: tidelog's target is
>= 1.2x the best of those), and directly on the trio thread with a lag probe running (the
lag each causes, beside raw's and tidelog's own, measured by separate ``-lag`` cases so
that the probe's wake-ups stay out of the throughput rows).

W1b: the same 5,000 events with ``append_nowait`` and ``flush()`` after every 100
(tidelog, FULL), against raw apsw committing 100 rows per transaction (FULL). One W1b
measurement is :data:`REPEATS_W1B` back-to-back repetitions in fresh databases (one
lasts only ~0.1 s); the rate is over their summed time.

The timed region is the append loop only (opening the database and session is not timed);
every system serializes the payload inside it, once per event.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Literal

import trio

from runtime import NewEvent, open_runtime

from ..harness.core import (
    PAYLOAD,
    CaseContext,
    LagProbe,
    Metrics,
    Row,
    Target,
    case,
    encode_payload,
    rows,
)
from ..references.alternatives import ALL as ALTERNATIVES
from ..references.alternatives import Alternative
from ..references.raw_sqlite import RawSync, insert_rows, open_raw

__all__ = ["BATCH", "REPEATS_W1B", "count"]

#: W1b: events per flush (tidelog) and per transaction (raw).
BATCH = 100
#: W1b: back-to-back repetitions per measurement (one lasts only ~0.1 s).
REPEATS_W1B = 5
_SESSION = "s"

Level = Literal["normal", "full"]


def count(ctx: CaseContext) -> int:
    """Appends per measurement: 5,000 at scale 1, a multiple of :data:`BATCH`."""
    n = ctx.n(5000, minimum=BATCH)
    return max(BATCH, n - n % BATCH)


def _rate(n: int, elapsed: float) -> Metrics:
    return {"appends_per_s": n / elapsed, "events_per_s": n / elapsed, "elapsed_s": elapsed}


def repeat(ctx: CaseContext, repeats: int, once: Callable[[Path], Metrics]) -> Metrics:
    """``repeats`` measurements, each in a fresh directory: rates over the summed time,
    counters summed."""
    runs = []
    for _ in range(repeats):
        with ctx.fresh_dir() as d:
            runs.append(once(d))
    n = sum(r["appends_per_s"] * r["elapsed_s"] for r in runs)
    metrics = _rate(round(n), sum(r["elapsed_s"] for r in runs))
    for key in ("batches", "fsyncs"):
        if key in runs[0]:
            metrics[key] = sum(r[key] for r in runs)
    if len(runs) == 1:  # the lag percentiles of one run (W1); W1b does not show them
        metrics |= {k: v for k, v in runs[0].items() if k.startswith("lag_")}
    return metrics


# -- raw apsw -------------------------------------------------------------------------------


@asynccontextmanager
async def _probing(lag: bool) -> AsyncIterator[Metrics]:
    """Run a :class:`~bench.harness.core.LagProbe` over the block if ``lag``; its metrics land in
    the yielded dict at exit. The throughput cases run without one: the probe's own
    wake-ups slow tidelog's awaited appends (``bench/HISTORY.md``, W1), so W1's lag is
    measured by cases of its own."""
    out: Metrics = {}
    if not lag:
        yield out
        return
    probe = LagProbe()
    async with trio.open_nursery() as nursery:
        await nursery.start(probe.run)
        yield out
        nursery.cancel_scope.cancel()
    out |= probe.metrics()


async def _raw(
    path: Path, synchronous: RawSync, n: int, per_txn: int, lag: bool = False
) -> Metrics:
    conn = open_raw(path, synchronous)
    try:
        limiter = trio.CapacityLimiter(1)
        seq = 0
        async with _probing(lag) as lag_metrics:
            start = time.perf_counter()
            for _ in range(n // per_txn):
                batch = []
                for _ in range(per_txn):
                    seq += 1
                    batch.append((_SESSION, seq, encode_payload(PAYLOAD)))
                await trio.to_thread.run_sync(insert_rows, conn, batch, limiter=limiter)
            elapsed = time.perf_counter() - start
        return _rate(n, elapsed) | lag_metrics
    finally:
        conn.close()


def _raw_case(
    synchronous: RawSync, per_txn: int, lag: bool = False
) -> Callable[[CaseContext], Metrics]:
    repeats = REPEATS_W1B if per_txn > 1 else 1

    def run(ctx: CaseContext) -> Metrics:
        n = count(ctx)
        return repeat(
            ctx, repeats, lambda d: trio.run(_raw, d / "raw.db", synchronous, n, per_txn, lag)
        )

    return run


def _raw_direct(path: Path, n: int) -> Metrics:
    """Per-row FULL commits called directly on this thread (no trio, no thread hop): what
    the synchronous alternatives do in W1."""
    conn = open_raw(path, "FULL")
    try:
        start = time.perf_counter()
        for seq in range(1, n + 1):
            insert_rows(conn, [(_SESSION, seq, encode_payload(PAYLOAD))])
        return _rate(n, time.perf_counter() - start)
    finally:
        conn.close()


@case("W1/raw-full-direct", system="raw apsw per-row commit (FULL), called directly")
def raw_full_direct(ctx: CaseContext) -> Metrics:
    with ctx.fresh_dir() as d:
        return _raw_direct(d / "raw.db", count(ctx))


case("W1/raw-normal", system="raw apsw per-row commit (NORMAL)")(_raw_case("NORMAL", 1))
case("W1/raw-full", system="raw apsw per-row commit (FULL)")(_raw_case("FULL", 1))
case("W1/raw-full-lag", system="raw apsw per-row commit (FULL), lag probe running")(
    _raw_case("FULL", 1, lag=True)
)
case("W1b/raw-full-100", system="raw apsw 100 rows per transaction (FULL)")(
    _raw_case("FULL", BATCH)
)


# -- tidelog --------------------------------------------------------------------------------


async def tidelog(
    path: Path | str, synchronous: Level, n: int, nowait: bool, lag: bool = False
) -> Metrics:
    async with (
        open_runtime(path, synchronous=synchronous) as rt,
        rt.open_session(_SESSION, mode="write") as w,
    ):
        before = rt.statistics()
        async with _probing(lag) as lag_metrics:
            start = time.perf_counter()
            if nowait:
                for i in range(1, n + 1):
                    w.append_nowait([NewEvent("message", PAYLOAD)])
                    if i % BATCH == 0:
                        await w.flush()
            else:
                for _ in range(n):
                    await w.append([NewEvent("message", PAYLOAD)])
            elapsed = time.perf_counter() - start
        after = rt.statistics()
        assert w.committed_head == n
    metrics = _rate(n, elapsed) | lag_metrics
    metrics["batches"] = float(after.writer.batches_committed - before.writer.batches_committed)
    metrics["fsyncs"] = float(after.writer.fsyncs - before.writer.fsyncs)
    return metrics


def _tidelog_case(
    synchronous: Level, nowait: bool, lag: bool = False
) -> Callable[[CaseContext], Metrics]:
    repeats = REPEATS_W1B if nowait else 1

    def run(ctx: CaseContext) -> Metrics:
        n = count(ctx)
        return repeat(
            ctx,
            repeats,
            lambda d: trio.run(tidelog, d / "tidelog.db", synchronous, n, nowait, lag),
        )

    return run


case("W1/tidelog-full", system="tidelog (synchronous=full)")(_tidelog_case("full", False))
case("W1/tidelog-full-lag", system="tidelog (synchronous=full), lag probe running")(
    _tidelog_case("full", False, lag=True)
)
case("W1/tidelog-normal", system="tidelog (synchronous=normal)")(_tidelog_case("normal", False))
case("W1b/tidelog-full", system="tidelog (synchronous=full), append_nowait + flush/100")(
    _tidelog_case("full", True)
)


# -- alternatives ---------------------------------------------------------------------------


def _alternative_case(alt: Alternative) -> Callable[[CaseContext], Metrics]:
    def run(ctx: CaseContext) -> Metrics:
        with ctx.fresh_dir() as d:
            metrics = alt.one_session(d / f"{alt.key}.db", count(ctx))
        metrics["events_per_s"] = metrics["appends_per_s"]
        return metrics

    return run


def _threaded_case(alt: Alternative) -> Callable[[CaseContext], Metrics]:
    def run(ctx: CaseContext) -> Metrics:
        with ctx.fresh_dir() as d:
            return alt.one_session_threaded(d / f"{alt.key}.db", count(ctx))

    return run


def _lag_case(alt: Alternative) -> Callable[[CaseContext], Metrics]:
    def run(ctx: CaseContext) -> Metrics:
        with ctx.fresh_dir() as d:
            return alt.one_session_lag(d / f"{alt.key}.db", count(ctx))

    return run


#: The direct-call (synchronous) alternatives, which W1 also runs in worker threads and
#: on the trio thread with a lag probe.
_DIRECT = tuple(alt for alt in ALTERNATIVES if alt.direct)
for _alt in _DIRECT:
    case(
        f"W1/{_alt.key}-thread",
        system=f"{_alt.system} (sync, in a trio worker thread per append)",
        requires=_alt.requires,
    )(_threaded_case(_alt))
    case(
        f"W1/{_alt.key}-lag",
        system=f"{_alt.system} (sync, called on the trio thread)",
        requires=_alt.requires,
    )(_lag_case(_alt))
for _alt in ALTERNATIVES:
    case(f"W1/{_alt.key}", system=f"{_alt.system} ({_alt.one_note})", requires=_alt.requires)(
        _alternative_case(_alt)
    )


# -- rows -----------------------------------------------------------------------------------

_W1 = "W1 1 session x 5,000 awaited appends"
_RATE = "appends_per_s"
_UNIT = "appends/s"
rows(
    Row("W1", f"{_W1}, FULL", "W1/raw-full", _RATE, _UNIT, note="reference"),
    Row(
        "W1",
        f"{_W1}, FULL",
        "W1/tidelog-full",
        _RATE,
        _UNIT,
        reference=("W1/raw-full", _RATE),
        # One fsync per append is everyone's floor: the speed issue's target is the raw
        # per-row loop with one thread hop, within 5 %.
        target=Target("ratio", ">=", 0.95),
    ),
    Row(
        "W1",
        f"{_W1}, FULL",
        "W1/raw-full-direct",
        _RATE,
        _UNIT,
        reference=("W1/raw-full", _RATE),
        note="reference",
    ),
    *(
        Row(
            "W1",
            f"{_W1}, FULL",
            f"W1/{alt.key}",
            _RATE,
            _UNIT,
            reference=("W1/raw-full", _RATE),
            note="alternative",
        )
        for alt in ALTERNATIVES
    ),
    # No target: the fair comparison is the next row's (off the event loop); the
    # synchronous alternatives called directly stall the event loop for every call.
    Row(
        "W1",
        f"{_W1}, FULL: tidelog vs the best alternative called directly",
        "W1/tidelog-full",
        _RATE,
        _UNIT,
        best_of=tuple((f"W1/{alt.key}", _RATE) for alt in ALTERNATIVES),
    ),
    *(
        Row(
            "W1",
            f"{_W1}, FULL: alternatives off the event loop",
            f"W1/{alt.key}-thread" if alt.direct else f"W1/{alt.key}",
            _RATE,
            _UNIT,
            reference=("W1/raw-full", _RATE),
            note="alternative",
        )
        for alt in ALTERNATIVES
    ),
    Row(
        "W1",
        f"{_W1}, FULL: tidelog vs the best alternative off the event loop",
        "W1/tidelog-full",
        _RATE,
        _UNIT,
        best_of=tuple(
            (f"W1/{alt.key}-thread" if alt.direct else f"W1/{alt.key}", _RATE)
            for alt in ALTERNATIVES
        ),
        # No target: the 1.2x asked earlier is withdrawn (every system pays one commit and
        # fsync per append; tidelog cannot commit a row faster than SQLite does).
    ),
    Row(
        "W1",
        f"{_W1}, FULL: loop lag p99",
        "W1/raw-full-lag",
        "lag_p99_ms",
        "ms",
        note="reference",
    ),
    Row(
        "W1",
        f"{_W1}, FULL: loop lag p99",
        "W1/tidelog-full-lag",
        "lag_p99_ms",
        "ms",
        reference=("W1/raw-full-lag", "lag_p99_ms"),
    ),
    *(
        Row(
            "W1",
            f"{_W1}, FULL: loop lag p99",
            f"W1/{alt.key}-lag",
            "lag_p99_ms",
            "ms",
            reference=("W1/raw-full-lag", "lag_p99_ms"),
            note="alternative",
        )
        for alt in _DIRECT
    ),
    Row("W1", f"{_W1}, NORMAL", "W1/raw-normal", _RATE, _UNIT, note="reference"),
    Row(
        "W1",
        f"{_W1}, NORMAL",
        "W1/tidelog-normal",
        _RATE,
        _UNIT,
        reference=("W1/raw-normal", _RATE),
    ),
    Row(
        "W1b",
        "W1b 1 session x 5,000 events, flush every 100, FULL",
        "W1b/raw-full-100",
        "events_per_s",
        "events/s",
        note="reference",
    ),
    Row(
        "W1b",
        "W1b 1 session x 5,000 events, flush every 100, FULL",
        "W1b/tidelog-full",
        "events_per_s",
        "events/s",
        reference=("W1b/raw-full-100", "events_per_s"),
        target=Target("ratio", ">=", 0.5),
    ),
)
