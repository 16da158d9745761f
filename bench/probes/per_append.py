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

Two ways to measure, the same program:

* time: ``python -m bench.probes.per_append`` prints us per append (median of
  :data:`REPEATS` runs); the W11 rows of ``python -m bench`` do the same.
* instructions: ``python -m bench.probes.per_append --callgrind`` runs the program under
  ``valgrind --tool=callgrind`` for ``0`` and ``n`` appends and prints the difference
  divided by ``n`` (start-up, imports and warm-up cancel out), with ``PYTHONHASHSEED=0``.
  Counts repeat whatever else the machine runs, where timings drift with the machine's
  load (``bench/HISTORY.md``); it takes about a minute (two runs side by side).
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

import trio

from runtime import MemoryStore, NewEvent, open_runtime

from ..harness.core import PAYLOAD, encode_payload

__all__ = ["REPEATS", "WARM_UP", "callgrind_per_append", "floor_loop", "tidelog_loop"]

#: Appends before the counted ones (the actor, the lease and every cache are warm).
WARM_UP = 200
#: Timed runs per measurement of ``python -m bench.probes.per_append``.
REPEATS = 5
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


_LOOPS = {
    "tidelog": tidelog_loop,
    "floor": floor_loop,
    "w1b-jsonl": w1b_jsonl_loop,
    "w1b-rawfile": w1b_rawfile_loop,
}
#: What ``python -m bench.probes.per_append`` measures unless ``--system`` says otherwise.
_DEFAULT = ("tidelog", "floor")


def callgrind_per_append(system: str, n: int) -> float:
    """Instructions per append of ``system`` ("tidelog" or "floor"): two runs under
    callgrind, of 0 and of ``n`` appends, side by side; their difference over ``n``.

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
    return (counts[1] - counts[0]) / n


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.probes.per_append", description=__doc__)
    parser.add_argument("--callgrind", action="store_true", help="count instructions")
    parser.add_argument("--appends", type=int, default=None, help="appends per run")
    parser.add_argument(
        "--system",
        action="append",
        choices=sorted(_LOOPS),
        help="what to measure (repeatable; default: tidelog and floor). The w1b-* loops "
        "are W1b on the JSONL store and its raw file reference, per event, both threads",
    )
    parser.add_argument("--run", nargs=2, metavar=("SYSTEM", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.run is not None:  # the program callgrind measures
        system, count = args.run
        trio.run(_LOOPS[system], int(count))
        return 0
    for system in args.system or _DEFAULT:
        if args.callgrind:
            n = args.appends or 1000
            per = callgrind_per_append(system, n)
            unit = "event" if system.startswith("w1b") else "awaited append"
            print(f"{system}: {per:,.0f} instructions per {unit} ({n} {unit}s)")
        else:
            n = args.appends or 20_000
            times = [trio.run(_LOOPS[system], n) for _ in range(REPEATS)]
            per_us = statistics.median(times) / n * 1e6
            unit = "event" if system.startswith("w1b") else "awaited append"
            print(f"{system}: {per_us:.2f} us per {unit} (median of {REPEATS})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
