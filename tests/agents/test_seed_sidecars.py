"""Tool sidecars, file snapshots and restoring a session (files, conversation, or both)."""

from __future__ import annotations

import io
import json
import os
import pathlib
import signal
import subprocess
import sys
from collections.abc import AsyncIterator

import pytest
from helpers import runtime_target

from runtime import JSON, InvalidArgumentError, MemoryStore, Runtime, open_runtime
from runtime.agents import (
    FILE_SNAPSHOT,
    Agent,
    CheckpointOptions,
    MemoryHistory,
    ModelResponse,
    RequestedCall,
    RunContext,
    Runner,
    ScriptedModel,
    SidecarEntry,
    ToolCall,
    ToolResult,
    UserMessage,
    agent_projections,
    checkpoint_anchors,
    checkpoints,
    function_tool,
    history,
    restore_session,
)
from runtime.cli._dump import export_runtime
from runtime.cli._load import import_dump
from runtime.cli._opening import StopFlag

WORKER = pathlib.Path(__file__).with_name("snapshot_worker.py")
ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(params=["memory", "sqlite", "jsonl", "postgres"])
async def rt(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> AsyncIterator[Runtime]:
    async with open_runtime(runtime_target(request.param, tmp_path, request)) as runtime:
        for projection in agent_projections():
            runtime.register_projection(projection)
        yield runtime


@function_tool
async def work(ctx: RunContext, n: int) -> str:
    """Do step n, recording progress as sidecars."""
    await ctx.record("progress", {"step": n, "phase": "begin"})
    await ctx.record("progress", {"step": n, "phase": "end"})
    return f"did {n}"


@function_tool
async def forge(ctx: RunContext) -> str:
    """Try to record what only the loop may, and bad data."""
    errors = []
    attempts: list[tuple[str, dict[str, JSON]]] = [
        ("tool_started", {}),
        ("user", {}),
        ("x", {"call_id": "y"}),
    ]
    for kind, data in attempts:
        try:
            await ctx.record(kind, data)
        except InvalidArgumentError as exc:
            errors.append(str(exc))
    return json.dumps(errors)


def _edit_tool(quota: int | None = None) -> object:
    @function_tool
    async def edit(ctx: RunContext, path: str, text: str | None) -> str:
        """Snapshot a file, then write (or delete, for null text) it."""
        if quota is None:
            await ctx.snapshot_file(path)
        else:
            await ctx.snapshot_file(path, quota_bytes=quota)
        if text is None:
            os.remove(path)
        else:
            pathlib.Path(path).write_text(text)  # noqa: ASYNC240
        return "ok"

    return edit


def _calls(*calls: RequestedCall) -> ModelResponse:
    return ModelResponse(tool_calls=calls)


async def test_sidecars_precede_their_result_and_never_split_results(rt: Runtime) -> None:
    """Each call's sidecars are checkpointed before its result, tagged with the call id;
    the conversation shows the two results as one group."""
    model = ScriptedModel(
        [
            _calls(RequestedCall("work", {"n": 1}, "c1"), RequestedCall("work", {"n": 2}, "c2")),
            ModelResponse("done"),
        ]
    )
    agent = Agent("a", "x", tools=(work,), model=model)
    options = CheckpointOptions(checkpoints(rt), "r1")
    result = await Runner.run(
        agent, "go", runtime=rt, session_id="s", checkpoint=options, history=history(rt)
    )
    for entries in (result.entries, (await checkpoints(rt).load("r1")).entries):  # type: ignore[union-attr]
        for call_id in ("c1", "c2"):
            marks = [
                i
                for i, e in enumerate(entries)
                if isinstance(e, SidecarEntry)
                and e.kind == "progress"
                and isinstance(e.data, dict)
                and e.data["call_id"] == call_id
            ]
            [done] = [
                i
                for i, e in enumerate(entries)
                if isinstance(e, ToolResult) and e.call_id == call_id
            ]
            assert len(marks) == 2
            assert max(marks) < done
    async with rt.snapshot("s") as snap:
        conversation = (await snap.values(["conversation"]))["conversation"]
    assert [m["role"] for m in conversation] == ["user", "assistant", "tool", "assistant"]
    assert sorted(r["id"] for r in conversation[2]["results"]) == ["c1", "c2"]  # completion order


async def test_tools_cannot_forge_loop_records_or_bad_data(rt: Runtime) -> None:
    """Loop kinds, conversation kinds and a set call_id are refused; nothing recorded."""
    model = ScriptedModel([_calls(RequestedCall("forge", {}, "c1")), ModelResponse("ok")])
    agent = Agent("a", "x", tools=(forge,), model=model)
    result = await Runner.run(agent, "go", runtime=rt)
    [out] = [e for e in result.entries if isinstance(e, ToolResult)]
    errors = json.loads(out.output)
    assert len(errors) == 3
    assert "run loop" in errors[0]
    assert "call_id" in errors[2]
    assert [e.kind for e in result.entries if isinstance(e, SidecarEntry)] == ["tool_started"]


async def _two_runs(rt: Runtime, tmp_path: pathlib.Path, quota: int | None = None) -> None:
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("v0")
    edit = _edit_tool(quota)
    model = ScriptedModel(
        [
            _calls(RequestedCall("edit", {"path": str(a), "text": "v1"}, "c1")),
            _calls(RequestedCall("edit", {"path": str(b), "text": "new"}, "c2")),
            ModelResponse("edited"),
            _calls(RequestedCall("edit", {"path": str(a), "text": "v2"}, "c3")),
            ModelResponse("edited again"),
        ]
    )
    agent = Agent("a", "x", tools=(edit,), model=model)  # type: ignore[arg-type]
    for n, prompt in enumerate(("one", "two")):
        options = CheckpointOptions(checkpoints(rt), f"run{n}")
        await Runner.run(
            agent, prompt, runtime=rt, session_id="s", checkpoint=options, history=history(rt)
        )


async def test_restore_files_and_conversation_to_anchors(
    rt: Runtime, tmp_path: pathlib.Path
) -> None:
    """Anchors sit before each prompt; restoring files writes the earliest later snapshot
    back (or deletes a file that did not exist); the conversation half cuts the log;
    either half alone leaves the other as it was."""
    await _two_runs(rt, tmp_path)
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    anchors = await checkpoint_anchors(history(rt), "s")
    assert [(x.text, x.run_id) for x in anchors] == [("one", "run0"), ("two", "run1")]
    assert anchors[0].seq == 0
    before = await history(rt).load("s")

    report = await restore_session(history(rt), "s", anchors[1].seq, conversation=False)
    assert (a.read_text(), b.read_text()) == ("v1", "new")
    assert report.restored == (str(a),)
    assert report.removed_entries == 0
    assert await history(rt).load("s") == before

    a.write_text("v2")
    report = await restore_session(history(rt), "s", anchors[1].seq, files=False)
    assert a.read_text() == "v2"
    assert report.restored == ()
    assert [x.text for x in await checkpoint_anchors(history(rt), "s")] == ["one"]

    report = await restore_session(history(rt), "s", 0)
    assert a.read_text() == "v0"
    assert not b.exists()
    assert report.deleted == (str(b),)
    assert await history(rt).load("s") == []
    leftovers = [p for p in tmp_path.iterdir() if p.name.startswith(".tidelog-")]  # noqa: ASYNC240
    assert not leftovers


async def test_over_quota_snapshot_is_truncated_and_skipped(
    rt: Runtime, tmp_path: pathlib.Path
) -> None:
    """With a 3-byte quota the second existing file's snapshot is stored truncated (no
    content) and its path is skipped on restore; the others are restored."""
    (tmp_path / "b.txt").write_text("old")  # 3 bytes, snapshotted after a.txt's 2
    await _two_runs(rt, tmp_path, quota=3)
    entries = await history(rt).load("s")
    snaps = [e.data for e in entries if isinstance(e, SidecarEntry) and e.kind == FILE_SNAPSHOT]
    assert [(s["size"], s["truncated"]) for s in snaps] == [(2, False), (3, True), (2, True)]  # type: ignore[index, call-overload]
    report = await restore_session(history(rt), "s", 0, conversation=False)
    assert report.skipped == (str(tmp_path / "b.txt"),)
    assert (tmp_path / "a.txt").read_text() == "v0"
    assert (tmp_path / "b.txt").read_text() == "new"


async def test_bad_restores_change_nothing(rt: Runtime, tmp_path: pathlib.Path) -> None:
    """A seq past the head, a negative one, no half asked, or a MemoryHistory are refused
    before any file or event is touched."""
    await _two_runs(rt, tmp_path)
    before = await history(rt).load("s")
    head = (await rt.stat("s")).head  # type: ignore[union-attr]
    for kwargs in ({"to_seq": head + 1}, {"to_seq": -1}):
        with pytest.raises(InvalidArgumentError):
            await restore_session(history(rt), "s", **kwargs)
    with pytest.raises(InvalidArgumentError, match="files, conversation"):
        await restore_session(history(rt), "s", 0, files=False, conversation=False)
    with pytest.raises(InvalidArgumentError, match="RuntimeHistory"):
        await restore_session(MemoryHistory(), "s", 0)  # type: ignore[arg-type]
    assert (tmp_path / "a.txt").read_text() == "v2"
    assert await history(rt).load("s") == before


async def test_snapshots_survive_export_and_import(tmp_path: pathlib.Path) -> None:
    """A dump carries the snapshots: the imported conversation restores the files."""
    async with open_runtime(MemoryStore()) as rt:
        await _two_runs(rt, tmp_path)
        out = io.StringIO()
        await export_runtime(rt, [], out)
    target = MemoryStore()
    lines = enumerate(out.getvalue().splitlines(keepends=True), start=1)
    next(lines)
    import_dump(target, lines, StopFlag(), lambda _: None)
    async with open_runtime(target) as rt2:
        report = await restore_session(history(rt2), "s", 0)
    assert (tmp_path / "a.txt").read_text() == "v0"
    assert not (tmp_path / "b.txt").exists()
    assert report.removed_entries > 0


def test_restore_after_a_host_was_killed_mid_tool(tmp_path: pathlib.Path) -> None:
    """A host SIGKILLed inside a tool, after its snapshot and its write: the snapshot is
    in the unfinished run's checkpoint, and a restore with the checkpointer puts the file
    back (the conversation, which never got the run, is left as it was)."""
    db = tmp_path / "crash.db"
    target = tmp_path / "notes.txt"
    target.write_text("before")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, str(WORKER), str(db), str(target)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert target.read_text() == "after"

    async def restore() -> None:
        async with open_runtime(db) as rt:
            snapshot = await checkpoints(rt).load("crash-run")
            assert snapshot is not None
            assert snapshot.head.status == "running"
            assert any(isinstance(e, ToolCall) for e in snapshot.entries)
            report = await restore_session(
                history(rt), "s", 0, conversation=False, checkpointer=checkpoints(rt)
            )
            assert report.restored == (str(target),)

    import trio

    trio.run(restore)
    assert target.read_text() == "before"


async def test_a_failing_file_write_leaves_the_conversation_uncut(
    rt: Runtime, tmp_path: pathlib.Path
) -> None:
    """A path that cannot be written raises its OSError before the conversation is cut;
    once the obstacle is gone, restoring again restores everything."""
    good, blocked = tmp_path / "good.txt", tmp_path / "sub" / "c.txt"
    snaps = [
        SidecarEntry(
            FILE_SNAPSHOT,
            {"path": str(p), "existed": True, "size": 2, "truncated": False, "content": "djA="},
        )
        for p in (good, blocked)
    ]
    await history(rt).append("s", [UserMessage("edit"), *snaps], run_id="r")
    (tmp_path / "sub").write_text("a file where the directory was")
    before = await history(rt).load("s")
    with pytest.raises(OSError):  # noqa: PT011 -- whichever OSError the platform gives
        await restore_session(history(rt), "s", 0)
    assert good.read_text() == "v0"
    assert await history(rt).load("s") == before
    (tmp_path / "sub").unlink()
    report = await restore_session(history(rt), "s", 0)
    assert report.restored == (str(good), str(blocked))
    assert blocked.read_text() == "v0"
    assert await history(rt).load("s") == []
