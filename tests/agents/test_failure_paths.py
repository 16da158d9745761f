"""The run loop's failure paths: a completed run stays completed, a live run is claimed
before any model call, "never dispatched" is told from "outcome unknown", a fork's
rewind never touches its parent's runs, and replays honour delete_on_success."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path

import attrs
import pytest
import trio
import trio.testing
from write_contract import OneFailure, SqliteOneFailure

from runtime import (
    INTERNAL_PREFIX,
    CommitPendingError,
    MemoryStore,
    NewEvent,
    Runtime,
    SessionOwnedError,
    StoreIOError,
    TidelogError,
    open_runtime,
)
from runtime.agents import (
    TOOL_OUTCOME_UNKNOWN,
    Agent,
    CheckpointOptions,
    Entry,
    FunctionTool,
    ModelRequest,
    ModelResponse,
    RequestedCall,
    RunContext,
    RunHead,
    Runner,
    ScriptedModel,
    SidecarEntry,
    ToolResult,
    checkpoints,
    fork_conversation,
    function_tool,
    history,
)


def answer(text: str) -> ModelResponse:
    return ModelResponse(text)


def call(name: str, call_id: str, **arguments: object) -> ModelResponse:
    return ModelResponse(tool_calls=(RequestedCall(name, dict(arguments), call_id),))  # type: ignore[arg-type]


async def test_completed_run_stays_completed_when_its_history_step_fails(
    tmp_path: Path,
) -> None:
    """Checkpoints on one runtime, history on another: when the history append fails
    after the completed checkpoint was saved, the run stays completed (never overwritten
    with "failed"); re-issuing it replays the stored result and heals the missing segment
    without calling the model."""
    conversations = tmp_path / "chat.db"
    async with open_runtime(tmp_path / "runs.db") as runs, open_runtime(conversations) as rt:
        model = ScriptedModel([answer("the answer")])
        agent = Agent("a", "x", model=model)
        options = CheckpointOptions(checkpoints(runs), "r1")
        async with (
            open_runtime(conversations, lease_ttl=60.0) as other,
            other.open_session("chat"),  # another host holds the conversation
        ):
            with pytest.raises(SessionOwnedError):
                await Runner.run(agent, "q", runtime=rt, session_id="chat", checkpoint=options)
        snap = await checkpoints(runs).load("r1")
        assert snap is not None
        assert snap.head.status == "completed"
        assert snap.head.output == "the answer"
        assert await history(rt).load("chat") == []
        result = await Runner.run(agent, "q", runtime=rt, session_id="chat", checkpoint=options)
        assert result.output == "the answer"
        assert result.finish_reason is None
        assert len(model.requests) == 1
        [segment] = await history(rt).segments("chat")
        assert segment.run_id == "r1"


async def test_replay_honours_delete_on_success(rt: Runtime) -> None:
    """Re-issuing a completed run with delete_on_success replays it and deletes its
    checkpoint, as a first completion would."""
    model = ScriptedModel([answer("done")])
    agent = Agent("a", "x", model=model)
    cp = checkpoints(rt)
    await Runner.run(agent, "q", runtime=rt, session_id="c", checkpoint=CheckpointOptions(cp, "r"))
    assert await cp.load("r") is not None
    options = CheckpointOptions(cp, "r", delete_on_success=True)
    result = await Runner.run(agent, "q", runtime=rt, session_id="c", checkpoint=options)
    assert result.finish_reason is None
    assert len(model.requests) == 1
    assert await cp.load("r") is None


async def test_a_live_run_is_claimed_before_any_model_call(tmp_path: Path) -> None:
    """A second runtime (another process or host on the same database) re-issuing a run
    that is live elsewhere gets SessionOwnedError before calling its model; asked to wait
    (wait_for_owner), it waits for the owner to finish and then replays the result."""
    path = tmp_path / "shared.db"
    release = trio.Event()
    started = trio.Event()

    class Slow:
        async def respond(self, request: ModelRequest) -> ModelResponse:  # noqa: ARG002
            started.set()
            await release.wait()
            return answer("from the first host")

    second = ScriptedModel([answer("from the second host")])
    async with open_runtime(path) as host1, open_runtime(path) as host2:
        first = Agent("a", "x", model=Slow())
        other = Agent("a", "x", model=second)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                lambda: Runner.run(
                    first, "q", runtime=host1, checkpoint=CheckpointOptions(checkpoints(host1), "r")
                )
            )
            await started.wait()
            with pytest.raises(SessionOwnedError):
                await Runner.run(
                    other, "q", runtime=host2, checkpoint=CheckpointOptions(checkpoints(host2), "r")
                )
            assert second.requests == []

            async def finish_soon() -> None:
                await trio.sleep(0.05)
                release.set()

            nursery.start_soon(finish_soon)
            waited = CheckpointOptions(checkpoints(host2), "r", wait_for_owner=True)
            result = await Runner.run(other, "q", runtime=host2, checkpoint=waited)
        assert result.output == "from the first host"
        assert result.finish_reason is None
        assert second.requests == []


class CancelAfterSteps(trio.abc.Instrument):
    """Cancel ``scope`` after the scheduler ran ``steps`` task steps (of any task)."""

    def __init__(self, steps: int, scope: trio.CancelScope) -> None:
        self.steps = steps
        self.scope = scope

    def after_task_step(self, task: trio.lowlevel.Task) -> None:  # noqa: ARG002 (counts steps)
        self.steps -= 1
        if self.steps == 0:
            self.scope.cancel()


async def test_interrupted_before_dispatch_is_run_on_resume() -> None:
    """A run cancelled at every scheduler step in turn, then resumed: a non-idempotent
    tool whose body never started before the interruption runs on resume (it was never
    dispatched); one whose body started is reported TOOL_OUTCOME_UNKNOWN, never run
    twice. Either way it runs exactly once, and "unknown" means it really ran."""
    interrupted_before = interrupted_after = 0
    step = 0
    while True:
        step += 1
        charged: list[str] = []
        charge = _charging_tool(charged)

        def script() -> list[ModelResponse]:
            return [call("charge", "c1", amount=5), answer("done")]

        async with open_runtime(MemoryStore()) as rt:
            options = CheckpointOptions(checkpoints(rt), "r")
            agent = Agent("a", "x", tools=(charge,), model=ScriptedModel(script()))
            with trio.CancelScope() as scope:
                instrument = CancelAfterSteps(step, scope)
                trio.lowlevel.add_instrument(instrument)
                try:
                    await Runner.run(agent, "go", runtime=rt, checkpoint=options)
                finally:
                    trio.lowlevel.remove_instrument(instrument)
            if not scope.cancelled_caught:
                assert charged == ["charge 5"]
                break
            ran_before = list(charged)
            snap = await checkpoints(rt).load("r")
            if snap is None or snap.head.status == "completed":
                continue  # interrupted before anything was saved, or after completion
            if any(isinstance(e, ToolResult) for e in snap.entries):
                continue  # the call was settled (its result recorded) before the interruption
            resumer = Agent("a", "x", tools=(charge,), model=ScriptedModel([answer("resumed")]))
            await Runner.run(resumer, "go", runtime=rt, checkpoint=options)
            entries = await history_of_run(rt, "r")
            results = [e for e in entries if isinstance(e, ToolResult) and e.call_id == "c1"]
            if not any(e.kind == "tool_started" for e in entries if hasattr(e, "kind")):
                continue  # interrupted before the call was announced: it ran on resume
            assert len(results) == 1, (step, entries)
            unknown = results[0].output.startswith(TOOL_OUTCOME_UNKNOWN)
            if ran_before:
                interrupted_after += 1
                assert unknown, f"step {step}: the body ran, yet resume re-ran it"
                assert charged == ["charge 5"]
            else:
                interrupted_before += 1
                assert not unknown, f"step {step}: never dispatched, yet reported unknown"
                assert charged == ["charge 5"]
        assert step < 500
    assert interrupted_before >= 1
    assert interrupted_after >= 1


def _charging_tool(charged: list[str]) -> FunctionTool:
    @function_tool
    async def charge(amount: int) -> str:
        """Charge money (a side effect: not idempotent)."""
        charged.append(f"charge {amount}")
        await trio.lowlevel.checkpoint()  # a cancel may land after the side effect
        return "charged"

    return charge


async def history_of_run(rt: Runtime, run_id: str) -> list[object]:
    snap = await checkpoints(rt).load(run_id)
    assert snap is not None
    return list(snap.entries)


async def test_rewinding_a_fork_keeps_the_parents_runs(rt: Runtime) -> None:
    """A fork shares its parent's run ids, but the runs' checkpoints belong to the parent:
    rewinding the fork deletes none of them, and re-issuing the parent's completed run
    replays it -- its non-idempotent tool is not run a second time."""
    sent: list[str] = []

    @function_tool
    async def send_email(to: str) -> str:
        """Send an email (not idempotent)."""
        sent.append(to)
        return "sent"

    def agent() -> Agent:
        model = ScriptedModel([call("send_email", "e1", to="ada"), answer("mailed")])
        return Agent("a", "x", tools=(send_email,), model=model)

    options = CheckpointOptions(checkpoints(rt), "r1")
    await Runner.run(agent(), "mail ada", runtime=rt, session_id="chat", checkpoint=options)
    await fork_conversation(rt, "chat", "alt")
    assert await history(rt).rewind("alt", 1) > 0
    snap = await checkpoints(rt).load("r1")
    assert snap is not None
    assert snap.head.status == "completed"
    replay = await Runner.run(
        agent(), "mail ada", runtime=rt, session_id="chat", checkpoint=options
    )
    assert replay.finish_reason is None
    assert sent == ["ada"]
    # The parent's own rewind does delete its run's checkpoint.
    await history(rt).rewind("chat", 0)
    assert await checkpoints(rt).load("r1") is None


async def test_run_checkpoints_cannot_collide_with_user_sessions(rt: Runtime) -> None:
    """Run checkpoints live in the reserved namespace: a user session named like a run's
    old id gets nothing of the run's events, and conversations are listed without them."""
    async with rt.open_session("run:r1") as w:
        await w.append([NewEvent("user-data")])
    agent = Agent("a", "x", model=ScriptedModel([answer("ok")]))
    await Runner.run(agent, "q", runtime=rt, checkpoint=CheckpointOptions(checkpoints(rt), "r1"))
    assert checkpoints(rt).session_id("r1").startswith(INTERNAL_PREFIX)
    assert [e.kind for e in await rt.read("run:r1")] == ["user-data"]
    assert [i.id for i in await rt.list_sessions()] == ["run:r1"]


Outcome = tuple[list[Entry], RunHead, list[Entry], int]


async def _run_until_done(store: OneFailure | SqliteOneFailure) -> Outcome:
    """Run a run with a handoff, an idempotent and a non-idempotent tool and a tool that
    records a sidecar on ``store``, re-issuing it (resume / replay) after any failure
    until it completes; return its checkpoint entries and head (``updated_at`` cleared),
    its conversation and the executions of its non-idempotent tool."""
    executions: list[str] = []

    @function_tool
    async def pay(amount: int) -> str:
        """Pay (not idempotent)."""
        executions.append(f"pay {amount}")
        return "paid"

    @function_tool(idempotent=True)
    async def look(q: str) -> str:
        """Look something up (idempotent)."""
        await trio.sleep(0.01)  # finishes after ``pay``: the results in one order
        return f"found {q}"

    @function_tool(idempotent=True)
    async def note(ctx: RunContext) -> str:
        """Record a sidecar (accepted also when its commit is retried)."""
        with contextlib.suppress(CommitPendingError):
            await ctx.record("progress", {"n": 1})
        return "noted"

    def respond(request: ModelRequest) -> ModelResponse:
        done = {e.call_id for e in request.messages if isinstance(e, ToolResult)}
        if "p1" not in done:
            return ModelResponse(
                tool_calls=(
                    RequestedCall("look", {"q": "x"}, "l1"),
                    RequestedCall("pay", {"amount": 3}, "p1"),
                )
            )
        if "h1" not in done:
            return ModelResponse(tool_calls=(RequestedCall("transfer_to_b", {}, "h1"),))
        if "n1" not in done:
            return ModelResponse("noting", tool_calls=(RequestedCall("note", {}, "n1"),))
        return answer("all done")

    class Model:
        async def respond(self, request: ModelRequest) -> ModelResponse:
            await trio.lowlevel.checkpoint()
            return respond(request)

    b = Agent("b", "x", tools=(note,), model=Model())
    agent = Agent("a", "x", tools=(look, pay), handoffs=(b,), model=Model())
    try:
        async with open_runtime(store) as rt:
            options = CheckpointOptions(checkpoints(rt), "r")
            for _ in range(5):
                try:
                    await Runner.run(agent, "go", runtime=rt, session_id="chat", checkpoint=options)
                    break
                except TidelogError:
                    await trio.sleep(1.0)  # let the retry land; then re-issue the run
    except StoreIOError:
        pass  # the final fsync barrier at exit failed: every commit is in the store
    async with open_runtime(store) as rt:
        snap = await checkpoints(rt).load("r")
        conversation = await history(rt).load("chat")
    assert snap is not None
    assert snap.head.status == "completed", snap
    head = attrs.evolve(snap.head, updated_at=0.0)
    return _attempts_once(snap.entries), head, _attempts_once(conversation), len(executions)


def _attempts_once(entries: Sequence[Entry]) -> list[Entry]:
    """``entries`` with the records of the run's own retries folded: no ``tool_aborted``
    (a body that never started), and each sidecar once (a body started again)."""
    out: list[Entry] = []
    for entry in entries:
        if isinstance(entry, SidecarEntry) and (entry.kind == "tool_aborted" or entry in out):
            continue
        out.append(entry)
    return out


@pytest.fixture
def loop_clock(backend: str) -> trio.testing.MockClock:
    """The test's clock (pytest-trio runs the test on it): virtual time that jumps when
    every task waits, so retries and backoffs take no real time. On SQLite it jumps only
    after the loop has been idle for 2 ms of real time: a commit in the store's thread
    keeps no task runnable, and a clock jumping at once would race through every
    heartbeat and lease timer (hundreds of thousands of rounds) while one fsync runs."""
    return trio.testing.MockClock(autojump_threshold=0 if backend == "memory" else 0.002)


@pytest.mark.parametrize("ambiguous", [False, True], ids=["before", "after-commit"])
@pytest.mark.parametrize("backend", ["memory", "sqlite"])
async def test_run_loop_saves_land_once_through_store_failures(
    loop_clock: trio.testing.MockClock,  # noqa: ARG001 (pytest-trio runs the test on it)
    tmp_path: Path,
    backend: str,
    ambiguous: bool,
) -> None:
    """A store failure at any one batch of a run (each in turn: checkpoint saves,
    barriers, the completion), before its commit or after it (the acknowledgement lost):
    re-issuing the run until it completes leaves the checkpoint and the conversation
    equal to those of a run without failures, and the non-idempotent tool ran once."""

    def store(fail_at: int | None, name: str) -> OneFailure | SqliteOneFailure:
        if backend == "memory":
            return OneFailure(fail_at, after_commit=ambiguous)
        return SqliteOneFailure(str(tmp_path / f"{name}.db"), fail_at, after_commit=ambiguous)

    clean = store(None, "clean")
    reference = await _run_until_done(clean)
    assert reference[3] == 1
    kinds = [type(e).__name__ for e in reference[0]]
    assert kinds.count("AssistantMessage") == 2  # "noting", then the final answer
    for where in range(clean.calls):
        failing = store(where, f"fail{where}")
        assert await _run_until_done(failing) == reference, where
        assert failing.calls > where  # the failure happened
