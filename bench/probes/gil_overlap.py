"""Can a store thread's commit overlap the event loop's Python work? ``python -m
bench.probes.gil_overlap``.

W2 is a closed loop: every client waits for its commit, so each batch costs the trio
thread's per-event work *plus* the store thread's commit. A writer that committed one
half of the clients while the trio thread served the other half would pay the larger of
the two instead, if the store thread could run while the trio thread runs Python.

This measures that on plain apsw, no tidelog code: one batch of :data:`ROWS` rows of the
bench payload (``executemany`` in one transaction, ``synchronous=NORMAL``, WAL) in a
thread of its own, first with nothing else running, then while the main thread runs
Python flat out (as the trio thread would, serving the other half). It prints
milliseconds per batch, best and median of :data:`BATCHES`. apsw releases the GIL inside
each SQLite call and takes it back for the next row's parameters; each take-back waits
for the running thread to drop the GIL, which it does after ``sys.getswitchinterval()``
(5 ms by default).
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import threading
import time

import apsw

from ..harness.core import PAYLOAD, encode_payload

__all__ = ["BATCHES", "ROWS", "measure"]

#: Rows per batch: half of W2's 100-event batches.
ROWS = 50
#: Batches per measurement.
BATCHES = 100


def measure(*, contended: bool) -> list[float]:
    """Milliseconds per batch of :data:`ROWS` rows, :data:`BATCHES` times, committed in
    a thread of their own; with ``contended``, while this thread runs Python."""
    with tempfile.TemporaryDirectory() as d:
        conn = apsw.Connection(os.path.join(d, "probe.db"))
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("CREATE TABLE events (sid INTEGER, seq INTEGER, data TEXT)")
        data = encode_payload(PAYLOAD)
        times: list[float] = []

        def commit_all() -> None:
            for batch in range(BATCHES):
                rows = [(i, batch, data) for i in range(ROWS)]
                start = time.perf_counter()
                with conn:
                    conn.executemany("INSERT INTO events VALUES (?, ?, ?)", rows)
                times.append((time.perf_counter() - start) * 1000.0)

        committer = threading.Thread(target=commit_all)
        committer.start()
        if contended:
            while committer.is_alive():
                _spin_once()
        committer.join()
        conn.close()
        return times


def _spin_once() -> None:
    """A slice of Python work: the stand-in for the trio thread serving clients."""
    total = 0
    for i in range(10_000):
        total += i * i


def main() -> None:
    print(f"switch interval {sys.getswitchinterval() * 1000:.1f} ms; {ROWS} rows per batch")
    for contended in (False, True, False, True):
        times = measure(contended=contended)
        label = "while Python runs" if contended else "alone            "
        print(
            f"{label}  best {min(times):7.3f} ms  median {statistics.median(times):7.3f} ms"
            " per batch"
        )


if __name__ == "__main__":
    main()
