"""A short tour of the synchronous store layer: SqliteStore in one file.

Run: ``python examples/store_basics.py [path/to/file.db]`` (default: a temporary directory).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from stores import ConflictError, NewEvent, SqliteStore


def tour(path: Path) -> None:
    print(f"opening {path}")
    store = SqliteStore(path, synchronous="normal", busy_timeout_ms=2000)
    try:
        info = store.create("chat-1", header={"title": "store basics", "lang": "en"})
        print(f"created session {info.id!r} with header {info.header}")

        head = store.append(
            "chat-1",
            [
                NewEvent("user", {"text": "hello"}),
                NewEvent("assistant", {"text": "hi! how can I help?"}, run_id="run-1"),
                NewEvent("user", {"text": "tell me about tides"}),
            ],
            expected_head=0,
        )
        print(f"appended 3 events, head is now {head}")

        try:
            store.append("chat-1", [NewEvent("user", {"text": "stale"})], expected_head=1)
        except ConflictError as exc:
            print(f"conflict: expected head {exc.expected}, actual head {exc.actual}")
            head = store.append(
                "chat-1", [NewEvent("assistant", {"text": "the moon"})], expected_head=exc.actual
            )
            print(f"retried with the actual head, head is now {head}")

        for event in store.read("chat-1", since_seq=1, limit=2):
            print(f"  read seq {event.seq}: {event.kind} {event.data}")

        removed = store.truncate("chat-1", 2)
        print(f"truncated to seq 2, removed {removed} events, head {store.head('chat-1')}")

        store.append("notes", [NewEvent("note", {"text": "a second session"})])
        for session in store.list_sessions():
            print(f"session {session.id!r}: head {session.head}")

        ok, detail = store.check_integrity()
        print(f"integrity check: {detail}")
        if not ok:
            raise SystemExit("integrity check failed")
    finally:
        store.close()
    print("done")


def main() -> None:
    if len(sys.argv) > 1:
        tour(Path(sys.argv[1]))
        return
    with tempfile.TemporaryDirectory() as tmp:
        tour(Path(tmp) / "basics.db")


if __name__ == "__main__":
    main()
