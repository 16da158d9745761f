"""A process of the cross-process approval tests: a host running one agent run, or a
decider approving or rejecting one of its calls.

Usage:
    python approval_worker.py host TARGET WORKDIR RUN [hang|wait]
    python approval_worker.py decide TARGET RUN CALL approve|reject BY

``host`` runs (or resumes) the run and prints one JSON line: its status, the pending
calls, the output, how many model calls it made. Its ``pay`` tool needs approval and
appends ``pay <amount>`` to ``WORKDIR/effects.log`` when it runs. With ``hang`` it then
waits forever with the runtime open (to be killed). With ``wait`` the run waits for the
decision instead of returning (``wait_for_decisions``): it prints ``awaiting`` when it
starts waiting, then the JSON line once it finished. ``decide`` prints whether this
process decided, or how the call had been decided already.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import trio

from runtime import open_runtime
from runtime.agents import (
    Agent,
    AlreadyDecidedError,
    AwaitingApproval,
    CheckpointOptions,
    ModelRequest,
    ModelResponse,
    RequestedCall,
    RunCompleted,
    RunFailed,
    Runner,
    RunResult,
    ToolResult,
    approve,
    checkpoints,
    function_tool,
    reject,
)


async def host(target: str, workdir: Path, run_id: str, mode: str) -> None:
    model_calls = 0

    def script(request: ModelRequest) -> ModelResponse:
        nonlocal model_calls
        model_calls += 1
        answered = [m for m in request.messages if isinstance(m, ToolResult)]
        if answered:
            return ModelResponse(f"done: {answered[-1].output}")
        return ModelResponse(tool_calls=(RequestedCall("pay", {"amount": 7}, "c1"),))

    @function_tool(needs_approval=True)
    def pay(amount: int) -> str:
        """Pay an amount (a sync tool: it runs in a worker thread)."""
        with open(workdir / "effects.log", "a") as log:
            log.write(f"pay {amount}\n")
        return f"paid {amount}"

    class Model:
        async def respond(self, request: ModelRequest) -> ModelResponse:
            await trio.lowlevel.checkpoint()
            return script(request)

    async with open_runtime(target) as rt:
        agent = Agent("clerk", "pay what is asked", model=Model(), tools=(pay,))
        options = CheckpointOptions(checkpoints(rt), run_id, wait_for_decisions=mode == "wait")
        results: list[RunResult] = []
        async with Runner.run_streamed(
            agent, "pay the bill", runtime=rt, session_id=f"s-{run_id}", checkpoint=options
        ) as events:
            async for event in events:
                if isinstance(event, AwaitingApproval) and mode == "wait":
                    print("awaiting", flush=True)
                elif isinstance(event, AwaitingApproval | RunCompleted):
                    results.append(event.result)
                elif isinstance(event, RunFailed):
                    raise event.error
        result = results[-1]
        summary = {
            "status": result.status,
            "pending": [c.call_id for c in result.pending_approvals],
            "output": result.output,
            "model_calls": model_calls,
        }
        print(json.dumps(summary), flush=True)
        if mode == "hang":
            await trio.sleep_forever()


async def decide(target: str, run_id: str, call_id: str, verdict: str, by: str) -> None:
    async with open_runtime(target) as rt:
        act = approve if verdict == "approve" else reject
        try:
            decision = await act(checkpoints(rt), run_id, call_id, by=by, message=f"{by} says no")
            out = {"decided": True, "approved": decision.approved, "by": decision.by}
        except AlreadyDecidedError as exc:
            earlier = exc.decision
            out = {"decided": False, "approved": earlier.approved, "by": earlier.by}
    print(json.dumps(out), flush=True)


def main() -> None:
    mode, target = sys.argv[1], sys.argv[2]
    if mode == "host":
        mode = sys.argv[5] if len(sys.argv) > 5 else "return"
        trio.run(host, target, Path(sys.argv[3]), sys.argv[4], mode)
    else:
        run_id, call_id, verdict, by = sys.argv[3:7]
        trio.run(decide, target, run_id, call_id, verdict, by)


if __name__ == "__main__":
    main()
