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

from runtime import JSON, InvalidArgumentError
from stores import prepare_events

from ._checkpoints import Checkpointer, RunHead, check_run_id, checkpoint_events
from ._history import History, check_entries, check_meta, segment_events
from ._home import SessionHome, optimistic
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
    (that is how a replay repairs the crash window of the second form), unless it already
    has this very head: so a call resent after :class:`~stores.CommitPendingError` stores
    nothing twice.

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
    run_home = checkpointer.home(run_id)
    conversation_home = history.home(session_id)
    if (
        run_home is not None
        and conversation_home is not None
        and run_home.runtime is conversation_home.runtime
    ):
        await _complete_atomically(
            checkpointer,
            history,
            run_home,
            conversation_home,
            run_id=run_id,
            new_entries=new_entries,
            head=head,
            run_entries=run_entries,
            meta=meta,
        )
        on_saved()
        return
    await checkpointer.append(run_id, new_entries, head)
    on_saved()
    await history.append(session_id, run_entries, run_id=run_id, meta=meta)


async def _complete_atomically(
    checkpointer: Checkpointer,
    history: History,
    run_home: SessionHome,
    conversation_home: SessionHome,
    *,
    run_id: str,
    new_entries: Sequence[Entry],
    head: RunHead,
    run_entries: Sequence[Entry],
    meta: dict[str, JSON] | None,
) -> None:
    cp_events = checkpoint_events(run_id, new_entries, head)
    segment = segment_events(check_entries(run_entries), run_id, check_meta(meta))
    # The opens below may create the sessions: refuse bad data (a segment past the batch
    # limit...) before them. The append encodes again: the runtime takes no prepared events.
    prepare_events(cp_events)
    prepare_events(segment)
    session_id = conversation_home.session_id
    async with run_home.open_writer() as run, conversation_home.open_writer() as conversation:

        async def attempt(conversation_head: int) -> None:
            if await history.has_run(session_id, run_id):
                # A replay repairing the checkpoint -- or this same completion resent
                # after CommitPendingError, whose group landed: then nothing is missing.
                stored = await checkpointer.load(run_id)
                if stored is None or stored.head != head:
                    await checkpointer.append(run_id, new_entries, head)
                return
            await run_home.runtime.append_atomic(
                {run: cp_events, conversation: segment},
                expected_heads={conversation: conversation_head},
            )

        await optimistic(conversation, attempt)
