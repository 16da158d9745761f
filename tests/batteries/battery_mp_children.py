"""The parent's side of the multi-process tests (``test_battery_multiprocess.py``): start
``battery_mp_worker.py`` children, read their reports, freeze them (SIGSTOP) at a moment
they hold no write transaction, and reap them."""

from __future__ import annotations

import contextlib
import fcntl
import json
import signal
import struct
import subprocess
import termios
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import trio
from battery_support import child_env, python_child
from helpers import all_threads_stopped, write_lock_free

WORKER = "battery_mp_worker.py"


class Child:
    """One running worker whose JSON-line reports are read on demand (:meth:`read_json`)."""

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
        message = json.loads(line)
        assert isinstance(message, dict), message
        return message

    async def send(self, text: str = "go") -> None:
        assert self.proc.stdin is not None
        await self.proc.stdin.send_all(text.encode() + b"\n")

    async def finish(self) -> None:
        """Wait for the child to exit and check it exited 0 with a clean stderr."""
        rc = await self.proc.wait()
        assert rc == 0, self.describe()
        assert "Traceback" not in self.stderr(), self.describe()


class Churner(Child):
    """A ``churn`` child: :meth:`pump` collects its report lines as they come."""

    def __init__(self, proc: trio.Process, name: str, stderr_path: Path) -> None:
        super().__init__(proc, name, stderr_path)
        self.lines: list[list[str]] = []
        self.opened_at: list[tuple[float, str]] = []  # (arrival time, session) of "O" lines
        self.holding: tuple[str, str] | None = None  # (sid, handle) while a session is open
        self.changed = trio.Event()
        #: Set when the pump has read everything the child wrote (end of file).
        self.eof = trio.Event()

    async def pump(self) -> None:
        """Read the child's stdout until it closes (keeps the pipe drained)."""
        try:
            await self._pump()
        except trio.ClosedResourceError:  # reaped while we waited: nothing more comes
            pass
        finally:
            self.eof.set()

    async def _pump(self) -> None:
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

    async def drained(self) -> None:
        """Wait until :meth:`pump` has read (and parsed: the same task step) every byte
        the child wrote; meant for a stopped child, whose output is final."""
        assert isinstance(self.proc.stdout, trio.lowlevel.FdStream)
        fd = self.proc.stdout.fileno()
        with trio.fail_after(10):
            while _unread_bytes(fd):  # noqa: ASYNC110 (a pipe filled by another process)
                await trio.sleep(0.001)

    def batches_left(self, held: tuple[str, str]) -> int:
        """How many of its planned batches the child has not finished through ``held``."""
        sid, handle = held
        planned = next(int(p[3]) for p in self.lines if p[:3] == ["O", sid, handle])
        done = sum(1 for p in self.lines if p[0] in ("K", "L", "E") and p[1:3] == [sid, handle])
        return planned - done


def _unread_bytes(fd: int) -> int:
    """How many bytes wait in the pipe ``fd`` (FIONREAD)."""
    [count] = struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))
    return int(count)


def worker_argv(command: str, db: Path, options: dict[str, object]) -> list[str]:
    """Command line of a child: ``lease_ttl=1.0`` -> ``--lease-ttl 1.0``, ``x=True`` -> ``--x``."""
    argv = [command, str(db)]
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        argv += [flag] if value is True else [flag, str(value)]
    return python_child(WORKER, *argv)


@contextlib.asynccontextmanager
async def _process(
    tmp_path: Path, name: str, command: str, db: Path, options: dict[str, object]
) -> AsyncIterator[tuple[trio.Process, Path]]:
    """Run ``battery_mp_worker.py COMMAND DB --options...`` for the block; a child still
    running at exit (the test failed or timed out) dumps its stacks to its stderr (shown
    in the failure's captured stdout) and is killed; every child is reaped."""
    stderr_path = tmp_path / f"{name}.stderr"
    with stderr_path.open("wb") as stderr:
        proc = await trio.lowlevel.open_process(
            worker_argv(command, db, options),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=child_env(),
        )
    try:
        yield proc, stderr_path
    finally:
        with trio.CancelScope(shield=True):
            if proc.returncode is None:
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
async def spawn(
    tmp_path: Path, name: str, command: str, db: Path, **options: object
) -> AsyncIterator[Child]:
    """A :class:`Child` running ``command`` for the block (see :func:`_process`)."""
    async with _process(tmp_path, name, command, db, options) as (proc, stderr_path):
        yield Child(proc, name, stderr_path)


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


@contextlib.asynccontextmanager
async def spawn_churner(
    nursery: trio.Nursery, tmp_path: Path, db: Path, name: str, **options: object
) -> AsyncIterator[Churner]:
    """A ``churn`` child whose reports ``nursery`` pumps (see :func:`_process`)."""
    async with _process(tmp_path, name, "churn", db, {"tag": name, **options}) as (
        proc,
        stderr_path,
    ):
        child = Churner(proc, name, stderr_path)
        nursery.start_soon(child.pump)
        yield child


async def stop(child: Child) -> float:
    """SIGSTOP ``child`` and wait until every thread of it is stopped (the signal is
    delivered asynchronously); return the monotonic time of the stop."""
    child.proc.send_signal(signal.SIGSTOP)
    stopped_at = time.monotonic()
    with trio.fail_after(10):
        while not all_threads_stopped(child.pid):  # noqa: ASYNC110 (another process's state)
            await trio.sleep(0.001)
    return stopped_at


async def freeze(child: Child, db: Path) -> float:
    """Stop ``child`` at a moment it does not hold the database's write lock (a frozen
    lock holder would block every writer, which is not what the fencing tests are about).
    Return the monotonic time of the final stop: its lease was last renewed before it."""
    with trio.fail_after(20):
        while True:
            stopped_at = await stop(child)
            if await trio.to_thread.run_sync(write_lock_free, db):
                return stopped_at
            child.proc.send_signal(signal.SIGCONT)
            await trio.sleep(0.01)  # let it leave the transaction before the next try


async def freeze_holding(child: Churner, db: Path) -> tuple[str, str]:
    """Stop ``child`` while it holds a session with at least two batches still to write
    (so at least one write is attempted after it resumes), at a moment it does not hold
    the write lock; return the (session, handle) it holds."""
    with trio.fail_after(30):
        while True:
            while child.holding is None:
                await child.changed.wait()
            await stop(child)
            await child.drained()  # what it reported before the stop is all parsed
            held = child.holding
            if (
                held is not None
                and child.batches_left(held) >= 2
                and await trio.to_thread.run_sync(write_lock_free, db)
            ):
                return held
            child.proc.send_signal(signal.SIGCONT)
            await trio.sleep(0.005)  # let it move on before the next try
