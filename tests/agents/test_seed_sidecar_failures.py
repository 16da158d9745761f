"""Write contract of a tool's sidecar: a store that fails the batch holding it."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from runtime import MemoryStore, StoreIOError, open_runtime
from runtime.agents import (
    Agent,
    CheckpointOptions,
    ModelResponse,
    RequestedCall,
    RunContext,
    Runner,
    ScriptedModel,
    SidecarEntry,
    checkpoints,
    function_tool,
)
from stores import AppendOp, BatchResult, WriteOp

outcomes: list[str] = []


class FailsOnSidecar(MemoryStore):
    """A real MemoryStore whose first batch holding a ``progress`` event fails, before or
    after it committed."""

    def __init__(self, *, after_commit: bool) -> None:
        super().__init__()
        self.after_commit = after_commit
        self.failed = False

    def write_batch(self, ops: Sequence[WriteOp], *, sync: bool = False) -> list[BatchResult]:
        hit = not self.failed and any(
            isinstance(op, AppendOp) and any(e.kind == "progress" for e in op.events) for op in ops
        )
        if hit and not self.after_commit:
            self.failed = True
            raise StoreIOError("injected: the disk failed before the commit")
        results = super().write_batch(ops, sync=sync)
        if hit:
            self.failed = True
            raise StoreIOError("injected: the disk failed after the commit landed")
        return results


@function_tool
async def step(ctx: RunContext) -> str:
    """Record progress, saying how the write went."""
    try:
        await ctx.record("progress", {"n": 1})
    except Exception as exc:
        outcomes.append(type(exc).__name__)
        raise
    outcomes.append("ok")
    return "stepped"


@pytest.mark.parametrize("after_commit", [False, True])
async def test_sidecar_lands_once_whatever_the_store_did(after_commit: bool) -> None:
    """Whether the failed commit landed or not, record raises CommitPendingError (the
    sidecar was accepted; the writer retries it), the run goes on, and the checkpoint
    holds the sidecar exactly once."""
    outcomes.clear()
    store = FailsOnSidecar(after_commit=after_commit)
    model = ScriptedModel(
        [ModelResponse(tool_calls=(RequestedCall("step", {}, "c1"),)), ModelResponse("done")]
    )
    agent = Agent("a", "x", tools=(step,), model=model)
    async with open_runtime(store) as rt:
        options = CheckpointOptions(checkpoints(rt), "r1")
        result = await Runner.run(agent, "go", runtime=rt, checkpoint=options)
        snapshot = await checkpoints(rt).load("r1")
    assert store.failed
    assert result.output == "done"
    assert outcomes == ["CommitPendingError"]  # accepted, its commit retried
    assert snapshot is not None
    marks = [e for e in snapshot.entries if isinstance(e, SidecarEntry) and e.kind == "progress"]
    assert marks == [SidecarEntry("progress", {"call_id": "c1", "n": 1})]
