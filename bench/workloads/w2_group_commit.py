"""W2 (and W9 during W2): many sessions appending concurrently, each append awaited.

100 trio tasks, one per session, each awaits 50 appends of one event (the payload). The
timed region starts when every task holds its session open and ends when the last append
returned; opening and closing sessions is outside it. A :class:`~bench.harness.core.LagProbe`
runs during the timed region of every system (W9). One measurement is :data:`REPEATS`
back-to-back repetitions, each in a fresh database: events/s is total events over total
timed seconds, lag percentiles are over the pooled samples.

Systems:

* ``raw apsw group-commit``: the physical reference. One writer trio task drains the queue
  of all tasks and commits every queued row in one transaction per thread hop
  (``trio.to_thread.run_sync`` with a ``CapacityLimiter(1)``); each task awaits its own
  commit. Run at ``synchronous=FULL`` (the reference of the targets) and ``NORMAL`` (like for like
  with tidelog's default).
* ``by hand``: the raw loop writing tidelog's own format with the contract's checks
  (:mod:`bench.references.by_hand`): what tidelog's layers cost, and the most any
  implementation of the contract in this format could reach against the raw loops.
* ``tidelog``: ``open_runtime(path, synchronous=...)``, one ``SessionWriter`` per task,
  ``await w.append([NewEvent("message", PAYLOAD)])``.
* the alternatives (:mod:`bench.references.alternatives`, FULL like sqlite3's default): one
  repetition each, no lag probe. Synchronous libraries run in trio worker threads.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import trio

from runtime import NewEvent, Runtime, open_runtime
from stores import Store

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
from ..references.by_hand import by_hand_encode, open_by_hand
from ..references.raw_sqlite import RawLayout, RawSync, encode_compiled, insert_rows, open_raw

__all__ = [
    "REPEATS",
    "Gate",
    "RawGroupCommit",
    "raw_client",
    "raw_run",
    "set_lag_probe",
    "shape",
    "tidelog_client",
    "timed_clients",
]


#: Back-to-back repetitions of the workload per measurement (one timed region of 100 x 50
#: lasts ~0.2 s: too few lag samples for a p99 on its own).
REPEATS = 5


def shape(ctx: CaseContext) -> tuple[int, int]:
    """(sessions, appends per session): 100 x 50 at scale 1. The 100-way concurrency is
    the point of the workload, so a scale above 1 only adds appends; below 1 both shrink."""
    sessions = 100 if ctx.scale >= 1 else max(2, round(100 * ctx.scale))
    return sessions, ctx.n(50)


class Gate:
    """Start every client together; note when the last one finished."""

    def __init__(self, clients: int) -> None:
        self.clients = clients
        self._ready = 0
        self.all_ready = trio.Event()
        self.go = trio.Event()
        self._finished = 0
        self.all_done = trio.Event()
        self.end = 0.0
        self.leave = trio.Event()

    async def arrive(self) -> None:
        self._ready += 1
        if self._ready == self.clients:
            self.all_ready.set()
        await self.go.wait()

    def done(self) -> None:
        self._finished += 1
        if self._finished == self.clients:
            self.end = time.perf_counter()
            self.all_done.set()


_LAG_PROBE = [True]


def set_lag_probe(enabled: bool) -> None:
    """Whether :func:`timed_clients` runs the event-loop lag probe (on unless told; W9
    reads it). The instruction counts of ``python -m bench.probes.per_append`` turn it
    off: under callgrind a repetition runs ~50x slower, so the probe's 1 ms wake-ups come
    ~50x as often per event as in a real run, and the count would measure the probe."""
    _LAG_PROBE[0] = enabled


async def timed_clients(
    gate: Gate, spawn: Callable[[trio.Nursery], None]
) -> tuple[float, LagProbe]:
    """Spawn the clients, start them together, return (elapsed, probe) -- the probe with
    no samples if :func:`set_lag_probe` turned it off."""
    probe = LagProbe()
    async with trio.open_nursery() as nursery:
        spawn(nursery)
        await gate.all_ready.wait()
        async with trio.open_nursery() as probe_nursery:
            if _LAG_PROBE[0]:
                await probe_nursery.start(probe.run)
            start = time.perf_counter()
            gate.go.set()
            await gate.all_done.wait()
            probe_nursery.cancel_scope.cancel()
        gate.leave.set()
    return gate.end - start, probe


@dataclass(frozen=True)
class Run:
    """One repetition: timed seconds, events appended, batches (commits) and the events
    they carried, lag samples."""

    elapsed: float
    events: int
    batches: int
    batch_events: int
    lag: list[float]


def repeat(ctx: CaseContext, once: Callable[[Path], Run]) -> Metrics:
    """Run :data:`REPEATS` repetitions, each in a fresh directory; pool them."""
    runs: list[Run] = []
    for _ in range(REPEATS):
        with ctx.fresh_dir() as d:
            runs.append(once(d))
    return pooled(runs)


def pooled(runs: Sequence[Run]) -> Metrics:
    """W2's metrics over repetitions: events over total time, the lag samples of all."""
    elapsed = sum(r.elapsed for r in runs)
    events = sum(r.events for r in runs)
    batches = sum(r.batches for r in runs)
    probe = LagProbe()
    probe.samples = [x for r in runs for x in r.lag]
    return {
        "events_per_s": events / elapsed,
        "elapsed_s": elapsed,
        "events": float(events),
        "batches": float(batches),
        "mean_batch": sum(r.batch_events for r in runs) / batches if batches else 0.0,
        **probe.metrics(),
    }


# -- raw apsw group-commit loop -------------------------------------------------------------


class RawGroupCommit:
    """One writer task commits everything queued, one transaction per thread hop."""

    def __init__(
        self,
        conn: Any,
        insert: Callable[[Any, Any], None] = insert_rows,
        encode: Callable[[object], str] = encode_payload,
    ) -> None:
        self._conn = conn
        self._insert = insert
        self._encode = encode
        self._limiter = trio.CapacityLimiter(1)
        self._queue: list[tuple[str, int, str]] = []
        self._waiters: list[trio.Event] = []
        self._wake = trio.Event()
        self.batches = 0
        self.rows = 0

    async def run_writer(self) -> None:
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            batch, waiters = self._queue, self._waiters
            self._queue, self._waiters = [], []
            await trio.to_thread.run_sync(self._insert, self._conn, batch, limiter=self._limiter)
            self.batches += 1
            self.rows += len(batch)
            for waiter in waiters:
                waiter.set()

    async def append(self, session: str, seq: int, payload: object) -> None:
        data = self._encode(payload)
        committed = trio.Event()
        self._queue.append((session, seq, data))
        self._waiters.append(committed)
        self._wake.set()
        await committed.wait()


async def raw_client(loop: RawGroupCommit, gate: Gate, session: str, appends: int) -> None:
    """One raw W2 client: wait for the start, then ``appends`` awaited appends."""
    await gate.arrive()
    for seq in range(1, appends + 1):
        await loop.append(session, seq, PAYLOAD)
    gate.done()


async def tidelog_client(rt: Runtime, gate: Gate, session: str, appends: int) -> None:
    """One tidelog W2 client: open the session, wait for the start, ``appends`` awaited
    appends, and keep the session open until every client is done (closing is untimed)."""
    async with rt.open_session(session, mode="write") as w:
        await gate.arrive()
        for _ in range(appends):
            await w.append([NewEvent("message", PAYLOAD)])
        gate.done()
        await gate.leave.wait()


async def _raw_main(
    path: Path,
    synchronous: RawSync,
    sessions: int,
    appends: int,
    layout: RawLayout,
    compiled: bool = False,
) -> Run:
    conn = open_raw(path, synchronous, layout)
    try:
        encode = encode_compiled if compiled else encode_payload
        return await raw_run(RawGroupCommit(conn, encode=encode), sessions, appends)
    finally:
        conn.close()


async def raw_run(loop: RawGroupCommit, sessions: int, appends: int) -> Run:
    """One repetition of the raw clients on ``loop``."""
    gate = Gate(sessions)

    def spawn(nursery: trio.Nursery) -> None:
        for i in range(sessions):
            nursery.start_soon(raw_client, loop, gate, f"session-{i}", appends)

    async with trio.open_nursery() as writer_nursery:
        writer_nursery.start_soon(loop.run_writer)
        elapsed, probe = await timed_clients(gate, spawn)
        writer_nursery.cancel_scope.cancel()
    return Run(elapsed, sessions * appends, loop.batches, loop.rows, probe.samples)


def _raw_case(
    synchronous: RawSync, layout: RawLayout = "clustered", compiled: bool = False
) -> Callable[[CaseContext], Metrics]:
    def run(ctx: CaseContext) -> Metrics:
        sessions, appends = shape(ctx)
        return repeat(
            ctx,
            lambda d: trio.run(
                _raw_main, d / "raw.db", synchronous, sessions, appends, layout, compiled
            ),
        )

    return run


async def by_hand_main(path: Path, synchronous: RawSync, sessions: int, appends: int) -> Run:
    """One repetition of the by-hand loop on a new tidelog file at ``path``."""
    names = [f"session-{i}" for i in range(sessions)]
    conn, insert = await trio.to_thread.run_sync(open_by_hand, path, synchronous, names)
    try:
        return await raw_run(RawGroupCommit(conn, insert, by_hand_encode), sessions, appends)
    finally:
        conn.close()


def _by_hand_case(synchronous: RawSync) -> Callable[[CaseContext], Metrics]:
    def run(ctx: CaseContext) -> Metrics:
        sessions, appends = shape(ctx)
        return repeat(
            ctx, lambda d: trio.run(by_hand_main, d / "by-hand.db", synchronous, sessions, appends)
        )

    return run


# -- tidelog --------------------------------------------------------------------------------


Level = Literal["normal", "full"]


async def tidelog_main(
    path: Path | str | Store, synchronous: Level, sessions: int, appends: int
) -> Run:
    async with open_runtime(path, synchronous=synchronous) as rt:
        gate = Gate(sessions)

        def spawn(nursery: trio.Nursery) -> None:
            for i in range(sessions):
                nursery.start_soon(tidelog_client, rt, gate, f"session-{i}", appends)

        before = rt.statistics()
        elapsed, probe = await timed_clients(gate, spawn)
        after = rt.statistics()
    return Run(
        elapsed,
        sessions * appends,
        after.writer.batches_committed - before.writer.batches_committed,
        after.writer.events_committed - before.writer.events_committed,
        probe.samples,
    )


def _tidelog_case(synchronous: Level) -> Callable[[CaseContext], Metrics]:
    def run(ctx: CaseContext) -> Metrics:
        sessions, appends = shape(ctx)
        return repeat(
            ctx,
            lambda d: trio.run(tidelog_main, d / "tidelog.db", synchronous, sessions, appends),
        )

    return run


# -- alternatives ---------------------------------------------------------------------------


def _alternative_case(alt: Alternative) -> Callable[[CaseContext], Metrics]:
    """One repetition (not :data:`REPEATS`): the alternatives are slow and run no probe."""

    def run(ctx: CaseContext) -> Metrics:
        sessions, appends = shape(ctx)
        with ctx.fresh_dir() as d:
            return alt.many_sessions(d / f"{alt.key}.db", sessions, appends)

    return run


# -- registration ---------------------------------------------------------------------------

_LEVELS: tuple[tuple[Level, RawSync], ...] = (("full", "FULL"), ("normal", "NORMAL"))

for _level, _raw_level in _LEVELS:
    case(f"W2/raw-{_level}", system=f"raw apsw group-commit ({_raw_level})")(_raw_case(_raw_level))
    case(
        f"W2/raw-{_level}-v4",
        system=f"raw apsw group-commit ({_raw_level}), format 4 layout (rowid + index)",
    )(_raw_case(_raw_level, "commit-order"))
    case(
        f"W2/raw-{_level}-v4-compiled",
        system=f"raw apsw group-commit ({_raw_level}), format 4 layout, msgspec encoder",
    )(_raw_case(_raw_level, "commit-order", compiled=True))
    case(
        f"W2/by-hand-{_level}",
        system=f"by hand: tidelog's format and checks, no runtime ({_raw_level})",
    )(_by_hand_case(_raw_level))
    case(f"W2/tidelog-{_level}", system=f"tidelog (synchronous={_level})")(_tidelog_case(_level))
for _alt in ALTERNATIVES:
    case(f"W2/{_alt.key}", system=f"{_alt.system} ({_alt.many_note})", requires=_alt.requires)(
        _alternative_case(_alt)
    )

_W2 = "W2 100 sessions x 50 awaited appends"
_W9 = "W9 loop lag during W2"
_RATE = "events_per_s"
for _level, _raw_level in _LEVELS:
    _raw = f"W2/raw-{_level}"
    _raw4 = f"W2/raw-{_level}-v4"
    _tl = f"W2/tidelog-{_level}"
    rows(
        Row("W2", f"{_W2}, {_raw_level}", _raw, _RATE, "events/s", note="reference"),
        Row(
            "W2",
            f"{_W2}, {_raw_level}",
            _tl,
            _RATE,
            "events/s",
            reference=(_raw, _RATE),
            # Against the raw loop on format 3's layout, so the gain of format 4's shows.
            target=Target("ratio", ">=", 1.3 if _level == "full" else 0.8),
        ),
        Row("W2", f"{_W2}, {_raw_level}: same layout", _raw4, _RATE, "events/s", note="reference"),
        Row(
            "W2",
            f"{_W2}, {_raw_level}: same layout",
            _tl,
            _RATE,
            "events/s",
            reference=(_raw4, _RATE),
            # The speed issue's target: at least the hand-written loop a user would write.
            target=Target("ratio", ">=", 1.0),
        ),
        Row(
            "W2",
            f"{_W2}, {_raw_level}: same layout, compiled codec",
            _raw4 + "-compiled",
            _RATE,
            "events/s",
            note="reference",
        ),
        Row(
            "W2",
            f"{_W2}, {_raw_level}: same layout, compiled codec",
            _tl,
            _RATE,
            "events/s",
            reference=(_raw4 + "-compiled", _RATE),
            target=Target("ratio", ">=", 0.85),
        ),
        # What the contract's work in tidelog's format costs, written by hand: against
        # the raw loops it bounds the two rows above; tidelog against it is the layers.
        Row(
            "W2",
            f"{_W2}, {_raw_level}: same layout",
            f"W2/by-hand-{_level}",
            _RATE,
            "events/s",
            reference=(_raw4, _RATE),
            note="bound",
        ),
        Row(
            "W2",
            f"{_W2}, {_raw_level}: same layout, compiled codec",
            f"W2/by-hand-{_level}",
            _RATE,
            "events/s",
            reference=(_raw4 + "-compiled", _RATE),
            note="bound",
        ),
        Row(
            "W2",
            f"{_W2}, {_raw_level}: tidelog vs by hand",
            _tl,
            _RATE,
            "events/s",
            reference=(f"W2/by-hand-{_level}", _RATE),
        ),
    )
    if _level == "full":
        rows(
            *(
                Row(
                    "W2",
                    f"{_W2}, FULL",
                    f"W2/{alt.key}",
                    _RATE,
                    "events/s",
                    reference=(_raw, _RATE),
                    note="alternative",
                )
                for alt in ALTERNATIVES
            ),
            Row(
                "W2",
                f"{_W2}, FULL: tidelog vs the best alternative",
                _tl,
                _RATE,
                "events/s",
                best_of=tuple((f"W2/{alt.key}", _RATE) for alt in ALTERNATIVES),
                target=Target("ratio", ">=", 10.0),
            ),
        )
for _level, _raw_level in _LEVELS:
    _raw = f"W2/raw-{_level}"
    _tl = f"W2/tidelog-{_level}"
    rows(
        Row("W9", f"{_W9} {_raw_level}: p99", _raw, "lag_p99_ms", "ms", note="reference"),
        Row(
            "W9",
            f"{_W9} {_raw_level}: p99",
            _tl,
            "lag_p99_ms",
            "ms",
            reference=(_raw, "lag_p99_ms"),
            target=Target("value", "<=", 2.0),
        ),
        # And never above 1.2x the raw loop's own lag in the same run: the raw loop shows
        # how much of the lag is the machine's.
        Row(
            "W9",
            f"{_W9} {_raw_level}: p99 against the raw loop's",
            _tl,
            "lag_p99_ms",
            "ms",
            reference=(_raw, "lag_p99_ms"),
            target=Target("ratio", "<=", 1.2),
        ),
        Row("W9", f"{_W9} {_raw_level}: max", _raw, "lag_max_ms", "ms", note="reference"),
        Row(
            "W9",
            f"{_W9} {_raw_level}: max",
            _tl,
            "lag_max_ms",
            "ms",
            reference=(_raw, "lag_max_ms"),
        ),
    )
