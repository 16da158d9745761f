"""Tool-call arguments that are not a JSON object: stored raw, an error result for the
model, and resumed and replayed like any other call, on every backend."""

from __future__ import annotations

import pathlib
from collections.abc import AsyncIterator

import pytest
from helpers import runtime_target

from runtime import Runtime, open_runtime
from runtime.agents import (
    UNPARSED_ARGUMENTS,
    Agent,
    CheckpointOptions,
    Entry,
    ModelResponse,
    RequestedCall,
    RunContext,
    RunHooks,
    Runner,
    ScriptedModel,
    ToolCall,
    ToolResult,
    checkpoints,
    function_tool,
    history,
    raw_arguments,
)
from runtime.agents._openai import parse_arguments, unparse_arguments

ran: list[int] = []


@function_tool
async def add(x: int) -> str:
    """Add x."""
    ran.append(x)
    return str(x + 1)


@pytest.fixture(params=["memory", "sqlite", "jsonl", "postgres"])
async def rt(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> AsyncIterator[Runtime]:
    async with open_runtime(runtime_target(request.param, tmp_path, request)) as runtime:
        yield runtime


def test_adapters_keep_the_text_the_model_sent() -> None:
    """Invalid JSON and JSON that is not an object are kept raw and sent back as-is."""
    for text in ("{oops", "[1, 2]", '"x"'):
        arguments = parse_arguments(text)
        assert arguments == {UNPARSED_ARGUMENTS: text}
        assert raw_arguments(ToolCall("c", "add", arguments)) == text
        assert unparse_arguments(arguments) == text
    assert raw_arguments(ToolCall("c", "add", {"x": 1})) is None


class StopAfterTurn(RunHooks):
    """Interrupt the run right after its first model turn is checkpointed."""

    def __init__(self) -> None:
        self.armed = True

    async def on_model_turn(self, ctx: RunContext, entries: tuple[Entry, ...]) -> None:  # noqa: ARG002
        if self.armed:
            self.armed = False
            raise KeyboardInterrupt


async def test_raw_calls_get_error_results_through_resume_and_replay(rt: Runtime) -> None:
    """The calls are checkpointed with their raw text; the resumed run gives each an
    error result naming it (the body never runs); the replay and the history hold the
    same calls."""
    ran.clear()
    model = ScriptedModel(
        [
            ModelResponse(
                tool_calls=(
                    RequestedCall("add", {UNPARSED_ARGUMENTS: "{oops"}, "c1"),
                    RequestedCall("add", {UNPARSED_ARGUMENTS: "[1, 2]"}, "c2"),
                    RequestedCall("add", {"x": 1}, "c3"),
                )
            ),
            ModelResponse("done"),
        ]
    )
    agent = Agent("a", "x", tools=(add,), model=model)
    options = CheckpointOptions(checkpoints(rt), "r1")
    run = {"runtime": rt, "session_id": "s", "checkpoint": options, "history": history(rt)}
    with pytest.raises(KeyboardInterrupt):
        await Runner.run(agent, "go", hooks=StopAfterTurn(), **run)  # type: ignore[arg-type]
    snapshot = await checkpoints(rt).load("r1")
    assert snapshot is not None
    stored = [raw_arguments(e) for e in snapshot.entries if isinstance(e, ToolCall)]
    assert stored == ["{oops", "[1, 2]", None]

    result = await Runner.run(agent, "go", **run)  # type: ignore[arg-type]
    results = {e.call_id: e for e in result.entries if isinstance(e, ToolResult)}
    assert results["c1"].is_error
    assert "'{oops'" in results["c1"].output
    assert results["c2"].is_error
    assert "'[1, 2]'" in results["c2"].output
    assert results["c3"] == ToolResult("c3", "2")
    assert ran == [1]
    second = model.requests[1].messages
    assert [raw_arguments(e) for e in second if isinstance(e, ToolCall)] == stored

    replayed = await Runner.run(agent, "go", **run)  # type: ignore[arg-type]
    assert replayed.entries == result.entries
    assert [e for e in await history(rt).load("s") if isinstance(e, ToolCall)] == [
        e for e in result.entries if isinstance(e, ToolCall)
    ]
    assert ran == [1]
