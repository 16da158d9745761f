"""The JSONL store thread's cost per op, alone: ``python -m bench.jsonl_ops``.

W2's batches as the runtime's writer hands them to the store: ``write_batch`` with one
one-event append (the bench payload, leased, with ``expected_head``) for each of 100
sessions, 50 batches per measurement, best of 7, ``synchronous="normal"``, no event
loop and no other thread competing for the GIL. It prints microseconds per op: the share
of W2's per-event cost that the JSONL write path (``stores/jsonl*``) decides.
"""

from __future__ import annotations

import sys
import tempfile
import time

from stores import AppendOp, JsonlStore, NewEvent, prepare_events

from .core import PAYLOAD

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

        def batches(n: int) -> None:
            for _ in range(n):
                ops = [AppendOp(s, events, expected_head=heads[s], owner="bench") for s in names]
                for name, head in zip(names, store.write_batch(ops), strict=True):
                    assert isinstance(head, int), head
                    heads[name] = head

        batches(5)
        best = float("inf")
        for _ in range(ROUNDS):
            start = time.perf_counter()
            batches(BATCHES)
            best = min(best, time.perf_counter() - start)
        return best / (BATCHES * SESSIONS) * 1e6
    finally:
        store.close()


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        print(f"{measure(tmp + '/store'):.2f} us per op (best of {ROUNDS})")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
