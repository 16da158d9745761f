"""The agent run loop: tools, handoffs, barriers, resume, replay, failure classification."""

from __future__ import annotations

import logging
import pathlib
from collections.abc import AsyncIterator

import pytest
import trio

from runtime import (
    JSON,
    MemoryStore,
    Runtime,
    SqliteStore,
    open_runtime,
)
from runtime.agents import (
    TOOL_OUTCOME_UNKNOWN,
    Agent,
    AgentNotFoundError,
    AssistantMessage,
    CheckpointOptions,
    Entry,
    FunctionTool,
    MaxTurnsExceededError,
    ModelRequest,
    ModelResponse,
    RequestedCall,
    RunCompleted,
    RunHead,
    Runner,
    RunStarted,
    ScriptedModel,
    SidecarEntry,
    ToolCall,
    ToolFinished,
    ToolResult,
    Usage,
    UserMessage,
    checkpoints,
    function_tool,
    history,
)


@pytest.fixture
async def rt(tmp_path: pathlib.Path) -> AsyncIterator[Runtime]:
    """A runtime on a SQLite file."""
    async with open_runtime(tmp_path / "runs.db") as runtime:
        yield runtime


def calls(*names: str) -> ModelResponse:
    """A model turn that calls the named tools (call ids c_<name>)."""
    return ModelResponse(
        tool_calls=tuple(RequestedCall(n, {}, f"c_{n}") for n in names), usage=Usage(1, 10, 5)
    )


def answer(text: str) -> ModelResponse:
    return ModelResponse(text, usage=Usage(1, 10, 5))


class Tools:
    """Tools that count their executions."""

    def __init__(self) -> None:
        self.ran: list[str] = []

        @function_tool(idempotent=True)
        async def lookup() -> str:
            """Look something up."""
            self.ran.append("lookup")
            return "found"

        @function_tool
        async def pay() -> str:
            """Pay (a side effect)."""
            self.ran.append("pay")
            return "paid"

        @function_tool
        async def broken() -> str:
            """Always fails."""
            raise ValueError("nope")

        self.lookup, self.pay, self.broken = lookup, pay, broken

    def all(self) -> tuple[FunctionTool, ...]:
        return (self.lookup, self.pay, self.broken)


async def test_simple_run_appends_history(rt: Runtime) -> None:
    """A run without tools returns the output and lands as one history segment."""
    model = ScriptedModel([answer("hello")])
    agent = Agent("a", "be nice", model=model)
    result = await Runner.run(agent, "hi", runtime=rt, session_id="s")
    assert result.output == "hello"
    assert result.finish_reason == "stop"
    usage: dict[str, JSON] = {"input_tokens": 10, "output_tokens": 5}
    assert await history(rt).load("s") == [
        UserMessage("hi"),
        AssistantMessage("hello", agent="a", usage=usage),
    ]
    second = await Runner.run(
        Agent("a", "x", model=ScriptedModel([answer("again")])), "more", runtime=rt, session_id="s"
    )
    assert second.output == "again"
    assert len(await history(rt).segments("s")) == 2


async def test_model_sees_history_and_system_prompt(rt: Runtime) -> None:
    """The request carries the rendered instructions, the history, then the run's entries."""
    seen: list[ModelRequest] = []

    def respond(request: ModelRequest) -> ModelResponse:
        seen.append(request)
        return answer("ok")

    await history(rt).append("s", [UserMessage("earlier")], run_id="old")
    agent = Agent("a", lambda ctx: f"run {ctx.run_id[:4]}", model=ScriptedModel([respond]))
    await Runner.run(agent, "now", runtime=rt, session_id="s")
    assert seen[0].system.startswith("run ")
    assert list(seen[0].messages) == [UserMessage("earlier"), UserMessage("now")]


async def test_tools_run_and_failures_become_error_results(rt: Runtime) -> None:
    """Requested tools run; a failing tool yields an error result, not a crashed run."""
    tools = Tools()
    model = ScriptedModel([calls("lookup", "broken"), answer("done")])
    agent = Agent("a", "x", tools=tools.all(), model=model)
    result = await Runner.run(agent, "go", runtime=rt)
    results = {e.call_id: e for e in result.entries if isinstance(e, ToolResult)}
    assert results["c_lookup"].output == "found"
    assert not results["c_lookup"].is_error
    assert results["c_broken"].is_error
    assert "ValueError: nope" in results["c_broken"].output
    assert tools.ran == ["lookup"]
    assert result.usage == Usage(2, 20, 10)


async def test_parallel_tools_run_concurrently(rt: Runtime) -> None:
    """Several calls in one turn run at the same time (each waits for the other)."""
    a_started, b_started = trio.Event(), trio.Event()

    @function_tool
    async def first() -> str:
        a_started.set()
        await b_started.wait()
        return "1"

    @function_tool
    async def second() -> str:
        b_started.set()
        await a_started.wait()
        return "2"

    model = ScriptedModel([calls("first", "second"), answer("both")])
    agent = Agent("a", "x", tools=(first, second), model=model)
    with trio.fail_after(10):
        result = await Runner.run(agent, "go", runtime=rt)
    assert result.output == "both"


async def test_handoff_switches_agent(rt: Runtime) -> None:
    """A transfer_to_<agent> call switches the active agent, recorded by name."""
    specialist = Agent("specialist", "x", model=ScriptedModel([answer("specialised")]))
    triage = Agent(
        "triage",
        "x",
        handoffs=(specialist,),
        model=ScriptedModel([calls("transfer_to_specialist")]),
    )
    cp = CheckpointOptions(checkpoints(rt), "h1")
    result = await Runner.run(triage, "help", runtime=rt, checkpoint=cp)
    assert result.agent == "specialist"
    assert result.output == "specialised"
    snap = await checkpoints(rt).load("h1")
    assert snap is not None
    assert snap.head.agent == "specialist"


async def test_barriers_flush_before_model_and_tool_bodies(
    rt: Runtime, tmp_path: pathlib.Path
) -> None:
    """Before each model request the checkpoint is committed and fsynced; a tool body runs
    only once its tool_started record is committed (seen from another connection)."""
    observer = SqliteStore(tmp_path / "runs.db")
    fsyncs: list[int] = []
    seen_in_tool: list[list[str]] = []

    def look() -> list[str]:
        return [e.kind for e in observer.read(checkpoints(rt).session_id("r1"))]

    def respond_1(_request: ModelRequest) -> ModelResponse:
        fsyncs.append(rt.statistics().writer.fsyncs)
        assert look() == ["user", "tidelog.head"]
        return calls("probe")

    def respond_2(_request: ModelRequest) -> ModelResponse:
        fsyncs.append(rt.statistics().writer.fsyncs)
        assert "tool_result" in look()
        return answer("ok")

    @function_tool
    async def probe() -> str:
        seen_in_tool.append(look())
        return "probed"

    agent = Agent("a", "x", tools=(probe,), model=ScriptedModel([respond_1, respond_2]))
    try:
        await Runner.run(
            agent, "go", runtime=rt, checkpoint=CheckpointOptions(checkpoints(rt), "r1")
        )
    finally:
        observer.close()
    assert fsyncs[0] >= 1
    assert fsyncs[1] > fsyncs[0]
    assert "tool_started" in seen_in_tool[0]
    assert "tool_call" in seen_in_tool[0]


async def _crashed_run(rt: Runtime, run_id: str, started: list[str], pending: list[str]) -> None:
    """Store a checkpoint as a crash would leave it: calls, some with a tool_started mark."""
    entries: list[Entry] = [UserMessage("go")]
    for name in pending:
        entries.append(ToolCall(f"c_{name}", name, {}))
    for name in started:
        entries.append(SidecarEntry("tool_started", {"call_id": f"c_{name}", "name": name}))
    await checkpoints(rt).append(run_id, entries, RunHead("a", turns=1))


async def test_resume_settles_pending_calls(rt: Runtime) -> None:
    """Resume: a never-started call runs; a started idempotent call re-runs; a started
    non-idempotent call gets TOOL_OUTCOME_UNKNOWN; completed results never re-run."""
    tools = Tools()
    await _crashed_run(rt, "r", started=["lookup", "pay"], pending=["lookup", "pay"])
    snap = await checkpoints(rt).load("r")
    assert snap is not None
    await checkpoints(rt).append("r", [ToolCall("c_fresh", "lookup", {})], snap.head)
    seen: list[ModelRequest] = []

    def respond(request: ModelRequest) -> ModelResponse:
        seen.append(request)
        return answer("recovered")

    agent = Agent("a", "x", tools=tools.all(), model=ScriptedModel([respond]))
    how: dict[str, str] = {}
    async with Runner.run_streamed(
        agent,
        "ignored input",
        runtime=rt,
        session_id="s",
        checkpoint=CheckpointOptions(checkpoints(rt), "r"),
    ) as events:
        async for event in events:
            if isinstance(event, ToolFinished):
                how[event.result.call_id] = event.how
            if isinstance(event, RunStarted):
                assert event.mode == "resumed"
    assert how == {"c_lookup": "re-ran", "c_pay": "unknown", "c_fresh": "ran"}
    assert sorted(tools.ran) == ["lookup", "lookup"]
    results = {e.call_id: e for e in seen[0].messages if isinstance(e, ToolResult)}
    assert results["c_pay"].is_error
    assert TOOL_OUTCOME_UNKNOWN in results["c_pay"].output
    entries = await history(rt).load("s")
    assert UserMessage("ignored input") not in entries
    assert all(
        len([e for e in entries if isinstance(e, ToolResult) and e.call_id == c]) == 1
        for c in ("c_lookup", "c_pay", "c_fresh")
    )


async def test_replay_of_completed_run(rt: Runtime) -> None:
    """A completed run replays: no model call, stored output, finish_reason None, only the
    terminal event, and the history append re-applied once."""
    first = Agent("a", "x", model=ScriptedModel([answer("forty-two")]))
    cp = CheckpointOptions(checkpoints(rt), "q")
    await Runner.run(first, "question", runtime=rt, session_id="s", checkpoint=cp)
    silent = ScriptedModel([])
    events = []
    async with Runner.run_streamed(
        Agent("a", "x", model=silent), "new input", runtime=rt, session_id="s", checkpoint=cp
    ) as stream:
        async for event in stream:
            events.append(event)
    assert len(events) == 1
    assert isinstance(events[0], RunCompleted)
    assert events[0].replayed
    assert events[0].result.output == "forty-two"
    assert events[0].result.finish_reason is None
    assert silent.requests == []
    assert len(await history(rt).segments("s")) == 1


async def test_replay_repairs_missing_history(rt: Runtime) -> None:
    """A completed checkpoint whose history segment is missing is repaired by a replay."""
    await checkpoints(rt).append(
        "q",
        [UserMessage("hi"), AssistantMessage("yo", agent="a")],
        RunHead("a", status="completed", output="yo"),
    )
    result = await Runner.run(
        Agent("a", "x", model=ScriptedModel([])),
        "hi",
        runtime=rt,
        session_id="s",
        checkpoint=CheckpointOptions(checkpoints(rt), "q"),
    )
    assert result.output == "yo"
    assert len(await history(rt).segments("s")) == 1


async def test_unknown_agent_on_resume_and_replay(
    rt: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    """Resuming an in-flight run of an unknown agent is a hard error; a completed replay
    falls back to the entry agent with a warning."""
    await checkpoints(rt).append("inflight", [UserMessage("x")], RunHead("gone"))
    agent = Agent("entry", "x", model=ScriptedModel([]))
    with pytest.raises(AgentNotFoundError):
        await Runner.run(
            agent, "x", runtime=rt, checkpoint=CheckpointOptions(checkpoints(rt), "inflight")
        )
    await checkpoints(rt).append(
        "done", [UserMessage("x")], RunHead("gone", status="completed", output=1)
    )
    with caplog.at_level(logging.WARNING, logger="tidelog"):
        result = await Runner.run(
            agent, "x", runtime=rt, checkpoint=CheckpointOptions(checkpoints(rt), "done")
        )
    assert result.agent == "entry"
    assert "gone" in caplog.text


async def test_cancellation_saves_interrupted_and_resumes(rt: Runtime) -> None:
    """A cancelled run checkpoints as interrupted; resuming it finishes the work."""
    gate = trio.Event()

    @function_tool(idempotent=True)
    async def slow() -> str:
        gate.set()
        await trio.sleep_forever()
        return "never"  # pragma: no cover

    cp = CheckpointOptions(checkpoints(rt), "c")
    agent = Agent("a", "x", tools=(slow,), model=ScriptedModel([calls("slow")]))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: Runner.run(agent, "go", runtime=rt, checkpoint=cp))
        await gate.wait()
        nursery.cancel_scope.cancel()
    snap = await checkpoints(rt).load("c")
    assert snap is not None
    assert snap.head.status == "interrupted"

    @function_tool(name="slow", idempotent=True)
    async def quick() -> str:
        return "fast now"

    resumed = Agent("a", "x", tools=(quick,), model=ScriptedModel([answer("finished")]))
    result = await Runner.run(resumed, "go", runtime=rt, checkpoint=cp)
    assert result.output == "finished"
    outputs = [e.output for e in result.entries if isinstance(e, ToolResult)]
    assert outputs == ["fast now"]


async def test_model_error_marks_failed(rt: Runtime) -> None:
    """A model error fails the run (status failed, error recorded) and propagates as is."""

    def boom(_request: ModelRequest) -> ModelResponse:
        raise ConnectionError("model down")

    cp = CheckpointOptions(checkpoints(rt), "f")
    with pytest.raises(ConnectionError):
        await Runner.run(
            Agent("a", "x", model=ScriptedModel([boom])), "go", runtime=rt, checkpoint=cp
        )
    snap = await checkpoints(rt).load("f")
    assert snap is not None
    assert snap.head.status == "failed"
    assert snap.head.error == {"type": "ConnectionError", "message": "model down"}


async def test_max_turns(rt: Runtime) -> None:
    """A run exceeding max_turns raises MaxTurnsExceededError and is saved as failed."""
    tools = Tools()
    model = ScriptedModel([calls("lookup")] * 5)
    cp = CheckpointOptions(checkpoints(rt), "m")
    with pytest.raises(MaxTurnsExceededError):
        await Runner.run(
            Agent("a", "x", tools=tools.all(), model=model),
            "go",
            runtime=rt,
            checkpoint=cp,
            max_turns=2,
        )
    snap = await checkpoints(rt).load("m")
    assert snap is not None
    assert snap.head.status == "failed"
    assert snap.head.turns == 2


async def test_delete_on_success(rt: Runtime) -> None:
    """delete_on_success removes the checkpoint once the run is in the history."""
    cp = CheckpointOptions(checkpoints(rt), "d", delete_on_success=True)
    await Runner.run(
        Agent("a", "x", model=ScriptedModel([answer("k")])),
        "go",
        runtime=rt,
        session_id="s",
        checkpoint=cp,
    )
    assert await checkpoints(rt).load("d") is None
    assert len(await history(rt).segments("s")) == 1


async def test_runs_on_memory_store() -> None:
    """The loop works the same on a MemoryStore runtime."""
    async with open_runtime(MemoryStore()) as rt:
        tools = Tools()
        model = ScriptedModel([calls("pay"), answer("paid it")])
        result = await Runner.run(
            Agent("a", "x", tools=tools.all(), model=model),
            "pay",
            runtime=rt,
            session_id="s",
            checkpoint=CheckpointOptions(checkpoints(rt), "p"),
        )
        assert result.output == "paid it"
        assert tools.ran == ["pay"]
        snap = await checkpoints(rt).load("p")
        assert snap is not None
        assert snap.head.status == "completed"
