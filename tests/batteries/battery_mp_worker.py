"""The child processes of the multi-process tests (``test_battery_multiprocess.py``).

Usage: ``python battery_mp_worker.py COMMAND DB [options]``. Any unexpected exception
propagates: the traceback goes to stderr and the exit status is 1, which the parent
reports.

Commands talking JSON lines on stdout (flushed at once), taking orders as stdin lines (or,
for ``fenced``, a sentinel file):

* ``hold``: open ``--session`` for write, append ``--events`` events, print
  ``{"ready": ...}``, wait for a stdin line, close the handle (releasing the lease), print
  ``{"released": ...}``, wait for another stdin line, leave the runtime.
* ``fenced``: like ``hold`` up to ``ready``; then poll every 0.1 s for ``--sentinel``; when
  it appears, try two more appends and report each outcome as JSON.
* ``append``: (optionally wait for ``go``) append ``--awaited`` events one awaited append
  each, then ``--nowait-batches`` batches of ``--nowait-size`` events with
  ``append_nowait`` followed by ``flush``; print ``{"done": ...}``.
* ``contend``: wait for ``go``; loop on ``open_session(write)`` until it succeeds
  (retrying on ``SessionOwnedError``), append ``--count`` events, close; print the seq
  range written.

And ``churn`` (the load of the battery), reporting plain lines: until ``--stopfile``
exists, pick a random session of ``--sessions`` and try to open it for writing (another
owner: try again a little later); holding it, write a few batches (awaited ``append``, or
``append_nowait`` then ``flush``), pausing between them, then close it. One line per
step::

    O <sid> <h> <n>              handle h opened on sid (h counts this child's opens);
                                 n batches will be written through it
    T <sid> <h> <batch> <size>   about to write batch (ids are "<tag>.<n>")
    K <sid> <h> <batch> <last>   batch acknowledged (committed), ending at seq <last>
    L <sid> <h> <batch>          OwnershipLostError: the batch was fenced out
    E <sid> <h> <batch> <type> <message>   any other tidelog error (must never happen)
    C <sid> <h>                  handle closed
    X <refused>                  exiting; <refused> write opens were refused

Its event data: ``{"w": tag, "h": h, "b": batch, "k": index, "of": size}``.

Every command takes ``--lease-ttl``, and two disguises for the lease's holder string
(``"pid <pid> on <host> ns <pid-namespace>"``): ``--host`` (a process of another host)
and ``--fake-pid`` (a process of another PID namespace on this host, whose pid means
nothing here). On SIGUSR1 a child prints its trio tasks to stderr, on SIGUSR2 its
threads' stacks (for hang reports).
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import random
import signal
import socket
import sys
from collections.abc import Awaitable, Callable

import trio

from runtime import (
    JSON,
    NewEvent,
    OwnershipLostError,
    SessionOwnedError,
    SessionWriter,
    TidelogError,
    open_runtime,
)


def emit(**message: JSON) -> None:
    """Send one JSON line to the parent."""
    print(json.dumps(message), flush=True)


def say(*parts: object) -> None:
    """Send one plain report line to the parent (``churn``)."""
    sys.stdout.write(" ".join(str(p) for p in parts) + "\n")
    sys.stdout.flush()


async def read_line() -> str:
    """One line from the parent ("" at EOF)."""
    return await trio.to_thread.run_sync(sys.stdin.readline)


async def write_events(w: SessionWriter, tag: str, count: int) -> int:
    """Append ``count`` events: the first half one awaited append each, the rest as one
    ``append_nowait`` batch followed by a flush. Return the head."""
    awaited = (count + 1) // 2
    head = await w.head()
    for n in range(awaited):
        head = await w.append([NewEvent("child", {"tag": tag, "n": n})])
    rest = [NewEvent("child", {"tag": tag, "n": n}) for n in range(awaited, count)]
    if rest:
        _, head = w.append_nowait(rest)
        await w.flush()
    return head


async def cmd_hold(args: argparse.Namespace) -> None:
    async with open_runtime(args.db, lease_ttl=args.lease_ttl) as rt:
        async with rt.open_session(args.session, mode="write") as w:
            head = await write_events(w, args.tag, args.events)
            emit(ready=True, pid=os.getpid(), head=head, committed=w.committed_head)
            await read_line()
        emit(released=True)
        await read_line()
    emit(exited=True)


async def attempt_append(w: SessionWriter, n: int) -> dict[str, JSON]:
    try:
        head = await w.append([NewEvent("stale", {"n": n})])
    except TidelogError as exc:
        return {"error": type(exc).__name__, "message": str(exc)}
    return {"ok": True, "head": head}


async def cmd_fenced(args: argparse.Namespace) -> None:
    sentinel = trio.Path(args.sentinel)
    async with (
        open_runtime(args.db, lease_ttl=args.lease_ttl) as rt,
        rt.open_session(args.session, mode="write") as w,
    ):
        head = await write_events(w, args.tag, args.events)
        emit(ready=True, pid=os.getpid(), head=head, committed=w.committed_head)
        while True:  # polled, so that a SIGSTOP/SIGCONT in between is harmless
            await trio.sleep(0.1)
            if await sentinel.exists():
                break
        first = await attempt_append(w, 0)
        second = await attempt_append(w, 1)
        emit(first=first, second=second)
    emit(exited=True)


async def cmd_append(args: argparse.Namespace) -> None:
    async with open_runtime(args.db, lease_ttl=args.lease_ttl) as rt:
        if args.wait_go:
            emit(ready=True, pid=os.getpid())
            await read_line()
        async with rt.open_session(args.session, mode="write") as w:
            n = 0
            for _ in range(args.awaited):
                n += 1
                head = await w.append([NewEvent("awaited", {"tag": args.tag, "n": n})])
                assert head == n, (head, n)
                if args.pause:
                    await trio.sleep(args.pause)
            for _ in range(args.nowait_batches):
                batch = []
                for _ in range(args.nowait_size):
                    n += 1
                    batch.append(NewEvent("nowait", {"tag": args.tag, "n": n}))
                first, last = w.append_nowait(batch)
                assert (first, last) == (n - len(batch) + 1, n), (first, last, n)
                await w.flush()
                assert w.committed_head == n, (w.committed_head, n)
                if args.pause:
                    await trio.sleep(args.pause)
            emit(done=True, head=await w.head(), committed=w.committed_head)


async def cmd_contend(args: argparse.Namespace) -> None:
    rng = random.Random(args.tag)
    async with open_runtime(args.db, lease_ttl=args.lease_ttl) as rt:
        emit(ready=True, pid=os.getpid())
        await read_line()
        refused = 0
        with trio.fail_after(args.deadline):
            while True:
                try:
                    async with rt.open_session(args.session, mode="write") as w:
                        start = await w.head()
                        for i in range(args.count):
                            await w.append([NewEvent("turn", {"tag": args.tag, "i": i})])
                        end = await w.head()
                    break
                except SessionOwnedError:
                    refused += 1
                    await trio.sleep(rng.uniform(0.002, 0.02))
        emit(done=True, first=start + 1, last=end, refused=refused)


async def churn_hold(
    w: SessionWriter, tag: str, h: int, n: int, rng: random.Random, counter: list[int]
) -> None:
    """Write ``n`` batches through ``w`` (pausing between them); stop at a fence."""
    sid = w.session_id
    await trio.sleep(rng.uniform(0.02, 0.06))
    for _ in range(n):
        counter[0] += 1
        batch = f"{tag}.{counter[0]}"
        size = rng.randint(1, 4)
        events = [
            NewEvent("mp", {"w": tag, "h": h, "b": batch, "k": k, "of": size}) for k in range(size)
        ]
        say("T", sid, h, batch, size)
        try:
            if rng.random() < 0.5:
                last = await w.append(events)
            else:
                _, last = w.append_nowait(events)
                await w.flush()
        except OwnershipLostError:
            say("L", sid, h, batch)
            return
        except TidelogError as exc:
            say("E", sid, h, batch, type(exc).__name__, str(exc).replace("\n", " "))
            return
        say("K", sid, h, batch, last)
        await trio.sleep(rng.uniform(0.01, 0.04))


async def cmd_churn(args: argparse.Namespace) -> None:
    rng = random.Random(args.seed)
    sessions = args.sessions.split(",")
    refused = 0
    handles = 0
    counter = [0]
    stop = trio.Path(args.stopfile)
    async with open_runtime(args.db, lease_ttl=args.lease_ttl) as rt:
        while not await stop.exists():
            sid = rng.choice(sessions)
            try:
                async with rt.open_session(sid, mode="write") as w:
                    handles += 1
                    n = rng.randint(3, 6)
                    say("O", sid, handles, n)
                    await churn_hold(w, args.tag, handles, n, rng, counter)
                say("C", sid, handles)
            except SessionOwnedError:
                refused += 1
                await trio.sleep(rng.uniform(0.002, 0.02))
            except TidelogError as exc:
                say("E", sid, handles, "-", type(exc).__name__, str(exc).replace("\n", " "))
    say("X", refused)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="battery_mp_worker")
    sub = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("db")
    common.add_argument("--session", default="s")
    common.add_argument("--tag", default="child")
    common.add_argument("--lease-ttl", type=float, default=10.0)
    common.add_argument(
        "--host", help="pretend to run on this host (the lease holder names pid and host)"
    )
    common.add_argument(
        "--fake-pid", type=int, help="pretend to have this pid (as seen from another PID namespace)"
    )

    hold = sub.add_parser("hold", parents=[common])
    hold.add_argument("--events", type=int, default=0)

    fenced = sub.add_parser("fenced", parents=[common])
    fenced.add_argument("--events", type=int, default=0)
    fenced.add_argument("--sentinel", required=True)

    append = sub.add_parser("append", parents=[common])
    append.add_argument("--awaited", type=int, default=0)
    append.add_argument("--nowait-batches", type=int, default=0)
    append.add_argument("--nowait-size", type=int, default=1)
    append.add_argument("--pause", type=float, default=0.0)
    append.add_argument("--wait-go", action="store_true")

    contend = sub.add_parser("contend", parents=[common])
    contend.add_argument("--count", type=int, default=20)
    contend.add_argument("--deadline", type=float, default=20.0)

    churn = sub.add_parser("churn", parents=[common])
    churn.add_argument("--seed", type=int, required=True)
    churn.add_argument("--stopfile", required=True)
    churn.add_argument("--sessions", default="p,q,r")
    return parser.parse_args(argv)


COMMANDS: dict[str, Callable[[argparse.Namespace], Awaitable[None]]] = {
    "hold": cmd_hold,
    "fenced": cmd_fenced,
    "append": cmd_append,
    "contend": cmd_contend,
    "churn": cmd_churn,
}


def dump_trio_tasks() -> None:
    """Print every trio task with the await stack it is suspended in, to stderr."""
    out = ["--- trio tasks:"]

    def walk(task: trio.lowlevel.Task, depth: int) -> None:
        out.append(f"{'  ' * depth}task {task.name}")
        for frame, lineno in task.iter_await_frames():
            code = frame.f_code
            out.append(f"{'  ' * depth}    {code.co_filename}:{lineno} in {code.co_name}")
        for nursery in task.child_nurseries:
            for child in nursery.child_tasks:
                walk(child, depth + 1)

    root = trio.lowlevel.current_root_task()
    if root is not None:  # None only outside trio.run
        walk(root, 0)
    print("\n".join(out), file=sys.stderr, flush=True)


async def run_command(args: argparse.Namespace) -> None:
    """Run the command; on SIGUSR1 (sent by the parent before it kills a child that is
    still running), dump the trio tasks to stderr."""

    async def watch_signals() -> None:
        with trio.open_signal_receiver(signal.SIGUSR1) as signals:
            async for _ in signals:
                dump_trio_tasks()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch_signals)
        await COMMANDS[args.command](args)
        nursery.cancel_scope.cancel()


def main(argv: list[str] | None = None) -> None:
    # SIGUSR2 dumps the threads' Python stacks (works even if the trio loop is stuck).
    faulthandler.register(signal.SIGUSR2, all_threads=True)
    args = parse(sys.argv[1:] if argv is None else argv)
    if args.host is not None:
        # A process of another host sharing the file: its leases name that host, so nobody
        # here can check whether its pid is alive (see stores/leases.py).
        host: str = args.host
        socket.gethostname = lambda: host
    if args.fake_pid is not None:
        # A process in another PID namespace on this host (a container sharing the hostname
        # and the volume): the pid its leases name does not exist in the parent's namespace.
        # Its namespace identity differs too, which is what lets the parent tell.
        import stores._leases

        fake_pid: int = args.fake_pid
        os.getpid = lambda: fake_pid
        stores._leases._pid_namespace = lambda: "4026531999"
    trio.run(run_command, args)


if __name__ == "__main__":
    main()
