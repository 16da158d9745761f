"""The cost of one awaited append on the trio thread (W11), on its own.

A runtime over a :class:`~stores.MemoryStore` keeps storage and threads out of the
picture: validation and encoding, the session actor, the group-commit batch, the store's
bookkeeping and the trips through trio's scheduler all run on the trio thread. The
program awaits ``n`` appends of one event (the payload, :data:`bench.harness.core.PAYLOAD`) to
one session, after :data:`WARM_UP` appends that are not counted.

The *floor* is what any awaited append of the payload must do on the trio thread: encode
the payload (the stdlib's compact JSON, as the raw systems of the other workloads) and
pass one checkpoint (``await`` of an awaited append is a trip through the scheduler).

``--system w1b-jsonl`` and ``--system w1b-rawfile`` measure W1b's loop instead, per
event: one-event ``append_nowait`` calls with a ``flush`` every 100 on a JSONL store
(``synchronous="full"``), and its raw file reference (one JSON line per event, one
``os.write`` and ``os.fsync`` per 100 lines in a worker thread). These count both
threads; the fsync itself, a syscall, is not counted.

``--system w2-tidelog``, ``--system w2-by-hand``, ``--system w2-raw`` and ``--system
w2-raw-compiled`` measure W2's shape instead (:mod:`bench.workloads.w2_group_commit`:
:data:`W2_SESSIONS` sessions x :data:`W2_APPENDS` awaited appends, :data:`W2_EVENTS`
events a repetition), per event: tidelog on a SQLite file at ``synchronous="normal"``
(``W2/tidelog-normal``), the by-hand loop in tidelog's format (``W2/by-hand-normal``,
:mod:`bench.references.by_hand`), and the raw apsw group-commit loop at NORMAL on format
4's layout with the stdlib encoder (``W2/raw-normal-v4``) or the compiled one
(``W2/raw-normal-v4-compiled``). Each repetition runs in its own ``trio.run`` on a fresh
database file of one temporary directory, after one warm-up repetition that is never
counted; their count is ``--repetitions`` (default :data:`W2_REPETITIONS`), not
``--appends``. These count both threads (the trio thread and the store's, or the raw
loop's, worker thread) and the whole of each repetition (opening the database and the
sessions, closing them); time counts W2's timed region only (all clients appending), like
W2's rows.

``--system w2pg-tidelog``, ``--system w2pg-by-hand`` and ``--system w2pg-raw`` measure
W2pg's shape the same way at NORMAL (``synchronous_commit = off``), each repetition on a
new schema of the bench's PostgreSQL server (:mod:`bench.references.raw_pg`): tidelog
(``W2pg/tidelog-normal``), the by-hand loop in tidelog's schema (``W2pg/by-hand-normal``)
and raw psycopg (``W2pg/raw-normal``). Instructions count the client only: the server is
another process.

Two ways to measure, the same program:

* time: ``python -m bench.probes.per_append`` prints us per append (median of
  :data:`REPEATS` runs); the W11 rows of ``python -m bench`` do the same.
* instructions: ``python -m bench.probes.per_append --callgrind`` runs the program under
  ``valgrind --tool=callgrind`` for ``0`` and ``n`` appends and prints the difference
  divided by ``n`` (start-up, imports and warm-up cancel out), with ``PYTHONHASHSEED=0``.
  Counts repeat whatever else the machine runs, where timings drift with the machine's
  load (``bench/HISTORY.md``); it takes about a minute (two runs side by side). For the
  ``w2-*`` systems the two runs are of the warm-up repetition alone and of it and ``k``
  more (``--repetitions``), and the difference is divided by ``k`` x :data:`W2_EVENTS`.
  Their counts move by about 0.5% from run to run: how many events a commit carries
  depends on how the two threads take turns. They run without W9's lag probe, whose 1 ms
  wake-ups would come ~50x as often per event under callgrind as in a real run (about
  8,000 instructions an event of W2's count; ``set_lag_probe`` in
  :mod:`bench.workloads.w2_group_commit`).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from runtime import MemoryStore, NewEvent, open_runtime

from ..harness.core import PAYLOAD, encode_payload

if TYPE_CHECKING:
    from ..workloads.w2_group_commit import Run

__all__ = [
    "REPEATS",
    "W2_APPENDS",
    "W2_EVENTS",
    "W2_REPETITIONS",
    "W2_SESSIONS",
    "WARM_UP",
    "callgrind_per_append",
    "floor_loop",
    "raw_w2_main",
    "tidelog_loop",
    "w2_loop",
]

#: Appends before the counted ones (the actor, the lease and every cache are warm).
WARM_UP = 200
#: Timed runs per measurement of ``python -m bench.probes.per_append``.
REPEATS = 5
#: W2's shape (at scale 1): sessions, and awaited appends of one event per session.
W2_SESSIONS = 100
W2_APPENDS = 50
#: Events of one repetition of W2's shape: the unit of the ``w2-*`` systems' counts.
W2_EVENTS = W2_SESSIONS * W2_APPENDS
#: Repetitions after the warm-up one that the ``w2-*`` systems count unless told.
W2_REPETITIONS = 2
_ROOT = Path(__file__).resolve().parents[2]


async def tidelog_loop(n: int) -> float:
    """Seconds that ``n`` awaited appends of the payload take on a MemoryStore runtime."""
    async with open_runtime(MemoryStore()) as rt, rt.open_session("s", mode="write") as w:
        for _ in range(WARM_UP):
            await w.append([NewEvent("message", PAYLOAD)])
        start = time.perf_counter()
        for _ in range(n):
            await w.append([NewEvent("message", PAYLOAD)])
        return time.perf_counter() - start


async def floor_loop(n: int) -> float:
    """Seconds that ``n`` rounds of the floor take: encode the payload, one checkpoint."""
    for _ in range(WARM_UP):
        encode_payload(PAYLOAD)
        await trio.lowlevel.checkpoint()
    start = time.perf_counter()
    for _ in range(n):
        encode_payload(PAYLOAD)
        await trio.lowlevel.checkpoint()
    return time.perf_counter() - start


async def w1b_jsonl_loop(n: int) -> float:
    """Seconds that ``n`` events of W1b take on a JSONL store (``synchronous="full"``):
    ``append_nowait`` of one event each, ``flush`` every 100 (``n``: a multiple of 100)."""
    with tempfile.TemporaryDirectory(prefix="tidelog-w1b-") as tmp:
        store = Path(tmp) / "store.jsonl"
        store.mkdir()
        async with (
            open_runtime(store, synchronous="full") as rt,
            rt.open_session("s", mode="write") as w,
        ):

            async def events(count: int) -> None:
                for i in range(1, count + 1):
                    w.append_nowait([NewEvent("message", PAYLOAD)])
                    if i % 100 == 0:
                        await w.flush()

            await events(WARM_UP)
            start = time.perf_counter()
            await events(n)
            return time.perf_counter() - start


async def w1b_rawfile_loop(n: int) -> float:
    """Seconds that ``n`` events of W1b's raw file reference take: one JSON line each,
    one ``os.write`` and one ``os.fsync`` per 100 lines in a worker thread."""
    with tempfile.TemporaryDirectory(prefix="tidelog-w1b-") as tmp:
        fd = os.open(Path(tmp) / "raw.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        limiter = trio.CapacityLimiter(1)
        seq = 0

        def commit(data: bytes) -> None:
            os.write(fd, data)
            os.fsync(fd)

        async def events(count: int) -> None:
            nonlocal seq
            for _ in range(count // 100):
                lines = []
                for _ in range(100):
                    seq += 1
                    lines.append(f'{{"seq":{seq},"data":{encode_payload(PAYLOAD)}}}\n'.encode())
                await trio.to_thread.run_sync(commit, b"".join(lines), limiter=limiter)

        try:
            await events(WARM_UP)
            start = time.perf_counter()
            await events(n)
            return time.perf_counter() - start
        finally:
            os.close(fd)


async def raw_w2_main(path: Path, compiled: bool = False) -> Run:
    """One repetition of W2's raw apsw group-commit loop at NORMAL on format 4's layout
    (``W2/raw-normal-v4``, or with ``compiled`` the compiled encoder's
    ``W2/raw-normal-v4-compiled``), on a new database at ``path``."""
    # Imported here: bench.workloads imports W11's module, which imports this one (and
    # W11's program imports nothing it does not run).
    from ..references.raw_sqlite import encode_compiled, open_raw
    from ..workloads.w2_group_commit import RawGroupCommit, raw_run

    conn = open_raw(path, "NORMAL", "commit-order")
    try:
        encode = encode_compiled if compiled else encode_payload
        return await raw_run(RawGroupCommit(conn, encode=encode), W2_SESSIONS, W2_APPENDS)
    finally:
        conn.close()


def _w2pg_once(system: str) -> Run:
    """One repetition of the ``w2pg-*`` ``system`` (W2pg at NORMAL) in its own
    ``trio.run``, on a new PostgreSQL schema of its own."""
    from ..references.raw_pg import pg_schema, url_of
    from ..workloads.pg_w1_w2_w9 import by_hand_w2, raw_w2
    from ..workloads.w2_group_commit import tidelog_main

    with pg_schema() as (dsn, schema):
        if system == "w2pg-tidelog":
            url = url_of(dsn, schema)
            return trio.run(tidelog_main, url, "normal", W2_SESSIONS, W2_APPENDS)
        if system == "w2pg-by-hand":
            return trio.run(by_hand_w2, dsn, schema, "off", W2_SESSIONS, W2_APPENDS)
        return trio.run(raw_w2, dsn, schema, "off", W2_SESSIONS, W2_APPENDS)


def _w2_once(system: str, path: Path) -> Run:
    """One repetition of the ``w2-*`` or ``w2pg-*`` ``system`` in its own ``trio.run``."""
    from ..workloads.w2_group_commit import by_hand_main, tidelog_main

    if system.startswith("w2pg-"):
        return _w2pg_once(system)
    if system == "w2-tidelog":
        return trio.run(tidelog_main, path, "normal", W2_SESSIONS, W2_APPENDS)
    if system == "w2-by-hand":
        return trio.run(by_hand_main, path, "NORMAL", W2_SESSIONS, W2_APPENDS)
    return trio.run(raw_w2_main, path, system == "w2-raw-compiled")


def w2_loop(system: str, repetitions: int) -> float:
    """Seconds of W2's timed regions in ``repetitions`` repetitions of ``system`` (one of
    the ``w2-*`` systems) after one warm-up repetition that is not counted; each in its
    own ``trio.run`` on a fresh database file of one temporary directory."""
    elapsed = 0.0
    with tempfile.TemporaryDirectory(prefix="tidelog-w2-") as tmp:
        for i in range(1 + repetitions):
            run = _w2_once(system, Path(tmp) / f"w2-{i}.db")
            if run.events != W2_EVENTS:
                raise RuntimeError(f"{system}: {run.events} events, not {W2_EVENTS}")
            if i > 0:
                elapsed += run.elapsed
    return elapsed


_LOOPS = {
    "tidelog": tidelog_loop,
    "floor": floor_loop,
    "w1b-jsonl": w1b_jsonl_loop,
    "w1b-rawfile": w1b_rawfile_loop,
}
#: W2's shape, per event (:func:`w2_loop`; ``n`` counts repetitions of :data:`W2_EVENTS`).
_W2_SYSTEMS = (
    "w2-tidelog",
    "w2-by-hand",
    "w2-raw",
    "w2-raw-compiled",
    "w2pg-tidelog",
    "w2pg-by-hand",
    "w2pg-raw",
)
#: What ``python -m bench.probes.per_append`` measures unless ``--system`` says otherwise.
_DEFAULT = ("tidelog", "floor")


def _unit(system: str) -> str:
    return "awaited append" if system in ("tidelog", "floor") else "event"


def callgrind_per_append(system: str, n: int) -> float:
    """Instructions per append of ``system`` ("tidelog" or "floor"; per event of the
    others): two runs under callgrind, of 0 and of ``n`` appends, side by side; their
    difference over ``n``. For the ``w2-*`` systems ``n`` counts repetitions after the
    warm-up one and the difference is over ``n`` x :data:`W2_EVENTS`.

    Raises :class:`RuntimeError` if valgrind is missing or a run fails."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise RuntimeError("valgrind is not installed")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_ROOT), env.get("PYTHONPATH")]))
    # W11: str hashes are randomised per process, which moves a count (dict and set
    # layouts; bench/HISTORY.md): one fixed seed makes runs comparable.
    env["PYTHONHASHSEED"] = "0"
    with tempfile.TemporaryDirectory(prefix="tidelog-callgrind-") as tmp:
        runs = []
        for count in (0, n):
            command = [
                valgrind,
                "--tool=callgrind",
                f"--callgrind-out-file={tmp}/callgrind.{count}.out",
                sys.executable,
                "-m",
                "bench.probes.per_append",
                "--run",
                system,
                str(count),
            ]
            runs.append(
                subprocess.Popen(
                    command, cwd=_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
                )
            )
        counts = []
        for proc in runs:
            _, err = proc.communicate(timeout=1800)
            found = re.search(rb"Collected : (\d+)", err)
            if proc.returncode != 0 or found is None:
                raise RuntimeError(f"callgrind run failed: {err.decode(errors='replace')[-2000:]}")
            counts.append(int(found.group(1)))
    events = n * W2_EVENTS if system in _W2_SYSTEMS else n
    return (counts[1] - counts[0]) / events


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.probes.per_append", description=__doc__)
    parser.add_argument("--callgrind", action="store_true", help="count instructions")
    parser.add_argument("--appends", type=int, default=None, help="appends per run")
    parser.add_argument(
        "--repetitions",
        type=int,
        default=None,
        help=f"counted repetitions of W2's {W2_EVENTS:,} events per run of the w2-* systems "
        f"(default {W2_REPETITIONS}; one warm-up repetition is always run before them)",
    )
    parser.add_argument(
        "--system",
        action="append",
        choices=sorted([*_LOOPS, *_W2_SYSTEMS]),
        help="what to measure (repeatable; default: tidelog and floor). The w1b-* loops "
        "are W1b on the JSONL store and its raw file reference, per event, both threads; "
        "the w2-* ones W2 at NORMAL (tidelog, the by-hand loop in tidelog's format, the raw "
        "loop on format 4's layout with the stdlib or the compiled encoder), per event, "
        "both threads; the w2pg-* ones W2pg at NORMAL (tidelog, by hand, raw psycopg)",
    )
    parser.add_argument("--run", nargs=2, metavar=("SYSTEM", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.run is not None:  # the program callgrind measures
        system, count = args.run
        if system in _W2_SYSTEMS:
            from ..workloads.w2_group_commit import set_lag_probe

            set_lag_probe(False)  # (see there: under callgrind it would count the probe)
            w2_loop(system, int(count))
        else:
            trio.run(_LOOPS[system], int(count))
        return 0
    for system in args.system or _DEFAULT:
        unit = _unit(system)
        w2 = system in _W2_SYSTEMS
        if args.callgrind:
            n = (args.repetitions or W2_REPETITIONS) if w2 else (args.appends or 1000)
            counted = f"{n} repetitions of {W2_EVENTS:,} events" if w2 else f"{n} {unit}s"
            per = callgrind_per_append(system, n)
            print(f"{system}: {per:,.0f} instructions per {unit} ({counted})")
        elif w2:
            n = args.repetitions or W2_REPETITIONS
            times = [w2_loop(system, n) for _ in range(REPEATS)]
            per_us = statistics.median(times) / (n * W2_EVENTS) * 1e6
            print(f"{system}: {per_us:.2f} us per event (median of {REPEATS}, timed region)")
        else:
            n = args.appends or 20_000
            times = [trio.run(_LOOPS[system], n) for _ in range(REPEATS)]
            per_us = statistics.median(times) / n * 1e6
            print(f"{system}: {per_us:.2f} us per {unit} (median of {REPEATS})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
