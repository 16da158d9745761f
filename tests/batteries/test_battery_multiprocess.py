"""Battery 5: ownership of sessions across real processes -- leases, takeover, fencing
and contention, one mechanism at a time and then all together under load.

Every child is ``python battery_mp_worker.py COMMAND ...`` (see that module), started and
read by ``battery_mp_children.py``; its stderr goes to a file under ``tmp_path`` and is
shown when an assertion fails. Databases are real SQLite files under ``tmp_path``.
(Commits of other processes seen by tails, and processes writing their own sessions side
by side, are in ``test_multiprocess_commits.py``.)

Sections 1-4 pin each mechanism alone: a refused write open, takeover after SIGKILL (this
host, another host, another PID namespace), a frozen owner fenced, take-turns contention.
Section 5 runs them *together*: four churning children keep opening random shared
sessions for writing, writing a few batches and closing, while the parent tails every
session; meanwhile one child is SIGKILLed and replaced, and one is frozen (SIGSTOP) while
it holds a session with writes still to do, kept stopped past ``lease_ttl`` while the
parent takes the session over and writes to it, then resumed (SIGCONT). Checked at the
end, from the children's reports and the database: no error at all (in particular no
``StoreBusyError`` / "database is locked" with the default 5 s busy timeout) reached a
caller; every session is gapless; every batch is whole and stored once; every
acknowledged batch is there at the seqs it was acknowledged with; every fenced batch is
absent; nothing is stored that no one attempted; the frozen owner was fenced
(``OwnershipLostError``) and wrote nothing after the takeover; the killed child's
sessions were taken over by the others; every tail saw exactly the final log, in order.

CI: one ~8 s round of section 5 (one kill, one freeze). Soak: six rounds.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import pytest
import trio
from battery_mp_children import (
    Churner,
    freeze,
    freeze_holding,
    spawn,
    spawn_churner,
    spawn_many,
)
from battery_support import contiguous, record, size
from helpers import num, obj, stat_head, text

from runtime import (
    NewEvent,
    Runtime,
    SessionOwnedError,
    SqliteStore,
    StoredEvent,
    open_runtime,
)

pytestmark = pytest.mark.slow

#: Lease TTL of the children that are killed or frozen (and of the parent in the kill test).
SHORT_TTL = 1.0
#: Extra wait past a TTL before a takeover must succeed.
TTL_MARGIN = 0.3


async def read_all(rt: Runtime, session_id: str) -> list[StoredEvent]:
    async with rt.open_session(session_id, mode="read") as r:
        return await r.read()


def seqs(events: Sequence[StoredEvent]) -> list[int]:
    return [e.seq for e in events]


def kinds_and_ns(events: Sequence[StoredEvent]) -> list[tuple[str, int]]:
    return [(e.kind, num(e, "n")) for e in events]


async def sleep_until(deadline: float) -> None:
    """Sleep until the monotonic ``deadline``: a lease TTL is wall-clock time by design
    (another process renews or lets it lapse), so this wait cannot be an event."""
    await trio.sleep(max(0.0, deadline - time.monotonic()))


# -- 1. ownership contention --------------------------------------------------------------


async def test_write_open_refused_while_other_process_holds_then_granted_after_release(
    tmp_path: Path,
) -> None:
    """Write open is refused while another process holds the session, granted after it closes."""
    db = tmp_path / "own.db"
    with trio.fail_after(20):
        async with (
            open_runtime(db) as rt,
            spawn(tmp_path, "holder", "hold", db, session="s", events=4) as child,
        ):
            ready = await child.read_json()
            assert ready["head"] == ready["committed"] == 4, ready
            for _ in range(2):  # a refused open leaves nothing behind that blocks a retry
                with pytest.raises(SessionOwnedError) as info:
                    async with rt.open_session("s", mode="write"):
                        raise AssertionError("opened a session another process holds")
                assert info.value.session_id == "s"
                assert f"pid {child.pid}" in (info.value.owner or ""), info.value.owner

            await child.send("release")
            assert await child.read_json() == {"released": True}
            # The child's runtime is still running: closing the handle released the lease.
            async with rt.open_session("s", mode="write") as w:
                assert await w.head() == 4
                assert await w.append([NewEvent("parent", {"n": 0})]) == 5
            await child.send("exit")
            assert await child.read_json() == {"exited": True}
            await child.finish()
            events = await read_all(rt, "s")
    assert seqs(events) == [1, 2, 3, 4, 5]
    assert [e.kind for e in events] == ["child"] * 4 + ["parent"]


# -- 2. lease takeover after SIGKILL --------------------------------------------------------


async def test_lease_of_killed_local_process_is_taken_over_at_once(tmp_path: Path) -> None:
    """A SIGKILLed owner on this host is taken over at once; the new owner continues its seqs."""
    db = tmp_path / "kill-local.db"
    with trio.fail_after(20):
        async with open_runtime(db, lease_ttl=SHORT_TTL) as rt:
            # Its lease_ttl is 10 s: only the dead-holder check can let the parent in now.
            async with spawn(tmp_path, "victim", "hold", db, session="s", events=9) as child:
                ready = await child.read_json()
                assert ready["head"] == ready["committed"] == 9, ready
                child.proc.kill()
                assert await child.proc.wait() == -signal.SIGKILL

            async with rt.open_session("s", mode="write") as w:  # no retry: it must succeed
                assert await w.head() == 9
                assert await w.append([NewEvent("parent", {"n": n}) for n in range(3)]) == 12
            events = await read_all(rt, "s")
    assert seqs(events) == list(range(1, 13))
    assert kinds_and_ns(events) == [("child", n) for n in range(9)] + [
        ("parent", n) for n in range(3)
    ]


async def test_lease_of_killed_remote_process_is_taken_over_after_ttl(tmp_path: Path) -> None:
    """A SIGKILLed owner of another host blocks write opens until lease_ttl, then is taken over."""
    db = tmp_path / "kill-remote.db"
    host = "elsewhere.invalid"
    with trio.fail_after(20):
        async with open_runtime(db, lease_ttl=SHORT_TTL) as rt:
            async with spawn(
                tmp_path,
                "victim",
                "hold",
                db,
                session="s",
                lease_ttl=SHORT_TTL,
                events=9,
                host=host,
            ) as child:
                ready = await child.read_json()
                assert ready["head"] == ready["committed"] == 9, ready
                child.proc.kill()
                killed_at = time.monotonic()
                assert await child.proc.wait() == -signal.SIGKILL

            # Its lease was renewed less than lease_ttl ago, and nothing here can tell that
            # a process of another host died: still owned.
            with pytest.raises(SessionOwnedError) as info:
                async with rt.open_session("s", mode="write"):
                    raise AssertionError("took over a lease that has not expired")
            assert (info.value.owner or "").startswith(f"pid {child.pid} on {host} ns ")

            await sleep_until(killed_at + SHORT_TTL + TTL_MARGIN)
            async with rt.open_session("s", mode="write") as w:  # no retry: it must succeed
                assert await w.head() == 9
                head = await w.append([NewEvent("parent", {"n": n}) for n in range(3)])
                assert head == 12
                w.append_nowait([NewEvent("parent", {"n": 3})])
                await w.flush()
                assert w.committed_head == 13
            events = await read_all(rt, "s")
    assert seqs(events) == list(range(1, 14))
    assert kinds_and_ns(events) == [("child", n) for n in range(9)] + [
        ("parent", n) for n in range(4)
    ]


def unused_pid() -> int:
    """A pid no process of this namespace has."""
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    for pid in range(pid_max - 1, 1, -1):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return pid
        except PermissionError:
            continue
    raise AssertionError("no free pid")


async def test_live_owner_in_another_pid_namespace_keeps_its_lease(tmp_path: Path) -> None:
    """A live owner whose pid is not visible here (same host, other PID namespace) keeps it."""
    db = tmp_path / "pidns.db"
    pid = unused_pid()
    with trio.fail_after(20):
        async with (
            open_runtime(db) as rt,
            spawn(tmp_path, "holder", "hold", db, session="s", events=3, fake_pid=pid) as child,
        ):
            ready = await child.read_json()
            assert ready["head"] == 3, ready
            # Its lease is live (lease_ttl 10 s, heartbeating) and it is running: a second
            # writer must be refused, whatever the pid in the lease means here.
            with pytest.raises(SessionOwnedError) as info:
                async with rt.open_session("s", mode="write"):
                    raise AssertionError(
                        f"took over the lease of a live writer (holder 'pid {pid} on "
                        f"{socket.gethostname()}', alive as pid {child.pid} here)"
                    )
            assert (info.value.owner or "").startswith(f"pid {pid} on {socket.gethostname()} ns ")
            await child.send("release")
            assert await child.read_json() == {"released": True}
            await child.send("exit")
            assert await child.read_json() == {"exited": True}
            await child.finish()


# -- 3. fencing a stale owner ---------------------------------------------------------------


async def test_frozen_owner_is_fenced_after_takeover(tmp_path: Path) -> None:
    """An owner frozen past lease_ttl is fenced: OwnershipLostError, and nothing written."""
    db = tmp_path / "fence.db"
    sentinel = tmp_path / "continue"
    with trio.fail_after(20):
        async with (
            open_runtime(db) as rt,
            spawn(
                tmp_path,
                "stale",
                "fenced",
                db,
                session="s",
                lease_ttl=SHORT_TTL,
                events=6,
                sentinel=sentinel,
            ) as child,
        ):
            ready = await child.read_json()
            assert ready["head"] == ready["committed"] == 6, ready
            stopped_at = await freeze(child, db)

            with pytest.raises(SessionOwnedError):  # frozen, but its lease is still live
                async with rt.open_session("s", mode="write"):
                    raise AssertionError("took over a lease that has not expired")

            await sleep_until(stopped_at + SHORT_TTL + TTL_MARGIN)
            async with rt.open_session("s", mode="write") as w:
                assert await w.head() == 6
                assert await w.append([NewEvent("parent", {"n": n}) for n in range(3)]) == 9

                sentinel.touch()
                child.proc.send_signal(signal.SIGCONT)
                with trio.move_on_after(5) as scope:
                    report = await child.read_json()
                assert not scope.cancelled_caught, (
                    "the stale owner's append neither failed nor returned (hung) after SIGCONT"
                )
                for attempt in ("first", "second"):
                    assert report[attempt].get("error") == "OwnershipLostError", report

                # The new owner is undisturbed by the stale one waking up.
                assert await w.append([NewEvent("parent", {"n": 3})]) == 10
                assert await stat_head(rt, "s") == 10
            assert await child.read_json() == {"exited": True}
            await child.finish()
            events = await read_all(rt, "s")
    assert seqs(events) == list(range(1, 11))
    assert kinds_and_ns(events) == [("child", n) for n in range(6)] + [
        ("parent", n) for n in range(4)
    ]


# -- 4. contention for one session -------------------------------------------------------------


async def test_processes_take_turns_owning_one_session(tmp_path: Path) -> None:
    """Processes contending for one session each write one contiguous run; none lost or doubled."""
    db = tmp_path / "contend.db"
    workers, count = 4, 20
    with trio.fail_after(30):
        async with open_runtime(db) as rt:
            assert await rt.list_sessions() == []  # the file exists before the children race
        options: dict[str, dict[str, object]] = {
            f"c{i}": {"session": "shared", "tag": f"c{i}", "count": count} for i in range(workers)
        }
        async with spawn_many(tmp_path, "contend", db, options) as children:
            for child in children:
                assert (await child.read_json())["ready"], child.describe()
            for child in children:
                await child.send("go")
            reports = {}
            for i, child in enumerate(children):
                reports[f"c{i}"] = await child.read_json()
            for child in children:
                await child.finish()
        async with open_runtime(db) as rt:
            events = await read_all(rt, "shared")
    total = workers * count
    assert seqs(events) == list(range(1, total + 1))
    runs = [events[k : k + count] for k in range(0, total, count)]
    owners = []
    for run in runs:
        tags = {text(e, "tag") for e in run}
        assert len(tags) == 1, [(e.seq, e.data) for e in run]
        tag = tags.pop()
        owners.append(tag)
        assert [num(e, "i") for e in run] == list(range(count)), tag
        report = reports[tag]
        assert (report["first"], report["last"]) == (run[0].seq, run[-1].seq), report
    assert sorted(owners) == sorted(reports), owners


# -- 5. all together, under load ---------------------------------------------------------------

SESSIONS = ["p", "q", "r"]
LEASE_TTL = 1.5
ROUND_SECONDS = 8.0


def check_logs(logs: dict[str, list[StoredEvent]], children: list[Churner]) -> dict[str, int]:
    """The end-state checks of the module doc; returns counts."""
    attempted: dict[str, tuple[str, str, int]] = {}  # batch -> (sid, handle, size)
    acked: dict[str, tuple[str, int]] = {}
    lost: set[str] = set()
    for child in children:
        for parts in child.lines:
            if parts[0] == "E":
                raise AssertionError(f"{child.name} got an error: {parts}")
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
        for e in events:  # a dict keeps the batches in their first event's order
            runs[text(e, "b")].append(e)
        for batch, run in runs.items():
            of = num(run[0], "of")
            assert [num(e, "k") for e in run] == list(range(of)), f"{sid}: batch {batch} torn"
            assert contiguous([e.seq for e in run], run[0].seq), f"{sid}: {batch} interleaved"
            assert batch not in seen, f"batch {batch} stored twice"
            seen.add(batch)
            if batch.startswith("parent."):
                continue
            assert batch in attempted, f"{sid}: {batch} was never attempted"
            assert attempted[batch][0] == sid
            assert attempted[batch][2] == of
            assert batch not in lost, f"{sid}: fenced batch {batch} was written"
            if batch in acked:
                assert acked[batch] == (sid, run[-1].seq), (batch, acked[batch], run[-1].seq)
    missing = set(acked) - seen
    assert not missing, f"acknowledged batches missing: {sorted(missing)[:10]}"
    return {"batches": len(seen), "acked": len(acked), "fenced": len(lost)}


async def one_round(
    tmp: Path, db: Path, rnd: int, rng: random.Random, earlier: list[Churner]
) -> dict[str, int]:
    """One round; ``earlier`` holds the children of earlier rounds (their batches are in
    the logs too) and gets this round's appended."""
    stopfile = tmp / f"stop{rnd}"
    children: list[Churner] = []
    tails: dict[str, list[StoredEvent]] = {sid: [] for sid in SESSIONS}
    async with open_runtime(db, lease_ttl=LEASE_TTL) as rt:
        for sid in SESSIONS:  # the sessions exist before the tails start
            async with rt.open_session(sid):
                pass
        async with trio.open_nursery() as nursery:

            async def tail(sid: str, since: int) -> None:
                async for event in rt.tail(sid, since_seq=since):
                    tails[sid].append(event)

            heads = {sid: await stat_head(rt, sid) for sid in SESSIONS}
            for sid in SESSIONS:
                nursery.start_soon(tail, sid, heads[sid])
            async with contextlib.AsyncExitStack() as stack:

                async def churner(i: int) -> Churner:
                    child = await stack.enter_async_context(
                        spawn_churner(
                            nursery,
                            tmp,
                            db,
                            f"w{rnd}x{i}",
                            seed=rng.randrange(1 << 30),
                            stopfile=stopfile,
                            sessions=",".join(SESSIONS),
                            lease_ttl=LEASE_TTL,
                        )
                    )
                    children.append(child)
                    return child

                for i in range(4):
                    await churner(i)
                start = time.monotonic()
                # 1. SIGKILL one child at a random moment (seeded), replace it.
                await trio.sleep(rng.uniform(0.8, 2.0))
                victim = children[0]
                victim.proc.kill()
                killed_at = time.monotonic()
                assert await victim.proc.wait() == -signal.SIGKILL
                orphan = victim.holding[0] if victim.holding else None
                await churner(4)
                # 2. Freeze one right after it opened a session; take the session over.
                stale = children[1]
                sid, handle = await freeze_holding(stale, db)
                frozen_at = time.monotonic()
                parent_batch = [
                    NewEvent("mp", {"w": "parent", "b": f"parent.{rnd}", "k": 0, "of": 1})
                ]
                await sleep_until(frozen_at + LEASE_TTL + 0.4)
                with trio.fail_after(20):
                    while True:  # the other children may get there first: wait our turn
                        try:
                            async with rt.open_session(sid, mode="write") as w:
                                marker = await w.append(parent_batch)
                            break
                        except SessionOwnedError:
                            await trio.sleep(0.01)
                assert time.monotonic() - frozen_at >= LEASE_TTL
                stale.proc.send_signal(signal.SIGCONT)
                # 3. The load goes on for the rest of the round, then every child stops.
                await sleep_until(start + ROUND_SECONDS)
                stopfile.touch()
                with trio.fail_after(30):
                    for child in children[1:]:
                        await child.finish()
                        await child.eof.wait()  # its last report is read
                        assert child.lines, child.describe()
                        assert child.lines[-1][0] == "X", child.lines[-3:]
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
        if (text(e, "w"), str(obj(e).get("h"))) == (stale.name, handle)
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
    children: list[Churner] = []
    for rnd in range(rounds):
        for key, value in (await one_round(tmp_path, db, rnd, rng, children)).items():
            totals[key] = value if key in ("batches", "acked", "fenced") else totals[key] + value
    record("multiprocess", rounds=rounds, kills=rounds, freezes=rounds, **totals, events_lost=0)
