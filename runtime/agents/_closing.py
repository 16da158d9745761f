"""Closing an interrupted run into its conversation, as lovia (the Python agent framework
whose Session/Checkpoint/Runner design this layer follows) lets a caller do after a stop.

A stopped run (``status="interrupted"``) keeps every completed turn in its checkpoint and
can be resumed later. The caller may instead end it where it stopped: its transcript goes
into the conversation's history as one completed segment, the tool calls that have no
result dropped (so every call in history has its result), and its checkpoint is marked
completed -- one transaction when both live on the same runtime (:func:`complete_run`).
"""

from __future__ import annotations

import time

import attrs

from runtime import JSON, InvalidArgumentError

from ._checkpoints import Checkpointer, RunSnapshot, check_run_id
from ._completion import complete_run
from ._errors import RunNotFoundError
from ._history import History
from ._transcript import drop_dangling_tool_calls

__all__ = ["close_interrupted_run"]


async def close_interrupted_run(
    checkpointer: Checkpointer,
    history: History,
    run_id: str,
    *,
    meta: dict[str, JSON] | None = None,
) -> RunSnapshot:
    """End the interrupted run ``run_id`` where it stopped: append its transcript (calls
    without a result dropped) to its conversation's history as a completed segment with
    ``meta`` (default: ``{"interrupted": <the stop's error record>}``), and save its
    checkpoint as completed (output ``None``: the run gave none).
    Returns the closed run's snapshot. A replay of the run afterwards returns that stored
    result without calling the model; resuming it is no longer possible.

    Safe to call again: a run already closed is answered with its snapshot and nothing
    is written (the history append is idempotent per run).

    Cancellation: as :func:`complete_run` (on one runtime, all or nothing).

    Raises: :class:`RunNotFoundError` (no checkpoint), :class:`~stores.InvalidArgumentError`
    (the run is not interrupted -- running, awaiting approval, failed or completed by its
    own loop --, or belongs to no conversation), the write errors of the two appends (an
    exception tells, as for any append, whether the write was accepted).
    """
    check_run_id(run_id)
    snap = await checkpointer.load(run_id)
    if snap is None:
        raise RunNotFoundError(run_id)
    head = snap.head
    if (
        head.status == "completed"
        and head.session_id is not None
        and await history.has_run(head.session_id, run_id)
    ):
        return snap  # closed already (or completed): nothing to do twice
    if head.status != "interrupted":
        raise InvalidArgumentError(
            f"run {run_id!r} is {head.status}, not interrupted: only a stopped run is closed"
        )
    if head.session_id is None:
        raise InvalidArgumentError(
            f"run {run_id!r} belongs to no conversation: there is no history to close it into"
        )
    closed = attrs.evolve(head, status="completed", output=None, error=None, updated_at=time.time())
    segment_meta: dict[str, JSON] = {"interrupted": head.error} if meta is None else meta
    await complete_run(
        checkpointer,
        history,
        session_id=head.session_id,
        run_id=run_id,
        new_entries=(),
        head=closed,
        run_entries=drop_dangling_tool_calls(snap.entries),
        meta=segment_meta,
    )
    return RunSnapshot(run_id, snap.entries, closed)
