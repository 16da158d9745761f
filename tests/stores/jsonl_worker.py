"""Child processes of the JSONL store tests (``tests/stores/test_jsonl_*.py``).

Usage::

    python jsonl_worker.py create ROOT ID GO       # wait for file GO, create ID, print result
    python jsonl_worker.py hold ROOT ID            # take ID's lease, print "held", sleep
    python jsonl_worker.py append ROOT ID N [Z [GO]]  # N appends of 1..5 events (batch-
                                                   # tagged), zstd frames if Z is "zstd"; with
                                                   # GO, halfway it waits until GO exists
    python jsonl_worker.py group ROOT STEP         # a group write, SIGKILLed at STEP
    python jsonl_worker.py create-store ROOT STEP  # create the store ROOT, SIGKILLed at STEP
    python jsonl_worker.py migrate ROOT ID STEP Z  # append to format 1 ID, SIGKILLed at STEP
                                                   # of its migration (Z: "zstd" or "plain")

Every event appended by ``append`` names its batch: ``{"b": batch, "k": index, "of": size}``.
"""

from __future__ import annotations

import os
import random
import signal
import sys
import time

from stores import (
    AppendOp,
    DeleteOp,
    GroupOp,
    JsonlStore,
    NewEvent,
    ReplaceOp,
    SessionExistsError,
    prepare_events,
)
from stores.jsonl import _group as jsonl_group

#: The group ``group`` writes: an append to "a", a replace of "b"'s tail, a delete of
#: "c" and the creation of "d" (the parent seeds a, b and c first).
GROUP_STEPS = [
    "intent written",
    "member applied: a",
    "member applied: b",
    "member applied: c",
    "member applied: d",
    "members synced",
    "intent removed",
    "backups removed",
]


def events(tag: str, n: int) -> tuple[object, ...]:
    return tuple(prepare_events([NewEvent("g", {"tag": tag, "i": i}) for i in range(n)]))


def main() -> None:
    command, root = sys.argv[1], sys.argv[2]
    if command == "create":
        session_id, go = sys.argv[3], sys.argv[4]
        store = JsonlStore(root)
        while not os.path.exists(go):
            time.sleep(0.0005)
        try:
            store.create(session_id, {"by": os.getpid()})
            print("won", flush=True)
        except SessionExistsError:
            print("exists", flush=True)
        store.close()
    elif command == "hold":
        store = JsonlStore(root)
        store.acquire_lease(sys.argv[3], "child", ttl=0.01, holder=f"pid {os.getpid()} child")
        store.append(sys.argv[3], [NewEvent("held")])
        print("held", flush=True)
        time.sleep(600)
    elif command == "append":
        store = JsonlStore(root, compress=sys.argv[5:6] == ["zstd"])
        rng = random.Random(7)
        count = int(sys.argv[4])
        for batch in range(count):
            if batch == count // 2 and len(sys.argv) > 6:
                while not os.path.exists(sys.argv[6]):
                    time.sleep(0.0005)
            size = rng.choice((1, 2, 3, 5))
            store.append(
                sys.argv[3],
                [
                    NewEvent(
                        "b", {"b": batch, "k": k, "of": size, "pad": "x" * rng.choice((0, 900))}
                    )
                    for k in range(size)
                ],
            )
        print("done", flush=True)
    elif command == "group":
        stop = sys.argv[3]

        def hook(name: str) -> None:
            if name == stop:
                os.kill(os.getpid(), signal.SIGKILL)

        jsonl_group.STEP[0] = hook
        store = JsonlStore(root)
        [result] = store.write_batch(
            [
                GroupOp(
                    (
                        AppendOp("a", events("new", 2), expected_head=3),  # type: ignore[arg-type]
                        ReplaceOp("b", 1, events("new", 3), expected_head=3),  # type: ignore[arg-type]
                        DeleteOp("c"),
                        AppendOp("d", events("new", 1)),  # type: ignore[arg-type]
                    )
                )
            ]
        )
        print(f"result {result}", flush=True)
    elif command == "create-store":
        stop = sys.argv[3]

        def die_at(name: str) -> None:
            if name == stop:
                os.kill(os.getpid(), signal.SIGKILL)

        jsonl_group.STEP[0] = die_at
        JsonlStore(root).close()
        print("created", flush=True)
    elif command == "migrate":
        session_id, stop, encoding = sys.argv[3], sys.argv[4], sys.argv[5]

        def kill_at(name: str) -> None:
            if name == stop:
                os.kill(os.getpid(), signal.SIGKILL)

        jsonl_group.STEP[0] = kill_at
        store = JsonlStore(root, compress=encoding == "zstd")
        print(f"head {store.append(session_id, [NewEvent('after', 'migration')])}", flush=True)
        store.close()


if __name__ == "__main__":
    main()
