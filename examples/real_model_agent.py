"""A durable agent on a real model: any OpenAI-compatible endpoint (OpenAI, vLLM, Ollama,
a LiteLLM proxy), streamed, with a validated tool and a structured final answer.

Configure it with environment variables (the openai extra must be installed):

    OPENAI_BASE_URL   the endpoint, e.g. https://api.openai.com/v1 or http://localhost:11434/v1
    OPENAI_API_KEY    its key (any text for a local server)
    TIDELOG_MODEL     the model name (default gpt-4o-mini)

Run: python examples/real_model_agent.py [DB_PATH]
Re-running with the same DB_PATH replays the completed run without calling the model.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Literal

import attrs
import trio

from runtime import open_runtime
from runtime.agents import (
    Agent,
    CheckpointOptions,
    OpenAIChatModel,
    Runner,
    RunResult,
    TextDelta,
    ToolFinished,
    checkpoints,
    function_tool,
)


@function_tool(idempotent=True, timeout=10)
async def convert(amount: float, unit: Literal["km", "mi"]) -> str:
    """Convert a distance between kilometres and miles.

    Args:
        amount: The distance.
        unit: The unit it is given in.
    """
    if unit == "km":
        return f"{amount} km = {amount / 1.609344:.2f} mi"
    return f"{amount} mi = {amount * 1.609344:.2f} km"


@attrs.frozen
class Answer:
    """The final answer."""

    summary: str
    kilometres: float


async def main(db_path: str) -> None:
    base_url, api_key = os.environ.get("OPENAI_BASE_URL"), os.environ.get("OPENAI_API_KEY")
    if not base_url or not api_key:
        sys.exit("set OPENAI_BASE_URL and OPENAI_API_KEY (see the docstring)")
    model_name = os.environ.get("TIDELOG_MODEL", "gpt-4o-mini")
    async with (
        open_runtime(db_path) as rt,
        OpenAIChatModel(model_name, base_url=base_url, api_key=api_key) as model,
    ):
        agent = Agent(
            "travel",
            "Use the convert tool for every conversion. Answer in the requested form.",
            tools=(convert,),
            model=model,
            output_type=Answer,
        )
        result: RunResult | None = None
        async with Runner.run_streamed(
            agent,
            "How far is a marathon (26.2 miles) in kilometres?",
            runtime=rt,
            session_id="travel-chat",
            checkpoint=CheckpointOptions(checkpoints(rt), "marathon"),
        ) as events:
            async for event in events:
                if isinstance(event, TextDelta):
                    print(event.text, end="", flush=True)
                elif isinstance(event, ToolFinished):
                    print(f"[tool {event.how}: {event.result.output}]")
                result = getattr(event, "result", result)
        assert result is not None
        answer = result.final_output
        print(f"\nanswer: {answer.summary} ({answer.kilometres} km)")
        print(f"usage: {result.usage.requests} requests, {result.usage.input_tokens} tokens in")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        trio.run(main, sys.argv[1])
    else:
        with tempfile.TemporaryDirectory() as tmp:
            trio.run(main, str(Path(tmp) / "real_model_agent.db"))
