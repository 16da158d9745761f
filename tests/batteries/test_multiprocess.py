"""The runtime across real processes: ownership leases, fencing, tails and contention.

Every child is ``python tests/mp_worker.py ...`` (see that module), talking JSON lines on
stdout; its stderr goes to a file under ``tmp_path`` and is shown when an assertion fails.
Databases are real SQLite files under ``tmp_path``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import trio
from helpers import all_threads_stopped, write_lock_free

from runtime import (
    NewEvent,
    Runtime,
    SessionOwnedError,
    StoredEvent,
    open_runtime,
)

pytestmark = pytest.mark.slow

WORKER = Path(__file__).resolve().parent / "mp_worker.py"

#: Lease TTL of the children that are killed or frozen (and of the parent in the kill test).
SHORT_TTL = 1.0
#: Extra wait past a TTL before a takeover must succeed.
TTL_MARGIN = 0.3


class Child:
    """One running ``mp_worker.py`` process."""

    def __init__(self, proc: trio.Process, name: str, stderr_path: Path) -> None:
        self.proc = proc
        self.name = name
        self.stderr_path = stderr_path
        self._buffer = bytearray()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def describe(self) -> str:
        return f"child {self.name} (pid {self.pid}, rc {self.proc.returncode})\n{self.stderr()}"

    async def read_json(self) -> dict[str, Any]:
        """The child's next JSON line; fails (with its stderr) if it closed stdout first."""
        assert self.proc.stdout is not None
        while b"\n" not in self._buffer:
            chunk = await self.proc.stdout.receive_some(65536)
            if not chunk:
                with trio.move_on_after(2):
                    await self.proc.wait()
                raise AssertionError(
                    f"stdout closed before a full line (buffered {bytes(self._buffer)!r}); "
                    + self.describe()
                )
            self._buffer += chunk
        line, _, rest = self._buffer.partition(b"\n")
        self._buffer = bytearray(rest)
        return json.loads(line)  # type: ignore[no-any-return]

    async def send(self, text: str = "go") -> None:
        assert self.proc.stdin is not None
        await self.proc.stdin.send_all(text.encode() + b"\n")

    async def finish(self) -> None:
        """Wait for the child to exit and check it exited 0 with a clean stderr."""
        rc = await self.proc.wait()
        assert rc == 0, self.describe()
        err = self.stderr()
        assert "Traceback" not in err, self.describe()


def worker_argv(command: str, db: Path, options: dict[str, object]) -> list[str]:
    """Command line of a child: ``lease_ttl=1.0`` -> ``--lease-ttl 1.0``, ``x=True`` -> ``--x``."""
    argv = [sys.executable, str(WORKER), command, str(db)]
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        argv += [flag] if value is True else [flag, str(value)]
    return argv


@contextlib.asynccontextmanager
async def spawn(
    tmp_path: Path, name: str, command: str, db: Path, **options: object
) -> AsyncIterator[Child]:
    """Run ``mp_worker.py COMMAND DB --options...`` for the block; the child is killed (if
    still running) and reaped at exit."""
    stderr_path = tmp_path / f"{name}.stderr"
    with stderr_path.open("wb") as stderr:
        proc = await trio.lowlevel.open_process(
            worker_argv(command, db, options),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
        )
    try:
        yield Child(proc, name, stderr_path)
    finally:
        with trio.CancelScope(shield=True):
            if proc.returncode is None:
                # Still running: the test failed or timed out. Dump its stacks to its stderr
                # (shown in the failure's captured stdout), then kill it.
                proc.send_signal(signal.SIGCONT)
                proc.send_signal(signal.SIGUSR2)  # thread stacks (faulthandler)
                proc.send_signal(signal.SIGUSR1)  # trio task tree
                with trio.move_on_after(0.5):
                    await proc.wait()
                if proc.returncode is None:
                    proc.kill()  # SIGKILL also ends a SIGSTOPped child
            await proc.wait()
            if proc.returncode not in (0, -signal.SIGKILL) or stderr_path.stat().st_size:
                print(f"--- stderr of child {name} (pid {proc.pid}, rc {proc.returncode}):")
                print(stderr_path.read_text(errors="replace"))
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    await stream.aclose()


@contextlib.asynccontextmanager
async def spawn_many(
    tmp_path: Path, command: str, db: Path, options: dict[str, dict[str, object]]
) -> AsyncIterator[list[Child]]:
    """Spawn one child per ``name: options`` entry; all are reaped at exit."""
    async with contextlib.AsyncExitStack() as stack:
        yield [
            await stack.enter_async_context(spawn(tmp_path, name, command, db, **opts))
            for name, opts in options.items()
        ]


async def freeze(child: Child, db: Path) -> float:
    """SIGSTOP the child at a moment it does not hold the database's write lock (a frozen
    lock holder would block every writer, which is not what the fencing test is about).
    Return the monotonic time of the final stop: its lease was last renewed before it."""
    for _ in range(50):
        child.proc.send_signal(signal.SIGSTOP)
        stopped_at = time.monotonic()
        while True:  # the signal is delivered asynchronously
            if all_threads_stopped(child.pid):
                break
            await trio.sleep(0.001)
        if await trio.to_thread.run_sync(write_lock_free, db):
            return stopped_at
        child.proc.send_signal(signal.SIGCONT)
        await trio.sleep(0.01)
    raise AssertionError("could not freeze the child outside a write transaction")


async def read_all(rt: Runtime, session_id: str) -> list[StoredEvent]:
    async with rt.open_session(session_id, mode="read") as r:
        return await r.read()


def seqs(events: Sequence[StoredEvent]) -> list[int]:
    return [e.seq for e in events]


async def sleep_until(deadline: float) -> None:
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
    assert [(e.kind, e.data["n"]) for e in events] == (  # type: ignore[index,call-overload]
        [("child", n) for n in range(9)] + [("parent", n) for n in range(3)]
    )


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
    assert [(e.kind, e.data["n"]) for e in events] == (  # type: ignore[index,call-overload]
        [("child", n) for n in range(9)] + [("parent", n) for n in range(4)]
    )


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
                assert (await rt.stat("s")).head == 10  # type: ignore[union-attr]
            assert await child.read_json() == {"exited": True}
            await child.finish()
            events = await read_all(rt, "s")
    assert seqs(events) == list(range(1, 11))
    assert [(e.kind, e.data["n"]) for e in events] == (  # type: ignore[index,call-overload]
        [("child", n) for n in range(6)] + [("parent", n) for n in range(4)]
    )


# -- 4. tail across processes ---------------------------------------------------------------


async def test_tail_sees_other_process_commits_in_order(tmp_path: Path) -> None:
    """rt.tail() yields another process's commits in seq order, without gaps or duplicates."""
    db = tmp_path / "tail.db"
    total = 50
    with trio.fail_after(20):
        async with open_runtime(db) as rt:
            async with rt.open_session("t", mode="write"):
                pass  # create it: a tail of a missing session raises
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
        assert [e.data["n"] for e in events] == seqs(events)  # type: ignore[index,call-overload]
        assert {e.data["tag"] for e in events} == {"tail"}  # type: ignore[index,call-overload]


# -- 5. concurrent writers on different sessions ----------------------------------------------


async def test_processes_append_to_own_sessions_concurrently(tmp_path: Path) -> None:
    """Four processes appending to their own sessions never hit busy errors and lose nothing."""
    db = tmp_path / "many.db"
    awaited, batches, size = 200, 5, 10
    total = awaited + batches * size
    with trio.fail_after(30):
        async with open_runtime(db):
            pass  # the file exists before the children race to open it
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
            logs = {i: await read_all(rt, f"s{i}") for i in range(4)}
            infos = {i: await rt.stat(f"s{i}") for i in range(4)}
    for i, events in logs.items():
        assert seqs(events) == list(range(1, total + 1)), i
        assert [e.data["n"] for e in events] == seqs(events), i  # type: ignore[index,call-overload]
        assert {e.data["tag"] for e in events} == {f"w{i}"}  # type: ignore[index,call-overload]
        assert [e.kind for e in events] == ["awaited"] * awaited + ["nowait"] * batches * size
        assert infos[i] is not None and infos[i].head == total  # type: ignore[union-attr]


# -- 6. contention for one session ------------------------------------------------------------


async def test_processes_take_turns_owning_one_session(tmp_path: Path) -> None:
    """Processes contending for one session each write one contiguous run; none lost or doubled."""
    db = tmp_path / "contend.db"
    workers, count = 4, 20
    with trio.fail_after(30):
        async with open_runtime(db):
            pass
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
        tags = {e.data["tag"] for e in run}  # type: ignore[index,call-overload]
        assert len(tags) == 1, [(e.seq, e.data) for e in run]
        tag = tags.pop()
        owners.append(tag)
        assert [e.data["i"] for e in run] == list(range(count)), tag  # type: ignore[index,call-overload]
        report = reports[tag]
        assert (report["first"], report["last"]) == (run[0].seq, run[-1].seq), report
    assert sorted(owners) == sorted(reports), owners
