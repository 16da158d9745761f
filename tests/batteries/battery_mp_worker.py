"""A child of the multi-process battery (``tests/test_battery_multiprocess.py``).

Usage: ``python battery_mp_worker.py DB TAG SEED STOPFILE --sessions p,q,r [--lease-ttl T]``

Until ``STOPFILE`` exists, the child picks a random shared session and tries to open it
for writing; if another process owns it (``SessionOwnedError``) it tries again a little
later. Holding a session it writes a few batches (awaited ``append``, or ``append_nowait``
then ``flush``), pausing between them, then closes it. It reports every step on stdout,
one line each, flushed at once::

    O <sid> <h> <n>              handle h opened on sid (h counts this child's opens);
                                 n batches will be written through it
    T <sid> <h> <batch> <size>   about to write batch (ids are "<tag>.<n>")
    K <sid> <h> <batch> <last>   batch acknowledged (committed), ending at seq <last>
    L <sid> <h> <batch>          OwnershipLostError: the batch was fenced out
    E <sid> <h> <batch> <type> <message>   any other tidelog error (must never happen)
    C <sid> <h>                  handle closed
    X <refused>                  exiting; <refused> write opens were refused

Event data: ``{"w": tag, "h": h, "b": batch, "k": index, "of": size}``.
"""

from __future__ import annotations

import argparse
import os
import random
import sys

import trio

from runtime import (
    NewEvent,
    OwnershipLostError,
    SessionOwnedError,
    SessionWriter,
    TidelogError,
    open_runtime,
)


def say(*parts: object) -> None:
    sys.stdout.write(" ".join(str(p) for p in parts) + "\n")
    sys.stdout.flush()


async def hold(
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


async def main(args: argparse.Namespace) -> None:
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
                    await hold(w, args.tag, handles, n, rng, counter)
                say("C", sid, handles)
            except SessionOwnedError:
                refused += 1
                await trio.sleep(rng.uniform(0.002, 0.02))
            except TidelogError as exc:
                say("E", sid, handles, "-", type(exc).__name__, str(exc).replace("\n", " "))
    say("X", refused)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="battery_mp_worker")
    parser.add_argument("db")
    parser.add_argument("tag")
    parser.add_argument("seed", type=int)
    parser.add_argument("stopfile")
    parser.add_argument("--sessions", default="p,q,r")
    parser.add_argument("--lease-ttl", type=float, default=10.0)
    os.environ.setdefault("PYTHONHASHSEED", "0")
    trio.run(main, parser.parse_args())
