"""AgentHandoff objects: the tool the model sees, resume through them, renamed agents."""

from __future__ import annotations

import logging

import pytest

from runtime import InvalidArgumentError, MemoryStore, open_runtime
from runtime.agents import (
    Agent,
    AgentHandoff,
    AgentNotFoundError,
    CheckpointOptions,
    ModelResponse,
    RequestedCall,
    RunContext,
    Runner,
    ScriptedModel,
    checkpoints,
    function_tool,
)


@function_tool
async def interrupt(ctx: RunContext) -> str:
    """Stop the run here (a resume continues it)."""
    raise KeyboardInterrupt(ctx.agent)


def _graph(billing_name: str, model: ScriptedModel) -> Agent:
    billing = Agent(billing_name, "bill", tools=(interrupt,), model=model)
    route = AgentHandoff(billing, tool_name="ask_billing", description="Use for invoices.")
    return Agent("triage", "route", handoffs=(route,), model=model)


async def test_handoff_object_names_and_describes_the_tool() -> None:
    """The model sees the handoff's own tool name and description; calling it hands the
    run to the target, which answers."""
    model = ScriptedModel(
        [ModelResponse(tool_calls=(RequestedCall("ask_billing", {}, "h1"),)), ModelResponse("paid")]
    )
    billing = Agent("billing", "bill", model=model)
    route = AgentHandoff(billing, tool_name="ask_billing", description="Use for invoices.")
    triage = Agent("triage", "route", handoffs=(route, Agent("other", "x")), model=model)
    async with open_runtime(MemoryStore()) as rt:
        result = await Runner.run(triage, "my invoice", runtime=rt)
    assert result.agent == "billing"
    assert result.output == "paid"
    tools = {t["name"]: t["description"] for t in model.requests[0].tools}
    assert tools == {"ask_billing": "Use for invoices.", "transfer_to_other": "Hand off to other"}


async def test_bad_handoffs_are_refused() -> None:
    """A non-agent target, a bad tool name, an empty description or a duplicate name."""
    target = Agent("b", "x")
    with pytest.raises(InvalidArgumentError):
        AgentHandoff("b")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="tool_name"):
        AgentHandoff(target, tool_name="has space")
    with pytest.raises(InvalidArgumentError, match="description"):
        AgentHandoff(target, description=" ")
    with pytest.raises(InvalidArgumentError, match="duplicate"):
        Agent("a", "x", handoffs=(target, AgentHandoff(target)))
    with pytest.raises(InvalidArgumentError, match="an Agent or an AgentHandoff"):
        Agent("a", "x", handoffs=("b",))  # type: ignore[arg-type]


async def test_resume_through_a_handoff_object_and_renamed_agents(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Resume finds the active agent by name through the handoff objects; after a rename
    an in-flight resume fails with AgentNotFoundError, while a completed run's replay
    falls back to the entry agent with a warning."""
    model = ScriptedModel(
        [
            ModelResponse(tool_calls=(RequestedCall("ask_billing", {}, "h1"),)),
            ModelResponse(tool_calls=(RequestedCall("interrupt", {}, "c1"),)),
            ModelResponse("paid"),
        ]
    )
    async with open_runtime(MemoryStore()) as rt:
        options = CheckpointOptions(checkpoints(rt), "r1")
        with pytest.raises(KeyboardInterrupt):
            await Runner.run(_graph("billing", model), "invoice", runtime=rt, checkpoint=options)
        snapshot = await checkpoints(rt).load("r1")
        assert snapshot is not None
        assert snapshot.head.agent == "billing"
        with pytest.raises(AgentNotFoundError, match="'billing'"):
            await Runner.run(_graph("invoices", model), "x", runtime=rt, checkpoint=options)
        result = await Runner.run(_graph("billing", model), "x", runtime=rt, checkpoint=options)
        assert result.agent == "billing"
        assert result.output == "paid"
        with caplog.at_level(logging.WARNING, logger="tidelog"):
            replayed = await Runner.run(
                _graph("invoices", model), "x", runtime=rt, checkpoint=options
            )
        assert replayed.agent == "triage"
        assert replayed.output == "paid"
        assert "agent 'billing' is unknown" in caplog.text
