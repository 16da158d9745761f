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

The crashing host is ``python -m runtime.cli._crash_host`` (see that module). The
workspace, the tools and the scripted agents are in ``_demo_tools``; step 2, the crash
and the recovery, in ``_demo_crash``.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import trio

from runtime import Runtime, StoredEvent, open_runtime
from runtime.agents import ModelResponse, Runner, RunResult, ToolCall, unwrap_group

from ._demo_crash import CRASH_SUBJECT, CRASH_TO, crash_host, step_crash
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

__all__ = [
    "CRASH_SUBJECT",
    "CRASH_TO",
    "OUTBOX",
    "DemoError",
    "Workspace",
    "crash_host",
    "make_tools",
    "run_demo",
]

#: Upper bound for the whole demo, in seconds (it normally takes about one).
DEMO_TIMEOUT = 20.0
TAIL_SESSION = "docs-cy"
SNAPSHOT_SESSION = "support-ada"


# -- step 1: three sessions at once --------------------------------------------------------

_SESSIONS: list[tuple[str, str, str, list[ModelResponse]]] = [
    (
        "support-ada",
        "ada-1",
        "Summarise ticket #311 for the team.",
        [
            ModelResponse(
                tool_calls=(
                    scripted_call(
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
                    scripted_call(
                        "call_bob_w",
                        "write_file",
                        path="invoices/1042.txt",
                        text="Invoice 1042\nTotal: 120.00 EUR\n",
                    ),
                    scripted_call(
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
                    scripted_call(
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
        agent = scripted_agent(f"agent-{session_id}", make_tools(workspace), script)
        result = await Runner.run(
            agent,
            prompt,
            runtime=rt,
            session_id=session_id,
            checkpoint=checkpoint_options(rt, run_id),
        )
        expect(result.finish_reason == "stop", f"run {run_id} did not finish")
        print(
            f"  finished {session_id:<12} run {run_id:<6} tools: {_tool_names(result):<22}", end=""
        )
        print(f" -> {result.output}")

    async with trio.open_nursery() as nursery:
        for session_id, run_id, prompt, script in _SESSIONS:
            nursery.start_soon(one, session_id, run_id, prompt, script)


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
                    scripted_call(
                        "call_ada_w2",
                        "write_file",
                        path="notes/ticket-311-followup.md",
                        text="Follow-up: fix shipped in 2.4.1.\n",
                    ),
                )
            ),
            ModelResponse("Follow-up noted."),
        ]
        agent = scripted_agent("agent-support-ada", make_tools(workspace), script)
        await Runner.run(
            agent,
            "Note the follow-up.",
            runtime=rt,
            session_id=SNAPSHOT_SESSION,
            checkpoint=checkpoint_options(rt, "ada-2"),
        )
        info = await rt.stat(SNAPSHOT_SESSION)
        assert info is not None
        after = len(await snap.read())
        expect(after == before and info.head > snap.as_of_seq, "the snapshot moved")
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
            print(f"  tail seq={event.seq:<3} {event.kind:<16} {short(event.data, 52)}")
            if event.kind == "tidelog.segment" and event.run_id == "cy-2":
                return

    script = [
        ModelResponse(
            tool_calls=(
                scripted_call(
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
        agent = scripted_agent("agent-docs-cy", make_tools(workspace), script)
        await Runner.run(
            agent,
            "Now the FAQ entry about imports.",
            runtime=rt,
            session_id=TAIL_SESSION,
            checkpoint=checkpoint_options(rt, "cy-2"),
        )
    print(f"  tail stopped after the run's last event ({len(seen)} events, in order, no gaps)")


# -- the demo ------------------------------------------------------------------------------


async def _demo(db: str, workspace: Workspace) -> None:
    """All steps on one runtime, bounded by :data:`DEMO_TIMEOUT`, then the summary."""
    with trio.fail_after(DEMO_TIMEOUT):
        async with open_runtime(db) as rt:
            await _step_concurrent(rt, workspace)
            await step_crash(rt, db, workspace)
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
    expect(count == 1, f"the crashed run's email was sent {count} times")
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
