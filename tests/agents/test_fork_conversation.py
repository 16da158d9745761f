"""fork_conversation: forks of conversations are independent and never start inside a
run with unanswered tool calls."""

from __future__ import annotations

import pytest
from helpers import stat_head

from runtime import NewEvent, Runtime
from runtime.agents import (
    ForkPointError,
    ToolCall,
    ToolResult,
    UserMessage,
    fork_conversation,
    history,
)


async def test_fork_sides_independent(rt: Runtime) -> None:
    """Appends, truncates, rewinds and deletes on either side never change the other."""
    await history(rt).append("p", [UserMessage("one")], run_id="r1")
    await history(rt).append("p", [UserMessage("two")], run_id="r2")
    await fork_conversation(rt, "p", "c")
    child = await history(rt).load("c")
    await history(rt).append("p", [UserMessage("three")], run_id="r3")
    await history(rt).rewind("p", 0)
    assert await history(rt).load("c") == child
    await history(rt).append("c", [UserMessage("child only")], run_id="r9")
    assert await history(rt).load("p") == []
    await rt.delete("p")
    assert await history(rt).load("c") == [*child, UserMessage("child only")]


async def test_fork_inside_open_run_refused(rt: Runtime) -> None:
    """A fork point between a tool call and its result is refused unless allowed."""
    async with rt.open_session("p") as w:
        await w.append(
            [
                NewEvent("user", {"text": "go"}, run_id="r"),
                NewEvent("tool_call", {"call_id": "c1", "name": "t", "arguments": {}}, run_id="r"),
                NewEvent(
                    "tool_result", {"call_id": "c1", "output": "ok", "is_error": False}, run_id="r"
                ),
            ]
        )
    with pytest.raises(ForkPointError) as info:
        await fork_conversation(rt, "p", "c", at_seq=2)
    assert info.value.pending == ["c1"]
    assert await rt.stat("c") is None
    await fork_conversation(rt, "p", "c", at_seq=2, allow_open_run=True)
    await fork_conversation(rt, "p", "d", at_seq=3)
    await fork_conversation(rt, "p", "e", at_seq=1)


async def test_fork_refusal_looks_only_at_the_open_run(rt: Runtime) -> None:
    """History segments before the fork point are closed; only the run containing the
    fork point is checked."""
    await history(rt).append("p", [ToolCall("x", "t", {}), ToolResult("x", "ok")], run_id="r1")
    await history(rt).append("p", [UserMessage("next")], run_id="r2")
    info = await fork_conversation(rt, "p", "c")
    assert info.parent == ("p", await stat_head(rt, "p"))
    assert await history(rt).load("c") == await history(rt).load("p")
