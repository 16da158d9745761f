"""Completing a run: the checkpoint says "completed" and the history holds the run.

lovia (the Python agent framework whose Session/Checkpoint/Runner design this layer
follows) orders it "complete the checkpoint, then append to the session": a crash between
the two leaves a completed checkpoint whose segment is missing, repaired when the run is
replayed (the history append is idempotent). When the checkpointer and the history live on the same
tidelog runtime, tidelog closes that window: both writes commit in one transaction (an
atomic append across the two sessions), so a run is never complete in one place and
missing from the other.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack

from runtime import JSON, InvalidArgumentError

from ._checkpoints import Checkpointer, RunHead, RuntimeCheckpointer, check_run_id
from ._checkpoints import _check_append as checkpoint_events
from ._history import History
from ._runtime_history import RuntimeHistory, optimistic
from ._transcript import Entry

__all__ = ["complete_run", "finish_run"]


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

    Raises: :class:`~stores.InvalidArgumentError` (head not completed, bad entries), the
    write errors of the checkpoint and history appends.
    """
    await finish_run(
        checkpointer,
        history,
        session_id=session_id,
        run_id=run_id,
        new_entries=new_entries,
        head=head,
        run_entries=run_entries,
        meta=meta,
        on_saved=lambda: None,
    )


async def finish_run(
    checkpointer: Checkpointer,
    history: History,
    *,
    session_id: str,
    run_id: str,
    new_entries: Sequence[Entry],
    head: RunHead,
    run_entries: Sequence[Entry],
    meta: dict[str, JSON] | None,
    on_saved: Callable[[], None],
) -> None:
    """:func:`complete_run`, calling ``on_saved()`` the moment the completed checkpoint is
    saved -- so that a failure of the history step after it is known not to undo the
    run's completion (the run loop must not record such a run as failed)."""
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
        on_saved()
        return
    await checkpointer.append(run_id, new_entries, head)
    on_saved()
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
    cp_events = checkpoint_events(run_id, new_entries, head)
    segment = history.segment_events(run_entries, run_id, meta)
    async with AsyncExitStack() as stack:
        run = checkpointer.claimed_writer(run_id)
        if run is None:
            run = await stack.enter_async_context(
                runtime.open_session(
                    checkpointer.session_id(run_id),
                    header={"tidelog": "checkpoint", "run_id": run_id},
                    shared=True,
                    internal=True,
                )
            )
        conversation = await stack.enter_async_context(
            runtime.open_session(session_id, shared=True)
        )

        async def attempt(conversation_head: int) -> None:
            if await history.has_run(session_id, run_id):
                await checkpointer.append(run_id, new_entries, head)
                return
            await runtime.append_atomic(
                {run: cp_events, conversation: segment},
                expected_heads={conversation: conversation_head},
            )

        await optimistic(conversation, attempt)
