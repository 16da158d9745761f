"""RunContext: the current turn number and the read-only transcript so far."""

from __future__ import annotations

from runtime import MemoryStore, open_runtime
from runtime.agents import (
    Agent,
    AssistantMessage,
    ModelResponse,
    RequestedCall,
    RunContext,
    Runner,
    ScriptedModel,
    ToolCall,
    UserMessage,
    function_tool,
    history,
)

seen: list[tuple[int, tuple[object, ...]]] = []


@function_tool
async def look(ctx: RunContext) -> str:
    """Record what the context shows."""
    seen.append((ctx.turn, ctx.transcript))
    return "looked"


async def test_tools_see_turn_and_transcript() -> None:
    """Tools see the turn they belong to and every entry so far (history first, then
    the run's, their own call included); instructions see the turns done so far."""
    seen.clear()
    prompts: list[tuple[int, int]] = []

    def instructions(ctx: RunContext) -> str:
        prompts.append((ctx.turn, len(ctx.transcript)))
        return "look around"

    model = ScriptedModel(
        [
            ModelResponse(tool_calls=(RequestedCall("look", {}, "c1"),)),
            ModelResponse(tool_calls=(RequestedCall("look", {}, "c2"),)),
            ModelResponse("done"),
        ]
    )
    agent = Agent("a", instructions, tools=(look,), model=model)
    async with open_runtime(MemoryStore()) as rt:
        await history(rt).append("s", [UserMessage("earlier"), AssistantMessage("ok")])
        await Runner.run(agent, "now", runtime=rt, session_id="s")
    assert [turn for turn, _ in seen] == [1, 2]
    first, second = seen[0][1], seen[1][1]
    assert isinstance(first, tuple)
    assert first[:3] == (UserMessage("earlier"), AssistantMessage("ok"), UserMessage("now"))
    assert [e.call_id for e in first if isinstance(e, ToolCall)] == ["c1"]
    assert [e.call_id for e in second if isinstance(e, ToolCall)] == ["c1", "c2"]
    assert second[: len(first)] == first
    assert [turn for turn, _ in prompts] == [0, 1, 2]
    assert prompts[0][1] == 3
