"""Stopping a run from elsewhere: a stop request in the run's control session reaches the
host through the runtime's tail; the run stops at a safe point, interrupted with the
reason and its completed turns kept; a run that is not running is answered plainly."""

from __future__ import annotations

import contextlib
import json
import pathlib
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator

import attrs
import pytest
import trio
import trio.testing
from helpers import FlakyMemoryStore

from runtime import InvalidArgumentError, MemoryStore, Runtime, TidelogError, open_runtime
from runtime.agents import (
    Agent,
    CheckpointOptions,
    Entry,
    ModelRequest,
    ModelResponse,
    RequestedCall,
    RunHead,
    Runner,
    RunNotFoundError,
    RunResult,
    RunStopped,
    ToolCall,
    ToolResult,
    UserMessage,
    checkpoints,
    close_interrupted_run,
    function_tool,
    history,
    request_stop,
)

WORKER = pathlib.Path(__file__).with_name("stop_worker.py")


@pytest.fixture
async def rt(tmp_path: pathlib.Path) -> AsyncIterator[Runtime]:
    """A runtime on a SQLite file."""
    async with open_runtime(tmp_path / "stop.db") as runtime:
        yield runtime


class Slow:
    """A model that calls ``look`` once, then blocks on its second request until
    released; a tool body that can be held open."""

    def __init__(self) -> None:
        self.asked = trio.Event()
        self.release = trio.Event()
        self.requests = 0
        self.tool_entered = trio.Event()
        self.tool_release = trio.Event()
        self.hold_tool = False

        @function_tool
        async def look() -> str:
            """Look around."""
            self.tool_entered.set()
            if self.hold_tool:
                await self.tool_release.wait()
            return "seen"

        self.tools = (look,)

    async def respond(self, request: ModelRequest) -> ModelResponse:
        self.requests += 1
        if not any(isinstance(m, ToolResult) for m in request.messages):
            await trio.lowlevel.checkpoint()
            return ModelResponse(tool_calls=(RequestedCall("look", {}, "c1"),))
        self.asked.set()
        await self.release.wait()
        return ModelResponse("done")


def _agent(model: Slow) -> Agent:
    return Agent("a", "x", model=model, tools=model.tools)


async def test_a_stop_cancels_the_model_request_and_keeps_completed_turns(rt: Runtime) -> None:
    """A stop while the model is asked: the request is abandoned, the run returns
    interrupted with the reason, its checkpoint keeps the finished tool turn; re-issuing
    the run resumes and completes it."""
    model = Slow()
    options = CheckpointOptions(checkpoints(rt), "r")
    result: list[RunResult] = []

    async def host() -> None:
        result.append(await Runner.run(_agent(model), "go", runtime=rt, checkpoint=options))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(host)
        await model.asked.wait()
        outcome = await request_stop(rt, "r", by="ops", reason="maintenance")
        assert outcome.requested
    assert result[0].status == "interrupted"
    assert result[0].stop_reason is not None
    assert "maintenance" in result[0].stop_reason
    snap = await checkpoints(rt).load("r")
    assert snap is not None
    assert snap.head.status == "interrupted"
    assert snap.head.error is not None
    assert "maintenance" in str(snap.head.error["message"])
    assert [e.output for e in snap.entries if isinstance(e, ToolResult)] == ["seen"]
    model.release.set()
    done = await Runner.run(_agent(model), "go", runtime=rt, checkpoint=options)
    assert done.status == "completed"
    assert done.output == "done"


async def test_a_stop_never_cuts_a_started_tool_body() -> None:
    """A stop while a tool body runs: the body finishes and its result is saved; the run
    stops before the next model request. (A MemoryStore runtime: no threads, so "every
    task is blocked" means the host has seen the request.)"""
    async with open_runtime(MemoryStore()) as rt:
        await _stop_during_tool(rt)


async def _stop_during_tool(rt: Runtime) -> None:
    model = Slow()
    model.hold_tool = True
    options = CheckpointOptions(checkpoints(rt), "r")
    seen: list[object] = []

    async def host() -> None:
        agent = _agent(model)
        async with Runner.run_streamed(agent, "go", runtime=rt, checkpoint=options) as events:
            seen.extend([e async for e in events])

    async with trio.open_nursery() as nursery:
        nursery.start_soon(host)
        await model.tool_entered.wait()
        assert (await request_stop(rt, "r", by="ops", reason="now")).requested
        await trio.testing.wait_all_tasks_blocked()  # the tail delivered it; the body runs on
        assert not model.tool_release.is_set()
        model.tool_release.set()
        model.release.set()  # were the stop missed, the run would finish instead
    assert isinstance(seen[-1], RunStopped)
    assert model.requests == 1
    snap = await checkpoints(rt).load("r")
    assert snap is not None
    assert snap.head.status == "interrupted"
    assert [e.output for e in snap.entries if isinstance(e, ToolResult)] == ["seen"]


async def test_a_stop_of_a_run_that_is_not_running_is_answered_plainly(rt: Runtime) -> None:
    """A finished run, or one that no host holds, gets its state back; nothing is written."""
    model = Slow()
    model.release.set()
    await Runner.run(
        _agent(model), "go", runtime=rt, checkpoint=CheckpointOptions(checkpoints(rt), "r")
    )
    finished = await request_stop(rt, "r", by="ops", reason="late")
    assert (finished.requested, finished.status) == (False, "completed")
    snap = await checkpoints(rt).load("r")
    assert snap is not None
    await checkpoints(rt).append("orphan", [], snap.head.__class__("a"))  # running, no host
    orphan = await request_stop(rt, "orphan", by="ops", reason="late")
    assert (orphan.requested, orphan.status) == (False, "running")
    ids = {i.id for i in await rt.list_sessions(include_internal=True)}
    assert not [i for i in ids if i.startswith("tidelog/ctl/")]


async def test_a_host_misses_no_stop_when_a_prune_deletes_its_control_session_meanwhile() -> None:
    """A host reads the control session's head, then waits for the run's claim while a
    prune holding it deletes that (left over) session: a stop written once the host
    runs lands in a session made anew, and still stops the run. (A MemoryStore runtime:
    no threads, so "every task is blocked" means the host is waiting for the claim.)"""
    async with open_runtime(MemoryStore()) as rt:
        await checkpoints(rt).append("r", [UserMessage("go")], RunHead("a"))
        async with checkpoints(rt).claim("r"):
            for reason in ("old", "older"):  # requests for an earlier host
                assert (await request_stop(rt, "r", by="ops", reason=reason)).requested
        await rt.delete("tidelog/run/r")  # its control session is left over
        model = Slow()
        options = CheckpointOptions(checkpoints(rt), "r", wait_for_owner=True)
        result: list[RunResult] = []

        async def host() -> None:
            result.append(await Runner.run(_agent(model), "go", runtime=rt, checkpoint=options))

        async with trio.open_nursery() as nursery:
            async with checkpoints(rt).claim("r"):  # as RuntimeCheckpointer.delete_control
                nursery.start_soon(host)
                await trio.testing.wait_all_tasks_blocked()  # it read head 2, it waits
                assert await rt.delete("tidelog/ctl/r")
            await model.asked.wait()
            assert (await request_stop(rt, "r", by="ops", reason="new")).requested
            await trio.testing.wait_all_tasks_blocked()  # the tail delivered it
            model.release.set()  # were the stop missed, the run would finish instead
        assert result[0].status == "interrupted"
        assert result[0].stop_reason is not None
        assert "new" in result[0].stop_reason


@pytest.fixture(params=["sqlite", "postgres"])
def shared_store(
    request: pytest.FixtureRequest, tmp_path: pathlib.Path
) -> Iterator[tuple[str, str]]:
    """``(store, poll interval)`` for two processes sharing a store: a SQLite file (the
    host polls), or a PostgreSQL schema of the test's own by URL, whose host never polls
    in the test's time (600 s): NOTIFY alone must wake it."""
    if request.param == "sqlite":
        yield str(tmp_path / "stop.db"), "0.025"
        return
    from pgtest import fresh_schema, url_of

    with fresh_schema() as where:
        yield url_of(*where), "600"


def test_a_run_in_a_child_process_is_stopped_from_the_parent(shared_store: tuple[str, str]) -> None:
    """A host process runs until its model hangs; the parent asks it to stop: the child
    ends the run interrupted within the bound, its finished turn kept."""
    db, poll_interval = shared_store
    child = subprocess.Popen(
        [sys.executable, str(WORKER), db, poll_interval],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "asking"

        async def stop() -> bool:
            async with open_runtime(db) as rt:
                return (await request_stop(rt, "r", by="parent", reason="enough")).requested

        assert trio.run(stop)
        out, err = child.communicate(timeout=30)
        assert child.returncode == 0, err
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["status"] == "interrupted"
    assert "enough" in summary["reason"]

    async def check() -> None:
        async with open_runtime(db) as rt:
            snap = await checkpoints(rt).load("r")
            assert snap is not None
            assert snap.head.status == "interrupted"
            assert [e.output for e in snap.entries if isinstance(e, ToolResult)] == ["seen"]

    trio.run(check)


async def test_an_interrupted_run_closes_into_its_history_without_dangling_calls(
    rt: Runtime,
) -> None:
    """lovia's close: a stopped run goes into its conversation as one completed segment,
    calls without a result dropped, its checkpoint completed; a second close writes
    nothing; a replay returns the stored result without asking the model."""
    model = Slow()
    options = CheckpointOptions(checkpoints(rt), "r")

    async def host() -> None:
        await Runner.run(_agent(model), "go", runtime=rt, session_id="chat", checkpoint=options)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(host)
        await model.asked.wait()
        assert (await request_stop(rt, "r", by="ops", reason="maintenance")).requested
    # A call the model asked for that never ran, as a crash would leave it.
    snap = await checkpoints(rt).load("r")
    assert snap is not None
    assert snap.head.status == "interrupted"
    await checkpoints(rt).append("r", [ToolCall("c9", "look", {})], snap.head)
    before = await rt.stat("chat")

    closed = await close_interrupted_run(checkpoints(rt), history(rt), "r")
    assert closed.head.status == "completed"
    assert closed.head.error is None
    entries = await history(rt).load("chat")
    calls = [e.call_id for e in entries if isinstance(e, ToolCall)]
    results = [e.call_id for e in entries if isinstance(e, ToolResult)]
    assert calls == results == ["c1"]  # the dangling c9 was dropped, c1 kept with its result
    reloaded = await checkpoints(rt).load("r")
    assert reloaded is not None
    assert reloaded.head.status == "completed"
    head = (await rt.stat("chat")).head  # type: ignore[union-attr]
    again = await close_interrupted_run(checkpoints(rt), history(rt), "r")
    assert again.head.status == "completed"
    assert (await rt.stat("chat")).head == head  # type: ignore[union-attr]
    assert before is None or before.head < head
    asked = model.requests
    replay = await Runner.run(
        _agent(model), "go", runtime=rt, session_id="chat", checkpoint=options
    )
    assert replay.status == "completed"
    assert model.requests == asked  # replayed from the checkpoint, no model call


async def test_closing_refuses_a_run_that_is_not_interrupted(rt: Runtime) -> None:
    """Only a stopped run closes: an unknown run, a completed one and a run of no
    conversation are refused with a named error, and nothing is written."""
    with pytest.raises(RunNotFoundError):
        await close_interrupted_run(checkpoints(rt), history(rt), "nobody")
    model = Slow()
    model.release.set()
    options = CheckpointOptions(checkpoints(rt), "solo")
    done = await Runner.run(_agent(model), "go", runtime=rt, checkpoint=options)
    assert done.status == "completed"
    with pytest.raises(InvalidArgumentError, match="not interrupted"):
        await close_interrupted_run(checkpoints(rt), history(rt), "solo")
    snap = await checkpoints(rt).load("solo")
    assert snap is not None
    interrupted = attrs.evolve(snap.head, status="interrupted")
    await checkpoints(rt).append("solo", [], interrupted)
    with pytest.raises(InvalidArgumentError, match="no conversation"):
        await close_interrupted_run(checkpoints(rt), history(rt), "solo")
    reloaded = await checkpoints(rt).load("solo")
    assert reloaded is not None
    assert reloaded.head.status == "interrupted"


async def _interrupted_run(rt: Runtime) -> None:
    """Run ``r`` of conversation ``chat``, stopped with one call left without a result."""
    head = RunHead(
        "a", status="interrupted", session_id="chat", error={"type": "Stop", "message": "m"}
    )
    entries: list[Entry] = [
        UserMessage("go"),
        ToolCall("c1", "look", {}),
        ToolResult("c1", "seen"),
        ToolCall("c2", "look", {}),  # asked for, never run
    ]
    await checkpoints(rt).append("r", entries, head)


@pytest.mark.parametrize("fault", ["before_commit", "after_commit"])
async def test_closing_through_a_failing_store_lands_once_when_resent(fault: str) -> None:
    """A close whose commit fails (nothing written, or written and then reported failed)
    raises a store error; resending it as told leaves exactly one segment of the run in
    the conversation and the run completed."""
    store = FlakyMemoryStore()
    async with open_runtime(store) as rt:
        await _interrupted_run(rt)
        if fault == "before_commit":
            store.fail_next = 1
        else:
            store.fail_after_commit = 1
        with contextlib.suppress(TidelogError):
            await close_interrupted_run(checkpoints(rt), history(rt), "r")
        await close_interrupted_run(checkpoints(rt), history(rt), "r")
        entries = await history(rt).load("chat")
        assert [type(e).__name__ for e in entries] == ["UserMessage", "ToolCall", "ToolResult"]
        snap = await checkpoints(rt).load("r")
        assert snap is not None
        assert snap.head.status == "completed"


async def test_a_close_cancelled_before_it_commits_writes_nothing() -> None:
    """A close cancelled before its commit leaves the run interrupted and the
    conversation without its segment (all or nothing); closing again then works."""
    async with open_runtime(MemoryStore()) as rt:
        await _interrupted_run(rt)
        with trio.CancelScope() as scope:
            scope.cancel()
            await close_interrupted_run(checkpoints(rt), history(rt), "r")
        snap = await checkpoints(rt).load("r")
        assert snap is not None
        assert snap.head.status == "interrupted"
        assert await history(rt).load("chat") == []
        await close_interrupted_run(checkpoints(rt), history(rt), "r")
        assert len(await history(rt).load("chat")) == 3
