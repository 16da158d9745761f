"""Completing a run: the checkpoint says "completed" and the history holds the run.

lovia's order is "complete the checkpoint, then append to the session": a crash between
the two leaves a completed checkpoint whose segment is missing, repaired when the run is
replayed (the history append is idempotent). When the checkpointer and the history live
on the same tidelog runtime, tidelog closes that window: both writes commit in one
transaction (a group write), so a run is never complete in one place and missing from
the other.
"""

from __future__ import annotations

from collections.abc import Sequence

import trio

from actors import GroupWrite
from stores import JSON, InvalidArgumentError, prepare_events

from .checkpoints import Checkpointer, RunHead, RuntimeCheckpointer, check_run_id
from .checkpoints import _check_append as checkpoint_events
from .history import History, RuntimeHistory
from .transcript import Entry

__all__ = ["complete_run"]


async def complete_run(
    checkpointer: Checkpointer,
    history: History,
    *,
    session_id: str,
    run_id: str,
    new_entries: Sequence[Entry],
    head: RunHead,
    run_entries: Sequence[Entry],
    meta: dict[str, JSON] | None = None,
) -> None:
    """Save the final checkpoint (``new_entries`` not yet checkpointed, ``head`` with
    status ``completed``) and append the run's segment (``run_entries``, ``meta``) to the
    conversation ``session_id``.

    Same runtime: one transaction. Otherwise: checkpoint first, then the idempotent history
    append. Calling it again for a run already in the history only saves the checkpoint
    (that is how a replay repairs the crash window of the second form).

    Cancellation: the atomic form is all or nothing; the fallback may stop between its two
    steps, which a replay repairs.

    Raises: :class:`~stores.InvalidArgumentError` (head not completed, bad entries), store
    errors.
    """
    check_run_id(run_id)
    if not isinstance(head, RunHead) or head.status != "completed":
        raise InvalidArgumentError("complete_run needs a RunHead with status 'completed'")
    if (
        isinstance(checkpointer, RuntimeCheckpointer)
        and isinstance(history, RuntimeHistory)
        and checkpointer.runtime is history.runtime
    ):
        await _complete_atomically(
            checkpointer, history, session_id, run_id, new_entries, head, run_entries, meta
        )
        return
    await checkpointer.append(run_id, new_entries, head)
    await history.append(session_id, run_entries, run_id=run_id, meta=meta)


async def _complete_atomically(
    checkpointer: RuntimeCheckpointer,
    history: RuntimeHistory,
    session_id: str,
    run_id: str,
    new_entries: Sequence[Entry],
    head: RunHead,
    run_entries: Sequence[Entry],
    meta: dict[str, JSON] | None,
) -> None:
    runtime = history.runtime
    cp_events = prepare_events(checkpoint_events(run_id, new_entries, head))
    segment = history.segment_events(run_entries, run_id, meta)
    cp_header: dict[str, JSON] = {"tidelog": "checkpoint", "run_id": run_id}
    cp_session = checkpointer.session_id(run_id)
    async with (
        history.locked(session_id),
        runtime._using(session_id) as conversation,
        runtime._using(cp_session, header=cp_header) as run,
    ):
        await conversation.wait_committed(conversation.assigned, conversation.failures)
        await run.wait_committed(run.assigned, run.failures)
        if await history.has_run(session_id, run_id):
            await checkpointer.append(run_id, new_entries, head)
            return
        failures = {conversation: conversation.failures, run: run.failures}
        group = GroupWrite.enqueue([(run, cp_events), (conversation, segment)])
        with trio.CancelScope(shield=True):  # a group cannot be withdrawn once queued
            await group.wait_done(failures)
