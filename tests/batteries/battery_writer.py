"""The child process of the kill -9 battery (``test_battery_kill.py``).

Usage::

    python battery_writer.py write DB SEED [--sessions N] [--lease-ttl T] [--host H]
    python battery_writer.py agent DB WORKDIR RUN_ID SESSION [--delay-seed S]

``write`` opens ``--sessions`` sessions (``s0``, ``s1``...) for writing, prints
``R <sid>=<head> ...`` once they are all open, and then appends forever, in random order
and random batch sizes, with awaited ``append`` and with ``append_nowait`` followed
(sometimes) by the session's ``flush`` or the runtime-wide ``rt.flush``. Every event's data
encodes what was intended: ``{"s": session, "n": seq intended, "b": batch id, "k": index in
the batch, "of": batch size}``. One stdout line is written (and flushed) per
*acknowledgement*:

* ``A <sid> <head>``: an awaited append returned ``head`` (committed: survives a crash);
* ``F <sid> <head>``: a flush returned; every event of ``sid`` up to ``head`` (its head when
  the flush was called) is durable.

The parent kills it with SIGKILL at a random moment. ``--host`` pretends to run on another
host, so that its leases can only be taken over after ``--lease-ttl`` (the dead-holder
check cannot see a process of another host).

``agent`` runs (or resumes: ``if_run_exists="resume"``) a scripted agent run whose tools
sleep a little (so that a kill lands inside tool bodies, model turns and checkpoint
saves), logs every tool execution to ``WORKDIR/executions.log`` and prints one JSON line
with the outcome when the run completes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import socket
import sys
from contextlib import AsyncExitStack
from pathlib import Path

import trio

from runtime import JSON, NewEvent, SessionWriter, Store, open_runtime
from runtime.agents import (
    Agent,
    CheckpointOptions,
    ModelRequest,
    ModelResponse,
    RequestedCall,
    Runner,
    ToolCall,
    checkpoints,
    function_tool,
)
from stores import JsonlStore


def say(line: str) -> None:
    """One acknowledgement line; flushed at once (one write(2) per line)."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def batch_events(sid: str, head: int, batch: str, size: int, pad: int) -> list[NewEvent]:
    return [
        NewEvent(
            "b",
            {"s": sid, "n": head + 1 + k, "b": batch, "k": k, "of": size, "pad": "x" * pad},
        )
        for k in range(size)
    ]


async def cmd_write(args: argparse.Namespace) -> None:
    if not args.compress:
        await write_forever(args, args.db)
        return
    with contextlib.closing(JsonlStore(args.db, compress=True)) as store:  # zstd frames
        await write_forever(args, store)


async def write_forever(args: argparse.Namespace, target: str | Store) -> None:
    rng = random.Random(args.seed)
    async with open_runtime(target, lease_ttl=args.lease_ttl) as rt, AsyncExitStack() as stack:
        writers: dict[str, SessionWriter] = {}
        for i in range(args.sessions):
            sid = f"s{i}"
            w = await stack.enter_async_context(rt.open_session(sid, mode="write"))
            writers[sid] = w
        say("R " + " ".join([f"{sid}={await w.head()}" for sid, w in writers.items()]))
        ids = sorted(writers)
        number = 0
        while True:
            number += 1
            sid = rng.choice(ids)
            w = writers[sid]
            size = rng.choice((1, 1, 2, 3, 5, 8))
            pad = rng.choice((0, 0, 16, 300, 3000))
            events = batch_events(sid, await w.head(), f"{args.seed}.{number}", size, pad)
            roll = rng.random()
            if roll < 0.35:
                head = await w.append(events)
                say(f"A {sid} {head}")
            else:
                w.append_nowait(events)
                after = rng.random()
                if after < 0.3:
                    head = await w.head()
                    await w.flush()
                    say(f"F {sid} {head}")
                elif after < 0.4:
                    heads = {s: await writers[s].head() for s in ids}
                    await rt.flush()
                    for s in ids:
                        say(f"F {s} {heads[s]}")
                elif after < 0.6:
                    await trio.sleep(rng.choice((0, 0.001, 0.003)))
                else:
                    await trio.lowlevel.checkpoint()


async def cmd_agent(args: argparse.Namespace) -> None:
    workdir = Path(args.workdir)
    rng = random.Random(args.delay_seed)
    model_calls = 0

    def log(name: str, call_id: str) -> None:
        with open(workdir / "executions.log", "a", encoding="utf-8") as f:
            f.write(f"{args.run_id} {name} {call_id}\n")
            f.flush()

    async def busy() -> None:
        await trio.sleep(rng.uniform(0.0, 0.05))

    @function_tool(idempotent=True)
    async def note(text: str) -> str:
        """Write a note (idempotent)."""
        log("note", text)
        await busy()
        return f"noted {text}"

    @function_tool
    async def charge(amount: int) -> str:
        """Charge money (a side effect: not idempotent)."""
        log("charge", str(amount))
        await busy()
        return f"charged {amount}"

    script: list[list[tuple[str, dict[str, JSON], str]]] = [
        [("note", {"text": "c1"}, "c1"), ("charge", {"amount": 5}, "c2")],
        [("note", {"text": "c3"}, "c3")],
        [("charge", {"amount": 7}, "c4"), ("note", {"text": "c5"}, "c5")],
        [],
    ]

    class Model:
        async def respond(self, request: ModelRequest) -> ModelResponse:
            nonlocal model_calls
            model_calls += 1
            await busy()
            calls = [e for e in request.messages if isinstance(e, ToolCall)]
            done = {c.call_id for c in calls}
            for turn in script:
                if turn and not {cid for _, _, cid in turn} <= done:
                    return ModelResponse(
                        tool_calls=tuple(RequestedCall(n, a, cid) for n, a, cid in turn)
                    )
            return ModelResponse("done")

    agent = Agent("worker", "do the job", tools=(note, charge), model=Model())
    async with open_runtime(args.db) as rt:
        say("S")  # the run starts now: the parent kills it somewhere from here on
        options = CheckpointOptions(checkpoints(rt), args.run_id, if_run_exists="resume")
        result = await Runner.run(
            agent, "start", runtime=rt, session_id=args.session, checkpoint=options
        )
    print(
        json.dumps(
            {
                "output": result.output,
                "finish_reason": result.finish_reason,
                "model_calls": model_calls,
            }
        ),
        flush=True,
    )


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="battery_writer")
    sub = parser.add_subparsers(dest="command", required=True)
    write = sub.add_parser("write")
    write.add_argument("db")
    write.add_argument("seed", type=int)
    write.add_argument("--sessions", type=int, default=3)
    write.add_argument("--lease-ttl", type=float, default=10.0)
    write.add_argument("--host")
    write.add_argument("--compress", action="store_true", help="JSONL: compressed files")
    agent = sub.add_parser("agent")
    agent.add_argument("db")
    agent.add_argument("workdir")
    agent.add_argument("run_id")
    agent.add_argument("session")
    agent.add_argument("--delay-seed", type=int, default=0)
    return parser.parse_args(argv)


def main() -> None:
    args = parse(sys.argv[1:])
    if getattr(args, "host", None):
        host: str = args.host
        socket.gethostname = lambda: host  # leases name another host: TTL only
    if args.command == "write":
        trio.run(cmd_write, args)
    else:
        trio.run(cmd_agent, args)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
