"""A host process for the real-model crash tests: one checkpointed run of an agent on the
OpenAI Chat Completions adapter, streamed, against the test's local server; its tool
``charge`` is a real HTTP call to that server (not idempotent).

Usage: python model_crash_worker.py DB SERVER_URL
Prints one JSON line with the output and how each call was settled.
"""

from __future__ import annotations

import json
import sys

import httpx2
import trio

from runtime import open_runtime
from runtime.agents import (
    Agent,
    CheckpointOptions,
    OpenAIChatModel,
    RetryPolicy,
    RunFailed,
    Runner,
    RunResult,
    ToolFinished,
    checkpoints,
    function_tool,
)

RUN_ID = "model-crash"


async def host(db: str, url: str) -> None:
    @function_tool
    async def charge(amount: int) -> str:
        """Charge money through the payment service (a side effect)."""
        async with httpx2.AsyncClient() as client:
            reply = await client.post(f"{url}/tool/charge", json={"amount": amount})
        return reply.text

    retry = RetryPolicy(max_attempts=1)
    how: dict[str, str] = {}
    result: RunResult | None = None
    async with (
        open_runtime(db) as rt,
        OpenAIChatModel(
            "gpt-4o-mini", base_url=url + "/v1", api_key="sk-test", retry=retry
        ) as model,
    ):
        agent = Agent("payer", "Charge what you are asked to.", tools=(charge,), model=model)
        options = CheckpointOptions(checkpoints(rt), RUN_ID)
        async with Runner.run_streamed(
            agent, "Charge 5.", runtime=rt, session_id="chat", checkpoint=options
        ) as events:
            async for event in events:
                if isinstance(event, ToolFinished):
                    how[event.result.call_id] = event.how
                elif isinstance(event, RunFailed):
                    raise event.error
                result = getattr(event, "result", result)
    assert isinstance(result, RunResult)
    print(json.dumps({"output": result.output, "how": how}), flush=True)


if __name__ == "__main__":
    trio.run(host, sys.argv[1], sys.argv[2])
