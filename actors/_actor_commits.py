"""The writer's side of a session's actor: the op it takes for a batch, and the result.

The store-wide :class:`~actors.GroupCommitWriter` takes one op per actor per batch
(:meth:`ActorCommits.take_op`: the front of the queue, queued appends merged), so the
actor's writes are applied in order while many actors share one transaction, and hands
back each op's result (:meth:`ActorCommits.commit_done`): the writes it covered are
committed, or stay queued for a retry with backoff, or are dropped (see the write
contract in :mod:`actors._session`).
"""

from __future__ import annotations

from typing import Literal, overload

import trio

from stores import (
    AppendOp,
    BatchResult,
    DeleteOp,
    InvalidArgumentError,
    PreparedEvent,
    ReplaceOp,
    SessionNotFoundError,
    StoreError,
    TidelogError,
    TruncateOp,
    WriteOp,
)

from ._actor_life import ActorLife

__all__ = ["MERGE_BYTES", "ActorCommits"]

_BACKOFF_MIN = 0.05
_BACKOFF_MAX = 2.0
#: Appends queued behind each other are merged into one op up to about this many bytes
#: of event data (one op is one statement's worth of data for the store).
MERGE_BYTES = 32 * 1024 * 1024


class ActorCommits(ActorLife):
    """The actor's side of the group-commit writer (see the module doc)."""

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
        if type(result) is not int and isinstance(result, TidelogError):  # (ints first)
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
        parked = self._parked
        if parked:  # wake_waiters(), inline: every commit of a waited-for write comes here
            self._parked = {}
            reschedule = trio.lowlevel.reschedule
            for task in parked:
                reschedule(task)
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

    def _refuse_from_front(self, error: TidelogError) -> None:
        """The store refused the front write for good (e.g. too large for the backend):
        drop it and every write queued after it (their seqs depend on it); the actor
        stays usable from the committed head on."""
        self.drop_pending(error)
        self._backoff = 0.0
        self.retry_at = 0.0
