"""W2 across processes: 4 processes append to one database file at the same time.

Each process runs 25 sessions x 50 awaited appends (one event each, the payload) with 25
concurrent trio tasks, like W2 in one process. The processes start, open their database
and sessions, say they are ready, and start appending together on one signal from the
parent. Each reports when its first client started and its last append returned (wall
clock, ``time.time()``); the aggregate rate is all events over (last end - first start).

Systems (both FULL, fsync per commit):

* ``raw apsw group-commit``: each process runs W2's raw loop (one writer task drains its
  25 clients, one transaction per thread hop); the 4 processes contend for SQLite's write
  lock (busy timeout 5 s).
* ``tidelog``: each process runs its own runtime (``synchronous="full"``) on the file.

One measurement is :data:`REPEATS` repetitions in the same processes and database, each
with fresh sessions and its own start signal (one repetition lasts only ~0.3 s): events/s
is all events over the sum of the repetitions' (last end - first start).

The parent creates the database before the children start (not timed).
"""

from __future__ import annotations

import functools
import time
from pathlib import Path
from typing import Any, Literal

import trio

from runtime import open_runtime

from ..harness.core import CaseContext, Metrics, Row, Target, case, rows
from ..harness.procs import ready_then_wait, run_together, worker
from ..references.raw_sqlite import open_raw
from .w2_group_commit import Gate, RawGroupCommit, raw_client, tidelog_client

__all__ = ["PROCESSES", "REPEATS", "SESSIONS_PER_PROCESS"]

PROCESSES = 4
SESSIONS_PER_PROCESS = 25
#: Timed repetitions per measurement, in the same processes.
REPEATS = 3

System = Literal["tidelog", "raw"]


async def clients(gate: Gate, sessions: list[str], append_all: Any) -> tuple[float, float]:
    """Run the clients once every one is ready and the parent said go; (start, end)."""
    async with trio.open_nursery() as nursery:
        for session in sessions:
            nursery.start_soon(append_all, session)
        await gate.all_ready.wait()
        await ready_then_wait()
        start = time.time()
        gate.go.set()
        await gate.all_done.wait()
        end = time.time()
        gate.leave.set()
    return start, end


async def _tidelog_child(path: str, prefix: str, sessions: int, appends: int) -> Metrics:
    out: Metrics = {}
    async with open_runtime(path, synchronous="full") as rt:
        for r in range(REPEATS):
            gate = Gate(sessions)
            append_all = functools.partial(tidelog_client, rt, gate, appends=appends)
            ids = [f"{prefix}-r{r}-session-{i}" for i in range(sessions)]
            out[f"start_{r}"], out[f"end_{r}"] = await clients(gate, ids, append_all)
        out["batches"] = float(rt.statistics().writer.batches_committed)
    return out


async def _raw_child(path: str, prefix: str, sessions: int, appends: int) -> Metrics:
    out: Metrics = {}
    conn = open_raw(Path(path), "FULL")
    try:
        loop = RawGroupCommit(conn)
        async with trio.open_nursery() as writer_nursery:
            writer_nursery.start_soon(loop.run_writer)
            for r in range(REPEATS):
                gate = Gate(sessions)
                append_all = functools.partial(raw_client, loop, gate, appends=appends)
                ids = [f"{prefix}-r{r}-session-{i}" for i in range(sessions)]
                out[f"start_{r}"], out[f"end_{r}"] = await clients(gate, ids, append_all)
            writer_nursery.cancel_scope.cancel()
    finally:
        conn.close()
    out["batches"] = float(loop.batches)
    return out


@worker("w2-process")
def w2_process(args: dict[str, Any]) -> Metrics:
    """One of the W2 processes: ``system``, ``path``, ``prefix``, ``sessions``, ``appends``."""
    main = _tidelog_child if args["system"] == "tidelog" else _raw_child
    return trio.run(main, args["path"], args["prefix"], args["sessions"], args["appends"])


def prepare(path: Path, system: System) -> None:
    """Create the database (schema, WAL) before the children start."""
    if system == "raw":
        open_raw(path, "FULL").close()
    else:

        async def create() -> None:
            async with open_runtime(path, synchronous="full"):
                pass

        trio.run(create)


def _case(system: System) -> Any:
    def run(ctx: CaseContext) -> Metrics:
        appends = ctx.n(50)
        with ctx.fresh_dir() as d:
            path = d / f"{system}.db"
            prepare(path, system)
            specs = [
                (
                    "w2-process",
                    {
                        "system": system,
                        "path": str(path),
                        "prefix": f"p{p}",
                        "sessions": SESSIONS_PER_PROCESS,
                        "appends": appends,
                    },
                )
                for p in range(PROCESSES)
            ]
            results = run_together(specs, barriers=REPEATS)
        spans = [
            max(r[f"end_{i}"] for r in results) - min(r[f"start_{i}"] for r in results)
            for i in range(REPEATS)
        ]
        events = float(REPEATS * PROCESSES * SESSIONS_PER_PROCESS * appends)
        return {
            "events_per_s": events / sum(spans),
            "elapsed_s": sum(spans),
            "events": events,
            "batches": sum(r["batches"] for r in results),
            "slowest_repetition_s": max(spans),
        }

    return run


case("W2/4proc-raw", system="raw apsw group-commit per process (FULL)")(_case("raw"))
case("W2/4proc-tidelog", system="tidelog (synchronous=full), one runtime per process")(
    _case("tidelog")
)

_W2P = f"W2 {PROCESSES} processes x {SESSIONS_PER_PROCESS} sessions x 50 awaited appends, FULL"
rows(
    Row("W2", _W2P, "W2/4proc-raw", "events_per_s", "events/s", note="reference"),
    Row(
        "W2",
        _W2P,
        "W2/4proc-tidelog",
        "events_per_s",
        "events/s",
        reference=("W2/4proc-raw", "events_per_s"),
        target=Target("ratio", ">=", 0.8),
    ),
)
