"""A "host" of the multi-host battery (``tests/batteries/test_battery_pg_hosts.py``): one
process, one runtime on a PostgreSQL store named by URL.

Usage: ``python pg_host_worker.py COMMAND URL --host NAME [options]``. ``--host`` makes the
process's lease holder string name another host, so that no peer can tell from the pid
whether it lives: only the lease's expiry and the server (its advisory lock) can. Every
command reports through JSON lines on stdout, flushed at once.

* ``write``: open ``--session`` for write, retrying while another host owns it (print
  ``{"waiting": true}`` at the first refusal), print
  ``{"owner": ..., "at": <time>, "head": ..., "refused": n}``; with ``--hold``, wait
  (still owning the session) for a line on stdin; then append batches of 1 to
  5 events (awaited appends, and ``append_nowait`` bursts followed by ``flush``), printing
  ``{"ack": head}`` for each acknowledged head, until ``--count`` events were written
  (forever with 0); then, with ``--end``, append one ``end`` event; print ``{"done": head}``.
* ``tail``: tail ``--session`` from the start, print ``{"seq": n, "tag": ...}`` for each
  event, until an ``end`` event; print ``{"done": n}``.
* ``append``: append ``--count`` events with awaited appends to each of the sessions
  ``--sessions`` (one trio task each, all at once) and ``--nowait`` events as one
  ``append_nowait`` + ``flush`` each; print ``{"done": {session: head}}``. Any error
  reaching a caller propagates (traceback on stderr, exit status 1).
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import sys
import time
from typing import Any

import trio

from runtime import NewEvent, SessionOwnedError, SessionWriter, open_runtime


def emit(**message: Any) -> None:
    print(json.dumps(message), flush=True)


async def own(rt: Any, session: str, deadline: float) -> tuple[Any, int]:
    """Open ``session`` for write, retrying while another host owns it."""
    refused = 0
    with trio.fail_after(deadline):
        while True:
            try:
                cm = rt.open_session(session, mode="write")
                writer = await cm.__aenter__()
                return (cm, writer), refused
            except SessionOwnedError:
                refused += 1
                if refused == 1:
                    emit(waiting=True)  # another host owns it
                await trio.sleep(0.01)


async def cmd_write(args: argparse.Namespace) -> None:
    rng = random.Random(args.seed)
    async with open_runtime(args.url, lease_ttl=args.lease_ttl) as rt:
        (cm, w), refused = await own(rt, args.session, args.deadline)
        try:
            assert isinstance(w, SessionWriter)
            head = await w.head()
            emit(owner=args.host, at=time.time(), head=head, refused=refused)
            if args.hold:  # the test's go-ahead
                await trio.to_thread.run_sync(sys.stdin.readline)
            written = 0
            batch = 0
            while args.count == 0 or written < args.count:
                batch += 1
                size = rng.randint(1, 5)
                if args.count:
                    size = min(size, args.count - written)
                events = [
                    NewEvent("w", {"tag": args.host, "b": batch, "k": k, "of": size})
                    for k in range(size)
                ]
                if rng.random() < 0.6:
                    head = await w.append(events)
                else:
                    _, head = w.append_nowait(events)
                    await w.flush()
                written += size
                emit(ack=head)
            if args.end:
                head = await w.append([NewEvent("end", {"tag": args.host})])
            emit(done=head)
        finally:
            await cm.__aexit__(None, None, None)


async def cmd_tail(args: argparse.Namespace) -> None:
    async with open_runtime(args.url, poll_interval=args.poll) as rt:
        emit(ready=True)
        async for event in rt.tail(args.session):
            data = event.data if isinstance(event.data, dict) else {}
            emit(seq=event.seq, tag=data.get("tag"), at=time.time())
            if event.kind == "end":
                emit(done=event.seq)
                return


async def cmd_append(args: argparse.Namespace) -> None:
    sessions = args.sessions.split(",")
    heads: dict[str, int] = {}
    async with open_runtime(args.url, lease_ttl=args.lease_ttl) as rt:

        async def one(session: str) -> None:
            async with rt.open_session(session, mode="write") as w:
                assert isinstance(w, SessionWriter)
                for n in range(args.count):
                    await w.append([NewEvent("a", {"tag": args.host, "n": n})])
                for n in range(args.nowait):
                    w.append_nowait([NewEvent("b", {"tag": args.host, "n": n})])
                await w.flush()
                heads[session] = await w.head()

        emit(ready=True)
        async with trio.open_nursery() as nursery:
            for session in sessions:
                nursery.start_soon(one, session)
    emit(done=heads)


def main() -> None:
    parser = argparse.ArgumentParser(prog="pg_host_worker")
    parser.add_argument("command", choices=["write", "tail", "append"])
    parser.add_argument("url")
    parser.add_argument("--host", required=True)
    parser.add_argument("--session", default="s")
    parser.add_argument("--sessions", default="")
    parser.add_argument("--count", type=int, default=0)
    parser.add_argument("--nowait", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--end", action="store_true")
    parser.add_argument("--hold", action="store_true")
    parser.add_argument("--lease-ttl", type=float, default=30.0)
    parser.add_argument("--deadline", type=float, default=60.0)
    parser.add_argument("--poll", type=float, default=600.0)
    args = parser.parse_args()
    host: str = args.host
    socket.gethostname = lambda: host  # leases name another host: no pid check applies
    trio.run({"write": cmd_write, "tail": cmd_tail, "append": cmd_append}[args.command], args)


if __name__ == "__main__":
    main()
