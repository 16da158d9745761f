"""W1, W1b, W2, W3 and W5 on the JSONL file store, beside a raw file reference and SQLite.

The JSONL cases run the same tidelog code as the SQLite ones (``w1_single_session``,
``w2_group_commit``, ``w3_cold_load``): ``open_runtime`` is given a directory, which opens
a :class:`~stores.JsonlStore`. The **raw file reference** does the same file appends with
no tidelog code: each event is one JSON line (``{"seq":N,"data":...}``) written with
``os.write`` to its session's file (opened ``O_APPEND`` before the timed region), from trio
through ``trio.to_thread.run_sync`` with a ``CapacityLimiter(1)`` (one thread hop per
commit, like the raw apsw reference), and ``os.fsync`` where the level asks for it:

* W1 (FULL): one line, one write and one fsync per awaited append;
* W1b (FULL): 100 lines, one write and one fsync per 100;
* W2: one writer task drains every task's queue; per thread hop it writes each session's
  queued lines to that session's file, then (FULL) fsyncs every file it wrote;
* W3: a fresh process opens the file, reads it whole and decodes every line;
* W5: the file's bytes per event (JSONL: every file of the store directory).

W2 NORMAL also runs the tidelog clients on a ``MemoryStore`` runtime, shown against the
raw file loop without a target: the runtime's share of W2 with a store that costs next to
nothing (no thread hop, no file), so that the JSONL row's distance from it is the store
thread's share.

Targets: JSONL >= 0.8x the raw file reference on W1b and W2.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from stores import MemoryStore

from ..harness.core import PAYLOAD, CaseContext, Metrics, Row, Target, case, encode_payload, rows
from ..harness.procs import run_worker, worker
from ..references.by_hand import by_hand_encode, open_by_hand_jsonl
from ..references.raw_sqlite import RawSync
from . import w1_single_session, w2_group_commit, w3_cold_load
from .w2_group_commit import Gate, RawGroupCommit, timed_clients

__all__ = ["by_hand_jsonl_main"]

_DECODER = json.JSONDecoder()


def _line(seq: int) -> bytes:
    return f'{{"seq":{seq},"data":{encode_payload(PAYLOAD)}}}\n'.encode()


def _store_dir(d: Path) -> Path:
    path = d / "store.jsonl"
    path.mkdir()
    return path


# -- W1 and W1b -------------------------------------------------------------------------------


async def _raw_one(path: Path, n: int, per_write: int, fsync: bool) -> Metrics:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    limiter = trio.CapacityLimiter(1)

    def commit(data: bytes) -> None:
        os.write(fd, data)
        if fsync:
            os.fsync(fd)

    try:
        seq = 0
        start = time.perf_counter()
        for _ in range(n // per_write):
            lines = []
            for _ in range(per_write):
                seq += 1
                lines.append(_line(seq))
            await trio.to_thread.run_sync(commit, b"".join(lines), limiter=limiter)
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
    return {"appends_per_s": n / elapsed, "events_per_s": n / elapsed, "elapsed_s": elapsed}


def _raw_w1(per_write: int, fsync: bool) -> Callable[[CaseContext], Metrics]:
    repeats = w1_single_session.REPEATS_W1B if per_write > 1 else 1

    def run(ctx: CaseContext) -> Metrics:
        n = w1_single_session.count(ctx)
        return w1_single_session.repeat(
            ctx, repeats, lambda d: trio.run(_raw_one, d / "raw.jsonl", n, per_write, fsync)
        )

    return run


def _jsonl_w1(level: w1_single_session.Level, nowait: bool) -> Callable[[CaseContext], Metrics]:
    repeats = w1_single_session.REPEATS_W1B if nowait else 1

    def run(ctx: CaseContext) -> Metrics:
        n = w1_single_session.count(ctx)
        return w1_single_session.repeat(
            ctx,
            repeats,
            lambda d: trio.run(w1_single_session.tidelog, _store_dir(d), level, n, nowait),
        )

    return run


case("W1/rawfile-full", system="raw file: os.write + os.fsync per append")(_raw_w1(1, True))
case("W1/jsonl-full", system="tidelog JSONL (synchronous=full)")(_jsonl_w1("full", False))
case("W1b/rawfile-full-100", system="raw file: os.write + os.fsync per 100 lines")(
    _raw_w1(w1_single_session.BATCH, True)
)
case("W1b/jsonl-full", system="tidelog JSONL (synchronous=full), append_nowait + flush/100")(
    _jsonl_w1("full", True)
)

# -- W2 ------------------------------------------------------------------------------------------


class _RawFiles:
    """The raw group-commit loop over one file per session."""

    def __init__(self, fds: dict[str, int], fsync: bool) -> None:
        self._fds = fds
        self._fsync = fsync
        self._limiter = trio.CapacityLimiter(1)
        self._queue: dict[str, list[bytes]] = {}
        self._waiters: list[trio.Event] = []
        self._wake = trio.Event()
        self.batches = 0
        self.rows = 0

    def _commit(self, queued: dict[str, list[bytes]]) -> None:
        for session, lines in queued.items():
            os.write(self._fds[session], b"".join(lines))
        if self._fsync:
            for session in queued:
                os.fsync(self._fds[session])

    async def run_writer(self) -> None:
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            queued, waiters = self._queue, self._waiters
            self._queue, self._waiters = {}, []
            await trio.to_thread.run_sync(self._commit, queued, limiter=self._limiter)
            self.batches += 1
            self.rows += sum(len(lines) for lines in queued.values())
            for waiter in waiters:
                waiter.set()

    async def append(self, session: str, seq: int) -> None:
        committed = trio.Event()
        self._queue.setdefault(session, []).append(_line(seq))
        self._waiters.append(committed)
        self._wake.set()
        await committed.wait()


async def _raw_client(loop: _RawFiles, gate: Gate, session: str, appends: int) -> None:
    await gate.arrive()
    for seq in range(1, appends + 1):
        await loop.append(session, seq)
    gate.done()


async def _raw_w2_main(d: Path, fsync: bool, sessions: int, appends: int) -> Any:
    names = [f"session-{i}" for i in range(sessions)]
    fds = {
        s: os.open(d / f"{s}.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) for s in names
    }
    try:
        loop = _RawFiles(fds, fsync)
        gate = Gate(sessions)

        def spawn(nursery: trio.Nursery) -> None:
            for s in names:
                nursery.start_soon(_raw_client, loop, gate, s, appends)

        async with trio.open_nursery() as writer_nursery:
            writer_nursery.start_soon(loop.run_writer)
            elapsed, probe = await timed_clients(gate, spawn)
            writer_nursery.cancel_scope.cancel()
    finally:
        for fd in fds.values():
            os.close(fd)
    return w2_group_commit.Run(elapsed, sessions * appends, loop.batches, loop.rows, probe.samples)


def _raw_w2(fsync: bool) -> Callable[[CaseContext], Metrics]:
    def run(ctx: CaseContext) -> Metrics:
        sessions, appends = w2_group_commit.shape(ctx)
        return w2_group_commit.repeat(
            ctx, lambda d: trio.run(_raw_w2_main, d, fsync, sessions, appends)
        )

    return run


def _jsonl_w2(level: w2_group_commit.Level) -> Callable[[CaseContext], Metrics]:
    def run(ctx: CaseContext) -> Metrics:
        sessions, appends = w2_group_commit.shape(ctx)
        return w2_group_commit.repeat(
            ctx,
            lambda d: trio.run(
                w2_group_commit.tidelog_main, _store_dir(d), level, sessions, appends
            ),
        )

    return run


def _memory_w2(ctx: CaseContext) -> Metrics:
    sessions, appends = w2_group_commit.shape(ctx)
    return w2_group_commit.repeat(
        ctx,
        lambda _: trio.run(
            w2_group_commit.tidelog_main, MemoryStore(), "normal", sessions, appends
        ),
    )


case("W2/memory-normal", system="tidelog on MemoryStore (the runtime alone)")(_memory_w2)


async def by_hand_jsonl_main(
    root: Path, synchronous: RawSync, sessions: int, appends: int
) -> w2_group_commit.Run:
    """One repetition of W2's by-hand loop (:mod:`bench.references.by_hand`) on a new
    JSONL store at ``root``."""
    names = [f"session-{i}" for i in range(sessions)]
    files, insert = await trio.to_thread.run_sync(open_by_hand_jsonl, root, synchronous, names)
    try:
        loop = RawGroupCommit(files, insert, by_hand_encode)
        return await w2_group_commit.raw_run(loop, sessions, appends)
    finally:
        files.close()


def _by_hand_w2(synchronous: RawSync) -> Callable[[CaseContext], Metrics]:
    def run(ctx: CaseContext) -> Metrics:
        sessions, appends = w2_group_commit.shape(ctx)
        return w2_group_commit.repeat(
            ctx,
            lambda d: trio.run(
                by_hand_jsonl_main, d / "by-hand.jsonl", synchronous, sessions, appends
            ),
        )

    return run


_W2_LEVELS: tuple[tuple[w2_group_commit.Level, RawSync], ...] = (
    ("full", "FULL"),
    ("normal", "NORMAL"),
)
for _w2_level, _upper in _W2_LEVELS:
    case(f"W2/rawfile-{_w2_level}", system=f"raw file group-commit ({_upper})")(
        _raw_w2(_w2_level == "full")
    )
    case(
        f"W2/by-hand-jsonl-{_w2_level}",
        system=f"by hand: tidelog's JSONL format and checks, no runtime ({_upper})",
    )(_by_hand_w2(_upper))
    case(f"W2/jsonl-{_w2_level}", system=f"tidelog JSONL (synchronous={_w2_level})")(
        _jsonl_w2(_w2_level)
    )

# -- W3 and W5 ------------------------------------------------------------------------------------


def _raw_read(path: str) -> list[tuple[int, object]]:
    with open(path, "rb") as f:
        data = f.read()
    decode = _DECODER.decode
    out = []
    for line in data.split(b"\n")[:-1]:
        record = decode(line.decode())
        out.append((record["seq"], record["data"]))
    return out


async def _raw_load(path: str, expected: int) -> Metrics:
    start = time.perf_counter()
    events = await trio.to_thread.run_sync(_raw_read, path)
    elapsed = time.perf_counter() - start
    if len(events) != expected:
        raise RuntimeError(f"read {len(events)} events, expected {expected}")
    return {"load_ms": elapsed * 1000.0}


@worker("w3-load-file")
def w3_load_file(args: dict[str, Any]) -> Metrics:
    """Time open + read all of a raw JSONL file in this (fresh) process."""
    return trio.run(_raw_load, args["path"], args["expected"])


def _write_raw(path: Path, n: int) -> None:
    with open(path, "wb") as f:
        for first in range(0, n, 500):
            f.write(b"".join(_line(seq) for seq in range(first + 1, min(n, first + 500) + 1)))


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _w3_case(system: str) -> Callable[[CaseContext], Metrics]:
    def run(ctx: CaseContext) -> Metrics:
        n = w3_cold_load.events(ctx)
        with ctx.fresh_dir() as d:
            if system == "jsonl":
                path = _store_dir(d)
                trio.run(w3_cold_load.write_tidelog, path, n)
                work, args = "w3-load", {"system": "tidelog", "path": str(path), "expected": n}
            else:
                path = d / "raw.jsonl"
                _write_raw(path, n)
                work, args = "w3-load-file", {"path": str(path), "expected": n}
            loads = [run_worker(work, args)["load_ms"] for _ in range(w3_cold_load.PROCESSES)]
            size = _size(path)
        return {
            "load_ms": statistics.median(loads),
            "load_min_ms": min(loads),
            "events": n,
            "bytes_per_event": size / n,
        }

    return run


case("W3/rawfile", system="raw file (read + json decode per line, one thread hop)")(_w3_case("raw"))
case("W3/jsonl", system="tidelog JSONL (open_runtime(dir) + read())")(_w3_case("jsonl"))

# -- rows -----------------------------------------------------------------------------------------

_W1 = "W1 1 session x 5,000 awaited appends, FULL"
_W1B = "W1b 1 session x 5,000 events, flush every 100, FULL"
_W2 = "W2 100 sessions x 50 awaited appends"
_W3 = "W3 cold load of a 10,000-event session (fresh process, import excluded)"
_W5 = "W5 bytes on disk per event, 10,000 events of 322 B JSON (500 per append)"
_A, _E = "appends_per_s", "events_per_s"
rows(
    Row("W1", f"{_W1}: files", "W1/rawfile-full", _A, "appends/s", note="reference"),
    Row("W1", f"{_W1}: files", "W1/jsonl-full", _A, "appends/s", reference=("W1/rawfile-full", _A)),
    Row(
        "W1",
        f"{_W1}: JSONL vs SQLite",
        "W1/jsonl-full",
        _A,
        "appends/s",
        reference=("W1/tidelog-full", _A),
    ),
    Row("W1b", f"{_W1B}: files", "W1b/rawfile-full-100", _E, "events/s", note="reference"),
    Row(
        "W1b",
        f"{_W1B}: files",
        "W1b/jsonl-full",
        _E,
        "events/s",
        reference=("W1b/rawfile-full-100", _E),
        target=Target("ratio", ">=", 0.8),
    ),
    Row(
        "W1b",
        f"{_W1B}: JSONL vs SQLite",
        "W1b/jsonl-full",
        _E,
        "events/s",
        reference=("W1b/tidelog-full", _E),
    ),
)
for _level, _upper in (("full", "FULL"), ("normal", "NORMAL")):
    rows(
        Row(
            "W2",
            f"{_W2}, {_upper}: files",
            f"W2/rawfile-{_level}",
            _E,
            "events/s",
            note="reference",
        ),
        Row(
            "W2",
            f"{_W2}, {_upper}: files",
            f"W2/jsonl-{_level}",
            _E,
            "events/s",
            reference=(f"W2/rawfile-{_level}", _E),
            target=Target("ratio", ">=", 0.8),
        ),
        Row(
            "W2",
            f"{_W2}, {_upper}: JSONL vs SQLite",
            f"W2/jsonl-{_level}",
            _E,
            "events/s",
            reference=(f"W2/tidelog-{_level}", _E),
        ),
        # The contract's work in tidelog's JSONL format, by hand (W2's by-hand loop).
        Row(
            "W2",
            f"{_W2}, {_upper}: files",
            f"W2/by-hand-jsonl-{_level}",
            _E,
            "events/s",
            reference=(f"W2/rawfile-{_level}", _E),
            note="bound",
        ),
        Row(
            "W2",
            f"{_W2}, {_upper}: files, tidelog vs by hand",
            f"W2/jsonl-{_level}",
            _E,
            "events/s",
            reference=(f"W2/by-hand-jsonl-{_level}", _E),
        ),
    )
rows(
    Row(
        "W2",
        f"{_W2}, NORMAL: files",
        "W2/memory-normal",
        _E,
        "events/s",
        reference=("W2/rawfile-normal", _E),
    ),
)
rows(
    Row("W3", f"{_W3}: files", "W3/rawfile", "load_ms", "ms", note="reference"),
    Row("W3", f"{_W3}: files", "W3/jsonl", "load_ms", "ms", reference=("W3/rawfile", "load_ms")),
    Row(
        "W3",
        f"{_W3}: JSONL vs SQLite",
        "W3/jsonl",
        "load_ms",
        "ms",
        reference=("W3/tidelog", "load_ms"),
    ),
    Row("W5", f"{_W5}: files", "W3/rawfile", "bytes_per_event", "B/event", note="reference"),
    Row(
        "W5",
        f"{_W5}: files",
        "W3/jsonl",
        "bytes_per_event",
        "B/event",
        reference=("W3/rawfile", "bytes_per_event"),
        higher_is_better=False,
    ),
    Row(
        "W5",
        f"{_W5}: JSONL vs SQLite",
        "W3/jsonl",
        "bytes_per_event",
        "B/event",
        reference=("W5/tidelog", "bytes_per_event"),
        higher_is_better=False,
    ),
)
