"""The state of a session's actor and its life: what the supervisor drives and reads.

:class:`ActorLife` holds everything a :class:`~actors.SessionActor` knows (the queue of
accepted writes, the accepted and committed heads, why it died) and the hooks of its
lifetime: the supervisor starts it once the lease is held, stops it accepting for a
drain, and it dies (drops its queue, fails every waiter) when its writes can never land.
It also parks the tasks that wait on its writes. The layers above it are the writer's
side (:mod:`actors._actor_commits`) and the acceptance of writes (:mod:`actors._session`,
which has the write contract); they are one object, split by concept: a subclass each, so
no call goes through another object.

All methods run on the trio thread; state changes are plain attribute updates between
checkpoints, so the actor needs no lock.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

import trio
from trio_util import AsyncValue

from stores import (
    BrokenError,
    ClosedError,
    NewEvent,
    OwnershipLostError,
    PreparedEvent,
    SessionNotFoundError,
    TidelogError,
    UnwrittenError,
    decode_json,
)

from ._pending import PendingWrite

if TYPE_CHECKING:
    from ._writer import GroupCommitWriter

__all__ = ["ActorLife", "ActorState"]


class ActorState(enum.Enum):
    STARTING = "starting"
    RUNNING = "running"
    DRAINING = "draining"
    STOPPED = "stopped"


class ActorLife:
    """Write-side state of one session and its lifecycle (see the module doc)."""

    def __init__(
        self, session_id: str, owner: str, header_json: str, writer: GroupCommitWriter
    ) -> None:
        self.session_id = session_id
        self.owner = owner
        self.header_json = header_json
        self.writer = writer
        #: The lifecycle, driven by the supervisor; writes are accepted while RUNNING.
        self.state: AsyncValue[ActorState] = AsyncValue(ActorState.STARTING)
        #: True while new writes are accepted: RUNNING and not dead. The hot paths test
        #: this one attribute and call :meth:`check_writable` for the refusal only when
        #: it is False; every change of ``state`` or ``_fatal`` goes through
        #: :meth:`start`, :meth:`stop_accepting`, :meth:`die` or :meth:`mark_stopped`.
        self.accepting = False
        #: Last seq accepted (assigned) and committed, as known to this actor.
        self.accepted_head = 0
        self.committed_head = 0
        self._pending: deque[PendingWrite] = deque()
        self._in_flight = 0
        self._fatal: TidelogError | None = None
        self._closing_reason: str | None = None
        self.retry_at = 0.0
        self._backoff = 0.0
        #: The number of the writer's batch that last committed writes of this actor.
        self.last_batch = 0
        #: Tasks parked by :meth:`_parking`, woken by :meth:`wake_waiters` when a commit
        #: attempt covering this actor finished or it died: a batch wakes only its own.
        #: A dict in parking order (trio's ``ParkingLot`` does the same for more: this
        #: runs for every awaited write, as ``trio.Event`` parks its tasks).
        self._parked: dict[trio.lowlevel.Task, None] = {}
        #: Accepted writes this actor dropped, not yet taken by whoever reports them.
        self._dropped: list[tuple[list[PendingWrite], TidelogError]] = []

    def __repr__(self) -> str:
        return f"<SessionActor {self.session_id!r} {self.state.value.value}>"

    # -- what the supervisor and runtime read --------------------------------------------

    @property
    def pending(self) -> bool:
        """True while accepted writes wait for their commit."""
        return bool(self._pending)

    @property
    def front(self) -> PendingWrite | None:
        """The oldest uncommitted write."""
        return self._pending[0] if self._pending else None

    @property
    def fatal(self) -> TidelogError | None:
        """Why the actor died (it accepts nothing any more), or None."""
        return self._fatal

    def queued_events(self) -> int:
        """Events accepted and not yet committed (statistics)."""
        return sum(len(w.events) for w in self._pending)

    def start(self, head: int) -> None:
        """The lease is held and the session's committed head is ``head``: accept writes."""
        self.accepted_head = self.committed_head = head
        self.state.value = ActorState.RUNNING
        self.accepting = self._fatal is None

    def stop_accepting(self, reason: str) -> None:
        """Refuse new writes from now on (``reason`` says why, in the ClosedError);
        accepted ones are still committed by the drain."""
        self._closing_reason = reason
        self.accepting = False
        if self.state.value is ActorState.RUNNING:
            self.state.value = ActorState.DRAINING

    def mark_stopped(self) -> None:
        """The supervisor is done with the actor (it never started, or it stopped)."""
        self.accepting = False
        self.state.value = ActorState.STOPPED

    def check_writable(self) -> None:
        """Raise the refusal for a new write, if any (the write contract of
        :mod:`actors._session`)."""
        fatal = self._fatal
        if fatal is not None:
            if isinstance(fatal, OwnershipLostError):
                raise OwnershipLostError(self.session_id)
            if isinstance(fatal, SessionNotFoundError):
                raise SessionNotFoundError(self.session_id)
            raise BrokenError(
                f"the writer of session {self.session_id!r} broke earlier: {fatal}"
            ) from fatal
        if self.state.value is not ActorState.RUNNING:
            raise ClosedError(
                f"session {self.session_id!r}: {self._closing_reason or 'its writer is stopping'}"
            )

    # -- waiters -------------------------------------------------------------------------

    def _parking(
        self, write: PendingWrite, report: bool
    ) -> Callable[[object], trio.lowlevel.Abort]:
        """Park the calling task on this actor until a commit attempt covering its writes
        finished (successfully or not), or it died, or the writer stopped: the caller
        awaits ``trio.lowlevel.wait_task_rescheduled`` of the abort function returned
        (cancellable: the abort unparks it), with no checkpoint in between.

        If the writer has stopped, ``write`` (accepted, waiting) will never be committed:
        raises :class:`~stores.UnwrittenError` for it (caused by the writer's stop)."""
        if not self.writer.running:
            write.reported = write.reported or report
            stopped = self.writer.stopped_error()
            raise self._unwritten(write.first, write.last, write.events, stopped)
        task = trio.lowlevel.current_task()
        parked = self._parked
        parked[task] = None

        def abort(_: object) -> trio.lowlevel.Abort:
            del parked[task]
            return trio.lowlevel.Abort.SUCCEEDED

        return abort

    def wake_waiters(self) -> None:
        """Wake every task parked on this actor: a commit attempt covering it ended, it
        died, or the writer stopped (they re-check their write)."""
        parked = self._parked
        if parked:
            self._parked = {}
            reschedule = trio.lowlevel.reschedule
            for task in parked:
                reschedule(task)

    # -- giving up writes ----------------------------------------------------------------

    def drop_pending(self, cause: TidelogError) -> None:
        """Give up every queued write: each is marked dropped (its waiters get an
        :class:`~stores.UnwrittenError` naming it, caused by ``cause``) and the accepted
        head falls back to the committed one. Those no waiter reported are reported by
        whoever closes the writer (:meth:`take_dropped`)."""
        dropped = list(self._pending)
        self._pending.clear()
        self._in_flight = 0
        self.accepted_head = self.committed_head
        for write in dropped:
            write.dropped = self._unwritten(write.first, write.last, write.events, cause)
        self.wake_waiters()
        if dropped:
            self._dropped.append((dropped, cause))

    def take_dropped(self) -> list[UnwrittenError]:
        """One error per drop, covering the dropped writes that no waiter has reported."""
        errors: list[UnwrittenError] = []
        for writes, cause in self._dropped:
            unseen = [w for w in writes if not (w.reported or w.watchers) and w.events]
            if unseen:
                events = tuple(e for w in unseen for e in w.events)
                first = min(w.first for w in unseen)
                last = max(w.last for w in unseen)
                errors.append(self._unwritten(first, last, events, cause))
        self._dropped = []
        return errors

    def _unwritten(
        self, first: int, last: int, prepared: tuple[PreparedEvent, ...], cause: TidelogError
    ) -> UnwrittenError:
        """The error naming writes that will never be written, with their events as
        :class:`~stores.NewEvent` values the caller can resend."""
        events = tuple(
            NewEvent(e.kind, decode_json(e.data_json), run_id=e.run_id) for e in prepared
        )
        if isinstance(cause, OwnershipLostError):
            return OwnershipLostError(self.session_id, first, last, events)
        error = UnwrittenError(self.session_id, first, last, events, reason=str(cause))
        error.__cause__ = cause
        return error

    def die(self, error: TidelogError) -> None:
        """Make the actor unusable: drop the queue (never written) and fail every waiter."""
        if self._fatal is None:
            self._fatal = error
        self.accepting = False
        self.drop_pending(error)
        self.writer.notify_progress()
