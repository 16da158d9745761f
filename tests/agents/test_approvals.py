"""Tool approvals: a run stops before a call that needs a person's yes, the decision is
recorded once in the run's checkpoint, and re-issuing the run acts on it."""

from __future__ import annotations

import pathlib
from collections.abc import AsyncIterator

import pytest
import trio
from helpers import FlakyMemoryStore

from runtime import CommitPendingError, InvalidArgumentError, Runtime, open_runtime
from runtime.agents import (
    Agent,
    AlreadyDecidedError,
    ApprovalNotPendingError,
    AwaitingApproval,
    CheckpointOptions,
    ModelRequest,
    ModelResponse,
    RequestedCall,
    RunCompleted,
    Runner,
    RunNotFoundError,
    RunResult,
    ScriptedModel,
    SidecarEntry,
    ToolCall,
    ToolResult,
    Verdict,
    approve,
    awaiting_approval,
    checkpoints,
    function_tool,
    history,
    list_runs,
    reject,
)


@pytest.fixture
async def rt(tmp_path: pathlib.Path) -> AsyncIterator[Runtime]:
    """A runtime on a SQLite file."""
    async with open_runtime(tmp_path / "approvals.db") as runtime:
        yield runtime


class Office:
    """Tools with effects, counting what ran: ``pay`` needs approval, ``look`` does not,
    ``send`` asks its policy."""

    def __init__(self) -> None:
        self.ran: list[str] = []

        @function_tool(needs_approval=True)
        async def pay(amount: int) -> str:
            """Pay an amount."""
            self.ran.append(f"pay {amount}")
            return f"paid {amount}"

        @function_tool
        async def look() -> str:
            """Look around."""
            self.ran.append("look")
            return "nothing"

        def policy(ctx: object, call: ToolCall) -> Verdict:  # noqa: ARG001 (the policy's signature)
            to = call.arguments.get("to")
            return "allow" if to == "me" else "deny" if to == "spam" else "ask"

        @function_tool(needs_approval=policy)
        async def send(to: str) -> str:
            """Send an email."""
            self.ran.append(f"send {to}")
            return f"sent to {to}"

        self.tools = (pay, look, send)


def calls(*specs: tuple[str, dict[str, object], str]) -> ModelResponse:
    return ModelResponse(tool_calls=tuple(RequestedCall(n, a, c) for n, a, c in specs))  # type: ignore[arg-type]


def results(entries: tuple[object, ...]) -> dict[str, ToolResult]:
    return {e.call_id: e for e in entries if isinstance(e, ToolResult)}


async def _run(rt: Runtime, office: Office, model: ScriptedModel, run_id: str) -> RunResult:
    agent = Agent("clerk", "x", model=model, tools=office.tools)
    options = CheckpointOptions(checkpoints(rt), run_id)
    return await Runner.run(
        agent, "do it", runtime=rt, session_id=f"s-{run_id}", checkpoint=options
    )


async def test_a_call_that_needs_approval_stops_the_run_and_others_still_run(rt: Runtime) -> None:
    """The run records the request, checkpoints as awaiting_approval and returns the
    pending call; the turn's call that needs no approval runs; nothing is in history."""
    office = Office()
    model = ScriptedModel([calls(("pay", {"amount": 5}, "c1"), ("look", {}, "c2"))])
    result = await _run(rt, office, model, "r")
    assert result.status == "awaiting_approval"
    assert result.output is None
    assert [c.call_id for c in result.pending_approvals] == ["c1"]
    assert office.ran == ["look"]
    snap = await checkpoints(rt).load("r")
    assert snap is not None
    assert snap.head.status == "awaiting_approval"
    assert [c.call_id for c in awaiting_approval(snap.entries)] == ["c1"]
    requests = [
        e for e in snap.entries if isinstance(e, SidecarEntry) and e.kind == "approval_requested"
    ]
    assert [e.data for e in requests] == [
        {"run_id": "r", "call_id": "c1", "tool": "pay", "arguments": {"amount": 5}}
    ]
    assert [i.run_id for i in await checkpoints(rt).list(status="awaiting_approval")] == ["r"]
    assert await history(rt).load("s-r") == []


async def test_approve_then_resume_runs_the_call_once_and_finishes(rt: Runtime) -> None:
    """After approve, re-issuing the run runs the approved call (once), asks the model
    again and completes; a resume before the decision just waits again, no model call."""
    office = Office()
    model = ScriptedModel([calls(("pay", {"amount": 5}, "c1")), ModelResponse("done")])
    await _run(rt, office, model, "r")
    again = await _run(rt, office, model, "r")
    assert again.status == "awaiting_approval"
    assert len(model.requests) == 1
    decision = await approve(checkpoints(rt), "r", "c1", by="ada")
    assert decision.approved
    assert decision.by == "ada"
    result = await _run(rt, office, model, "r")
    assert result.status == "completed"
    assert result.output == "done"
    assert office.ran == ["pay 5"]
    assert results(result.entries)["c1"].output == "paid 5"
    segment = (await history(rt).segments("s-r"))[0]
    kinds = [e.kind for e in segment.entries if isinstance(e, SidecarEntry)]
    assert "approval_requested" in kinds
    assert "approval_decision" in kinds
    replay = await _run(rt, office, model, "r")
    assert replay.output == "done"
    assert office.ran == ["pay 5"]


async def test_reject_becomes_a_tool_result_the_model_sees(rt: Runtime) -> None:
    """A rejected call never runs; the model gets an error result with the message."""
    office = Office()
    seen: list[ModelRequest] = []

    def answer(request: ModelRequest) -> ModelResponse:
        seen.append(request)
        return ModelResponse("understood")

    model = ScriptedModel([calls(("pay", {"amount": 900}, "c1")), answer])
    await _run(rt, office, model, "r")
    await reject(checkpoints(rt), "r", "c1", by="ada", message="too much")
    result = await _run(rt, office, model, "r")
    assert result.output == "understood"
    assert office.ran == []
    got = results(result.entries)["c1"]
    assert got.is_error
    assert "REJECTED" in got.output
    assert "too much" in got.output
    assert got in seen[0].messages


async def test_the_second_of_two_racing_deciders_is_told_how_it_was_decided(rt: Runtime) -> None:
    """Two deciders at once: exactly one decision is written; the other gets
    AlreadyDecidedError carrying the first decision."""
    office = Office()
    await _run(rt, office, ScriptedModel([calls(("pay", {"amount": 1}, "c1"))]), "r")
    outcomes: list[object] = []

    async def decide(approved: bool) -> None:
        try:
            decide_one = approve if approved else reject
            outcomes.append(await decide_one(checkpoints(rt), "r", "c1", by=f"d{approved}"))
        except AlreadyDecidedError as exc:
            outcomes.append(exc)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(decide, True)
        nursery.start_soon(decide, False)
    errors = [o for o in outcomes if isinstance(o, AlreadyDecidedError)]
    assert len(errors) == 1
    winner = next(o for o in outcomes if not isinstance(o, AlreadyDecidedError))
    assert errors[0].decision == winner
    snap = await checkpoints(rt).load("r")
    assert snap is not None
    decisions = [
        e for e in snap.entries if isinstance(e, SidecarEntry) and e.kind == "approval_decision"
    ]
    assert len(decisions) == 1


async def test_policy_allow_deny_ask_are_audited(rt: Runtime) -> None:
    """A policy's every answer is a permission_decision beside the call: allow runs it,
    deny gives an error result, ask waits for a person."""
    office = Office()
    turn = calls(
        ("send", {"to": "me"}, "a"), ("send", {"to": "spam"}, "d"), ("send", {"to": "boss"}, "q")
    )
    result = await _run(rt, office, ScriptedModel([turn]), "r")
    assert [c.call_id for c in result.pending_approvals] == ["q"]
    assert office.ran == ["send me"]
    got = results(result.entries)
    assert got["a"].output == "sent to me"
    assert got["d"].is_error
    assert "DENIED" in got["d"].output
    audits = [
        e.data
        for e in result.entries
        if isinstance(e, SidecarEntry) and e.kind == "permission_decision"
    ]
    assert audits == [
        {"call_id": "a", "tool": "send", "verdict": "allow"},
        {"call_id": "d", "tool": "send", "verdict": "deny"},
        {"call_id": "q", "tool": "send", "verdict": "ask"},
    ]


async def test_bad_decisions_are_refused_and_write_nothing(rt: Runtime) -> None:
    """Unknown run, unknown call, a call that needs no approval, malformed ids: a named
    error each, and the checkpoint is unchanged."""
    office = Office()
    model = ScriptedModel([calls(("pay", {"amount": 1}, "c1"), ("look", {}, "c2"))])
    await _run(rt, office, model, "r")
    before = await checkpoints(rt).load("r")
    cp = checkpoints(rt)
    with pytest.raises(RunNotFoundError):
        await approve(cp, "nope", "c1", by="ada")
    with pytest.raises(ApprovalNotPendingError, match="no such call"):
        await approve(cp, "r", "c9", by="ada")
    with pytest.raises(ApprovalNotPendingError, match="needs no approval"):
        await approve(cp, "r", "c2", by="ada")
    for bad in ("", "x\n"):
        with pytest.raises(InvalidArgumentError):
            await approve(cp, "r", bad, by="ada")
        with pytest.raises(InvalidArgumentError):
            await approve(cp, bad, "c1", by="ada")
    with pytest.raises(InvalidArgumentError):
        await reject(cp, "r", "c1", by="")
    assert await checkpoints(rt).load("r") == before
    assert "tidelog/run/nope" not in {i.id for i in await rt.list_sessions(include_internal=True)}


async def test_a_run_without_checkpoint_cannot_await_approval(rt: Runtime) -> None:
    """Without a checkpoint nothing could resume the run: it fails, naming the tool."""
    office = Office()
    agent = Agent(
        "clerk", "x", model=ScriptedModel([calls(("pay", {"amount": 1}, "c1"))]), tools=office.tools
    )
    with pytest.raises(InvalidArgumentError, match="pay"):
        await Runner.run(agent, "go", runtime=rt)
    assert office.ran == []


async def test_streamed_run_ends_with_awaiting_approval(rt: Runtime) -> None:
    """run_streamed's last event says the run awaits approval."""
    office = Office()
    agent = Agent(
        "clerk", "x", model=ScriptedModel([calls(("pay", {"amount": 1}, "c1"))]), tools=office.tools
    )
    options = CheckpointOptions(checkpoints(rt), "r")
    async with Runner.run_streamed(agent, "go", runtime=rt, checkpoint=options) as events:
        seen = [e async for e in events]
    assert isinstance(seen[-1], AwaitingApproval)
    assert [c.call_id for c in seen[-1].result.pending_approvals] == ["c1"]


async def test_a_decision_whose_commit_fails_follows_the_write_contract(
    autojump_clock: trio.testing.MockClock,  # noqa: ARG001 (pytest-trio runs the test on it)
) -> None:
    """A store failure while writing a decision follows the write contract: the commit
    failed after the decision was accepted (CommitPendingError), so it is recorded --
    deciding again is told so -- and stored once."""
    store = FlakyMemoryStore()
    async with open_runtime(store) as rt:
        office = Office()
        await _run(rt, office, ScriptedModel([calls(("pay", {"amount": 1}, "c1"))]), "r")
        store.fail_next = 1
        with pytest.raises(CommitPendingError):
            await approve(checkpoints(rt), "r", "c1", by="ada")
        with pytest.raises(AlreadyDecidedError):
            await approve(checkpoints(rt), "r", "c1", by="bob")
        snap = await checkpoints(rt).load("r")
        assert snap is not None
        decisions = [
            e for e in snap.entries if isinstance(e, SidecarEntry) and e.kind == "approval_decision"
        ]
        assert len(decisions) == 1


async def test_a_host_that_waits_for_decisions_continues_when_one_lands(rt: Runtime) -> None:
    """With wait_for_decisions the run does not return when it awaits approval: it lets
    go of the run, follows its checkpoint, and continues once the call is decided."""
    office = Office()
    model = ScriptedModel([calls(("pay", {"amount": 3}, "c1")), ModelResponse("paid")])
    agent = Agent("clerk", "x", model=model, tools=office.tools)
    options = CheckpointOptions(checkpoints(rt), "r", wait_for_decisions=True)
    done: list[RunResult] = []
    async with Runner.run_streamed(agent, "go", runtime=rt, checkpoint=options) as events:
        async for event in events:
            if isinstance(event, AwaitingApproval):  # the host goes on waiting meanwhile
                await approve(checkpoints(rt), "r", "c1", by="ada")
            elif isinstance(event, RunCompleted):
                done.append(event.result)
    assert done[0].status == "completed"
    assert done[0].output == "paid"
    assert office.ran == ["pay 3"]


def test_waiting_for_decisions_needs_a_checkpointer_on_a_runtime() -> None:
    """An in-memory checkpointer has no session to follow: refused at once."""
    from runtime.agents import MemoryCheckpointer

    with pytest.raises(InvalidArgumentError, match="wait_for_decisions"):
        CheckpointOptions(MemoryCheckpointer(), "r", wait_for_decisions=True)


async def test_list_runs_shows_status_and_pending_approvals(rt: Runtime) -> None:
    """The public run listing: each run's status, session, pending approvals."""
    office = Office()
    await _run(rt, office, ScriptedModel([calls(("pay", {"amount": 2}, "c1"))]), "waiting")
    await _run(rt, office, ScriptedModel([ModelResponse("hi")]), "finished")
    runs = {r.run_id: r for r in await list_runs(checkpoints(rt))}
    assert runs["waiting"].status == "awaiting_approval"
    assert runs["waiting"].session_id == "s-waiting"
    assert [c.call_id for c in runs["waiting"].pending_approvals] == ["c1"]
    assert runs["finished"].status == "completed"
    assert runs["finished"].pending_approvals == ()
    assert runs["waiting"].to_json()["pending_approvals"] == [
        {"call_id": "c1", "name": "pay", "arguments": {"amount": 2}}
    ]
    only = await list_runs(checkpoints(rt), status="awaiting_approval")
    assert [r.run_id for r in only] == ["waiting"]
