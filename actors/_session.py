"""SessionActor: the single owner of one session's write side in this process.

The actor assigns sequence numbers, keeps the queue of accepted but not yet committed
writes in order, and tells each waiter what became of *its* write. Commits themselves are
done by the store-wide :class:`~actors._writer.GroupCommitWriter`, which takes one op per
actor per batch, so the actor's writes are serialised and applied in order while many
actors share one transaction. Its lifetime (start, lease, eviction) is the supervisor's.

The actor is one object in three layers, a module each: its state and life
(:class:`~actors._actor_life.ActorLife`: start, stop, die, parking its waiters), the
writer's side (:class:`~actors._actor_commits.ActorCommits`: the op of a batch and its
result), and here, on top, the acceptance of writes and the waiting for them. Atomic
appends to several sessions are :class:`~actors.GroupWrite` (:mod:`actors._group`).

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
from collections.abc import Sequence
from typing import TYPE_CHECKING

import trio

from stores import (
    CommitPendingError,
    ConflictError,
    InvalidArgumentError,
    PreparedEvent,
    TidelogError,
)

from ._actor_commits import ActorCommits
from ._pending import PendingWrite, WriteKind

if TYPE_CHECKING:
    from ._group import GroupWrite

__all__ = ["SessionActor"]


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


class SessionActor(ActorCommits):
    """Write-side state of one session. Created and run by the supervisor."""

    # -- accepting writes ----------------------------------------------------------------

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

    def accept_group_part(
        self, events: tuple[PreparedEvent, ...], group: GroupWrite
    ) -> PendingWrite:
        """Queue this session's part of ``group`` behind every earlier write and assign
        its seqs: for :meth:`GroupWrite.enqueue`, which checked every part first."""
        return self._accept("group", events, group=group)

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
        if not self.accepting:
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
            if not urgent:
                # No submit: the tail was submitted when it was accepted and no batch has
                # taken it since (a taken write is in flight, and joins nothing), so the
                # writer holds this actor among its marked ones and has been woken.
                return prev + 1, prev + 1
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
        if not self.accepting:
            self.check_writable()
        if expected_head is not None and expected_head != self.accepted_head:
            raise ConflictError(self.session_id, expected_head, self.accepted_head)
        if not events:
            await trio.lowlevel.checkpoint()
            return self.accepted_head
        writer = self.writer
        leads = writer.inline and writer.lead(self)  # (no call where none can lead)
        if leads:
            # writer.lead_yield(self), inline (one coroutine fewer on every awaited append)
            try:
                await trio.lowlevel.checkpoint()
            except BaseException:
                writer.lead_done()
                raise
            leads = writer.lead_resume(self)
        if leads:
            # This task makes the batch: accept after the yield (checked again, things
            # may have changed meanwhile), then commit it at once.
            try:
                if not self.accepting:
                    self.check_writable()
                if expected_head is not None and expected_head != self.accepted_head:
                    raise ConflictError(self.session_id, expected_head, self.accepted_head)
            except BaseException:
                writer.lead_done()
                raise
            prev = self.accepted_head  # _accept("append", events), inline
            write = PendingWrite("append", prev, prev + 1, prev + len(events), tuple(events))
            self.accepted_head = write.last
            self._pending.append(write)
            write.watchers += 1
            try:
                await writer.commit_batch(True)  # lead=True
            finally:
                write.watchers -= 1
            if not write.done:  # failed, dropped, or handed over to the writer task
                await self.wait_write(write, 0)
            return write.last
        await trio.lowlevel.checkpoint_if_cancelled()  # pending: nothing is accepted
        # _accept("append", events) and wait_write(write, 0, submit=True), inline: every
        # awaited append that does not lead comes here.
        prev = self.accepted_head
        write = PendingWrite("append", prev, prev + 1, prev + len(events), tuple(events))
        self.accepted_head = write.last
        self._pending.append(write)
        writer.submit(self, urgent=True)  # lead() said no just now: the writer task makes it
        # The first wait of wait_write(write, 0), inline; the rest (a failed or dropped
        # write) is its.
        write.watchers += 1
        try:
            await trio.lowlevel.wait_task_rescheduled(self._parking(write, True))
        except trio.Cancelled:
            await self._settle_cancelled(write)
            raise
        finally:
            write.watchers -= 1
        if not write.done:
            await self.wait_write(write, 0)
        return write.last

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
                if writer.submit_awaited(self) and await writer.lead_yield(self):
                    await writer.commit_batch(True)  # lead=True
            while not write.done:
                if write.dropped is not None:
                    write.reported = write.reported or report
                    raise write.dropped
                if write.failed_attempts > failures_before:
                    if one_attempt:
                        return
                    raise self._pending_error(write) from write.error
                await trio.lowlevel.wait_task_rescheduled(self._parking(write, report))
        except trio.Cancelled:
            if withdraw:
                await self._settle_cancelled(write)
            raise
        finally:
            write.watchers -= 1

    async def _settle_cancelled(self, write: PendingWrite) -> None:
        """A wait for ``write`` was cancelled: withdraw it if no commit attempt took it
        (it never happened), else wait, shielded, until its current attempt ended (the
        caller then raises ``Cancelled``; :attr:`accepted_head` says what became of it)."""
        if not self.withdraw(write):
            with trio.CancelScope(shield=True), contextlib.suppress(TidelogError):
                await self.wait_write(
                    write, write.failed_attempts, withdraw=False, one_attempt=True
                )

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
