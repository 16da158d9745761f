"""W6: tail latency, from just before ``append`` is called to the tailer holding the event.

In-process (1,000 samples at scale 1): one trio task iterates ``rt.tail("s")`` and notes
the arrival time of each event (``time.perf_counter``); the writer notes the time just
before calling ``await w.append([one event])``, waits until the tailer has the event, pauses
1 ms (so that the tailer is back waiting) and appends the next. Latency = arrival - that
time: it includes the commit itself (``synchronous="normal"``, the default), the wake-up
and the tailer's read. The raw reference does the same with plain apsw: the writer commits
in a worker thread, then sets a ``trio.Event``; the tailer, woken, reads the new rows on a
second connection in its own thread hop.

Across processes (200 samples at scale 1): a child process (its own runtime) appends one
event every 5-15 ms (random), its data stamped with ``time.time()`` just before the
``append`` call; the parent tails the session and computes ``time.time()`` at arrival
minus the stamp. Other processes' commits are found by polling ``PRAGMA data_version``
every ``poll_interval`` (25 ms by default), which bounds this latency from below.
"""

from __future__ import annotations

import functools
import json
import random
import time
from pathlib import Path
from typing import Any

import trio

from runtime import NewEvent, open_runtime

from ..harness.core import (
    PAYLOAD,
    CaseContext,
    Metrics,
    Row,
    Target,
    case,
    encode_payload,
    percentile,
    rows,
)
from ..harness.procs import ROOT, child_command, child_env, worker
from ..references.raw_sqlite import insert_rows, open_raw

__all__ = ["PAUSE"]

#: Pause between in-process samples (the tailer goes back to waiting meanwhile).
PAUSE = 0.001
_SESSION = "s"
_DECODER = json.JSONDecoder()


def latency_metrics(latencies: list[float], prefix: str = "latency") -> Metrics:
    ms = [x * 1000.0 for x in latencies]
    return {
        f"{prefix}_p50_ms": percentile(ms, 50),
        f"{prefix}_p99_ms": percentile(ms, 99),
        f"{prefix}_max_ms": max(ms, default=float("nan")),
        "samples": float(len(ms)),
    }


class _Arrivals:
    """What the writer waits for: the tailer saw ``seq``."""

    def __init__(self) -> None:
        self.sent: dict[int, float] = {}
        self.latencies: list[float] = []
        self.arrived = trio.Event()

    def note(self, seq: int, now: float) -> None:
        self.latencies.append(now - self.sent.pop(seq))
        self.arrived.set()


# -- in-process: tidelog --------------------------------------------------------------------


async def _tidelog_inproc(path: Path, n: int) -> Metrics:
    clock = time.perf_counter
    async with open_runtime(path) as rt, rt.open_session(_SESSION, mode="write") as w:
        await w.append([NewEvent("message", PAYLOAD)])
        arrivals = _Arrivals()

        async def tailer() -> None:
            async for event in rt.tail(_SESSION, since_seq=1):
                arrivals.note(event.seq, clock())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(tailer)
            await trio.sleep(0.01)
            for _ in range(n):
                arrivals.arrived = trio.Event()
                arrivals.sent[await w.head() + 1] = clock()
                await w.append([NewEvent("message", PAYLOAD)])
                await arrivals.arrived.wait()
                await trio.sleep(PAUSE)
            nursery.cancel_scope.cancel()
    return latency_metrics(arrivals.latencies)


# -- in-process: raw apsw -------------------------------------------------------------------


def _read_after(conn: Any, cursor: int) -> list[tuple[int, object]]:
    rows_ = conn.execute(
        "SELECT seq, data FROM events WHERE session=? AND seq>? ORDER BY seq LIMIT 256",
        (_SESSION, cursor),
    ).fetchall()
    return [(int(seq), _DECODER.decode(data)) for seq, data in rows_]


async def _raw_inproc(path: Path, n: int) -> Metrics:
    clock = time.perf_counter
    wconn = open_raw(path, "NORMAL")
    rconn = open_raw(path, "NORMAL")
    try:
        wlimiter = trio.CapacityLimiter(1)
        rlimiter = trio.CapacityLimiter(1)
        insert_rows(wconn, [(_SESSION, 1, encode_payload(PAYLOAD))])
        arrivals = _Arrivals()
        changed = [trio.Event()]

        async def tailer() -> None:
            cursor = 1
            while True:
                watch = changed[0]
                page = await trio.to_thread.run_sync(_read_after, rconn, cursor, limiter=rlimiter)
                if page:
                    now = clock()
                    for seq, _ in page:
                        arrivals.note(seq, now)
                    cursor = page[-1][0]
                else:
                    await watch.wait()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(tailer)
            await trio.sleep(0.01)
            for seq in range(2, n + 2):
                arrivals.arrived = trio.Event()
                arrivals.sent[seq] = clock()
                row = [(_SESSION, seq, encode_payload(PAYLOAD))]
                await trio.to_thread.run_sync(insert_rows, wconn, row, limiter=wlimiter)
                changed[0].set()
                changed[0] = trio.Event()
                await arrivals.arrived.wait()
                await trio.sleep(PAUSE)
            nursery.cancel_scope.cancel()
    finally:
        rconn.close()
        wconn.close()
    return latency_metrics(arrivals.latencies)


# -- across processes -----------------------------------------------------------------------


@worker("w6-writer")
def w6_writer(args: dict[str, Any]) -> Metrics:
    """Append ``count`` stamped events to session ``s`` of ``path``, 5-15 ms apart."""
    rng = random.Random(args.get("seed", 7))

    async def main() -> Metrics:
        async with (
            open_runtime(args["path"]) as rt,
            rt.open_session(_SESSION, mode="write") as w,
        ):
            for _ in range(args["count"]):
                await trio.sleep(rng.uniform(0.005, 0.015))
                await w.append([NewEvent("message", dict(PAYLOAD, t=time.time()))])
        return {"appended": float(args["count"])}

    return trio.run(main)


async def run_tidelog_cross(path: Path | str, n: int) -> Metrics:
    latencies: list[float] = []
    async with open_runtime(path) as rt:
        async with rt.open_session(_SESSION, mode="write") as w:
            await w.append([NewEvent("message", PAYLOAD)])  # seq 1: the session exists
        child = functools.partial(
            trio.run_process,
            child_command("w6-writer", {"path": str(path), "count": n}),
            cwd=ROOT,
            env=child_env(),
            capture_stdout=True,
            capture_stderr=True,
            check=True,
        )
        async with trio.open_nursery() as nursery:
            nursery.start_soon(child)
            with trio.fail_after(60 + n * 0.1):
                async for event in rt.tail(_SESSION, since_seq=1):
                    now = time.time()
                    assert isinstance(event.data, dict)
                    stamp = event.data["t"]
                    assert isinstance(stamp, float)
                    latencies.append(now - stamp)
                    if len(latencies) == n:
                        break
    return latency_metrics(latencies)


# -- registration ---------------------------------------------------------------------------


@case("W6/raw-inproc", system="raw apsw (commit, wake a task that reads on a 2nd connection)")
def raw_inproc(ctx: CaseContext) -> Metrics:
    with ctx.fresh_dir() as d:
        return trio.run(_raw_inproc, d / "raw.db", ctx.n(1000, minimum=20))


@case("W6/tidelog-inproc", system="tidelog rt.tail (synchronous=normal)")
def tidelog_inproc(ctx: CaseContext) -> Metrics:
    with ctx.fresh_dir() as d:
        return trio.run(_tidelog_inproc, d / "tidelog.db", ctx.n(1000, minimum=20))


@case("W6/tidelog-cross", system="tidelog rt.tail, writer in another process (poll 25 ms)")
def tidelog_cross(ctx: CaseContext) -> Metrics:
    with ctx.fresh_dir() as d:
        return trio.run(run_tidelog_cross, d / "tidelog.db", ctx.n(200, minimum=10))


_IN = "W6 tail latency in-process (append call to tailer wake)"
_X = "W6 tail latency across processes (stamp before append to tailer wake)"
rows(
    Row("W6", f"{_IN}: p50", "W6/raw-inproc", "latency_p50_ms", "ms", note="reference"),
    Row(
        "W6",
        f"{_IN}: p50",
        "W6/tidelog-inproc",
        "latency_p50_ms",
        "ms",
        reference=("W6/raw-inproc", "latency_p50_ms"),
    ),
    Row("W6", f"{_IN}: p99", "W6/raw-inproc", "latency_p99_ms", "ms", note="reference"),
    Row(
        "W6",
        f"{_IN}: p99",
        "W6/tidelog-inproc",
        "latency_p99_ms",
        "ms",
        reference=("W6/raw-inproc", "latency_p99_ms"),
        target=Target("value", "<=", 5.0),
    ),
    Row("W6", f"{_X}: p50", "W6/tidelog-cross", "latency_p50_ms", "ms"),
    Row(
        "W6",
        f"{_X}: p99",
        "W6/tidelog-cross",
        "latency_p99_ms",
        "ms",
        target=Target("value", "<=", 100.0),
    ),
)
