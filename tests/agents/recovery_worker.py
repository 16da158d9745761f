"""A host process for the crash-recovery tests: runs (or resumes) one scripted agent run
and kills itself with SIGKILL at a named barrier.

Usage: python recovery_worker.py DB WORKDIR MODE [CRASH_AT]
MODE: run | resume | replay. Prints one JSON line with what happened.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import trio

from runtime import open_runtime
from runtime.agents import (
    Agent,
    CheckpointOptions,
    Entry,
    ModelRequest,
    ModelResponse,
    RequestedCall,
    RunCompleted,
    RunContext,
    RunFailed,
    RunHooks,
    Runner,
    RunResult,
    RuntimeHistory,
    ToolCall,
    ToolFinished,
    ToolResult,
    checkpoints,
    function_tool,
    history,
)

RUN_ID = "crash-run"
SESSION = "conversation"


def die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def main() -> None:
    db, workdir, mode = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    crash_at = sys.argv[4] if len(sys.argv) > 4 else ""
    trio.run(host, db, workdir, mode, crash_at)


async def host(db: str, workdir: Path, mode: str, crash_at: str) -> None:
    model_calls = 0

    def log(name: str, call_id: str) -> None:
        with open(workdir / "executions.log", "a") as f:
            f.write(f"{name} {call_id}\n")

    @function_tool(idempotent=True)
    async def note(text: str) -> str:
        """Write a note (idempotent)."""
        log("note", text)
        if crash_at == f"inside_note_{text}":
            die()
        return f"noted {text}"

    @function_tool
    async def charge(amount: int) -> str:
        """Charge money (a side effect: not idempotent)."""
        log("charge", str(amount))
        if crash_at == "inside_charge":
            die()
        return f"charged {amount}"

    def respond(request: ModelRequest) -> ModelResponse:
        nonlocal model_calls
        model_calls += 1
        calls = [e for e in request.messages if isinstance(e, ToolCall)]
        if crash_at == f"before_model_{len(calls)}":
            die()
        if not calls:
            return ModelResponse(
                tool_calls=(
                    RequestedCall("note", {"text": "c1"}, "c1"),
                    RequestedCall("charge", {"amount": 5}, "c2"),
                )
            )
        if len(calls) == 2:
            return ModelResponse(tool_calls=(RequestedCall("note", {"text": "c3"}, "c3"),))
        return ModelResponse("done")

    class Model:
        async def respond(self, request: ModelRequest) -> ModelResponse:
            await trio.lowlevel.checkpoint()
            return respond(request)

    class Hooks(RunHooks):
        # RunHooks' signatures; these hooks only crash the process at their barrier.
        async def on_model_turn(self, ctx: RunContext, entries: tuple[Entry, ...]) -> None:  # noqa: ARG002
            if crash_at == "after_model_turn":
                die()

        async def on_tool_result(self, ctx: RunContext, result: ToolResult) -> None:  # noqa: ARG002
            if crash_at == "after_tool_result":
                die()

    agent = Agent("worker", "do the job", tools=(note, charge), model=Model())
    how: dict[str, str] = {}
    result: RunResult | None = None
    # Checkpoints in a second database: completion then follows the order of lovia (the
    # Python agent framework whose Session/Checkpoint/Runner design the agent layer
    # follows): checkpoint, then history, which has the crash window this test exercises.
    async with open_runtime(db) as rt, open_runtime(db + ".runs") as runs:
        conversations = history(rt)
        if crash_at == "between_completion_and_history":

            class DyingHistory(RuntimeHistory):
                # Dies before it looks at its arguments.
                async def append(self, *args: object, **kwargs: object) -> str:  # noqa: ARG002
                    die()
                    raise AssertionError  # pragma: no cover

            conversations = DyingHistory(rt, checkpointer=checkpoints(runs))
        options = CheckpointOptions(
            checkpoints(runs),
            RUN_ID,
            if_run_exists="resume" if mode == "run" else "resume_only",
        )
        async with Runner.run_streamed(
            agent,
            "start",
            runtime=rt,
            session_id=SESSION,
            checkpoint=options,
            hooks=Hooks(),
            history=conversations,
        ) as events:
            async for event in events:
                if isinstance(event, ToolFinished):
                    how[event.result.call_id] = event.how
                if isinstance(event, RunCompleted):
                    result = event.result
                if isinstance(event, RunFailed):
                    raise event.error
    assert result is not None
    print(
        json.dumps(
            {
                "output": result.output,
                "finish_reason": result.finish_reason,
                "model_calls": model_calls,
                "how": how,
            }
        )
    )


if __name__ == "__main__":
    main()
