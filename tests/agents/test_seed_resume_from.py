"""CheckpointOptions(resume_from=snapshot) takes the run id from the snapshot."""

from __future__ import annotations

import pytest

from runtime import InvalidArgumentError, MemoryStore, open_runtime
from runtime.agents import (
    Agent,
    CheckpointOptions,
    MemoryCheckpointer,
    ModelResponse,
    RequestedCall,
    RunContext,
    Runner,
    RunSnapshot,
    ScriptedModel,
    checkpoints,
    function_tool,
)


@function_tool
async def stop_here(ctx: RunContext) -> str:
    """Interrupt the run (the test resumes it from its snapshot)."""
    raise KeyboardInterrupt(ctx.run_id)


async def test_resume_from_a_snapshot_alone() -> None:
    """Only the snapshot is given: the run resumes under the snapshot's run id, on the
    store its checkpointer names, and completes there."""
    model = ScriptedModel(
        [ModelResponse(tool_calls=(RequestedCall("stop_here", {}, "c1"),)), ModelResponse("done")]
    )
    agent = Agent("a", "x", tools=(stop_here,), model=model)
    async with open_runtime(MemoryStore()) as rt:
        options = CheckpointOptions(checkpoints(rt), "held-run")
        with pytest.raises(KeyboardInterrupt):
            await Runner.run(agent, "go", runtime=rt, checkpoint=options)
        snapshot = await checkpoints(rt).load("held-run")
        assert snapshot is not None
        assert snapshot.head.status == "interrupted"
        alone = CheckpointOptions(checkpoints(rt), resume_from=snapshot)
        assert alone.run_id == "held-run"
        result = await Runner.run(agent, "ignored", runtime=rt, checkpoint=alone)
        assert result.run_id == "held-run"
        assert result.output == "done"
        stored = await checkpoints(rt).load("held-run")
        assert stored is not None
        assert stored.head.status == "completed"


async def test_run_id_is_needed_without_a_snapshot() -> None:
    """Neither a run id nor a snapshot, or a snapshot of another run, is refused."""
    cp = MemoryCheckpointer()
    with pytest.raises(InvalidArgumentError, match="needs a run_id"):
        CheckpointOptions(cp)
    with pytest.raises(InvalidArgumentError, match="RunSnapshot"):
        CheckpointOptions(cp, resume_from="r")  # type: ignore[arg-type]
    snap = RunSnapshot.from_json(
        {"run_id": "a", "entries": [], "head": {"agent": "x", "status": "interrupted"}}
    )
    with pytest.raises(InvalidArgumentError, match="not 'b'"):
        CheckpointOptions(cp, "b", resume_from=snap)
