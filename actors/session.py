"""SessionActor: the single owner of one session's write side in this process.

The actor holds the session's lease, assigns sequence numbers, keeps the queue of accepted
but not yet committed writes in order, and answers "is my write committed / durable yet?".
Commits themselves are done by the store-wide :class:`~actors.writer.GroupCommitWriter`,
which takes one op per actor per batch, so the actor's writes are serialised and applied in
order while many actors share one transaction.

All methods run on the trio thread; state changes are plain attribute updates between
checkpoints, so the actor needs no lock.

Failure model:

* A transient store failure (busy, I/O, disk full) leaves the queue intact; the writer
  retries it with backoff. Every waiter whose write was not committed gets the error; if no
  waiter saw it, the next ``append``/``flush`` raises it once. When the store recovers each
  queued event lands exactly once (ops carry ``expected_head``; an op that landed although
  its commit reported an error is recognised by the head it left).
* A lost lease, a foreign write under our feet, or the session being deleted is *fatal*:
  the queue is dropped (fenced writes are never written) and every later call raises.
"""

from __future__ import annotations

import contextlib
import enum
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs
import trio

from stores import (
    AppendOp,
    BatchResult,
    ClosedError,
    ConflictError,
    DeleteOp,
    InvalidArgumentError,
    PreparedEvent,
    ReplaceOp,
    StoreError,
    TidelogError,
    TruncateOp,
    WriteOp,
)

if TYPE_CHECKING:
    from .writer import GroupCommitWriter

__all__ = ["ActorState", "GroupWrite", "PendingWrite", "SessionActor"]

_BACKOFF_MIN = 0.05
_BACKOFF_MAX = 2.0


class ActorState(enum.Enum):
    STARTING = "starting"
    RUNNING = "running"
    DRAINING = "draining"
    STOPPED = "stopped"


@attrs.define(eq=False)
class PendingWrite:
    """One accepted write waiting for its commit: an append (seqs ``first..last``), a
    truncate to ``to_seq``, a replace of everything after ``to_seq`` by ``events``, a
    delete, or this session's part of an all-or-nothing :class:`GroupWrite`."""

    kind: str
    prev: int
    first: int = 0
    last: int = 0
    events: tuple[PreparedEvent, ...] = ()
    to_seq: int = 0
    result: int | None = None
    done: bool = False
    group: GroupWrite | None = None


@attrs.define(eq=False)
class GroupWrite:
    """Appends to several sessions that commit together or not at all (one GroupOp).

    Each member actor holds its part as a ``"group"`` :class:`PendingWrite`; the writer
    takes the group when it is at the front of every member's queue."""

    members: list[tuple[SessionActor, PendingWrite]] = attrs.Factory(list)

    @classmethod
    def enqueue(cls, parts: Sequence[tuple[SessionActor, Sequence[PreparedEvent]]]) -> GroupWrite:
        """Accept appends to several sessions as one unit (all actors must be distinct)."""
        if len({id(actor) for actor, _ in parts}) != len(parts):
            raise ValueError("a group write names one session twice")
        for actor, _ in parts:
            actor.check_writable()
        group = cls()
        for actor, events in parts:
            write = PendingWrite(
                "group",
                actor.assigned,
                actor.assigned + 1,
                actor.assigned + len(events),
                tuple(events),
                group=group,
            )
            actor.assigned = write.last
            actor.pending.append(write)
            group.members.append((actor, write))
        for actor, _ in parts:
            actor.writer.submit(actor, urgent=True)
        return group

    def ready(self, now: float) -> bool:
        """True when the group is at the front of every member's queue, none in flight."""
        return all(actor.ready(now) and actor.pending[0] is write for actor, write in self.members)

    async def wait_done(self, failures_before: dict[SessionActor, int]) -> None:
        """Wait for the group's commit (raises as :meth:`SessionActor.wait_done`; the
        error counts as seen for every member, since they failed as one)."""
        try:
            for actor, write in self.members:
                await actor.wait_done(write, failures_before.get(actor, actor.failures))
        except TidelogError:
            for actor, _ in self.members:
                actor.fault_reported = True
            raise


@attrs.define(eq=False)
class SessionActor:
    """Write-side state of one session. Created and run by the supervisor."""

    session_id: str
    owner: str
    header_json: str
    writer: GroupCommitWriter
    state: ActorState = ActorState.STARTING
    #: Last seq accepted (assigned), committed, as known to this actor.
    assigned: int = 0
    committed: int = 0
    pending: deque[PendingWrite] = attrs.Factory(deque)
    in_flight: int = 0
    fault: TidelogError | None = None
    fault_reported: bool = True
    fatal: TidelogError | None = None
    failures: int = 0
    retry_at: float = 0.0
    backoff: float = 0.0
    #: Attachments: the explicit writer handle (at most one) and internal users.
    handle_open: bool = False
    users: int = 0
    last_used: float = 0.0
    started: trio.Event = attrs.Factory(trio.Event)
    stopped: trio.Event = attrs.Factory(trio.Event)
    wake: trio.Event = attrs.Factory(trio.Event)
    start_error: BaseException | None = None
    stop_requested: bool = False
    created: bool = False
    #: Tasks parked in :meth:`wait_progress`, woken by :meth:`notify` when a commit
    #: attempt covering this actor finished or it died: a batch wakes only its waiters.
    parked: list[trio.lowlevel.Task] = attrs.Factory(list)

    # -- accepting writes --------------------------------------------------------------

    def check_writable(self) -> None:
        """Raise the fatal error, or the transient fault nobody has seen yet (once)."""
        if self.fatal is not None:
            raise self.fatal
        if self.state is not ActorState.RUNNING:
            raise ClosedError(f"session {self.session_id!r}: its actor is shutting down")
        if self.fault is not None and not self.fault_reported:
            self.fault_reported = True
            raise self.fault

    def enqueue_append(
        self, events: Sequence[PreparedEvent], expected_head: int | None, *, urgent: bool
    ) -> PendingWrite | None:
        """Accept an append (the caller validated ``events``); ``None`` for an empty batch.

        ``expected_head`` is checked against the last *accepted* seq: this actor is the only
        writer, so that is the head every reader will see once the queue is committed.
        """
        self.check_writable()
        if expected_head is not None and expected_head != self.assigned:
            raise ConflictError(self.session_id, expected_head, self.assigned)
        if not events:
            return None
        write = PendingWrite(
            "append", self.assigned, self.assigned + 1, self.assigned + len(events), tuple(events)
        )
        self.assigned = write.last
        self.pending.append(write)
        self.writer.submit(self, urgent=urgent)
        return write

    def enqueue_truncate(self, to_seq: int) -> PendingWrite | None:
        """Accept a truncate behind every earlier write; ``None`` if it removes nothing."""
        self.check_writable()
        if to_seq >= self.assigned:
            return None
        write = PendingWrite("truncate", self.assigned, to_seq=to_seq)
        self.assigned = to_seq
        self.pending.append(write)
        self.writer.submit(self, urgent=True)
        return write

    def enqueue_replace(self, from_seq: int, events: Sequence[PreparedEvent]) -> PendingWrite:
        """Accept a rewrite of everything after ``from_seq`` (behind earlier writes)."""
        self.check_writable()
        if from_seq > self.assigned:
            raise InvalidArgumentError(
                f"session {self.session_id!r}: from_seq {from_seq} is past the head {self.assigned}"
            )
        write = PendingWrite(
            "replace",
            self.assigned,
            from_seq + 1,
            from_seq + len(events),
            tuple(events),
            to_seq=from_seq,
        )
        self.assigned = write.last
        self.pending.append(write)
        self.writer.submit(self, urgent=True)
        return write

    def enqueue_delete(self) -> PendingWrite:
        """Accept a delete of the whole session behind every earlier write."""
        self.check_writable()
        write = PendingWrite("delete", self.assigned)
        self.assigned = 0
        self.pending.append(write)
        self.writer.submit(self, urgent=True)
        return write

    def withdraw(self, write: PendingWrite) -> bool:
        """Take back a write that no commit has picked up yet, if nothing was queued after
        it (later writes hold seqs that depend on it). True if withdrawn."""
        if write.done or not self.pending or self.pending[-1] is not write:
            return False
        if len(self.pending) <= self.in_flight:
            return False
        self.pending.pop()
        self.assigned = write.prev
        return True

    # -- waiting -----------------------------------------------------------------------

    async def wait_done(self, write: PendingWrite, failures_before: int) -> None:
        """Wait until ``write`` is committed; raise if a commit attempt covering it failed
        (the write stays queued unless the error is fatal) or the actor died."""
        while not write.done:
            if self.fatal is not None:
                raise self.fatal
            if self.failures > failures_before and self.fault is not None:
                self.fault_reported = True
                raise self.fault
            await self.wait_progress()

    async def wait_progress(self) -> None:
        """Wait until a commit attempt covering this actor's writes finished (successfully
        or not), the actor died, or the writer stopped. Cancellable.

        Raises :class:`~stores.ClosedError` if the writer is not running."""
        if not self.writer.running:
            raise ClosedError("the runtime's writer has stopped")
        task = trio.lowlevel.current_task()
        parked = self.parked
        parked.append(task)

        def abort(_: object) -> trio.lowlevel.Abort:
            parked.remove(task)  # still parked: notify() would have swapped the list
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)

    def notify(self) -> None:
        """Wake every task parked in :meth:`wait_progress`."""
        parked = self.parked
        if parked:
            self.parked = []
            for task in parked:
                trio.lowlevel.reschedule(task)

    async def append(self, events: Sequence[PreparedEvent], expected_head: int | None) -> int:
        """Accept an awaited append (see :meth:`enqueue_append`) and return the new head
        once it is committed; an empty batch returns the last accepted seq.

        Cancellation: all or nothing, as :meth:`wait_write`, decided the moment the
        cancel arrives: a write no batch has taken is withdrawn then and there (so a
        cancel already pending at the call always withdraws it); a taken one is waited
        for, shielded, before ``Cancelled`` propagates. Raises as :meth:`enqueue_append`
        and :meth:`wait_done`.
        """
        failures = self.failures
        write = self.enqueue_append(events, expected_head, urgent=True)
        if write is None:
            await trio.lowlevel.checkpoint()
            return self.assigned
        if self.writer.running:
            # The usual case, without the general wait loop: park once; the batch that
            # commits the write wakes this task (only a failure leaves it not done).
            task = trio.lowlevel.current_task()
            parked = self.parked
            parked.append(task)
            taken_when_cancelled = False

            def abort(_: object) -> trio.lowlevel.Abort:
                nonlocal taken_when_cancelled
                if self.withdraw(write):  # no batch took it: it never happened
                    parked.remove(task)  # still parked: notify() would have swapped it
                    return trio.lowlevel.Abort.SUCCEEDED
                taken_when_cancelled = True  # stay parked until its attempt ends
                return trio.lowlevel.Abort.FAILED

            await trio.lowlevel.wait_task_rescheduled(abort)
            if taken_when_cancelled:
                with trio.CancelScope(shield=True), contextlib.suppress(TidelogError):
                    # A failure leaves it queued for retry (or fenced): the head says which.
                    await self.wait_done(write, failures)
                await trio.lowlevel.checkpoint()  # raises the Cancelled the abort deferred
            if write.done:
                return write.last
        await self.wait_write(write, failures)
        return write.last

    async def wait_write(self, write: PendingWrite, failures_before: int) -> None:
        """Wait for ``write``'s commit, all or nothing under cancellation: if cancelled
        before a batch took it (and nothing was queued behind it) it is withdrawn; else
        its commit is awaited, shielded, before ``Cancelled`` propagates. Raises as
        :meth:`wait_done`."""
        try:
            await self.wait_done(write, failures_before)
        except trio.Cancelled:
            if not self.withdraw(write):
                with trio.CancelScope(shield=True), contextlib.suppress(TidelogError):
                    # A failure leaves it queued for retry (or fenced): the head says which.
                    await self.wait_done(write, failures_before)
            raise

    async def wait_committed(self, target: int, failures_before: int) -> None:
        """Wait until every write accepted up to now is committed (see :meth:`wait_done`).

        Someone waits for them now, so they no longer wait for the batching window."""
        last = self.pending[-1] if self.pending else None
        if last is not None:
            self.writer.submit(self, urgent=True)
            await self.wait_done(last, failures_before)
        elif self.fatal is not None:
            raise self.fatal

    # -- the writer's side -------------------------------------------------------------

    def ready(self, now: float) -> bool:
        return bool(self.pending) and self.in_flight == 0 and now >= self.retry_at

    def take_op(self) -> WriteOp | None:
        """Build this actor's op for the next batch from the front of its queue."""
        if not self.pending or self.in_flight:
            return None
        front = self.pending[0]
        if front.kind != "append":
            self.in_flight = 1
        if front.kind == "truncate":
            return TruncateOp(self.session_id, front.to_seq, owner=self.owner)
        if front.kind == "delete":
            return DeleteOp(self.session_id, owner=self.owner)
        if front.kind == "replace":
            return ReplaceOp(
                self.session_id,
                front.to_seq,
                front.events,
                expected_head=self.committed,
                owner=self.owner,
            )
        if front.kind == "group":
            return AppendOp(
                self.session_id,
                front.events,
                expected_head=self.committed,
                owner=self.owner,
                header_json=self.header_json,
                retry=self.fault is not None,
            )
        if len(self.pending) == 1:  # the usual case: one awaited append
            events: tuple[PreparedEvent, ...] = front.events
            count = 1
        else:
            merged: list[PreparedEvent] = []
            count = 0
            for write in self.pending:
                if write.kind != "append":
                    break
                merged.extend(write.events)
                count += 1
            events = tuple(merged)
        self.in_flight = count
        return AppendOp(
            self.session_id,
            events,
            expected_head=self.committed,
            owner=self.owner,
            header_json=self.header_json,
            retry=self.fault is not None,
        )

    def commit_done(self, result: BatchResult, now: float) -> bool:
        """Apply one op's result. Returns True if the session's committed data changed."""
        count = self.in_flight
        self.in_flight = 0
        if isinstance(result, TidelogError):  # the op's writes stay queued, in order
            if isinstance(result, StoreError):
                self.commit_failed(result, now)  # transient: retried with backoff
            else:
                self.die(result)  # lost lease, foreign write, bad op: retrying cannot help
            return False
        pending = self.pending
        front = last = pending.popleft()
        front.done = True
        front.result = result
        if count > 1:  # appends merged into one op
            for _ in range(count - 1):
                last = pending.popleft()
                last.done = True
                last.result = result
        kind = front.kind
        if kind == "truncate":
            self.committed = front.to_seq
        elif kind == "delete":
            self.committed = 0
            self.die(ClosedError(f"session {self.session_id!r} was deleted"))
        else:  # append, replace, group
            self.committed = last.last
        if self.fault is not None or self.backoff:
            self.fault = None
            self.backoff = 0.0
            self.retry_at = 0.0
        self.notify()
        return True

    def commit_failed(self, error: TidelogError, now: float) -> None:
        """A commit attempt covering this actor's op failed as a whole; keep the queue."""
        self.in_flight = 0
        self.failures += 1
        self.fault = error
        self.fault_reported = False
        self.backoff = min(_BACKOFF_MAX, max(_BACKOFF_MIN, self.backoff * 2))
        self.retry_at = now + self.backoff
        self.writer.submit(self, urgent=False)
        self.notify()

    def die(self, error: TidelogError) -> None:
        """Make the actor unusable: drop the queue (never written) and fail every waiter."""
        if self.fatal is None:
            self.fatal = error
        self.pending.clear()
        self.in_flight = 0
        self.wake.set()
        self.notify()  # waiters re-check and see ``fatal``
        self.writer.notify_progress()
