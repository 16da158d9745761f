"""``tidelog demo``: durable agent sessions on one embedded SQLite file, in a few seconds.

What it shows, with scripted models (no network, no API key):

1. three agent sessions running concurrently on one runtime, each a checkpointed run whose
   tools write files into a workspace (idempotent) or "send an email" (a line appended to
   ``outbox.log``: not idempotent);
2. a host process killed with SIGKILL in the middle of a tool call, after the email went
   out; a new host resumes the run: the idempotent call is re-run, the email is reported
   ``TOOL_OUTCOME_UNKNOWN`` (the model checks the outbox instead of resending), and running
   the completed run again is a replay that never calls the model;
3. a snapshot pinned at a sequence number while the session moves on;
4. a live tail of a session while a run appends to it;
5. a summary: the outbox proves the email was sent exactly once.

The crashing host is ``python -m runtime.cli._crash_host`` (see that module).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeAlias

import trio

from runtime import JSON, Runtime, StoredEvent, TidelogError, open_runtime
from runtime.agents import (
    TOOL_OUTCOME_UNKNOWN,
    Agent,
    AssistantMessage,
    CheckpointOptions,
    FunctionTool,
    ModelRequest,
    ModelResponse,
    ModelTurn,
    RequestedCall,
    RunCompleted,
    RunFailed,
    Runner,
    RunResult,
    RunStarted,
    ScriptedModel,
    ToolCall,
    ToolFinished,
    ToolResult,
    ToolStarted,
    checkpoints,
    function_tool,
    history,
    pending_tool_calls,
    unwrap_group,
)

__all__ = ["DemoError", "Workspace", "crash_host", "make_tools", "run_demo"]

#: Upper bound for the whole demo, in seconds (it normally takes about one).
DEMO_TIMEOUT = 20.0
#: Lease lifetime of the crashing host: the longest its dead lease can block the next host
#: (a lease of a dead process of this machine is usually taken over at once).
CRASH_LEASE_TTL = 0.5
CRASH_SESSION = "nightly-report"
CRASH_RUN = "nightly-1"
CRASH_TO = "ops@example.com"
CRASH_SUBJECT = "Nightly report ready"
OUTBOX = "outbox.log"
TAIL_SESSION = "docs-cy"
SNAPSHOT_SESSION = "support-ada"

#: One scripted model answer: fixed, or computed from the request.
Script: TypeAlias = ModelResponse | Callable[[ModelRequest], ModelResponse]


class DemoError(TidelogError):
    """A demo step did not produce what it must (the demo then exits with status 1)."""


def _expect(condition: bool, message: str) -> None:
    """Raise :class:`DemoError` with ``message`` unless ``condition`` holds."""
    if not condition:
        raise DemoError(message)


def _short(value: JSON, width: int = 64) -> str:
    """Compact one-line JSON of ``value``, cut to ``width`` characters."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= width else text[: width - 3] + "..."


# -- the workspace and the tools ----------------------------------------------------------


class Workspace:
    """The directory the demo's tools write into: files, and ``outbox.log`` (one line per
    email "sent")."""

    def __init__(self, root: Path) -> None:
        """Use ``root`` (an existing directory) as the workspace."""
        self.root = root

    def _resolve(self, relative: str) -> Path:
        """``relative`` inside the workspace; refuse absolute paths and ``..``."""
        path = Path(relative)
        if path.is_absolute() or ".." in path.parts or not path.parts:
            raise ValueError(f"path must be relative and stay in the workspace: {relative!r}")
        return self.root / path

    def write(self, relative: str, text: str) -> int:
        """Write ``text`` to ``relative`` (parents created); return its size in bytes."""
        path = self._resolve(relative)
        path.parent.mkdir(parents=True, exist_ok=True)
        data = text.encode("utf-8")
        path.write_bytes(data)
        return len(data)

    def send(self, to: str, subject: str) -> None:
        """Append one line to the outbox and make it durable (the side effect)."""
        with open(self.root / OUTBOX, "a", encoding="utf-8") as outbox:
            outbox.write(f"{to}\t{subject}\n")
            outbox.flush()
            os.fsync(outbox.fileno())

    def outbox(self) -> list[str]:
        """The outbox's lines (emails sent so far)."""
        path = self.root / OUTBOX
        return path.read_text(encoding="utf-8").splitlines() if path.exists() else []

    def files(self) -> list[str]:
        """The files written by ``write_file``, relative, sorted."""
        return sorted(
            p.relative_to(self.root).as_posix()
            for p in self.root.rglob("*")
            if p.is_file() and p.name != OUTBOX
        )


def make_tools(workspace: Workspace, *, crash_in_send_email: bool = False) -> list[FunctionTool]:
    """The demo's tools: ``write_file`` (idempotent), ``send_email`` (not idempotent) and
    ``check_outbox`` (idempotent, read-only). With ``crash_in_send_email`` the process
    kills itself with SIGKILL right after the email's side effect happened."""

    async def write_file(path: str, text: str) -> str:
        """Write a text file into the workspace (same path, same content: idempotent)."""
        size = await trio.to_thread.run_sync(workspace.write, path, text)
        return f"wrote {size} bytes to {path}"

    async def send_email(to: str, subject: str) -> str:
        """Send an email (fake: one line in outbox.log per email sent)."""
        if crash_in_send_email:
            workspace.send(to, subject)  # synchronous: nothing runs between effect and crash
            print(f"  send_email: {subject!r} is in the outbox; now SIGKILL", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
            await trio.sleep_forever()
        await trio.to_thread.run_sync(workspace.send, to, subject)
        return f"sent {subject!r} to {to}"

    async def check_outbox() -> str:
        """List the emails already sent (one line each)."""
        lines = await trio.to_thread.run_sync(workspace.outbox)
        return "\n".join(lines) if lines else "(the outbox is empty)"

    return [
        function_tool(write_file, idempotent=True),
        function_tool(send_email),  # idempotent=False, the default: a re-run sends twice
        function_tool(check_outbox, idempotent=True),
    ]


def _agent(name: str, tools: Sequence[FunctionTool], responses: Sequence[Script]) -> Agent:
    """An agent answering with a scripted model."""
    return Agent(
        name,
        f"You are {name}. Use the tools to do the task, then answer briefly.",
        tools=tools,
        model=ScriptedModel(responses),
    )


def _call(call_id: str, name: str, **arguments: JSON) -> RequestedCall:
    """A scripted tool call with a fixed call id (so the output is deterministic)."""
    return RequestedCall(name, dict(arguments), call_id)


def _checkpoint(rt: Runtime, run_id: str, *, wait: bool = False) -> CheckpointOptions:
    """Checkpoint ``run_id`` on ``rt``; resume it if it exists (replay if completed).
    ``wait``: wait for a host that still holds the run (a dead host's claim is taken
    over at once on this machine, else after its lease expires)."""
    return CheckpointOptions(checkpoints(rt), run_id, if_run_exists="resume", wait_for_owner=wait)


# -- step 1: three sessions at once --------------------------------------------------------

_SESSIONS: list[tuple[str, str, str, list[ModelResponse]]] = [
    (
        "support-ada",
        "ada-1",
        "Summarise ticket #311 for the team.",
        [
            ModelResponse(
                tool_calls=(
                    _call(
                        "call_ada_w",
                        "write_file",
                        path="notes/ticket-311.md",
                        text="# Ticket 311\nExport fails for files over 2 GB.\n",
                    ),
                )
            ),
            ModelResponse("Summary saved to notes/ticket-311.md."),
        ],
    ),
    (
        "billing-bob",
        "bob-1",
        "Send Bob his invoice #1042.",
        [
            ModelResponse(
                tool_calls=(
                    _call(
                        "call_bob_w",
                        "write_file",
                        path="invoices/1042.txt",
                        text="Invoice 1042\nTotal: 120.00 EUR\n",
                    ),
                    _call(
                        "call_bob_e", "send_email", to="bob@example.com", subject="Invoice #1042"
                    ),
                )
            ),
            ModelResponse("Invoice #1042 written and emailed to bob@example.com."),
        ],
    ),
    (
        "docs-cy",
        "cy-1",
        "Draft the FAQ entry about exports.",
        [
            ModelResponse(
                tool_calls=(
                    _call(
                        "call_cy_w",
                        "write_file",
                        path="docs/faq-exports.md",
                        text="## How do I export?\nUse File > Export.\n",
                    ),
                )
            ),
            ModelResponse("FAQ entry drafted in docs/faq-exports.md."),
        ],
    ),
]


def _tool_names(result: RunResult) -> str:
    """The names of the tools a run called, in order."""
    return ", ".join(e.name for e in result.entries if isinstance(e, ToolCall)) or "-"


async def _step_concurrent(rt: Runtime, workspace: Workspace) -> None:
    """Step 1: three checkpointed runs in three sessions, concurrently."""
    print("== 1. Three agent sessions at once (one host, one runtime, one SQLite file)")

    async def one(session_id: str, run_id: str, prompt: str, script: list[ModelResponse]) -> None:
        """Run one session's scripted run and print a line when it finishes."""
        agent = _agent(f"agent-{session_id}", make_tools(workspace), script)
        result = await Runner.run(
            agent,
            prompt,
            runtime=rt,
            session_id=session_id,
            checkpoint=_checkpoint(rt, run_id),
        )
        _expect(result.finish_reason == "stop", f"run {run_id} did not finish")
        print(
            f"  finished {session_id:<12} run {run_id:<6} tools: {_tool_names(result):<22}", end=""
        )
        print(f" -> {result.output}")

    async with trio.open_nursery() as nursery:
        for session_id, run_id, prompt, script in _SESSIONS:
            nursery.start_soon(one, session_id, run_id, prompt, script)


# -- step 2: a crash mid-tool and the recovery --------------------------------------------


def _crash_script() -> list[ModelResponse]:
    """The crashing run's model: one turn asking for two tools at once."""
    return [
        ModelResponse(
            "Writing the nightly report and notifying ops.",
            tool_calls=(
                _call(
                    "call_write",
                    "write_file",
                    path="reports/nightly.md",
                    text="# Nightly report\nAll 3 jobs succeeded.\n",
                ),
                _call("call_email", "send_email", to=CRASH_TO, subject=CRASH_SUBJECT),
            ),
        )
    ]


async def _crash_host(db: str, workspace: Workspace) -> None:
    """The crashing host: a run whose ``send_email`` kills the process mid-tool."""
    async with open_runtime(db, lease_ttl=CRASH_LEASE_TTL) as rt:
        agent = _agent("reporter", make_tools(workspace, crash_in_send_email=True), _crash_script())
        print(f"  host pid {os.getpid()}: starting run {CRASH_RUN} in {CRASH_SESSION}", flush=True)
        await Runner.run(
            agent,
            "Write the nightly report and email ops that it is ready.",
            runtime=rt,
            session_id=CRASH_SESSION,
            checkpoint=_checkpoint(rt, CRASH_RUN),
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
        tool_calls=(_call("call_check", "check_outbox"),),
    )


def _after_check(request: ModelRequest) -> ModelResponse:
    """The resumed model's second turn: resend only if the outbox lacks the email."""
    outputs = "\n".join(r.output for r in _last_result(request))
    if CRASH_SUBJECT in outputs:
        return ModelResponse(f"The outbox already has {CRASH_SUBJECT!r}: not resending it.")
    return ModelResponse(
        "The email is not in the outbox: sending it now.",
        tool_calls=(_call("call_resend", "send_email", to=CRASH_TO, subject=CRASH_SUBJECT),),
    )


async def _step_crash(rt: Runtime, db: str, workspace: Workspace) -> None:
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
    _expect(sent == 1, f"the crashed email should be in the outbox once, found {sent}")
    print(f"  the side effect happened before the crash: {CRASH_SUBJECT!r} is in {OUTBOX}")

    stored = await checkpoints(rt).load(CRASH_RUN)
    _expect(stored is not None, "the crashed run left no checkpoint")
    assert stored is not None
    pending = pending_tool_calls(stored.entries)
    names = {call.call_id: call.name for call in pending}
    print(
        f"  checkpoint of {CRASH_RUN}: status={stored.head.status}, turns={stored.head.turns}, "
        f"calls without result: {', '.join(c.name for c in pending)}"
    )

    print("  a new host takes over the dead host's lease and resumes (Runner.run_streamed)")
    resumer = _agent("reporter", make_tools(workspace), [_after_crash, _after_check])
    hows: dict[str, list[str]] = {}
    async with Runner.run_streamed(
        resumer,
        "(ignored on resume)",
        runtime=rt,
        session_id=CRASH_SESSION,
        checkpoint=_checkpoint(rt, CRASH_RUN, wait=True),
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
                print(
                    f"  {_HOW.get(event.how, event.how)}: {name} -> {_short(event.result.output)}"
                )
            elif isinstance(event, RunCompleted):
                print(f"  completed: {event.result.output}")
            elif isinstance(event, RunFailed):
                raise DemoError(f"the resumed run failed: {event.error!r}")
    _expect(hows.get("re-ran") == ["write_file"], f"expected write_file re-ran, got {hows}")
    _expect(hows.get("unknown") == ["send_email"], f"expected send_email unknown, got {hows}")
    _expect(hows.get("ran") == ["check_outbox"], f"expected check_outbox ran fresh, got {hows}")
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
        checkpoint=_checkpoint(rt, CRASH_RUN),
    )
    _expect(result.finish_reason is None and not silent.requests, "the second run was no replay")
    print(
        f"  replay: running {CRASH_RUN} again returns the stored output without calling the "
        f"model (finish_reason={result.finish_reason}, model requests={len(silent.requests)})"
    )
    entries = await history(rt).load(CRASH_SESSION)
    calls = [e.call_id for e in entries if isinstance(e, ToolCall)]
    results = [e.call_id for e in entries if isinstance(e, ToolResult)]
    _expect(sorted(calls) == sorted(results), "a call in the history lacks its single result")
    print(f"  history of {CRASH_SESSION}: {len(calls)} tool calls, each with exactly one result")


_HOW = {
    "re-ran": "re-ran  (idempotent, started before the crash)",
    "unknown": "unknown (not idempotent, started before the crash)",
    "ran": "ran     (fresh call)",
}


# -- steps 3 and 4: a pinned snapshot, a live tail ----------------------------------------


async def _step_snapshot(rt: Runtime, workspace: Workspace) -> None:
    """Step 3: a snapshot stays at its ``as_of_seq`` while a run appends."""
    print()
    print(f"== 3. A pinned snapshot of {SNAPSHOT_SESSION}")
    async with rt.snapshot(SNAPSHOT_SESSION) as snap:
        before = len(await snap.read())
        print(f"  snapshot pinned at as_of_seq={snap.as_of_seq} ({before} events)")
        script = [
            ModelResponse(
                tool_calls=(
                    _call(
                        "call_ada_w2",
                        "write_file",
                        path="notes/ticket-311-followup.md",
                        text="Follow-up: fix shipped in 2.4.1.\n",
                    ),
                )
            ),
            ModelResponse("Follow-up noted."),
        ]
        agent = _agent("agent-support-ada", make_tools(workspace), script)
        await Runner.run(
            agent,
            "Note the follow-up.",
            runtime=rt,
            session_id=SNAPSHOT_SESSION,
            checkpoint=_checkpoint(rt, "ada-2"),
        )
        info = await rt.stat(SNAPSHOT_SESSION)
        assert info is not None
        after = len(await snap.read())
        _expect(after == before and info.head > snap.as_of_seq, "the snapshot moved")
        print(f"  run ada-2 appended: the session's head is now {info.head}")
        print(f"  the snapshot still reads as_of_seq={snap.as_of_seq} ({after} events)")


async def _step_tail(rt: Runtime, workspace: Workspace) -> None:
    """Step 4: a live tail prints a run's events as they are committed."""
    print()
    print(f"== 4. A live tail of {TAIL_SESSION} while run cy-2 appends to it")
    info = await rt.stat(TAIL_SESSION)
    assert info is not None
    seen: list[StoredEvent] = []

    async def follow(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Print tailed events until the run's closing segment marker."""
        tail = rt.tail(TAIL_SESSION, since_seq=info.head)
        task_status.started()
        async for event in tail:
            seen.append(event)
            print(f"  tail seq={event.seq:<3} {event.kind:<16} {_short(event.data, 52)}")
            if event.kind == "tidelog.segment" and event.run_id == "cy-2":
                return

    script = [
        ModelResponse(
            tool_calls=(
                _call(
                    "call_cy_w2",
                    "write_file",
                    path="docs/faq-imports.md",
                    text="## How do I import?\nUse File > Import.\n",
                ),
            )
        ),
        ModelResponse("Import FAQ drafted."),
    ]
    async with trio.open_nursery() as nursery:
        await nursery.start(follow)
        agent = _agent("agent-docs-cy", make_tools(workspace), script)
        await Runner.run(
            agent,
            "Now the FAQ entry about imports.",
            runtime=rt,
            session_id=TAIL_SESSION,
            checkpoint=_checkpoint(rt, "cy-2"),
        )
    print(f"  tail stopped after the run's last event ({len(seen)} events, in order, no gaps)")


# -- the demo ------------------------------------------------------------------------------


async def _demo(db: str, workspace: Workspace) -> None:
    """All steps on one runtime, bounded by :data:`DEMO_TIMEOUT`, then the summary."""
    with trio.fail_after(DEMO_TIMEOUT):
        async with open_runtime(db) as rt:
            await _step_concurrent(rt, workspace)
            await _step_crash(rt, db, workspace)
            await _step_snapshot(rt, workspace)
            await _step_tail(rt, workspace)
            sessions = await rt.list_sessions(include_internal=True)
    print()
    print("== 5. Summary")
    outbox = workspace.outbox()
    print(f"  {OUTBOX} ({len(outbox)} lines):")
    for line in outbox:
        print(f"    {line.replace(chr(9), '  ')}")
    count = outbox.count(f"{CRASH_TO}\t{CRASH_SUBJECT}")
    _expect(count == 1, f"the crashed run's email was sent {count} times")
    print(f"  the crashed run's email {CRASH_SUBJECT!r} was sent exactly once")
    files = workspace.files()
    print(f"  files written ({len(files)}): {', '.join(files)}")
    print(f"  workspace: {workspace.root}")
    print(f"  database: {db} ({len(sessions)} sessions: conversations, run checkpoints)")


def run_demo(db: str | None = None, *, keep: bool = False) -> int:
    """Run the demo on ``db`` (a new file; a temporary directory if None) and return the
    exit status. The workspace is a directory next to the database. ``keep`` keeps the
    temporary directory."""
    tmp: str | None = None
    if db is None:
        tmp = tempfile.mkdtemp(prefix="tidelog-demo-")
        db_path = Path(tmp) / "demo.db"
    else:
        db_path = Path(db).resolve()
        if db_path.exists():
            print(f"tidelog demo: {db} already exists; give a new path", file=sys.stderr)
            return 2
    root = db_path.with_name(db_path.stem + "-workspace")
    if root.exists():
        print(f"tidelog demo: {root} already exists; give a new path", file=sys.stderr)
        return 2
    root.mkdir(parents=True)
    workspace = Workspace(root)
    try:
        trio.run(_demo, str(db_path), workspace)
    except BaseException as exc:
        leaf = unwrap_group(exc)
        if isinstance(leaf, DemoError):
            print(f"tidelog demo: FAILED: {leaf}", file=sys.stderr)
            return 1
        if isinstance(leaf, trio.TooSlowError):
            print(f"tidelog demo: FAILED: took longer than {DEMO_TIMEOUT} s", file=sys.stderr)
            return 1
        raise
    finally:
        if tmp is not None and not keep:
            shutil.rmtree(tmp, ignore_errors=True)
    if tmp is not None and not keep:
        print("  (temporary directory removed; pass --keep to keep it)")
    print("demo finished: every step checked")
    return 0
