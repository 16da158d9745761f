"""Commits across real processes: a tail sees another process's commits in order, and
processes writing their own sessions of one file side by side never meet a busy error.

Children are ``python battery_mp_worker.py append ...`` (see that module), started and
read by ``battery_mp_children.py``. Ownership across processes (refused opens, takeover,
fencing, contention) is battery 5, ``test_battery_multiprocess.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
import trio
from battery_mp_children import spawn, spawn_many
from helpers import num, stat_head, text

from runtime import StoredEvent, open_runtime

pytestmark = pytest.mark.slow


def seqs(events: Sequence[StoredEvent]) -> list[int]:
    return [e.seq for e in events]


async def test_tail_sees_other_process_commits_in_order(tmp_path: Path) -> None:
    """rt.tail() yields another process's commits in seq order, without gaps or duplicates."""
    db = tmp_path / "tail.db"
    total = 50
    with trio.fail_after(20):
        async with open_runtime(db) as rt:
            async with rt.open_session("t", mode="write") as w:
                assert await w.head() == 0  # created: a tail of a missing session raises
            received: dict[int, list[StoredEvent]] = {0: [], 25: []}

            async def collect(since: int) -> None:
                async for event in rt.tail("t", since_seq=since):
                    received[since].append(event)
                    if event.seq >= total:
                        break

            async with spawn(
                tmp_path,
                "appender",
                "append",
                db,
                session="t",
                tag="tail",
                awaited=20,
                nowait_batches=6,
                nowait_size=5,
                pause=0.02,
            ) as child:
                async with trio.open_nursery() as nursery:
                    for since in received:
                        nursery.start_soon(collect, since)
                done = await child.read_json()
                assert done == {"done": True, "head": total, "committed": total}, done
                await child.finish()
    for since, events in received.items():
        assert seqs(events) == list(range(since + 1, total + 1)), since
        assert [num(e, "n") for e in events] == seqs(events)
        assert {text(e, "tag") for e in events} == {"tail"}


async def test_processes_append_to_own_sessions_concurrently(tmp_path: Path) -> None:
    """Four processes appending to their own sessions never hit busy errors and lose nothing."""
    db = tmp_path / "many.db"
    awaited, batches, size = 200, 5, 10
    total = awaited + batches * size
    with trio.fail_after(30):
        async with open_runtime(db) as rt:
            assert await rt.list_sessions() == []  # the file exists before the children race
        options: dict[str, dict[str, object]] = {
            f"w{i}": {
                "session": f"s{i}",
                "tag": f"w{i}",
                "wait_go": True,
                "awaited": awaited,
                "nowait_batches": batches,
                "nowait_size": size,
            }
            for i in range(4)
        }
        async with spawn_many(tmp_path, "append", db, options) as children:
            for child in children:
                assert (await child.read_json())["ready"], child.describe()
            for child in children:
                await child.send("go")
            for child in children:
                done = await child.read_json()
                assert done == {"done": True, "head": total, "committed": total}, done
            for child in children:
                await child.finish()
                err = child.stderr()
                assert "StoreBusyError" not in err
                assert "database is locked" not in err
        async with open_runtime(db) as rt:
            logs = {i: await rt.read(f"s{i}") for i in range(4)}
            heads = {i: await stat_head(rt, f"s{i}") for i in range(4)}
    for i, events in logs.items():
        assert seqs(events) == list(range(1, total + 1)), i
        assert [num(e, "n") for e in events] == seqs(events), i
        assert {text(e, "tag") for e in events} == {f"w{i}"}
        assert [e.kind for e in events] == ["awaited"] * awaited + ["nowait"] * batches * size
        assert heads[i] == total
