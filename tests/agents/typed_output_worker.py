"""A host process for the typed-output crash test: completes one run whose output type
is a pydantic model, then kills itself with SIGKILL before it could exit cleanly.

Usage: python typed_output_worker.py DB
"""

from __future__ import annotations

import os
import signal
import sys

import pydantic
import trio

from runtime import open_runtime
from runtime.agents import (
    Agent,
    CheckpointOptions,
    ModelResponse,
    Runner,
    ScriptedModel,
    checkpoints,
)


class Verdict(pydantic.BaseModel):
    ok: bool
    score: int


async def host(db: str) -> None:
    agent = Agent(
        "judge", "judge", model=ScriptedModel([ModelResponse('{"ok": true, "score": 7}')])
    )
    async with open_runtime(db) as rt:
        options = CheckpointOptions(checkpoints(rt), "typed-run")
        result = await Runner.run(
            agent, "judge it", runtime=rt, session_id="s", checkpoint=options, output_type=Verdict
        )
        assert isinstance(result.final_output, Verdict)
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    trio.run(host, sys.argv[1])
