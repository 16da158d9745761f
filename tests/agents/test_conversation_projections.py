"""The agent layer's projections: the conversation a model sees, and the turn outline."""

from __future__ import annotations

import pathlib
from collections.abc import AsyncIterator

import pytest
from helpers import runtime_target

from runtime import NewEvent, Runtime, open_runtime
from runtime.agents import agent_projections


@pytest.fixture(params=["sqlite", "postgres"])
async def rt(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> AsyncIterator[Runtime]:
    async with open_runtime(runtime_target(request.param, tmp_path, request)) as runtime:
        for projection in agent_projections():
            runtime.register_projection(projection)
        yield runtime


async def test_empty_conversation_views(rt: Runtime) -> None:
    """An empty session's conversation and turn outline are empty lists."""
    async with rt.open_session("s"), rt.snapshot("s") as snap:
        values = await snap.values(["conversation", "turns"])
    assert values == {"conversation": [], "turns": []}


async def test_conversation_fold_rules(rt: Runtime) -> None:
    """User/assistant push messages; calls attach to the assistant; consecutive tool
    results coalesce even across sidecars; a summary replaces everything before it."""
    events = [
        NewEvent("user", {"text": "old"}),
        NewEvent("summary", {"text": "earlier: the user said old"}),
        NewEvent("user", {"text": "q"}),
        NewEvent("assistant", {"text": ""}),
        NewEvent("tool_call", {"call_id": "a", "name": "t", "arguments": {}}),
        NewEvent("tool_call", {"call_id": "b", "name": "t", "arguments": {}}),
        NewEvent("tool_result", {"call_id": "a", "output": "A", "is_error": False}),
        NewEvent("tool_started", {"call_id": "x"}),
        NewEvent("tool_result", {"call_id": "b", "output": "B", "is_error": True}),
        NewEvent("context_view", {"messages": 3}),
        NewEvent("assistant", {"text": "done", "usage": {"input_tokens": 7, "output_tokens": 2}}),
    ]
    async with rt.open_session("s") as w:
        await w.append(events)
    async with rt.snapshot("s") as snap:
        values = await snap.values()
    conversation = values["conversation"]
    assert [m["role"] for m in conversation] == [
        "summary",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert [c["id"] for c in conversation[2]["tool_calls"]] == ["a", "b"]
    assert [r["id"] for r in conversation[3]["results"]] == ["a", "b"]
    assert values["stats"]["usage"] == {"input_tokens": 7, "output_tokens": 2}
    [turn_old, turn] = values["turns"]
    assert turn_old["outcome"] == "pending"
    assert turn == {"seq": 3, "text": "q", "tools": ["t", "t"], "errors": 1, "outcome": "answered"}
