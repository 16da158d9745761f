"""W13: the web inspector (``runtime.inspector``) beside a writer, over real HTTP.

* Append rate while five SSE clients tail the session written: the writer appends one
  event per ``append`` call to a SQLite file (``synchronous="normal"``), alone, then with
  five clients (in a child process, as browsers would be) reading ``/api/stream`` of that
  session from the same runtime's inspector over TCP on 127.0.0.1. Target: >= 0.9x the
  solo rate of the same run. Once with the inspector embedded in the writer's runtime
  (its streams share the writer's trio thread: they share one tail read at most every
  25 ms and send each tick's events in one write), once with ``tidelog serve`` in another
  process (the writer's process then does nothing for them). At small scales a rate case
  lasts about one tick: read it over several rounds, or with more appends.
* First window of a long session (1M events at scale 1): ``GET /api/events?from_end=1&
  limit=200`` on one keep-alive connection, request to whole response. Target p95
  <= 100 ms.
* Commit to SSE delivery across processes: a child process (its own runtime) appends
  stamped events 5-15 ms apart (the W6 writer); the parent's inspector streams them to an
  SSE client in the parent, which computes ``time.time()`` at arrival minus the stamp.
  Other processes' commits are found by polling every 25 ms. Target p99 <= 50 ms.
"""

from __future__ import annotations

import functools
import json
import re
import signal
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h11
import trio

from runtime import NewEvent, Runtime, open_runtime

from ..harness.core import PAYLOAD, CaseContext, Metrics, Row, Target, case, percentile, rows
from ..harness.procs import ROOT, child_command, child_env, worker

EXTRA = ("starlette", "hypercorn", "sse_starlette")
_SESSION = "s"


async def _start(rt: Runtime, nursery: trio.Nursery) -> int:
    from runtime.inspector import serve_inspector

    server = await nursery.start(functools.partial(serve_inspector, rt))
    port: int = server.port
    return port


async def _sse(port: int, since: int, on_event: Callable[[dict[str, Any]], bool]) -> None:
    """Read ``/api/stream`` of the session after ``since``; ``on_event(event)`` returns
    True to stop."""
    target = "/api/stream?" + urllib.parse.urlencode({"id": _SESSION, "since_seq": since})
    conn = h11.Connection(h11.CLIENT)
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        host = [("Host", f"127.0.0.1:{port}")]
        await stream.send_all(
            conn.send(h11.Request(method="GET", target=target, headers=host))
            + conn.send(h11.EndOfMessage())
        )
        buffer = ""
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await stream.receive_some(65536))
            elif isinstance(event, h11.Data):
                buffer += bytes(event.data).decode()
                *blocks, buffer = buffer.replace("\r\n", "\n").split("\n\n")
                for block in blocks:
                    for line in block.split("\n"):
                        if line.startswith("data: ") and on_event(json.loads(line[6:])):
                            return
            elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                return


@worker("w13-sse-clients")
def w13_sse_clients(args: dict[str, Any]) -> Metrics:
    """``clients`` SSE streams of session ``s`` at ``port``: print ``ready`` once each has
    its first event, exit once each has event ``last`` (ids found in the raw bytes: the
    clients cost the writer's process nothing)."""

    async def client(ready: trio.Event, done: trio.Event) -> None:
        port, last = args["port"], args["last"]
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            request = f"GET /api/stream?id={_SESSION} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n"
            await stream.send_all(request.encode())
            first, final = b"\nid: 1\r\n", f"\nid: {last}\r\n".encode()
            tail = b""
            while not done.is_set():
                chunk = await stream.receive_some(65536)
                if not chunk:
                    raise RuntimeError("the stream ended")
                tail = tail[-64:] + chunk
                if first in tail:
                    ready.set()
                if final in tail:
                    done.set()

    async def main() -> Metrics:
        readies = [trio.Event() for _ in range(args["clients"])]
        dones = [trio.Event() for _ in range(args["clients"])]
        async with trio.open_nursery() as nursery:
            for ready, done in zip(readies, dones, strict=True):
                nursery.start_soon(client, ready, done)
            for ready in readies:
                await ready.wait()
            print("ready", flush=True)
            for done in dones:
                await done.wait()
        return {"clients": float(args["clients"])}

    return trio.run(main)


async def _serve_elsewhere(path: Path) -> tuple[trio.Process, int]:
    """``tidelog serve PATH`` in a child process, and its port (once it listens)."""
    command = [sys.executable, "-m", "runtime.cli", "serve", str(path), "--port", "0"]
    proc = await trio.lowlevel.open_process(
        command, cwd=ROOT, env=child_env(), stdout=subprocess.PIPE
    )
    assert proc.stdout is not None
    said = b""
    with trio.fail_after(60):
        while (found := re.search(rb"127\.0\.0\.1:(\d+)/", said)) is None:
            chunk = await proc.stdout.receive_some(1024)
            if not chunk:
                raise RuntimeError(f"tidelog serve ended: {said!r}")
            said += chunk
    return proc, int(found.group(1))


async def _append_rate(path: Path, n: int, clients: int, *, elsewhere: bool = False) -> Metrics:
    server: trio.Process | None = None
    async with open_runtime(path) as rt, trio.open_nursery() as nursery:
        async with rt.open_session(_SESSION) as w:
            await w.append([NewEvent("message", PAYLOAD)])
            await rt.flush()
            proc = None
            if clients:
                if elsewhere:
                    server, port = await _serve_elsewhere(path)
                else:
                    port = await _start(rt, nursery)
                spec = {"port": port, "clients": clients, "last": n + 1}
                proc = await trio.lowlevel.open_process(
                    child_command("w13-sse-clients", spec),
                    cwd=ROOT,
                    env=child_env(),
                    stdout=subprocess.PIPE,
                )
                assert proc.stdout is not None
                with trio.fail_after(60):
                    said = b""
                    while b"ready\n" not in said:
                        said += await proc.stdout.receive_some(1024)
            start = time.perf_counter()
            for _ in range(n):
                await w.append([NewEvent("message", PAYLOAD)])
            elapsed = time.perf_counter() - start
        if proc is not None:
            with trio.fail_after(60):
                assert await proc.wait() == 0  # every client got every event
        if server is not None:
            server.send_signal(signal.SIGINT)
            with trio.fail_after(30):
                await server.wait()
        nursery.cancel_scope.cancel()
    return {"appends_per_s": n / elapsed, "clients": float(clients)}


async def _first_window(path: Path, events: int, samples: int) -> Metrics:
    async with open_runtime(path) as rt:
        async with rt.open_session(_SESSION) as w:
            batch = [NewEvent("message", PAYLOAD)] * 5000
            written = 0
            while written < events:
                part = batch[: min(len(batch), events - written)]
                await w.append(part)
                written += len(part)
        async with trio.open_nursery() as nursery:
            port = await _start(rt, nursery)
            conn = h11.Connection(h11.CLIENT)
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            target = "/api/events?" + urllib.parse.urlencode(
                {"id": _SESSION, "from_end": 1, "limit": 200}
            )
            times: list[float] = []
            async with stream:
                for _ in range(samples):
                    start = time.perf_counter()
                    request = h11.Request(
                        method="GET", target=target, headers=[("Host", f"127.0.0.1:{port}")]
                    )
                    await stream.send_all(conn.send(request) + conn.send(h11.EndOfMessage()))
                    body = bytearray()
                    while True:
                        event = conn.next_event()
                        if event is h11.NEED_DATA:
                            conn.receive_data(await stream.receive_some(65536))
                        elif isinstance(event, h11.Data):
                            body += event.data
                        elif isinstance(event, h11.EndOfMessage):
                            break
                    times.append(time.perf_counter() - start)
                    got = json.loads(bytes(body))
                    assert len(got["events"]) == min(200, events)
                    conn.start_next_cycle()
            nursery.cancel_scope.cancel()
    ms = [t * 1000 for t in times]
    return {"p50_ms": percentile(ms, 50), "p95_ms": percentile(ms, 95), "events": float(events)}


async def _cross(path: Path, n: int) -> Metrics:
    latencies: list[float] = []
    async with open_runtime(path) as rt:
        async with rt.open_session(_SESSION) as w:
            await w.append([NewEvent("message", PAYLOAD)])
        child = functools.partial(
            trio.run_process,
            child_command("w6-writer", {"path": str(path), "count": n}),
            cwd=ROOT,
            env=child_env(),
            capture_stdout=True,
            capture_stderr=True,
            check=True,
        )

        def on_event(event: dict[str, Any]) -> bool:
            latencies.append(time.time() - float(event["data"]["t"]))
            return len(latencies) >= n

        async with trio.open_nursery() as nursery:
            port = await _start(rt, nursery)
            nursery.start_soon(child)
            with trio.fail_after(60 + n * 0.1):
                await _sse(port, 1, on_event)
            nursery.cancel_scope.cancel()
    ms = [x * 1000 for x in latencies]
    return {"p50_ms": percentile(ms, 50), "p99_ms": percentile(ms, 99), "samples": float(len(ms))}


@case("W13/solo", system="tidelog writer alone (one event per append, synchronous=normal)")
def solo(ctx: CaseContext) -> Metrics:
    with ctx.fresh_dir() as d:
        return trio.run(_append_rate, d / "a.db", ctx.n(2000, minimum=50), 0)


@case(
    "W13/5-sse", system="the same writer, 5 SSE clients of its embedded inspector", requires=EXTRA
)
def five_sse(ctx: CaseContext) -> Metrics:
    with ctx.fresh_dir() as d:
        return trio.run(_append_rate, d / "a.db", ctx.n(2000, minimum=50), 5)


@case(
    "W13/5-sse-serve",
    system="the same writer, 5 SSE clients of `tidelog serve` in another process",
    requires=EXTRA,
)
def five_sse_serve(ctx: CaseContext) -> Metrics:
    with ctx.fresh_dir() as d:
        return trio.run(
            functools.partial(_append_rate, elsewhere=True),
            d / "a.db",
            ctx.n(2000, minimum=50),
            5,
        )


@case("W13/first-window", system="GET /api/events from_end, limit 200", requires=EXTRA)
def first_window(ctx: CaseContext) -> Metrics:
    with ctx.fresh_dir() as d:
        return trio.run(_first_window, d / "w.db", ctx.n(1_000_000, minimum=1000), 50)


@case("W13/cross-sse", system="SSE from the inspector, writer in another process", requires=EXTRA)
def cross_sse(ctx: CaseContext) -> Metrics:
    with ctx.fresh_dir() as d:
        return trio.run(_cross, d / "x.db", ctx.n(200, minimum=10))


rows(
    Row(
        "W13",
        "W13 append rate, writer alone",
        "W13/solo",
        "appends_per_s",
        "ops/s",
        note="reference",
    ),
    Row(
        "W13",
        "W13 append rate while 5 SSE clients of the embedded inspector tail the session",
        "W13/5-sse",
        "appends_per_s",
        "ops/s",
        reference=("W13/solo", "appends_per_s"),
        target=Target("ratio", ">=", 0.9),
    ),
    Row(
        "W13",
        "W13 append rate while 5 SSE clients of `tidelog serve` (another process) tail it",
        "W13/5-sse-serve",
        "appends_per_s",
        "ops/s",
        reference=("W13/solo", "appends_per_s"),
        target=Target("ratio", ">=", 0.9),
    ),
    Row(
        "W13",
        "W13 first window of a long session (1M events at scale 1): p95",
        "W13/first-window",
        "p95_ms",
        "ms",
        target=Target("value", "<=", 100.0),
    ),
    Row(
        "W13",
        "W13 commit in another process to SSE delivery: p99",
        "W13/cross-sse",
        "p99_ms",
        "ms",
        target=Target("value", "<=", 50.0),
    ),
)
