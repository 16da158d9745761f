"""A host process for the stop test: runs one agent run whose model calls ``look``, then
hangs on its second request (printing ``asking`` first), and prints one JSON line with
how the run ended.

Usage: python stop_worker.py STORE POLL_INTERVAL  (STORE: a SQLite file or a
postgresql:// URL)
"""

from __future__ import annotations

import json
import sys

import trio

from runtime import open_runtime
from runtime.agents import (
    Agent,
    CheckpointOptions,
    ModelRequest,
    ModelResponse,
    RequestedCall,
    Runner,
    ToolResult,
    checkpoints,
    function_tool,
)


@function_tool
async def look() -> str:
    """Look around."""
    await trio.lowlevel.checkpoint()
    return "seen"


class Hanging:
    async def respond(self, request: ModelRequest) -> ModelResponse:
        if not any(isinstance(m, ToolResult) for m in request.messages):
            await trio.lowlevel.checkpoint()
            return ModelResponse(tool_calls=(RequestedCall("look", {}, "c1"),))
        print("asking", flush=True)
        await trio.sleep_forever()
        raise AssertionError("unreachable")


async def main(db: str, poll_interval: float) -> None:
    async with open_runtime(db, poll_interval=poll_interval) as rt:
        agent = Agent("a", "x", model=Hanging(), tools=(look,))
        with trio.fail_after(60):
            result = await Runner.run(
                agent, "go", runtime=rt, checkpoint=CheckpointOptions(checkpoints(rt), "r")
            )
    print(json.dumps({"status": result.status, "reason": result.stop_reason}), flush=True)


if __name__ == "__main__":
    trio.run(main, sys.argv[1], float(sys.argv[2]))
