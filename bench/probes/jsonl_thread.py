"""The JSONL store thread's cost per op, alone: ``python -m bench.probes.jsonl_thread``.

W2's batches as the runtime's writer hands them to the store (the ops built beforehand,
as the runtime builds them on the event loop): ``write_batch`` with one one-event append
(the bench payload, leased, with ``expected_head``) for each of 100 sessions, 50 batches
per measurement, best of 7, ``synchronous="normal"``, no event loop and no other thread
competing for the GIL. It prints microseconds per op: the share of W2's per-event cost
that the JSONL write path (``stores/jsonl/``) decides.

Beside it, measured the same way in the same run, the raw file reference's share: what
W2's raw loop does per op in its thread, one ``os.write`` of the op's line to its
session's file (opened ``O_APPEND`` beforehand), the line encoded beforehand as the raw
loop encodes it on the event loop.

And the *floor*: the least a store thread written in Python can do per op and keep the
contract's promises for an append -- the owner and expected-head checks, the next seq,
the format 2 line with its time (the batch's one time, spelled once per batch), kind,
commit mark and CRC-32, the ``os.write``, the seq-to-offset index and an undo record --
with no store around it: one loop over
``__slots__`` records. Not a store (no locks, no files created, no undo run); it bounds
what rewriting the JSONL write path in Python could gain.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import zlib
from array import array

from stores import AppendOp, JsonlStore, NewEvent, prepare_events

from ..harness.core import PAYLOAD, encode_payload

SESSIONS = 100
BATCHES = 50
ROUNDS = 7


def measure(root: str) -> float:
    """Best-of-:data:`ROUNDS` microseconds per op of W2-shaped batches."""
    store = JsonlStore(root)
    try:
        names = [f"session-{i}" for i in range(SESSIONS)]
        heads = dict.fromkeys(names, 0)
        events = tuple(prepare_events([NewEvent("message", PAYLOAD)]))
        for name in names:
            store.acquire_lease(name, "bench", ttl=3600, holder="bench")

        def ops(n: int) -> list[list[AppendOp]]:
            """The next ``n`` batches' ops, built beforehand: the runtime builds them on
            the event loop, not in the store's thread."""
            built = []
            for k in range(n):
                built.append(
                    [AppendOp(s, events, expected_head=heads[s] + k, owner="bench") for s in names]
                )
            return built

        def batches(built: list[list[AppendOp]]) -> None:
            for batch in built:
                for name, head in zip(names, store.write_batch(batch), strict=True):
                    assert isinstance(head, int), head
                    heads[name] = head

        batches(ops(5))
        best = float("inf")
        for _ in range(ROUNDS):
            built = ops(BATCHES)
            start = time.perf_counter()
            batches(built)
            best = min(best, time.perf_counter() - start)
        return best / (BATCHES * SESSIONS) * 1e6
    finally:
        store.close()


def measure_raw(root: str) -> float:
    """Best-of-:data:`ROUNDS` microseconds per op of the raw loop's thread on the same
    shape: one ``os.write`` of one line to each of :data:`SESSIONS` files per batch."""
    os.mkdir(root)
    fds = [
        os.open(os.path.join(root, f"session-{i}.jsonl"), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        for i in range(SESSIONS)
    ]
    try:
        line = f'{{"seq":1,"data":{encode_payload(PAYLOAD)}}}\n'.encode()
        best = float("inf")
        for _ in range(ROUNDS):
            start = time.perf_counter()
            for _ in range(BATCHES):
                for fd in fds:
                    os.write(fd, line)
            best = min(best, time.perf_counter() - start)
        return best / (BATCHES * SESSIONS) * 1e6
    finally:
        for fd in fds:
            os.close(fd)


class _FloorSession:
    """What the floor loop keeps per session: the file, the head, the end, the index."""

    __slots__ = ("end", "fd", "head", "offsets", "owner")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.owner = "bench"
        self.head = 0
        self.end = 0
        self.offsets = array("q")


def measure_floor(root: str) -> float:
    """Best-of-:data:`ROUNDS` microseconds per op of the floor loop (see the module doc)
    on the same shape as :func:`measure`."""
    os.mkdir(root)
    sessions = {
        f"session-{i}": _FloorSession(
            os.open(
                os.path.join(root, f"session-{i}.jsonl"), os.O_WRONLY | os.O_APPEND | os.O_CREAT
            )
        )
        for i in range(SESSIONS)
    }
    try:
        [event] = prepare_events([NewEvent("message", PAYLOAD)])
        best = float("inf")
        for _ in range(ROUNDS):
            start = time.perf_counter()
            for _ in range(BATCHES):
                ops = [(name, event, s.head, "bench") for name, s in sessions.items()]
                now = time.time()
                stamp = repr(now)  # one time per batch, spelled once (as the store does)
                undo: list[tuple[_FloorSession, int]] = []
                results: list[int | None] = []
                for name, ev, expected, owner in ops:
                    s = sessions[name]
                    if s.owner != owner or expected != s.head:
                        results.append(None)
                        continue
                    seq = s.head + 1
                    line = (
                        f'{{"seq":{seq},"ts":{stamp},"kind":"{ev.kind}",'
                        f'"data":{ev.data_json},"end":1,"f":"0123abcd"'  # format 3's file key
                    ).encode()
                    line += b',"crc":%d}\n' % zlib.crc32(line)
                    at = s.end
                    os.write(s.fd, line)
                    undo.append((s, at))
                    s.offsets.append(at)
                    s.head = seq
                    s.end = at + len(line)
                    results.append(seq)
            best = min(best, time.perf_counter() - start)
        return best / (BATCHES * SESSIONS) * 1e6
    finally:
        for s in sessions.values():
            os.close(s.fd)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = measure(tmp + "/store")
        raw = measure_raw(tmp + "/raw")
        floor = measure_floor(tmp + "/floor")
    print(f"tidelog JSONL write_batch: {store:.2f} us per op (best of {ROUNDS})")
    print(f"raw file os.write:         {raw:.2f} us per op (best of {ROUNDS})")
    print(f"floor in Python:           {floor:.2f} us per op (best of {ROUNDS})")
    print(f"ratio (raw / JSONL):       {raw / store:.2f}x")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
