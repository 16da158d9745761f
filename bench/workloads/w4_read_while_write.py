"""W4 (and W9 during W4): one writer appends flat out while a reader reads the tail.

The writer awaits appends of **one event each** (the payload) to session ``"s"``, 5,000 at
scale 1, after a seed of 50 events. The reader loops back to back with no pause (the
stress case of a UI or worker polling the session): look up the committed head, then read
the events after ``max(0, head - 50)``. Reader latency is that whole operation (head + read,
decoded events in hand); ``read_call_*`` metrics in the JSON time the ``read`` call alone.

Each round first runs the writer alone (solo rate), then writer + reader, each in a fresh
database; the writer's rate with the reader is reported as a ratio of its solo rate.
A :class:`~bench.harness.core.LagProbe` runs during the writer + reader phase (W9).

Systems: ``tidelog`` (default ``synchronous="normal"``; reads through a
``rt.open_session("s", mode="read")`` handle, so the runtime's reader connection) and
``raw apsw`` (``synchronous=NORMAL``; the writer commits each append in its own
transaction in a worker thread; the reader uses a second connection and does head, read
and decode in one thread hop of its own).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from pathlib import Path

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
    percentile,
    rows,
)
from ..references.raw_sqlite import insert_rows, open_raw, read_last

__all__ = ["LAST", "SEED"]

#: Events the reader asks for, and events written before the timed region.
LAST = 50
SEED = 50
_SESSION = "s"


def writer_count(ctx: CaseContext) -> int:
    return ctx.n(5000, minimum=10)


class _Reader:
    """Latency samples of a reader loop that runs until :attr:`stop` is set."""

    def __init__(self) -> None:
        self.stop = False
        self.recording = False
        self.warmed = trio.Event()
        self.latencies: list[float] = []
        self.call_latencies: list[float] = []

    def record(self, start: float, call: float, end: float) -> None:
        """Keep one read's timings if inside the timed region."""
        self.warmed.set()
        if self.recording:
            self.latencies.append(end - start)
            self.call_latencies.append(end - call)

    def metrics(self, elapsed: float) -> Metrics:
        ms = [x * 1000.0 for x in self.latencies]
        call_ms = [x * 1000.0 for x in self.call_latencies]
        return {
            "reader_p50_ms": percentile(ms, 50),
            "reader_p99_ms": percentile(ms, 99),
            "reader_max_ms": max(ms, default=float("nan")),
            "read_call_p50_ms": percentile(call_ms, 50),
            "read_call_p99_ms": percentile(call_ms, 99),
            "reads": float(len(ms)),
            "reads_per_s": len(ms) / elapsed,
        }


async def phase(
    append_one: Callable[[], Awaitable[None]],
    read_loop: Callable[[_Reader], Awaitable[None]] | None,
    count: int,
) -> Metrics:
    """Time ``count`` calls of ``append_one``, with ``read_loop`` running if given."""
    reader = _Reader()
    probe = LagProbe()
    async with trio.open_nursery() as nursery:
        if read_loop is not None:
            nursery.start_soon(read_loop, reader)
            await reader.warmed.wait()  # the reader is up and has done one read
        async with trio.open_nursery() as probe_nursery:
            await probe_nursery.start(probe.run)
            reader.recording = True
            start = time.perf_counter()
            for _ in range(count):
                await append_one()
            elapsed = time.perf_counter() - start
            reader.recording = False
            probe_nursery.cancel_scope.cancel()
        reader.stop = True
    metrics: Metrics = {"writer_per_s": count / elapsed, "elapsed_s": elapsed}
    if read_loop is not None:
        metrics |= reader.metrics(elapsed)
        metrics |= probe.metrics()
    return metrics


def combine(solo: Metrics, both: Metrics) -> Metrics:
    out = dict(both)
    out["writer_solo_per_s"] = solo["writer_per_s"]
    out["writer_vs_solo"] = both["writer_per_s"] / solo["writer_per_s"]
    return out


# -- tidelog --------------------------------------------------------------------------------


async def tidelog_phase(path: Path | str, count: int, with_reader: bool) -> Metrics:
    async with open_runtime(path) as rt, rt.open_session(_SESSION, mode="write") as w:
        await w.append([NewEvent("message", PAYLOAD) for _ in range(SEED)])

        async def append_one() -> None:
            await w.append([NewEvent("message", PAYLOAD)])

        async def read_loop(state: _Reader) -> None:
            async with rt.open_session(_SESSION, mode="read") as r:
                clock = time.perf_counter
                while not state.stop:
                    start = clock()
                    events = await r.read(limit=LAST, from_end=True)  # one hop, like raw
                    end = clock()
                    assert len(events) == LAST
                    state.record(start, start, end)

        return await phase(append_one, read_loop if with_reader else None, count)


@case("W4/tidelog", system="tidelog (synchronous=normal)")
def tidelog_read_while_write(ctx: CaseContext) -> Metrics:
    count = writer_count(ctx)
    with ctx.fresh_dir() as d:
        solo = trio.run(tidelog_phase, d / "tidelog.db", count, False)
    with ctx.fresh_dir() as d:
        both = trio.run(tidelog_phase, d / "tidelog.db", count, True)
    return combine(solo, both)


# -- raw apsw -------------------------------------------------------------------------------


async def _raw_phase(path: Path, count: int, with_reader: bool) -> Metrics:
    wconn = open_raw(path, "NORMAL")
    try:
        rconn = open_raw(path, "NORMAL")
        try:
            insert_rows(wconn, [(_SESSION, i, encode_payload(PAYLOAD)) for i in range(1, SEED + 1)])
            wlimiter = trio.CapacityLimiter(1)
            rlimiter = trio.CapacityLimiter(1)
            head = SEED

            async def append_one() -> None:
                nonlocal head
                head += 1
                row = [(_SESSION, head, encode_payload(PAYLOAD))]
                await trio.to_thread.run_sync(insert_rows, wconn, row, limiter=wlimiter)

            async def read_loop(state: _Reader) -> None:
                clock = time.perf_counter
                while not state.stop:
                    start = clock()
                    events = await trio.to_thread.run_sync(
                        read_last, rconn, _SESSION, LAST, limiter=rlimiter
                    )
                    end = clock()
                    assert len(events) >= LAST
                    state.record(start, start, end)

            return await phase(append_one, read_loop if with_reader else None, count)
        finally:
            rconn.close()
    finally:
        wconn.close()


@case("W4/raw", system="raw apsw (NORMAL, 2 connections)")
def raw_read_while_write(ctx: CaseContext) -> Metrics:
    count = writer_count(ctx)
    with ctx.fresh_dir() as d:
        solo = trio.run(_raw_phase, d / "raw.db", count, False)
    with ctx.fresh_dir() as d:
        both = trio.run(_raw_phase, d / "raw.db", count, True)
    return combine(solo, both)


# -- rows -----------------------------------------------------------------------------------

_W4 = "W4 read last 50 while 1 writer appends"
_W9 = "W9 loop lag during W4"
_RAW = "W4/raw"
_TL = "W4/tidelog"
rows(
    Row("W4", f"{_W4}: reader p50", _RAW, "reader_p50_ms", "ms", note="reference"),
    Row("W4", f"{_W4}: reader p50", _TL, "reader_p50_ms", "ms", reference=(_RAW, "reader_p50_ms")),
    Row("W4", f"{_W4}: reader p99", _RAW, "reader_p99_ms", "ms", note="reference"),
    Row(
        "W4",
        f"{_W4}: reader p99",
        _TL,
        "reader_p99_ms",
        "ms",
        reference=(_RAW, "reader_p99_ms"),
        target=Target("value", "<=", 2.0),
    ),
    # And no slower than the raw pair's reader in the same run (the speed issue's target).
    Row(
        "W4",
        f"{_W4}: reader p99 against the raw reader's",
        _TL,
        "reader_p99_ms",
        "ms",
        reference=(_RAW, "reader_p99_ms"),
        target=Target("ratio", "<=", 1.0),
    ),
    Row(
        "W4",
        "W4 writer solo (1 event/append)",
        _RAW,
        "writer_solo_per_s",
        "appends/s",
        note="reference",
    ),
    Row(
        "W4",
        "W4 writer solo (1 event/append)",
        _TL,
        "writer_solo_per_s",
        "appends/s",
        reference=(_RAW, "writer_solo_per_s"),
    ),
    Row(
        "W4",
        "W4 writer while reader reads (vs own solo)",
        _RAW,
        "writer_per_s",
        "appends/s",
        reference=(_RAW, "writer_solo_per_s"),
        reference_label="its own solo rate",
    ),
    Row(
        "W4",
        "W4 writer while reader reads (vs own solo)",
        _TL,
        "writer_per_s",
        "appends/s",
        reference=(_TL, "writer_solo_per_s"),
        reference_label="its own solo rate",
        target=Target("ratio", ">=", 0.5),
    ),
    Row("W9", f"{_W9}: p99", _RAW, "lag_p99_ms", "ms", note="reference"),
    Row(
        "W9",
        f"{_W9}: p99",
        _TL,
        "lag_p99_ms",
        "ms",
        reference=(_RAW, "lag_p99_ms"),
        target=Target("value", "<=", 2.0),
    ),
    # And never above 1.2x the raw pair's own lag in the same run: the raw pair shows how
    # much of the lag is the machine's.
    Row(
        "W9",
        f"{_W9}: p99 against the raw pair's",
        _TL,
        "lag_p99_ms",
        "ms",
        reference=(_RAW, "lag_p99_ms"),
        target=Target("ratio", "<=", 1.2),
    ),
    Row("W9", f"{_W9}: max", _RAW, "lag_max_ms", "ms", note="reference"),
    Row("W9", f"{_W9}: max", _TL, "lag_max_ms", "ms", reference=(_RAW, "lag_max_ms")),
)
