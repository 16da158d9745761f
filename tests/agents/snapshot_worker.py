"""A host process for the file-restore crash test: a tool snapshots a file, rewrites it,
and the host kills itself with SIGKILL before the call's result is recorded.

Usage: python snapshot_worker.py DB FILE
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import trio

from runtime import open_runtime
from runtime.agents import (
    Agent,
    CheckpointOptions,
    ModelResponse,
    RequestedCall,
    RunContext,
    Runner,
    ScriptedModel,
    checkpoints,
    function_tool,
    history,
)


async def host(db: str, target: str) -> None:
    @function_tool
    async def edit(ctx: RunContext, path: str) -> str:
        """Rewrite a file, then the host dies."""
        await ctx.snapshot_file(path)
        Path(path).write_text("after")  # noqa: ASYNC240 -- a small file in a test host
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)
        return "unreachable"

    model = ScriptedModel(
        [ModelResponse(tool_calls=(RequestedCall("edit", {"path": target}, "c1"),))]
    )
    agent = Agent("a", "x", tools=(edit,), model=model)
    async with open_runtime(db) as rt:
        options = CheckpointOptions(checkpoints(rt), "crash-run")
        await Runner.run(
            agent, "edit it", runtime=rt, session_id="s", checkpoint=options, history=history(rt)
        )


if __name__ == "__main__":
    trio.run(host, sys.argv[1], sys.argv[2])
