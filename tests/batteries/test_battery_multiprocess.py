"""Battery 5: four processes contending for the same sessions of one database, under load.

``tests/test_multiprocess.py`` pins each mechanism alone (a refused open, one takeover
after SIGKILL, one frozen owner fenced, one cross-process tail, take-turns contention).
This battery runs them *together*: four churning children (``tests/battery_mp_worker.py``)
keep opening random shared sessions for writing, writing a few batches and closing, while
the parent tails every session; meanwhile one child is SIGKILLed and replaced, and one
is frozen (SIGSTOP) while it holds a session with writes still to do, kept stopped past
``lease_ttl`` while the parent takes the session over and writes to it, then resumed
(SIGCONT).

Checked at the end, from the children's reports and the database:

* no ``StoreBusyError`` / "database is locked" (no error at all) reached a caller, with
  default settings (``busy_timeout_ms`` 5000);
* every session is gapless; every batch is whole and stored once; every acknowledged
  batch is there at the seqs it was acknowledged with; every fenced batch is absent;
  nothing is stored that no one attempted;
* the frozen owner was fenced (``OwnershipLostError``) and wrote nothing after the
  takeover; the killed child's sessions were taken over by the others;
* every tail saw exactly the final log, in order.

CI: one ~8 s round (one kill, one freeze). Soak: six rounds.
"""

from __future__ import annotations

import contextlib
import random
import signal
import subprocess
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio
from battery_support import child_env, contiguous, python_child, record, size
from helpers import all_threads_stopped, write_lock_free

from runtime import (
    NewEvent,
    SessionOwnedError,
    SqliteStore,
    StoredEvent,
    open_runtime,
)

pytestmark = pytest.mark.slow

SESSIONS = ["p", "q", "r"]
LEASE_TTL = 1.5
ROUND_SECONDS = 8.0


class Child:
    """One churning child and everything it reported."""

    def __init__(self, proc: trio.Process, tag: str, stderr: Path) -> None:
        self.proc = proc
        self.tag = tag
        self.stderr = stderr
        self.lines: list[list[str]] = []
        self.opened_at: list[tuple[float, str]] = []  # (arrival time, session) of "O" lines
        self.holding: tuple[str, str] | None = None  # (sid, handle) while a session is open
        self.changed = trio.Event()

    async def pump(self) -> None:
        """Read the child's stdout until it closes (keeps the pipe drained)."""
        assert self.proc.stdout is not None
        buffer = b""
        while True:
            chunk = await self.proc.stdout.receive_some(65536)
            if not chunk:
                return
            buffer += chunk
            *complete, buffer = buffer.split(b"\n")
            for raw in complete:
                parts = raw.decode().split(" ", 5)
                self.lines.append(parts)
                if parts[0] == "O":
                    self.holding = (parts[1], parts[2])
                    self.opened_at.append((time.monotonic(), parts[1]))
                elif parts[0] == "C":
                    self.holding = None
                self.changed.set()
                self.changed = trio.Event()


@contextlib.asynccontextmanager
async def churner(
    nursery: trio.Nursery, tmp: Path, db: Path, tag: str, seed: int, stopfile: Path
) -> AsyncIterator[Child]:
    stderr_path = tmp / f"{tag}.stderr"
    with stderr_path.open("wb") as stderr:
        proc = await trio.lowlevel.open_process(
            python_child(
                "battery_mp_worker.py",
                str(db),
                tag,
                str(seed),
                str(stopfile),
                "--sessions",
                ",".join(SESSIONS),
                "--lease-ttl",
                str(LEASE_TTL),
            ),
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=child_env(),
        )
    child = Child(proc, tag, stderr_path)
    nursery.start_soon(child.pump)
    try:
        yield child
    finally:
        with trio.CancelScope(shield=True):
            if proc.returncode is None:
                with trio.move_on_after(30):
                    await proc.wait()
                if proc.returncode is None:
                    proc.send_signal(signal.SIGCONT)
                    proc.kill()
            await proc.wait()
            if proc.stdout is not None:
                await proc.stdout.aclose()


def batches_left(child: Child, held: tuple[str, str]) -> int:
    """How many of its planned batches the child has not finished through ``held``."""
    sid, handle = held
    planned = next(int(p[3]) for p in child.lines if p[:3] == ["O", sid, handle])
    done = sum(1 for p in child.lines if p[0] in ("K", "L", "E") and p[1:3] == [sid, handle])
    return planned - done


async def freeze_holding(child: Child, db: Path) -> tuple[str, str]:
    """SIGSTOP ``child`` while it holds a session with at least two batches still to
    write (so at least one write is attempted after it resumes), at a moment it does not
    hold the write lock; return the (session, handle) it holds."""
    with trio.fail_after(30):
        while True:
            while child.holding is None:
                await child.changed.wait()
            child.proc.send_signal(signal.SIGSTOP)
            while not all_threads_stopped(child.proc.pid):  # noqa: ASYNC110 (another process's state)
                await trio.sleep(0.001)
            await trio.sleep(0.05)  # let the pump read what the child wrote before it stopped
            held = child.holding
            if (
                held is not None
                and batches_left(child, held) >= 2
                and await trio.to_thread.run_sync(write_lock_free, db)
            ):
                return held
            child.proc.send_signal(signal.SIGCONT)
            await trio.sleep(0.005)


def check_logs(logs: dict[str, list[StoredEvent]], children: list[Child]) -> dict[str, int]:
    """The end-state checks of the module doc; returns counts."""
    attempted: dict[str, tuple[str, str, int]] = {}  # batch -> (sid, handle, size)
    acked: dict[str, tuple[str, int]] = {}
    lost: set[str] = set()
    for child in children:
        for parts in child.lines:
            if parts[0] == "E":
                raise AssertionError(f"{child.tag} got an error: {parts}")
            if parts[0] == "T":
                attempted[parts[3]] = (parts[1], parts[2], int(parts[4]))
            elif parts[0] == "K":
                acked[parts[3]] = (parts[1], int(parts[4]))
            elif parts[0] == "L":
                lost.add(parts[3])
    seen: set[str] = set()
    for sid, events in logs.items():
        assert contiguous([e.seq for e in events]), f"{sid}: gap"
        runs: dict[str, list[StoredEvent]] = defaultdict(list)
        order: list[str] = []
        for e in events:
            batch = e.data["b"]  # type: ignore[index,call-overload]
            if batch not in runs:
                order.append(batch)
            runs[batch].append(e)
        for batch in order:
            run = runs[batch]
            of = run[0].data["of"]  # type: ignore[index,call-overload]
            assert [e.data["k"] for e in run] == list(range(of)), f"{sid}: batch {batch} torn"  # type: ignore[index,call-overload]
            assert contiguous([e.seq for e in run], run[0].seq), f"{sid}: {batch} interleaved"
            assert batch not in seen, f"batch {batch} stored twice"
            seen.add(batch)
            if batch.startswith("parent."):
                continue
            assert batch in attempted, f"{sid}: {batch} was never attempted"
            assert attempted[batch][0] == sid and attempted[batch][2] == of
            assert batch not in lost, f"{sid}: fenced batch {batch} was written"
            if batch in acked:
                assert acked[batch] == (sid, run[-1].seq), (batch, acked[batch], run[-1].seq)
    missing = set(acked) - seen
    assert not missing, f"acknowledged batches missing: {sorted(missing)[:10]}"
    return {"batches": len(seen), "acked": len(acked), "fenced": len(lost)}


async def one_round(
    tmp: Path, db: Path, rnd: int, rng: random.Random, earlier: list[Child]
) -> dict[str, int]:
    """One round; ``earlier`` holds the children of earlier rounds (their batches are in
    the logs too) and gets this round's appended."""
    stopfile = tmp / f"stop{rnd}"
    children: list[Child] = []
    tails: dict[str, list[StoredEvent]] = {sid: [] for sid in SESSIONS}
    async with open_runtime(db, lease_ttl=LEASE_TTL) as rt:
        for sid in SESSIONS:  # the sessions exist before the tails start
            async with rt.open_session(sid):
                pass
        async with trio.open_nursery() as nursery:

            async def tail(sid: str, since: int) -> None:
                async for event in rt.tail(sid, since_seq=since):
                    tails[sid].append(event)

            heads = {sid: (await rt.stat(sid)).head for sid in SESSIONS}  # type: ignore[union-attr]
            for sid in SESSIONS:
                nursery.start_soon(tail, sid, heads[sid])
            async with contextlib.AsyncExitStack() as stack:
                for i in range(4):
                    child = await stack.enter_async_context(
                        churner(nursery, tmp, db, f"w{rnd}x{i}", rng.randrange(1 << 30), stopfile)
                    )
                    children.append(child)
                start = time.monotonic()
                # 1. SIGKILL one child at a random moment, replace it.
                await trio.sleep(rng.uniform(0.8, 2.0))
                victim = children[0]
                victim.proc.kill()
                killed_at = time.monotonic()
                assert await victim.proc.wait() == -signal.SIGKILL
                orphan = victim.holding[0] if victim.holding else None
                children.append(
                    await stack.enter_async_context(
                        churner(nursery, tmp, db, f"w{rnd}x4", rng.randrange(1 << 30), stopfile)
                    )
                )
                # 2. Freeze one right after it opened a session; take the session over.
                stale = children[1]
                sid, handle = await freeze_holding(stale, db)
                frozen_at = time.monotonic()
                await trio.sleep(LEASE_TTL + 0.4)
                with trio.fail_after(20):
                    while True:  # the other children may get there first: wait our turn
                        try:
                            async with rt.open_session(sid, mode="write") as w:
                                marker = await w.append(
                                    [
                                        NewEvent(
                                            "mp",
                                            {"w": "parent", "b": f"parent.{rnd}", "k": 0, "of": 1},
                                        )
                                    ]
                                )
                            break
                        except SessionOwnedError:  # another child got there first
                            await trio.sleep(0.01)
                assert time.monotonic() - frozen_at >= LEASE_TTL
                stale.proc.send_signal(signal.SIGCONT)
                await trio.sleep(max(0.0, ROUND_SECONDS - (time.monotonic() - start)))
                stopfile.touch()
            for child in children[1:]:
                assert child.proc.returncode == 0, child.stderr.read_text()
                assert "Traceback" not in child.stderr.read_text(), child.stderr.read_text()
                assert child.lines and child.lines[-1][0] == "X", child.lines[-3:]
            store = SqliteStore(db)
            try:
                logs = {s: store.read(s) for s in SESSIONS}
            finally:
                store.close()
            with trio.fail_after(10):  # the tails catch up with the final heads
                while any(len(tails[s]) < len(logs[s]) - heads[s] for s in SESSIONS):  # noqa: ASYNC110
                    await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
    for s in SESSIONS:
        assert [(e.seq, e.data) for e in tails[s]] == [
            (e.seq, e.data) for e in logs[s][heads[s] :]
        ], f"tail of {s}"
    earlier.extend(children)
    counts = check_logs(logs, earlier)
    if orphan is not None:  # the killed child's session was taken over by another
        assert any(t > killed_at and s == orphan for c in children[1:] for t, s in c.opened_at), (
            f"nobody took {orphan} over after its owner was killed"
        )
    # The frozen owner wrote nothing after the takeover and was fenced.
    after_marker = [
        e
        for e in logs[sid][marker:]
        if (e.data["w"], str(e.data.get("h"))) == (stale.tag, handle)  # type: ignore[index,union-attr]
    ]
    assert not after_marker, f"stale owner wrote after the takeover: {after_marker[:3]}"
    fenced = [p for p in stale.lines if p[0] == "L" and p[1] == sid and p[2] == handle]
    assert fenced, f"the frozen owner of {sid} was not fenced: {stale.lines[-8:]}"
    counts["refused"] = sum(int(c.lines[-1][1]) for c in children[1:])
    return counts


@pytest.mark.parametrize("rounds", [size(1, 6)])
async def test_four_processes_contend_under_load(tmp_path: Path, rounds: int) -> None:
    """Four contending processes, a SIGKILL and a fenced owner: no busy error, nothing lost."""
    db = tmp_path / "mp.db"
    rng = random.Random(4242)
    totals: dict[str, int] = defaultdict(int)
    children: list[Child] = []
    for rnd in range(rounds):
        for key, value in (await one_round(tmp_path, db, rnd, rng, children)).items():
            totals[key] = value if key in ("batches", "acked", "fenced") else totals[key] + value
    record("multiprocess", rounds=rounds, kills=rounds, freezes=rounds, **totals, events_lost=0)
