"""Run checkpoints: one suite for MemoryCheckpointer and RuntimeCheckpointer, the
if_run_exists policies, and run completion: atomic on one runtime, otherwise in the order
of lovia (the Python agent framework whose Session/Checkpoint/Runner design the agent
layer follows): checkpoint first, then history."""

from __future__ import annotations

import functools
import pathlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Literal

import pytest
import trio
import trio.testing
from helpers import runtime_target

from runtime import (
    JSON,
    CommitPendingError,
    InvalidArgumentError,
    MemoryStore,
    TidelogError,
    open_runtime,
)
from runtime.agents import (
    Agent,
    AssistantMessage,
    Checkpointer,
    CheckpointOptions,
    Entry,
    MemoryCheckpointer,
    MemoryHistory,
    ModelResponse,
    RunExistsError,
    RunHead,
    Runner,
    RunNotFoundError,
    RunSnapshot,
    RunStatus,
    RuntimeCheckpointer,
    ScriptedModel,
    ToolCall,
    ToolResult,
    UserMessage,
    begin_run,
    checkpoints,
    complete_run,
    history,
)

ENTRIES: list[Entry] = [UserMessage("hi"), ToolCall("c1", "t", {"a": 1}), ToolResult("c1", "ok")]


@pytest.fixture(params=["memory", "runtime-memory", "runtime-sqlite", "runtime-postgres"])
async def cp(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> AsyncIterator[Checkpointer]:
    """A checkpointer per implementation."""
    if request.param == "memory":
        yield MemoryCheckpointer()
        return
    target = runtime_target(request.param.removeprefix("runtime-"), tmp_path, request)
    async with open_runtime(target) as rt:
        yield checkpoints(rt)


def head(
    status: RunStatus = "running",
    *,
    turns: int = 0,
    usage: dict[str, JSON] | None = None,
    output: JSON = None,
    updated_at: float = 0.0,
) -> RunHead:
    """A head of agent ``agent`` with the given fields (the rest at their defaults)."""
    return RunHead(
        "agent",
        usage=usage or {},
        turns=turns,
        status=status,
        output=output,
        updated_at=updated_at,
    )


async def test_append_accumulates_entries_and_replaces_head(cp: Checkpointer) -> None:
    """Entries are added batch by batch, never rewritten; the head is replaced."""
    await cp.append("r", ENTRIES[:1], head(turns=1))
    await cp.append("r", ENTRIES[1:], head(turns=2, usage={"input_tokens": 5}))
    snap = await cp.load("r")
    assert snap is not None
    assert snap.run_id == "r"
    assert list(snap.entries) == ENTRIES
    assert snap.head.turns == 2
    assert snap.head.usage == {"input_tokens": 5}
    assert await cp.load("other") is None


async def test_delete_is_idempotent(cp: Checkpointer) -> None:
    """delete forgets a run; deleting again is fine."""
    await cp.append("r", ENTRIES, head())
    await cp.delete("r")
    await cp.delete("r")
    assert await cp.load("r") is None


async def test_list_by_status(cp: Checkpointer) -> None:
    """list() names stored runs, filtered by status, most recently saved first."""
    await cp.append("a", [], head("completed", updated_at=1.0))
    await cp.append("b", [], head("interrupted", updated_at=2.0))
    assert [i.run_id for i in await cp.list()] == ["b", "a"]
    assert [i.run_id for i in await cp.list(status="completed")] == ["a"]


async def test_bad_input_refused(cp: Checkpointer) -> None:
    """Empty run ids, wrong types and bad entries raise before anything is stored."""
    with pytest.raises(InvalidArgumentError):
        await cp.append("", [], head())
    with pytest.raises(InvalidArgumentError):
        await cp.append("r", ["x"], head())  # type: ignore[list-item]  # bad input under test
    with pytest.raises(InvalidArgumentError):
        await cp.append("r", [], {"agent": "a"})  # type: ignore[arg-type]  # bad input under test
    assert await cp.load("r") is None


async def test_head_fields_round_trip(cp: Checkpointer) -> None:
    """Every head field survives a save and load."""
    full = RunHead(
        "writer",
        usage={"input_tokens": 1, "output_tokens": 2},
        turns=3,
        status="failed",
        output={"answer": [1, 2]},
        error={"type": "ValueError", "message": "boom"},
        context_state={"summary": "s"},
        updated_at=12.5,
    )
    await cp.append("r", [AssistantMessage("x", agent="writer")], full)
    snap = await cp.load("r")
    assert snap is not None
    assert snap.head == full


def test_old_snapshot_loads_with_defaults() -> None:
    """A head stored without newer optional fields loads with the documented defaults."""
    loaded = RunHead.from_json({"agent": "a", "status": "interrupted", "future_field": 1})
    assert loaded == RunHead("a", status="interrupted")
    assert loaded.usage == {}
    assert loaded.turns == 0
    assert loaded.error is None


def test_snapshot_json_round_trip() -> None:
    """RunSnapshot.to_json/from_json round-trip exactly."""
    snap = RunSnapshot("r", tuple(ENTRIES), head("completed", output="done"))
    assert RunSnapshot.from_json(snap.to_json()) == snap


def test_run_head_validation() -> None:
    """RunHead refuses bad fields."""
    with pytest.raises(InvalidArgumentError):
        RunHead("")
    with pytest.raises(InvalidArgumentError):
        RunHead("a", status="done")  # type: ignore[arg-type]  # bad input under test
    with pytest.raises(InvalidArgumentError):
        RunHead("a", turns=-1)
    with pytest.raises(InvalidArgumentError):
        RunHead("a", error={"message": "no type"})
    with pytest.raises(InvalidArgumentError):
        RunHead("a", output=float("nan"))


def test_checkpoint_options_validation() -> None:
    """CheckpointOptions validates its fields as the seed describes."""
    cp = MemoryCheckpointer()
    with pytest.raises(InvalidArgumentError):
        CheckpointOptions(cp, "")
    with pytest.raises(InvalidArgumentError):
        CheckpointOptions(cp, "r", if_run_exists="overwrite")  # type: ignore[arg-type]  # bad input under test
    with pytest.raises(InvalidArgumentError):
        CheckpointOptions(object(), "r")  # type: ignore[arg-type]  # bad input under test
    with pytest.raises(InvalidArgumentError):
        CheckpointOptions(cp, "r", delete_on_success=1)  # type: ignore[arg-type]  # bad input under test
    other = RunSnapshot("other", (), head())
    with pytest.raises(InvalidArgumentError):
        CheckpointOptions(cp, "r", resume_from=other)
    assert CheckpointOptions(cp, "r").if_run_exists == "resume"


@pytest.mark.parametrize("status", ["running", "completed"])
async def test_policies_with_a_stored_run(status: RunStatus) -> None:
    """resume/resume_only return the stored run; restart deletes it; fail raises."""
    cp = MemoryCheckpointer()
    await cp.append("r", ENTRIES, head(status))
    resuming: tuple[Literal["resume", "resume_only"], ...] = ("resume", "resume_only")
    for policy in resuming:
        snap = await begin_run(CheckpointOptions(cp, "r", if_run_exists=policy))
        assert snap is not None
        assert snap.head.status == status
    with pytest.raises(RunExistsError) as info:
        await begin_run(CheckpointOptions(cp, "r", if_run_exists="fail"))
    assert info.value.status == status
    assert await begin_run(CheckpointOptions(cp, "r", if_run_exists="restart")) is None
    assert await cp.load("r") is None


async def test_policies_without_a_stored_run() -> None:
    """Nothing stored: resume/restart/fail start fresh; resume_only raises."""
    cp = MemoryCheckpointer()
    fresh: tuple[Literal["resume", "restart", "fail"], ...] = ("resume", "restart", "fail")
    for policy in fresh:
        assert await begin_run(CheckpointOptions(cp, "r", if_run_exists=policy)) is None
    with pytest.raises(RunNotFoundError):
        await begin_run(CheckpointOptions(cp, "r", if_run_exists="resume_only"))


async def test_resume_from_overrides_the_store() -> None:
    """resume_from resumes from the given snapshot even if nothing is stored."""
    cp = MemoryCheckpointer()
    snap = RunSnapshot("r", tuple(ENTRIES), head("interrupted"))
    options = CheckpointOptions(cp, "r", if_run_exists="resume_only", resume_from=snap)
    assert await begin_run(options) == snap


# -- completion ---------------------------------------------------------------------------


async def test_completion_is_atomic_on_one_runtime(tmp_path: pathlib.Path) -> None:
    """On one runtime the completed checkpoint and the history segment are one group
    write: both land, and a repeat (a replay) adds nothing to the history."""
    async with open_runtime(tmp_path / "db") as rt:
        await checkpoints(rt).append("r", ENTRIES[:1], head())
        await complete_run(
            checkpoints(rt),
            history(rt),
            session_id="s",
            run_id="r",
            new_entries=ENTRIES[1:],
            head=head("completed", output="ok"),
            run_entries=ENTRIES,
            meta={"m": 1},
        )
        snap = await checkpoints(rt).load("r")
        assert snap is not None
        assert snap.head.status == "completed"
        assert await history(rt).load("s") == ENTRIES
        await complete_run(
            checkpoints(rt),
            history(rt),
            session_id="s",
            run_id="r",
            new_entries=[],
            head=head("completed", output="ok"),
            run_entries=ENTRIES,
        )
        assert len(await history(rt).segments("s")) == 1


async def test_atomic_completion_failure_leaves_neither(
    autojump_clock: trio.testing.MockClock,  # noqa: ARG001 (pytest-trio runs the test on it)
) -> None:
    """If the shared commit fails, neither the completion nor the segment is visible (the
    group was accepted: CommitPendingError); once the store recovers both land together."""
    from helpers import FlakyMemoryStore

    store = FlakyMemoryStore()
    async with open_runtime(store) as rt:
        await checkpoints(rt).append("r", ENTRIES, head())
        store.fail_next = 1
        with pytest.raises(CommitPendingError):
            await complete_run(
                checkpoints(rt),
                history(rt),
                session_id="s",
                run_id="r",
                new_entries=[],
                head=head("completed"),
                run_entries=ENTRIES,
            )
        # Accepted as one group: committed together (closing the writers retried it) or
        # still queued together -- never one without the other.
        snap = await checkpoints(rt).load("r")
        assert snap is not None
        assert (snap.head.status == "completed") == (store.head("s") == len(ENTRIES) + 1)
        await rt.flush()
        snap = await checkpoints(rt).load("r")
        assert snap is not None
        assert snap.head.status == "completed"
        assert await history(rt).load("s") == ENTRIES


async def test_fallback_order_and_crash_window_repair() -> None:
    """Different stores: checkpoint first, then history. A crash between the two leaves a
    completed checkpoint without a segment; completing again (a replay) repairs it once."""
    cp = MemoryCheckpointer()
    history = MemoryHistory(checkpointer=cp)
    await cp.append("r", ENTRIES, head("completed"))  # ... and the process died here
    assert await history.load("s") == []
    for _ in range(2):
        await complete_run(
            cp,
            history,
            session_id="s",
            run_id="r",
            new_entries=[],
            head=head("completed"),
            run_entries=ENTRIES,
        )
    assert await history.load("s") == ENTRIES
    assert len(await history.segments("s")) == 1


async def test_complete_requires_completed_head() -> None:
    """complete_run refuses a head whose status is not completed."""
    with pytest.raises(InvalidArgumentError):
        await complete_run(
            MemoryCheckpointer(),
            MemoryHistory(),
            session_id="s",
            run_id="r",
            new_entries=[],
            head=head("running"),
            run_entries=[],
        )


async def test_restart_discards_the_old_run_on_every_checkpointer(cp: Checkpointer) -> None:
    """``if_run_exists="restart"`` discards the stored run and runs a new one, also with
    the runtime's checkpointer, whose claim holds the run session's writer."""
    async with open_runtime(MemoryStore()) as own:
        rt = cp.runtime if isinstance(cp, RuntimeCheckpointer) else own
        for text, policy in (("one", "resume"), ("two", "restart")):
            agent = Agent("a", "x", model=ScriptedModel([ModelResponse(text)]))
            options = CheckpointOptions(cp, "r", if_run_exists=policy)  # type: ignore[arg-type]
            result = await Runner.run(agent, f"q-{text}", runtime=rt, checkpoint=options)
            assert result.output == text
        snap = await cp.load("r")
        assert snap is not None
        assert snap.head.status == "completed"
        assert snap.head.output == "two"
        assert [e.text for e in snap.entries if isinstance(e, UserMessage)] == ["q-two"]
        assert [e.text for e in snap.entries if isinstance(e, AssistantMessage)] == ["two"]


async def _resend_until_done(save: Callable[[], Awaitable[None]]) -> int:
    """Send ``save`` again until it returns (as lovia's save loop does); the number of
    CommitPendingErrors it saw."""
    pending = 0
    while True:
        try:
            await save()
        except CommitPendingError:
            pending += 1
        except TidelogError:
            pass  # refused or dropped: nothing of it is stored, send it again
        else:
            return pending


@pytest.mark.parametrize("failures", [1, 2])
@pytest.mark.parametrize("claimed", [False, True], ids=["shared", "claimed"])
async def test_a_save_resent_after_commit_pending_is_stored_once(
    autojump_clock: trio.testing.MockClock,  # noqa: ARG001 (pytest-trio runs the test on it)
    claimed: bool,
    failures: int,
) -> None:
    """A checkpoint save that raised CommitPendingError (accepted, commit retried) and is
    sent again is recognised: its entries are stored once, with or without the claim."""
    from helpers import FlakyMemoryStore

    store = FlakyMemoryStore()
    async with open_runtime(store) as rt, AsyncExitStack() as stack:
        cp = checkpoints(rt)
        if claimed:
            await stack.enter_async_context(cp.claim("r"))
        await cp.append("r", [UserMessage("e0")], head())
        store.fail_next = failures
        save = functools.partial(cp.append, "r", [UserMessage("e1")], head(turns=1))
        assert await _resend_until_done(save) >= 1
        await cp.append("r", [UserMessage("e2")], head(turns=2))
        snap = await cp.load("r")
        assert snap is not None
        assert [e.text for e in snap.entries if isinstance(e, UserMessage)] == ["e0", "e1", "e2"]
        assert snap.head.turns == 2


async def test_a_completion_resent_after_commit_pending_is_stored_once(
    autojump_clock: trio.testing.MockClock,  # noqa: ARG001 (pytest-trio runs the test on it)
) -> None:
    """``complete_run`` resent after CommitPendingError leaves the checkpoint's final
    entries and the history segment once each."""
    from helpers import FlakyMemoryStore

    store = FlakyMemoryStore()
    async with open_runtime(store) as rt:
        await checkpoints(rt).append("r", ENTRIES[:1], head())
        store.fail_next = 1
        complete = functools.partial(
            complete_run,
            checkpoints(rt),
            history(rt),
            session_id="s",
            run_id="r",
            new_entries=ENTRIES[1:],
            head=head("completed", output="ok"),
            run_entries=ENTRIES,
        )
        assert await _resend_until_done(complete) >= 1
        snap = await checkpoints(rt).load("r")
        assert snap is not None
        assert list(snap.entries) == ENTRIES
        assert await history(rt).load("s") == ENTRIES
