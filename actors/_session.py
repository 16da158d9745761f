"""SessionActor: the single owner of one session's write side in this process.

The actor assigns sequence numbers, keeps the queue of accepted but not yet committed
writes in order, and tells each waiter what became of *its* write. Commits themselves are
done by the store-wide :class:`~actors._writer.GroupCommitWriter`, which takes one op per
actor per batch, so the actor's writes are serialised and applied in order while many
actors share one transaction. Its lifetime (start, lease, eviction) is the supervisor's.

All methods run on the trio thread; state changes are plain attribute updates between
checkpoints, so the actor needs no lock.

The write contract (``docs/durability.md`` has it as a table):

* A call either **refuses** its write (nothing accepted: a bad argument, a stale
  ``expected_head``, a closed or broken actor -- resending is safe) or **accepts** it
  (seqs assigned, queued in order). An accepted write is never dropped silently.
* A commit attempt that fails as a whole (busy, I/O, disk full) leaves every accepted
  write queued; the writer retries with backoff, and the retried op is marked ``retry``
  so that a commit that landed although it reported an error is recognised: each event
  lands exactly once. A caller waiting on a write covered by a failed attempt gets
  :class:`~stores.CommitPendingError` (accepted -- do not resend).
* A write that will never be written -- the lease was taken over, a permanent failure,
  a drain that gave up -- is *dropped*: every waiter on it gets
  :class:`~stores.UnwrittenError` (or its subclass :class:`~stores.OwnershipLostError`)
  naming the seq range and carrying the events.
"""

from __future__ import annotations

import contextlib
import enum
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal, overload

import attrs
import trio
from trio_util import AsyncValue

from stores import (
    AppendOp,
    BatchResult,
    BrokenError,
    ClosedError,
    CommitPendingError,
    ConflictError,
    DeleteOp,
    InvalidArgumentError,
    NewEvent,
    OwnershipLostError,
    PreparedEvent,
    ReplaceOp,
    SessionNotFoundError,
    StoreError,
    TidelogError,
    TruncateOp,
    UnwrittenError,
    WriteOp,
    decode_json,
)

from ._pending import PendingWrite, WriteKind

if TYPE_CHECKING:
    from ._writer import GroupCommitWriter

__all__ = ["ActorState", "GroupWrite", "SessionActor"]

_BACKOFF_MIN = 0.05
_BACKOFF_MAX = 2.0
#: Appends queued behind each other are merged into one op up to about this many bytes
#: of event data (one op is one statement's worth of data for the store).
MERGE_BYTES = 32 * 1024 * 1024


#: A queued append grows by joined one-event appends (see :meth:`SessionActor.append_nowait`)
#: up to this many events, each of at most :data:`JOIN_CHARS` characters of data: a write
#: stays within about :data:`~stores.MAX_BATCH_BYTES` plus 32 MiB, so the ops the writer
#: merges from queued writes stay as large as they could be before.
JOIN_EVENTS = 128
JOIN_CHARS = 64 * 1024


def _joinable(tail: PendingWrite, events: Sequence[PreparedEvent]) -> bool:
    """May a one-event append join ``tail``, the queue's last write (not in flight)? Only
    a plain append that no task waits on (an awaited append, ``wait_committed``) and that
    no commit attempt covered (a failed one marks it for a resend), while small."""
    return (
        tail.kind == "append"
        and not tail.watchers
        and not tail.failed_attempts
        and len(tail.events) < JOIN_EVENTS
        and len(events[0].data_json) <= JOIN_CHARS
    )


class ActorState(enum.Enum):
    STARTING = "starting"
    RUNNING = "running"
    DRAINING = "draining"
    STOPPED = "stopped"


_RUNNING = ActorState.RUNNING  # (a module global: read for every awaited append)


class SessionActor:
    """Write-side state of one session. Created and run by the supervisor."""

    def __init__(
        self, session_id: str, owner: str, header_json: str, writer: GroupCommitWriter
    ) -> None:
        self.session_id = session_id
        self.owner = owner
        self.header_json = header_json
        self.writer = writer
        #: The lifecycle, driven by the supervisor; writes are accepted while RUNNING.
        self.state: AsyncValue[ActorState] = AsyncValue(ActorState.STARTING)
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
        #: Tasks parked in :meth:`_park`, woken by :meth:`wake_waiters` when a commit
        #: attempt covering this actor finished or it died: a batch wakes only its own.
        self._parked = trio.lowlevel.ParkingLot()
        self._parked_count = 0  # cheaper to test than the lot, every commit
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

    def stop_accepting(self, reason: str) -> None:
        """Refuse new writes from now on (``reason`` says why, in the ClosedError);
        accepted ones are still committed by the drain."""
        self._closing_reason = reason
        if self.state.value is ActorState.RUNNING:
            self.state.value = ActorState.DRAINING

    # -- accepting writes ----------------------------------------------------------------

    def check_writable(self) -> None:
        """Raise the refusal for a new write, if any (see the module doc)."""
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

    def _accept(
        self,
        kind: WriteKind,
        events: tuple[PreparedEvent, ...] = (),
        *,
        to_seq: int = 0,
        group: GroupWrite | None = None,
    ) -> PendingWrite:
        """Queue a write behind every earlier one and assign its seqs (checked by the
        caller)."""
        prev = self.accepted_head
        if kind == "append" or kind == "group":  # the usual case first
            write = PendingWrite(kind, prev, prev + 1, prev + len(events), events, group=group)
            self.accepted_head = write.last
        else:
            if kind == "truncate":
                write = PendingWrite(kind, prev, to_seq=to_seq)
            elif kind == "delete":
                write = PendingWrite(kind, prev)
            else:
                write = PendingWrite(kind, prev, to_seq + 1, to_seq + len(events), events, to_seq)
            self.accepted_head = write.head_after
        self._pending.append(write)
        return write

    def append_nowait(
        self, events: Sequence[PreparedEvent], expected_head: int | None, *, urgent: bool
    ) -> tuple[int, int]:
        """Accept an append (the caller validated ``events``); return its seq range
        ``(first, last)``, which is ``(head + 1, head)`` for an empty batch.

        ``expected_head`` is checked against the last *accepted* seq: this actor is the only
        writer, so that is the head every reader will see once the queue is committed.

        A one-event append joins the queue's last write when nobody waits on that write
        and no commit attempt has touched it (see :func:`_joinable`): one queued write
        instead of one per call. Nothing observable changes: the writer merges queued
        appends into one op anyway, and a failure or a drop covers both alike.

        Raises (refused, nothing queued): :class:`~stores.ConflictError`,
        :class:`~stores.ClosedError`, :class:`~stores.BrokenError`,
        :class:`~stores.OwnershipLostError`, :class:`~stores.SessionNotFoundError`.
        """
        self.check_writable()
        prev = self.accepted_head
        if expected_head is not None and expected_head != prev:
            raise ConflictError(self.session_id, expected_head, prev)
        if not events:
            return prev + 1, prev
        pending = self._pending
        if len(events) == 1 and len(pending) > self._in_flight and _joinable(pending[-1], events):
            tail = pending[-1]
            tail.events += (events[0],)
            tail.last = self.accepted_head = prev + 1
        else:
            self._accept("append", tuple(events))
        self.writer.submit(self, urgent=urgent)
        return prev + 1, self.accepted_head

    async def append(self, events: Sequence[PreparedEvent], expected_head: int | None) -> int:
        """Accept an awaited append and return the new head once it is committed; an
        empty batch returns the last accepted seq.

        Cancellation: all or nothing, decided the moment the cancel arrives: a write no
        batch has taken is withdrawn then and there (a cancel already pending at the
        call accepts nothing, on every path); a taken one is waited for, shielded,
        until its commit attempt ended, then ``Cancelled`` propagates -- committed, or
        (attempt failed) still accepted and queued: :attr:`accepted_head` says which.

        On a non-blocking store with an idle writer the calling task makes the batch
        (:meth:`~actors.GroupCommitWriter.lead`): it yields first, so that
        the writes of the other tasks of this scheduler round join the batch, and only
        then accepts its write, so a cancel pending at the call or arriving at the
        yield accepts nothing; the write is taken right after it is accepted.

        Raises: the refusals of :meth:`append_nowait`; then as :meth:`wait_write`.
        """
        if self._fatal is not None or self.state.value is not _RUNNING:
            self.check_writable()
        if expected_head is not None and expected_head != self.accepted_head:
            raise ConflictError(self.session_id, expected_head, self.accepted_head)
        if not events:
            await trio.lowlevel.checkpoint()
            return self.accepted_head
        writer = self.writer
        if writer.lead(self) and await writer.lead_yield():
            # This task makes the batch: accept after the yield (checked again, things
            # may have changed meanwhile), then commit it at once.
            try:
                if self._fatal is not None or self.state.value is not _RUNNING:
                    self.check_writable()
                if expected_head is not None and expected_head != self.accepted_head:
                    raise ConflictError(self.session_id, expected_head, self.accepted_head)
            except BaseException:
                writer.lead_done()
                raise
            write = self._accept_append(events)
            write.watchers += 1
            try:
                await writer.commit_batch(True)  # lead=True
            finally:
                write.watchers -= 1
            if not write.done:  # failed, dropped, or handed over to the writer task
                await self.wait_write(write, 0)
            return write.last
        await trio.lowlevel.checkpoint_if_cancelled()  # pending: nothing is accepted
        write = self._accept_append(events)
        await self.wait_write(write, 0, True)  # submit=True, positional: the hot path
        return write.last

    def _accept_append(self, events: Sequence[PreparedEvent]) -> PendingWrite:
        """``_accept("append", events)``, lean: every awaited append comes here."""
        prev = self.accepted_head
        write = PendingWrite("append", prev, prev + 1, prev + len(events), tuple(events))
        self.accepted_head = write.last
        self._pending.append(write)
        return write

    async def truncate(self, to_seq: int) -> int:
        """Accept a truncate behind every earlier write and wait for it; return how many
        committed events it removed. One that removes nothing only waits for the writes
        accepted before it (:meth:`wait_committed`). Cancellation as :meth:`append`.

        Raises: refusals as :meth:`append_nowait`, then as :meth:`wait_write`."""
        self.check_writable()
        await trio.lowlevel.checkpoint_if_cancelled()
        if to_seq >= self.accepted_head:
            await self.wait_committed()
            return 0
        write = self._accept("truncate", to_seq=to_seq)
        await self.wait_write(write, 0, submit=True)
        return write.result or 0

    async def replace(
        self, from_seq: int, events: Sequence[PreparedEvent], expected_head: int | None
    ) -> int:
        """Accept a rewrite of everything after ``from_seq`` (behind earlier writes) and
        wait for it; return the new head. Cancellation as :meth:`append`.

        Raises: :class:`~stores.InvalidArgumentError` (``from_seq`` past the accepted
        head), refusals as :meth:`append_nowait`, then as :meth:`wait_write`."""
        self.check_writable()
        if expected_head is not None and expected_head != self.accepted_head:
            raise ConflictError(self.session_id, expected_head, self.accepted_head)
        if from_seq > self.accepted_head:
            raise InvalidArgumentError(
                f"session {self.session_id!r}: from_seq {from_seq} is past the head "
                f"{self.accepted_head}"
            )
        await trio.lowlevel.checkpoint_if_cancelled()
        write = self._accept("replace", tuple(events), to_seq=from_seq)
        await self.wait_write(write, 0, submit=True)
        return write.last

    async def delete(self) -> bool:
        """Accept a delete of the whole session behind every earlier write and wait for
        it (shielded: it cannot be withdrawn once accepted); True if it existed. The actor
        dies with it: later writes raise :class:`~stores.SessionNotFoundError`."""
        self.check_writable()
        write = self._accept("delete")
        with trio.CancelScope(shield=True):
            await self.wait_write(write, 0, withdraw=False, submit=True)
        return bool(write.result)

    def withdraw(self, write: PendingWrite) -> bool:
        """Take back a write that no commit attempt has picked up yet, if nothing was
        queued after it (later writes hold seqs that depend on it). True if withdrawn."""
        pending = self._pending
        if write.done or write.dropped or not pending or pending[-1] is not write:
            return False
        if len(pending) <= self._in_flight or write.failed_attempts:
            return False  # taken by a batch, or tried before: its outcome may be "landed"
        pending.pop()
        self.accepted_head = write.prev
        return True

    # -- waiting -------------------------------------------------------------------------

    async def wait_write(
        self,
        write: PendingWrite,
        failures_before: int,
        submit: bool = False,
        *,
        withdraw: bool = True,
        one_attempt: bool = False,
        report: bool = True,
    ) -> None:
        """Wait until ``write`` is committed. ``submit``: submit it first, for the next
        batch at once -- the one path of every awaited write is accept, then this; the
        writer decides whether this task makes that batch itself
        (:meth:`~actors.GroupCommitWriter.submit_awaited`).

        Raises :class:`~stores.CommitPendingError` if a commit attempt covering it fails
        after ``failures_before`` had (it stays queued), :class:`~stores.UnwrittenError`
        (or :class:`~stores.OwnershipLostError`) if it was dropped, and
        :class:`~stores.BrokenError` if the writer stopped under it.

        Cancellation (``withdraw``): a write that no attempt took is withdrawn (it never
        happened); otherwise its current attempt is awaited, shielded, before
        ``Cancelled`` propagates. Without ``withdraw`` cancellation only stops waiting.
        ``one_attempt``: return after the first attempt's end, whatever it was.
        ``report``: an UnwrittenError raised here counts as reported to the caller (see
        :meth:`take_dropped`).
        """
        write.watchers += 1
        try:
            if submit:
                writer = self.writer
                if writer.submit_awaited(self) and await writer.lead_yield():
                    await writer.commit_batch(True)  # lead=True
            while not write.done:
                if write.dropped is not None:
                    write.reported = write.reported or report
                    raise write.dropped
                if write.failed_attempts > failures_before:
                    if one_attempt:
                        return
                    raise self._pending_error(write) from write.error
                await self._park(write, report)
        except trio.Cancelled:
            if withdraw and not self.withdraw(write):
                with trio.CancelScope(shield=True), contextlib.suppress(TidelogError):
                    await self.wait_write(
                        write, write.failed_attempts, withdraw=False, one_attempt=True
                    )
            raise
        finally:
            write.watchers -= 1

    def _pending_error(self, write: PendingWrite) -> CommitPendingError:
        if write.kind in ("append", "replace", "group"):
            return CommitPendingError(self.session_id, write.first, write.last, write.kind)
        return CommitPendingError(self.session_id, 1, 0, write.kind)

    async def wait_committed(self, *, report: bool = True) -> None:
        """Wait until every write accepted before the call is committed; a checkpoint.
        Someone waits for them now, so they no longer wait for the batching window.
        Cancellation only stops the waiting. ``report=False``: an UnwrittenError raised
        here does not count as reported to a caller (the supervisor's own drain, which
        hands dropped writes to whoever closes the writer).

        Raises :class:`~stores.CommitPendingError` (covering everything queued) if an
        attempt fails meanwhile, :class:`~stores.UnwrittenError` if they were dropped,
        :class:`~stores.BrokenError` if the writer stopped."""
        if not self._pending:
            await trio.lowlevel.checkpoint()
            return
        await trio.lowlevel.checkpoint_if_cancelled()
        last = self._pending[-1]
        first = self._pending[0]
        try:
            await self.wait_write(
                last, last.failed_attempts, withdraw=False, submit=True, report=report
            )
        except CommitPendingError as exc:
            raise CommitPendingError(
                self.session_id, first.first, last.head_after, "writes"
            ) from exc.__cause__

    async def _park(self, write: PendingWrite, report: bool) -> None:
        """Wait until a commit attempt covering this actor's writes finished (successfully
        or not), or it died, or the writer stopped. Cancellable.

        If the writer has stopped, ``write`` (accepted, waiting) will never be committed:
        raises :class:`~stores.UnwrittenError` for it (caused by the writer's stop)."""
        if not self.writer.running:
            write.reported = write.reported or report
            stopped = self.writer.stopped_error()
            raise self._unwritten(write.first, write.last, write.events, stopped)
        self._parked_count += 1
        try:
            await self._parked.park()
        finally:
            self._parked_count -= 1

    def wake_waiters(self) -> None:
        """Wake every task parked on this actor: a commit attempt covering it ended, it
        died, or the writer stopped (they re-check their write)."""
        if self._parked_count:
            self._parked.unpark_all()

    # -- the writer's side ---------------------------------------------------------------

    def ready(self, now: float) -> bool:
        return bool(self._pending) and self._in_flight == 0 and now >= self.retry_at

    @property
    def in_flight(self) -> bool:
        return self._in_flight > 0

    @overload
    def take_op(self, appends_only: Literal[True]) -> AppendOp | None: ...
    @overload
    def take_op(self, appends_only: bool = False) -> WriteOp | None: ...
    def take_op(self, appends_only: bool = False) -> WriteOp | None:
        """Build this actor's op for the next batch from the front of its queue.
        ``appends_only``: only if the front is a plain append and the actor is not
        backing off (else None and nothing taken)."""
        pending = self._pending
        if not pending or self._in_flight:
            return None
        front = pending[0]
        retry = front.failed_attempts > 0
        kind = front.kind
        if kind != "append":
            if appends_only:
                return None
            self._in_flight = 1
            if kind == "truncate":
                return TruncateOp(self.session_id, front.to_seq, owner=self.owner)
            if kind == "delete":
                return DeleteOp(self.session_id, owner=self.owner)
            if kind == "replace":
                return ReplaceOp(
                    self.session_id,
                    front.to_seq,
                    front.events,
                    expected_head=self.committed_head,
                    owner=self.owner,
                    retry=retry,
                )
            return AppendOp(  # a group's member
                self.session_id,
                front.events,
                expected_head=self.committed_head,
                owner=self.owner,
                header_json=self.header_json,
                retry=retry,
            )
        if appends_only and self.retry_at:
            return None
        if len(pending) == 1:  # the usual case: one awaited append
            events: tuple[PreparedEvent, ...] = front.events
            count = 1
        else:
            merged: list[PreparedEvent] = []
            size = 0
            count = 0
            for write in pending:
                if write.kind != "append" or (count and size > MERGE_BYTES):
                    break
                merged.extend(write.events)
                size += sum(len(event.data_json) for event in write.events)
                count += 1
            events = tuple(merged)
        self._in_flight = count
        # (expected_head, owner, header_json, retry: positional, cheaper on this hot path)
        return AppendOp(
            self.session_id, events, self.committed_head, self.owner, self.header_json, retry
        )

    def commit_done(self, result: BatchResult) -> bool:
        """Apply one op's result (writes still queued are submitted for the next batch).
        Returns True if the session's committed data changed."""
        count = self._in_flight
        self._in_flight = 0
        if isinstance(result, TidelogError):
            if isinstance(result, StoreError):
                # transient: retried with backoff
                self.commit_failed(result, trio.current_time())
            elif isinstance(result, InvalidArgumentError):
                self._refuse_from_front(result)  # this write can never land; others can
            else:
                self.die(result)  # lost lease, foreign write: retrying cannot help
            return False
        pending = self._pending
        front = last = pending.popleft()
        front.done = True
        front.result = result
        if count > 1:  # appends merged into one op
            for _ in range(count - 1):
                last = pending.popleft()
                last.done = True
                last.result = result
        kind = front.kind
        if kind == "append":  # the usual case: head_after, without the property call
            self.committed_head = last.last
        elif kind == "delete":
            self.committed_head = 0
            self.die(SessionNotFoundError(self.session_id))
        else:
            self.committed_head = last.head_after
        if self._backoff:
            self._backoff = 0.0
            self.retry_at = 0.0
        if pending:
            self.writer.submit(self, urgent=True)
        if self._parked_count:
            self.wake_waiters()
        return True

    def commit_failed(self, error: TidelogError, now: float) -> None:
        """A commit attempt covering this actor's op failed as a whole; keep the queue.
        Every queued write waits behind the failed one, so each counts the attempt."""
        self._in_flight = 0
        for write in self._pending:
            write.failed_attempts += 1
            write.error = error
        self._backoff = min(_BACKOFF_MAX, max(_BACKOFF_MIN, self._backoff * 2))
        self.retry_at = now + self._backoff
        self.writer.submit(self, urgent=False)
        self.wake_waiters()

    @property
    def backoff(self) -> float:
        """Seconds the next retry waits (0 when the last attempt succeeded)."""
        return self._backoff

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

    def _refuse_from_front(self, error: TidelogError) -> None:
        """The store refused the front write for good (e.g. too large for the backend):
        drop it and every write queued after it (their seqs depend on it); the actor
        stays usable from the committed head on."""
        self.drop_pending(error)
        self._backoff = 0.0
        self.retry_at = 0.0

    def die(self, error: TidelogError) -> None:
        """Make the actor unusable: drop the queue (never written) and fail every waiter."""
        if self._fatal is None:
            self._fatal = error
        self.drop_pending(error)
        self.writer.notify_progress()


@attrs.define(eq=False)
class GroupWrite:
    """Writes to several sessions that commit together or not at all (one GroupOp).

    Each member actor holds its part as a ``"group"`` :class:`~actors.PendingWrite`; the
    writer takes the group when it is at the front of every member's queue."""

    members: list[tuple[SessionActor, PendingWrite]] = attrs.Factory(list)

    @classmethod
    def enqueue(
        cls, parts: Sequence[tuple[SessionActor, Sequence[PreparedEvent], int | None]]
    ) -> GroupWrite:
        """Accept appends to several sessions as one unit (``(actor, events,
        expected_head)`` each; all actors distinct). All or nothing: if any part is
        refused, nothing is accepted.

        Raises: :class:`~stores.InvalidArgumentError` (a session named twice, no parts),
        :class:`~stores.ConflictError`, and the refusals of :meth:`SessionActor.append_nowait`.
        """
        if not parts:
            raise InvalidArgumentError("an atomic append needs at least one session")
        if len({id(actor) for actor, _, _ in parts}) != len(parts):
            raise InvalidArgumentError("an atomic append names one session twice")
        for actor, _, expected_head in parts:
            actor.check_writable()
            if expected_head is not None and expected_head != actor.accepted_head:
                raise ConflictError(actor.session_id, expected_head, actor.accepted_head)
        group = cls()
        for actor, events, _ in parts:
            write = actor._accept("group", tuple(events), group=group)
            group.members.append((actor, write))
        for actor, _, _ in parts:
            actor.writer.submit(actor, urgent=True)
        return group

    def ready(self, now: float) -> bool:
        """True when the group is at the front of every member's queue, none in flight."""
        return all(actor.ready(now) and actor.front is write for actor, write in self.members)

    async def wait(self) -> list[int]:
        """Wait for the group's commit; return each member's new head. Shield it: a
        group cannot be withdrawn once accepted.

        Raises :class:`~stores.CommitPendingError` (the group stays queued) or
        :class:`~stores.UnwrittenError` for the first member that reports it."""
        for actor, write in self.members:
            await actor.wait_write(write, 0, withdraw=False)
        return [write.last for _, write in self.members]
