"""The retention API (runtime.agents.prune, checkpoint_sessions, conversation_sessions)
on both backends: what each policy selects, what is never deleted, dry runs, stopping."""

from __future__ import annotations

import pytest

from runtime import InvalidArgumentError, Runtime
from runtime.agents import (
    RunHead,
    RunStatus,
    UserMessage,
    checkpoint_sessions,
    checkpoints,
    conversation_sessions,
    history,
    prune,
)


async def _run(rt: Runtime, conversation: str, run_id: str, status: RunStatus, at: float) -> None:
    await history(rt).append(conversation, [UserMessage(run_id)], run_id=run_id)
    head = RunHead("a", status=status, session_id=conversation, updated_at=at)
    await checkpoints(rt).append(run_id, [UserMessage(run_id)], head)


async def _ids(rt: Runtime) -> list[str]:
    return [info.id for info in await rt.list_sessions(include_internal=True)]


async def test_checkpoint_sessions_name_their_conversation(rt: Runtime) -> None:
    """checkpoint_sessions lists every stored checkpoint with its head and conversation;
    conversation_sessions the internal sessions of one conversation."""
    await _run(rt, "a", "a1", "completed", 1.0)
    await _run(rt, "b", "b1", "running", 2.0)
    found = await checkpoint_sessions(rt)
    assert [(c.run_id, c.conversation) for c in found] == [("a1", "a"), ("b1", "b")]
    assert found[1].head is not None
    assert found[1].head.status == "running"
    assert await conversation_sessions(rt, "a") == ["tidelog/run/a1"]


async def test_older_than_deletes_conversations_with_their_checkpoints(rt: Runtime) -> None:
    """older_than selects conversations not updated since the cutoff and their run
    checkpoints (deleted first); a dry run selects the same and deletes nothing."""
    await _run(rt, "old", "o1", "completed", 1.0)
    [info] = [i for i in await rt.list_sessions() if i.id == "old"]
    later = info.updated_at + 100
    dry = await prune(rt, older_than=50, now=later, dry_run=True)
    assert [a.session_id for a in dry.actions] == ["tidelog/run/o1", "old"]
    assert dry.deleted == []
    assert await _ids(rt) == ["old", "tidelog/run/o1"]
    report = await prune(rt, older_than=50, now=later)
    assert report.deleted == ["tidelog/run/o1", "old"]
    assert await _ids(rt) == []
    assert (await prune(rt, older_than=500, now=later)).actions == ()


async def test_held_and_lent_sessions_are_kept(rt: Runtime) -> None:
    """A session named in ``held`` (a live writer) is kept with its checkpoints; a
    parent a kept fork borrows from is kept; a fork selected too goes first, and then
    its parent may go."""
    await _run(rt, "held", "h1", "completed", 1.0)
    await _run(rt, "parent", "p1", "completed", 1.0)
    await rt.fork("parent", "child")
    now = max(i.updated_at for i in await rt.list_sessions()) + 10
    report = await prune(rt, older_than=5, now=now, held={"held"}, dry_run=True)
    kept = {a.session_id: a.kept for a in report.kept}
    assert kept == {
        "held": "a live writer holds it",
        "tidelog/run/h1": "its conversation 'held' is kept: a live writer holds it",
    }
    assert {a.session_id for a in report.actions} >= {"child", "parent"}
    order = [a.session_id for a in report.actions]
    assert order.index("child") < order.index("parent")
    keep_child = await prune(rt, older_than=5, now=now, held={"child", "held"})
    assert {a.session_id: a.kept for a in keep_child.kept}["parent"] == (
        "fork 'child' borrows its events"
    )
    assert await _ids(rt) == ["child", "held", "parent", "tidelog/run/h1", "tidelog/run/p1"]


async def test_checkpoint_policies(rt: Runtime) -> None:
    """completed_checkpoints, keep_last_runs (by saved time, per conversation) and
    orphaned_checkpoints select only checkpoints; conversations stay."""
    await _run(rt, "a", "a1", "completed", 1.0)
    await _run(rt, "a", "a2", "running", 3.0)
    await _run(rt, "a", "a3", "failed", 2.0)
    await _run(rt, "gone", "g1", "completed", 1.0)
    await rt.delete("gone")
    done = await prune(rt, completed_checkpoints=True, dry_run=True)
    assert [a.session_id for a in done.actions] == ["tidelog/run/a1", "tidelog/run/g1"]
    last = await prune(rt, keep_last_runs=2, dry_run=True)
    assert [a.session_id for a in last.actions] == ["tidelog/run/a1"]
    orphans = await prune(rt, orphaned_checkpoints=True)
    assert orphans.deleted == ["tidelog/run/g1"]
    assert "its conversation is gone" in orphans.actions[0].reason
    assert await _ids(rt) == ["a", "tidelog/run/a1", "tidelog/run/a2", "tidelog/run/a3"]


async def test_stop_ends_pruning_between_deletions(rt: Runtime) -> None:
    """``stop()`` returning True ends pruning before the next deletion (interrupted),
    with every deletion made whole."""
    for n in range(3):
        await _run(rt, f"c{n}", f"r{n}", "completed", 1.0)
    calls = iter([False, True])
    report = await prune(rt, completed_checkpoints=True, stop=lambda: next(calls))
    assert report.interrupted
    assert report.deleted == ["tidelog/run/r0"]


@pytest.mark.parametrize(
    "policy",
    [{"older_than": -1}, {"older_than": "1d"}, {"keep_last_runs": -1}, {"dry_run": 1}],
    ids=["negative-age", "text-age", "negative-runs", "int-flag"],
)
async def test_bad_policies_are_refused(rt: Runtime, policy: dict[str, object]) -> None:
    """A bad policy raises InvalidArgumentError before anything is selected."""
    with pytest.raises(InvalidArgumentError):
        await prune(rt, **policy)  # type: ignore[arg-type]
