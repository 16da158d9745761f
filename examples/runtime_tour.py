"""A tour of the tidelog runtime: writers, group commit, flush, snapshots and a live tail.

Run: python examples/runtime_tour.py [DB_PATH]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import trio

from runtime import NewEvent, SessionOwnedError, open_runtime


async def main(db_path: str) -> None:
    async with open_runtime(db_path) as rt:
        # One writer per session: the handle owns the session's lease.
        async with rt.open_session("chat-1", header={"user": "ada"}) as w:
            head = await w.append([NewEvent("user", {"text": "What is a WAL?"})])
            print(f"committed user message, head={head}")
            first, last = w.append_nowait(
                [NewEvent("assistant", {"text": "A write-ahead log."}), NewEvent("usage", 42)]
            )
            print(f"accepted seqs {first}..{last} without waiting")
            await w.flush()
            print(f"flushed: committed_head={w.committed_head} (durable)")
            try:
                async with rt.open_session("chat-1"):
                    pass
            except SessionOwnedError as exc:
                print(f"second writer refused: {type(exc).__name__}")

        # Many sessions appending at once share transactions (group commit).
        async def chatter(i: int) -> None:
            async with rt.open_session(f"chat-{i}") as w:
                for n in range(20):
                    await w.append([NewEvent("user", {"n": n})])

        async with trio.open_nursery() as nursery:
            for i in range(2, 12):
                nursery.start_soon(chatter, i)
        stats = rt.statistics().writer
        print(
            f"group commit: {stats.events_committed} events in {stats.batches_committed} "
            f"batches (mean {stats.mean_batch_size:.1f} per transaction)"
        )

        # A snapshot stays fixed while the writer goes on.
        async with rt.open_session("chat-1") as w, rt.snapshot("chat-1") as snap:
            await w.append([NewEvent("user", {"text": "and after the snapshot?"})])
            seen = await snap.read()
            print(f"snapshot as_of_seq={snap.as_of_seq} still reads {len(seen)} events")

        # A live tail: replays history, then follows new commits.
        async def follow(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            task_status.started()
            async for event in rt.tail("chat-1", since_seq=3):
                print(f"tail: seq={event.seq} kind={event.kind} data={event.data}")
                if event.kind == "bye":
                    return

        async with trio.open_nursery() as nursery:
            await nursery.start(follow)
            async with rt.open_session("chat-1") as w:
                await w.append([NewEvent("assistant", {"text": "unchanged."}), NewEvent("bye")])

        sessions = await rt.list_sessions(order="updated", limit=3)
        print("most recent sessions:", ", ".join(f"{s.id}(head={s.head})" for s in sessions))


if __name__ == "__main__":
    if len(sys.argv) > 1:
        trio.run(main, sys.argv[1])
    else:
        with tempfile.TemporaryDirectory() as tmp:
            trio.run(main, str(Path(tmp) / "tour.db"))
