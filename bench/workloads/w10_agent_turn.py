"""W10: the run loop's per-turn overhead against a model that answers instantly.

A local HTTP server on 127.0.0.1 (trio + h11, in the same process) answers every Chat
Completions request at once with a small body: a call of a tool that does nothing, or
the final answer once the request carries that call's result. Both cases drive the real
``OpenAIChatModel`` adapter (the ``openai`` extra) through the official SDK, over
keep-alive HTTP:

* ``adapter``: :data:`TURNS` bare ``model.respond(request)`` calls, one after another,
  alternating the two requests of a run (the question; the question, the call and its
  result);
* ``run-loop``: :data:`TURNS` / 2 checkpointed runs (SQLite, ``synchronous="normal"``)
  of two turns each (the model calls the tool, then answers). Per turn the loop flushes
  before the request (a durability barrier) and checkpoints the turn; the tool's
  ``tool_started`` record is checkpointed and flushed before it runs and its result
  checkpointed; each run is claimed, and its completion commits with its checkpoint.

The ratio run-loop / adapter is what durability costs per turn, relative to the cheapest
possible real model call; a real model answers in hundreds of milliseconds, so its share
there is far smaller. Runs are kept to two turns so both cases send requests of the same
size: in one long run every request carries the whole transcript, and the SDK's cost of
building and validating it grows with each turn (measured in ``bench/HISTORY.md``, W10).
"""

from __future__ import annotations

import functools
import json
import time
from pathlib import Path
from typing import Any

import attrs
import trio

from runtime import open_runtime

from ..harness.core import CaseContext, Metrics, Row, case, rows

__all__ = ["TURNS"]

#: Model turns per measurement at scale 1.
TURNS = 200


def _completion(message: dict[str, Any], finish: str) -> bytes:
    choice = {"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    body = {"id": "c", "object": "chat.completion", "created": 1, "model": "bench"}
    return json.dumps({**body, "choices": [choice], "usage": usage}).encode()


#: A call of the tool ``noop``; and the final answer, sent when the last message of the
#: request is that call's result.
_CALL = _completion(
    {
        "content": None,
        "tool_calls": [
            {"id": "call_0", "type": "function", "function": {"name": "noop", "arguments": "{}"}}
        ],
    },
    "tool_calls",
)
_ANSWER = _completion({"content": "done"}, "stop")


async def _serve(stream: trio.SocketStream) -> None:
    """Answer every request on the connection at once (keep-alive)."""
    import h11

    conn = h11.Connection(h11.SERVER)
    body = b""
    try:
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = await stream.receive_some(65536)
                if not data:
                    return
                conn.receive_data(data)
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                messages = json.loads(body)["messages"]
                reply = _ANSWER if messages[-1]["role"] == "tool" else _CALL
                body = b""
                headers = [
                    ("content-type", "application/json"),
                    ("content-length", str(len(reply))),
                ]
                for part in (h11.Response(status_code=200, headers=headers), h11.Data(data=reply)):
                    await stream.send_all(conn.send(part) or b"")
                await stream.send_all(conn.send(h11.EndOfMessage()) or b"")
                conn.start_next_cycle()
            elif isinstance(event, h11.ConnectionClosed):
                return
    except trio.BrokenResourceError:
        return


async def _measure(path: Path, turns: int, loop: bool) -> Metrics:
    from runtime.agents import (
        Agent,
        CheckpointOptions,
        ModelRequest,
        OpenAIChatModel,
        Runner,
        ToolCall,
        ToolResult,
        UserMessage,
        checkpoints,
        function_tool,
    )

    @function_tool
    async def noop() -> str:
        """Do nothing."""
        return "ok"

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            functools.partial(trio.serve_tcp, _serve, 0, host="127.0.0.1")
        )
        url = f"http://127.0.0.1:{listeners[0].socket.getsockname()[1]}/v1"
        async with OpenAIChatModel("bench", base_url=url, api_key="bench") as model:
            first = ModelRequest("a", "x", (UserMessage("go"),), (noop.schema(),))
            call = ToolCall("call_0", "noop", {})
            second = attrs.evolve(
                first, messages=(UserMessage("go"), call, ToolResult("call_0", "ok"))
            )
            await model.respond(first)  # warm the connection and the SDK
            runs = turns // 2
            fsyncs = 0
            if loop:
                async with open_runtime(path) as rt:
                    agent = Agent("a", "x", tools=(noop,), model=model)
                    before = rt.statistics().writer.fsyncs
                    start = time.perf_counter()
                    for i in range(runs):
                        options = CheckpointOptions(checkpoints(rt), f"run-{i}")
                        await Runner.run(agent, "go", runtime=rt, checkpoint=options)
                    elapsed = time.perf_counter() - start
                    fsyncs = rt.statistics().writer.fsyncs - before
            else:
                start = time.perf_counter()
                for _ in range(runs):
                    await model.respond(first)
                    await model.respond(second)
                elapsed = time.perf_counter() - start
        nursery.cancel_scope.cancel()
    done = runs * 2
    return {"ms_per_turn": elapsed * 1000 / done, "turns": float(done), "fsyncs": float(fsyncs)}


def _case(loop: bool) -> Any:
    def run(ctx: CaseContext) -> Metrics:
        with ctx.fresh_dir() as d:
            return trio.run(_measure, d / "agent.db", ctx.n(TURNS, minimum=5), loop)

    return run


_REQUIRES = ("openai", "h11")
case("W10/adapter", system="OpenAIChatModel.respond, local HTTP", requires=_REQUIRES)(_case(False))
case("W10/run-loop", system="Runner.run turn (checkpoint + flush barriers)", requires=_REQUIRES)(
    _case(True)
)

_LABEL = "W10 one model turn, instant model on 127.0.0.1"
rows(
    Row(
        "W10", _LABEL, "W10/adapter", "ms_per_turn", "ms", note="reference", higher_is_better=False
    ),
    Row(
        "W10",
        _LABEL,
        "W10/run-loop",
        "ms_per_turn",
        "ms",
        reference=("W10/adapter", "ms_per_turn"),
        higher_is_better=False,
    ),
)
