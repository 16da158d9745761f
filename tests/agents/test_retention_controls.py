"""Run control sessions (``tidelog/ctl/R``: stop requests) go with their run: deleting a
checkpoint, a conversation or pruning removes them, never while a host runs the run, and
what a delete that stopped midway left behind is removed by the next prune or delete."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import pytest
from helpers import FlakyMemoryStore, RuntimeFactory

from runtime import Runtime, SessionOwnedError, TidelogError, open_runtime
from runtime.agents import (
    RunHead,
    RunStatus,
    UserMessage,
    checkpoints,
    control_sessions,
    conversation_sessions,
    delete_owned,
    history,
    prune,
    request_stop,
)
from stores import BatchResult, WriteOp


async def _run(rt: Runtime, conversation: str, run_id: str, status: RunStatus = "running") -> None:
    await history(rt).append(conversation, [UserMessage(run_id)], run_id=run_id)
    head = RunHead("a", status=status, session_id=conversation, updated_at=1.0)
    await checkpoints(rt).append(run_id, [UserMessage(run_id)], head)


async def _stopped(rt: Runtime, conversation: str, run_id: str) -> None:
    """A run with a stop request in its control session (asked while a host held it)."""
    await _run(rt, conversation, run_id)
    async with checkpoints(rt).claim(run_id):
        assert (await request_stop(rt, run_id, by="ops", reason="enough")).requested


async def _ids(rt: Runtime) -> list[str]:
    return [info.id for info in await rt.list_sessions(include_internal=True)]


async def _later(rt: Runtime) -> float:
    return max(info.updated_at for info in await rt.list_sessions(include_internal=True)) + 10


async def test_a_control_session_is_internal_and_goes_with_its_checkpoint(rt: Runtime) -> None:
    """A control session is listed only with the internal sessions, named by its
    conversation's sessions after its checkpoint, and a checkpoint's delete takes it."""
    await _stopped(rt, "c", "r1")
    assert await _ids(rt) == ["c", "tidelog/ctl/r1", "tidelog/run/r1"]
    assert [info.id for info in await rt.list_sessions()] == ["c"]
    assert list(await control_sessions(rt)) == ["r1"]
    assert await conversation_sessions(rt, "c") == ["tidelog/run/r1", "tidelog/ctl/r1"]
    await checkpoints(rt).delete("r1")
    assert await _ids(rt) == ["c"]


async def test_prune_deletes_control_sessions_with_their_runs_and_leftovers(
    rt: Runtime,
) -> None:
    """An old conversation goes after its checkpoint and that run's control session; a
    control session whose checkpoint is gone (a delete stopped midway) goes at any
    prune, a dry run only names it."""
    await _stopped(rt, "old", "o1")
    await _stopped(rt, "kept", "k1")
    await rt.delete("tidelog/run/k1")  # as a delete that stopped after the checkpoint
    now = await _later(rt)
    dry = await prune(rt, completed_checkpoints=True, dry_run=True)
    assert [(a.session_id, a.deleted) for a in dry.actions] == [("tidelog/ctl/k1", False)]
    assert "whose checkpoint is gone" in dry.actions[0].reason
    assert "tidelog/ctl/k1" in await _ids(rt)
    report = await prune(rt, older_than=5, now=now, held={"kept"})
    assert report.deleted == ["tidelog/ctl/k1", "tidelog/run/o1", "tidelog/ctl/o1", "old"]
    assert [a.session_id for a in report.kept] == ["kept"]
    assert await _ids(rt) == ["kept"]


async def test_a_live_runs_control_session_is_kept(
    rt: Runtime, make_runtime: RuntimeFactory
) -> None:
    """While a host (another runtime) holds a run -- one with a checkpoint, or a fresh
    one not saved yet whose old control session is left -- neither delete_owned nor
    prune removes its control session, and a stop still reaches it."""
    await _stopped(rt, "c", "live")
    await _stopped(rt, "c", "fresh")
    await checkpoints(rt).delete("fresh")
    await _stopped(rt, "c", "fresh")  # its control session again ...
    await rt.delete("tidelog/run/fresh")  # ... left without its checkpoint
    async with make_runtime() as host:
        async with checkpoints(host).claim("live"), checkpoints(host).claim("fresh"):
            for sid in ("tidelog/ctl/live", "tidelog/ctl/fresh", "tidelog/run/live"):
                with pytest.raises(SessionOwnedError):
                    await delete_owned(rt, sid)
            report = await prune(rt, older_than=0, now=await _later(rt))
            kept = {a.session_id: a.kept for a in report.kept}
            assert kept == {  # (the claim of "fresh" is its run session: ctl/fresh stays)
                "tidelog/run/live": "a live writer holds it",
                "tidelog/ctl/live": "its run's checkpoint 'tidelog/run/live' is kept",
            }
            assert report.deleted == ["c"]
            before = await rt.stat("tidelog/ctl/live")
            assert before is not None
            assert (await request_stop(rt, "live", by="ops", reason="now")).requested
            after = await rt.stat("tidelog/ctl/live")
            assert after is not None
            assert after.head == before.head + 1
        assert await _ids(rt) == ["tidelog/ctl/fresh", "tidelog/ctl/live", "tidelog/run/live"]


async def test_a_control_session_of_a_saved_run_is_not_deleted(rt: Runtime) -> None:
    """delete_owned of a control session whose run has a saved checkpoint (it was made
    again) deletes nothing and says so."""
    await _stopped(rt, "c", "r1")
    assert await delete_owned(rt, "tidelog/ctl/r1") is False
    assert "tidelog/ctl/r1" in await _ids(rt)
    assert await delete_owned(rt, "tidelog/ctl/nothing") is False


class _FailingAt(FlakyMemoryStore):
    """Fails the ``at``-th write batch from when it is armed (then works again)."""

    def __init__(self) -> None:
        super().__init__()
        self.at: int | None = None

    def write_batch(self, ops: Sequence[WriteOp], *, sync: bool = False) -> list[BatchResult]:
        if self.at is not None:
            self.at -= 1
            if self.at == 0:
                self.fail_next = 1
        return super().write_batch(ops, sync=sync)


@pytest.mark.parametrize("at", range(1, 9))
async def test_a_prune_failing_midway_leaves_no_user_session_without_its_runs(at: int) -> None:
    """The store fails one batch of a prune (each in turn): wherever it fails, a
    conversation that is gone has no checkpoint nor control session left, and the next
    prune leaves exactly the sessions kept, each once."""
    store = _FailingAt()
    async with open_runtime(store) as rt:
        await _stopped(rt, "old", "o1")
        await _run(rt, "old", "o2", "completed")
        await _stopped(rt, "keep", "k1")
        now = await _later(rt)
        store.at = at
        with contextlib.suppress(TidelogError):
            await prune(rt, older_than=5, now=now, held={"keep"})
        store.at = None
        await rt.flush()  # what was queued when the batch failed lands now
        ids = await _ids(rt)
        if "old" not in ids:
            assert not [i for i in ids if i.endswith(("/o1", "/o2"))]
        await prune(rt, older_than=5, now=now, held={"keep"})
        assert await _ids(rt) == ["keep", "tidelog/ctl/k1", "tidelog/run/k1"]
        stops = await rt.read("tidelog/ctl/k1")
        assert [e.kind for e in stops] == ["tidelog.stop"]
