"""Step 2 of ``tidelog demo`` (:mod:`runtime.cli._demo`): a host process killed with
SIGKILL in the middle of a tool call, after the email went out, then a new host that
resumes the run (the idempotent call re-run, the email reported ``TOOL_OUTCOME_UNKNOWN``)
and runs it again as a replay. The crashing host is :func:`crash_host`, run as
``python -m runtime.cli._crash_host`` (see that module).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import trio

from runtime import Runtime, open_runtime
from runtime.agents import (
    TOOL_OUTCOME_UNKNOWN,
    Agent,
    AssistantMessage,
    ModelRequest,
    ModelResponse,
    ModelTurn,
    RunCompleted,
    RunFailed,
    Runner,
    RunStarted,
    ScriptedModel,
    ToolCall,
    ToolFinished,
    ToolResult,
    ToolStarted,
    checkpoints,
    history,
    pending_tool_calls,
)

from ._demo_tools import (
    OUTBOX,
    DemoError,
    Workspace,
    checkpoint_options,
    expect,
    make_tools,
    scripted_agent,
    scripted_call,
    short,
)

__all__ = ["CRASH_SUBJECT", "CRASH_TO", "crash_host", "step_crash"]

#: Lease lifetime of the crashing host: the longest its dead lease can block the next host
#: (a lease of a dead process of this machine is usually taken over at once).
CRASH_LEASE_TTL = 0.5
CRASH_SESSION = "nightly-report"
CRASH_RUN = "nightly-1"
CRASH_TO = "ops@example.com"
CRASH_SUBJECT = "Nightly report ready"


# -- step 2: a crash mid-tool and the recovery --------------------------------------------


def _crash_script() -> list[ModelResponse]:
    """The crashing run's model: one turn asking for two tools at once."""
    return [
        ModelResponse(
            "Writing the nightly report and notifying ops.",
            tool_calls=(
                scripted_call(
                    "call_write",
                    "write_file",
                    path="reports/nightly.md",
                    text="# Nightly report\nAll 3 jobs succeeded.\n",
                ),
                scripted_call("call_email", "send_email", to=CRASH_TO, subject=CRASH_SUBJECT),
            ),
        )
    ]


async def _crash_host(db: str, workspace: Workspace) -> None:
    """The crashing host: a run whose ``send_email`` kills the process mid-tool."""
    async with open_runtime(db, lease_ttl=CRASH_LEASE_TTL) as rt:
        agent = scripted_agent(
            "reporter", make_tools(workspace, crash_in_send_email=True), _crash_script()
        )
        print(f"  host pid {os.getpid()}: starting run {CRASH_RUN} in {CRASH_SESSION}", flush=True)
        await Runner.run(
            agent,
            "Write the nightly report and email ops that it is ready.",
            runtime=rt,
            session_id=CRASH_SESSION,
            checkpoint=checkpoint_options(rt, CRASH_RUN),
        )
    print("  host: the run finished without crashing (unexpected)", flush=True)


def crash_host(db: str, workspace: str) -> int:
    """Entry point of the host process that dies mid-tool
    (``python -m runtime.cli._crash_host``)."""
    trio.run(_crash_host, db, Workspace(Path(workspace)))
    return 1  # reaching this means the crash did not happen


def _last_result(request: ModelRequest) -> list[ToolResult]:
    """The tool results after the last assistant turn of ``request``."""
    results: list[ToolResult] = []
    for entry in reversed(request.messages):
        if isinstance(entry, AssistantMessage | ToolCall):
            if results:
                break
            continue
        if isinstance(entry, ToolResult):
            results.append(entry)
    return results


def _after_crash(request: ModelRequest) -> ModelResponse:
    """The resumed model's first turn: it sees the unknown outcome and checks first."""
    unknown = any(r.output.startswith(TOOL_OUTCOME_UNKNOWN) for r in _last_result(request))
    if not unknown:
        return ModelResponse("Report written and email sent.")
    return ModelResponse(
        "The email's outcome is unknown: I will check the outbox before resending.",
        tool_calls=(scripted_call("call_check", "check_outbox"),),
    )


def _after_check(request: ModelRequest) -> ModelResponse:
    """The resumed model's second turn: resend only if the outbox lacks the email."""
    outputs = "\n".join(r.output for r in _last_result(request))
    if CRASH_SUBJECT in outputs:
        return ModelResponse(f"The outbox already has {CRASH_SUBJECT!r}: not resending it.")
    return ModelResponse(
        "The email is not in the outbox: sending it now.",
        tool_calls=(
            scripted_call("call_resend", "send_email", to=CRASH_TO, subject=CRASH_SUBJECT),
        ),
    )


async def step_crash(rt: Runtime, db: str, workspace: Workspace) -> None:
    """Step 2: a host killed mid-tool in a subprocess, then resume and replay here."""
    print()
    print("== 2. A host killed mid-tool, then recovered")
    print(f"  starting a host process for run {CRASH_RUN}: write_file + send_email in one turn")
    command = [
        sys.executable,
        "-m",
        "runtime.cli._crash_host",
        "--db",
        db,
        "--workspace",
        str(workspace.root),
    ]
    proc = await trio.run_process(command, capture_stdout=True, capture_stderr=True, check=False)
    for line in proc.stdout.decode("utf-8", "replace").splitlines():
        print(f"  | {line.strip()}")
    if proc.returncode != -signal.SIGKILL:
        sys.stderr.write(proc.stderr.decode("utf-8", "replace"))
        raise DemoError(f"the host exited with {proc.returncode}, expected -9 (SIGKILL)")
    print(f"  host died: return code {proc.returncode} (SIGKILL)")
    sent = workspace.outbox().count(f"{CRASH_TO}\t{CRASH_SUBJECT}")
    expect(sent == 1, f"the crashed email should be in the outbox once, found {sent}")
    print(f"  the side effect happened before the crash: {CRASH_SUBJECT!r} is in {OUTBOX}")

    stored = await checkpoints(rt).load(CRASH_RUN)
    expect(stored is not None, "the crashed run left no checkpoint")
    assert stored is not None
    pending = pending_tool_calls(stored.entries)
    names = {call.call_id: call.name for call in pending}
    print(
        f"  checkpoint of {CRASH_RUN}: status={stored.head.status}, turns={stored.head.turns}, "
        f"calls without result: {', '.join(c.name for c in pending)}"
    )

    print("  a new host takes over the dead host's lease and resumes (Runner.run_streamed)")
    resumer = scripted_agent("reporter", make_tools(workspace), [_after_crash, _after_check])
    hows: dict[str, list[str]] = {}
    async with Runner.run_streamed(
        resumer,
        "(ignored on resume)",
        runtime=rt,
        session_id=CRASH_SESSION,
        checkpoint=checkpoint_options(rt, CRASH_RUN, wait=True),
    ) as events:
        async for event in events:
            if isinstance(event, RunStarted):
                print(f"  run {event.run_id} {event.mode} (agent {event.agent})")
            elif isinstance(event, ModelTurn):
                for entry in event.entries:
                    if isinstance(entry, AssistantMessage) and entry.text:
                        print(f"  model: {entry.text}")
                    elif isinstance(entry, ToolCall):
                        names[entry.call_id] = entry.name
            elif isinstance(event, ToolStarted):
                names[event.call.call_id] = event.call.name
            elif isinstance(event, ToolFinished):
                name = names.get(event.result.call_id, "?")
                hows.setdefault(event.how, []).append(name)
                print(f"  {_HOW.get(event.how, event.how)}: {name} -> {short(event.result.output)}")
            elif isinstance(event, RunCompleted):
                print(f"  completed: {event.result.output}")
            elif isinstance(event, RunFailed):
                raise DemoError(f"the resumed run failed: {event.error!r}")
    expect(hows.get("re-ran") == ["write_file"], f"expected write_file re-ran, got {hows}")
    expect(hows.get("unknown") == ["send_email"], f"expected send_email unknown, got {hows}")
    expect(hows.get("ran") == ["check_outbox"], f"expected check_outbox ran fresh, got {hows}")
    print(
        f"  summary: re-ran {', '.join(hows['re-ran'])}; unknown {', '.join(hows['unknown'])}; "
        f"ran fresh {', '.join(hows['ran'])}"
    )

    silent = ScriptedModel([])
    replayer = Agent("reporter", "unused", tools=make_tools(workspace), model=silent)
    result = await Runner.run(
        replayer,
        "again",
        runtime=rt,
        session_id=CRASH_SESSION,
        checkpoint=checkpoint_options(rt, CRASH_RUN),
    )
    expect(result.finish_reason is None and not silent.requests, "the second run was no replay")
    print(
        f"  replay: running {CRASH_RUN} again returns the stored output without calling the "
        f"model (finish_reason={result.finish_reason}, model requests={len(silent.requests)})"
    )
    entries = await history(rt).load(CRASH_SESSION)
    calls = [e.call_id for e in entries if isinstance(e, ToolCall)]
    results = [e.call_id for e in entries if isinstance(e, ToolResult)]
    expect(sorted(calls) == sorted(results), "a call in the history lacks its single result")
    print(f"  history of {CRASH_SESSION}: {len(calls)} tool calls, each with exactly one result")


_HOW = {
    "re-ran": "re-ran  (idempotent, started before the crash)",
    "unknown": "unknown (not idempotent, started before the crash)",
    "ran": "ran     (fresh call)",
}
