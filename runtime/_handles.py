"""Session handles: a writer (``SessionWriter``) and any number of readers, made by the
runtime (:func:`new_writer`, :func:`new_reader`) on its engine."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import final

import trio

from actors import GroupWrite, SessionActor
from stores import (
    ClosedError,
    InvalidArgumentError,
    NewEvent,
    PreparedEvent,
    StoredEvent,
    check_seq,
    prepare_events,
    validate_session_id,
)

from ._constructors import NoPublicConstructor
from ._engine import Engine

__all__ = ["SessionReader", "SessionWriter", "append_atomic", "new_reader", "new_writer"]


def new_writer(engine: Engine, actor: SessionActor, *, exclusive: bool) -> SessionWriter:
    """A writer handle on ``actor`` (``Runtime.open_session``)."""
    return SessionWriter._create(engine, actor, exclusive=exclusive)


def new_reader(engine: Engine, session_id: str) -> SessionReader:
    """A read handle of ``session_id`` (``Runtime.open_session(id, "read")``)."""
    return SessionReader._create(engine, session_id)


async def append_atomic(
    engine: Engine,
    appends: Mapping[SessionWriter, Sequence[NewEvent]],
    expected_heads: Mapping[SessionWriter, int] | None,
) -> dict[str, int]:
    """``Runtime.append_atomic``: one group write over the handles' actors."""
    engine.check_open()
    expected = dict(expected_heads or {})
    parts: list[tuple[SessionActor, Sequence[PreparedEvent], int | None]] = []
    for handle, events in appends.items():
        if not isinstance(handle, SessionWriter) or handle._engine is not engine:
            raise InvalidArgumentError("append_atomic takes writer handles of this runtime")
        head = expected.pop(handle, None)
        if head is not None:
            check_seq(head, "expected_heads")
        parts.append((handle._live_actor(), prepare_events(events), head))
    if expected:
        raise InvalidArgumentError("expected_heads names a handle that appends nothing")
    group = GroupWrite.enqueue(parts)
    with trio.CancelScope(shield=True):
        heads = await group.wait()
    return {actor.session_id: head for (actor, _, _), head in zip(parts, heads, strict=True)}


@final
class SessionWriter(metaclass=NoPublicConstructor):
    """A writer of one session (``rt.open_session(id)``).

    Sequence numbers are assigned when a write is *accepted*; :meth:`head` is the last
    accepted seq. What an exception from a write call means (the table is in
    ``docs/durability.md``):

    * :class:`~stores.CommitPendingError`: the call's events **were accepted** and are
      queued; their commit failed and is retried in the background. Do not resend;
      :meth:`wait_committed` or :meth:`flush` waits for them.
    * :class:`~stores.UnwrittenError` (and its subclass
      :class:`~stores.OwnershipLostError`): accepted events were dropped and will never
      be written; ``.events`` are theirs to resend.
    * any other exception (including ``Cancelled`` before the writer took the write):
      the call accepted nothing; resending is safe.

    After ``Cancelled`` from a write that was already being committed, :meth:`head`
    tells whether it was accepted.

    Its async methods are checkpoints, also when they have nothing to wait for;
    :meth:`append_nowait` is not one.
    """

    def __init__(self, engine: Engine, actor: SessionActor, *, exclusive: bool) -> None:
        self._engine = engine
        self._actor = actor
        self._exclusive = exclusive
        self.session_id = actor.session_id
        self._closed = False

    def __repr__(self) -> str:
        return f"<SessionWriter {self.session_id!r}{' closed' if self._closed else ''}>"

    def _live_actor(self) -> SessionActor:
        if self._closed:
            raise ClosedError(f"the writer of session {self.session_id!r} was closed")
        return self._actor

    async def head(self) -> int:
        """The last accepted seq (committed or queued): what ``expected_head`` is checked
        against, and what readers will see once the queue is committed. No I/O.

        Raises :class:`~stores.ClosedError` after :meth:`aclose`."""
        actor = self._live_actor()
        await trio.lowlevel.checkpoint()
        return actor.accepted_head

    @property
    def committed_head(self) -> int:
        """The last seq known to be committed (visible to every reader and process)."""
        return self._actor.committed_head

    async def append(self, events: Sequence[NewEvent], *, expected_head: int | None = None) -> int:
        """Append ``events`` atomically and return the new head once committed.

        Committed means visible to every reader and process and surviving a process crash;
        :meth:`flush` adds power-loss durability with ``synchronous="normal"``. An empty
        batch writes nothing and returns :meth:`head` (the last *accepted* seq) at once;
        use :meth:`wait_committed` to wait for earlier ``append_nowait`` events.

        Cancellation: all or nothing. If cancelled before the group-commit writer took the
        batch, it is withdrawn and ``head()`` is unchanged; once taken, its commit attempt
        is awaited (shielded) before ``Cancelled`` propagates, and ``head()`` includes it
        (committed, or queued for a retry if that attempt failed).

        Raises:
            InvalidEventError, InvalidArgumentError: bad input; nothing accepted.
            ConflictError: ``expected_head`` is not the last accepted seq; nothing accepted.
            ClosedError: the handle or runtime is closed; nothing accepted.
            BrokenError: the writer broke earlier; nothing accepted.
            CommitPendingError: accepted, commit failed, retried in the background.
            UnwrittenError, OwnershipLostError: accepted, then dropped (never written).
        """
        if self._closed:  # _live_actor(), inline: every awaited append comes here
            self._live_actor()
        if expected_head is not None:
            check_seq(expected_head, "expected_head")
        return await self._actor.append(prepare_events(events), expected_head)

    def append_nowait(
        self, events: Sequence[NewEvent], *, expected_head: int | None = None
    ) -> tuple[int, int]:
        """Accept ``events`` now and return their seq range ``(first, last)``.

        The group-commit writer commits them within ``batch_window`` seconds; a failed
        commit keeps them queued in order and retries them. :meth:`wait_committed` and
        :meth:`flush` wait for them (and report a failing commit as
        :class:`~stores.CommitPendingError`); leaving the block commits them or raises
        :class:`~stores.UnwrittenError` naming them. An empty batch returns
        ``(head + 1, head)``. Not a checkpoint.

        Raises (nothing accepted): as :meth:`append` before its commit.
        """
        if self._closed:  # _live_actor(), inline: this runs for every event of a stream
            self._live_actor()
        if expected_head is not None:
            check_seq(expected_head, "expected_head")
        return self._actor.append_nowait(prepare_events(events), expected_head, urgent=False)

    async def wait_committed(self) -> None:
        """Return when every write accepted before the call is committed (visible to every
        reader and process), without an fsync barrier. Cancellation only stops the waiting.

        Raises: :class:`~stores.CommitPendingError` if an attempt covering them failed
        (they stay queued: call again to keep waiting), :class:`~stores.UnwrittenError`,
        :class:`~stores.ClosedError`, :class:`~stores.BrokenError`."""
        actor = self._live_actor()
        actor.check_writable()
        await actor.wait_committed()

    async def flush(self) -> None:
        """Return when every write accepted before the call is committed and durable.

        With ``synchronous="normal"`` this is one fsync barrier, shared with every
        concurrent flush in the runtime. Cancellation only stops the waiting.

        Raises: as :meth:`wait_committed`; if the barrier itself failed, an error of the
        store error's class (the store's chained as ``__cause__``) saying the writes are
        committed but not yet known durable: call again."""
        actor = self._live_actor()
        await self._engine.flush([actor], strict=True)

    async def truncate(self, to_seq: int) -> int:
        """Remove events after ``to_seq`` (queued ones included); return how many
        committed events were removed. Snapshots covering them expire. Like every write it
        is ordered after the writes accepted before it: it returns once they are
        committed, also when it removes nothing. Cancellation as :meth:`append`.

        Raises: :class:`~stores.InvalidArgumentError` (negative or non-int), the rest as
        :meth:`append`."""
        actor = self._live_actor()
        check_seq(to_seq, "to_seq")
        return await actor.truncate(to_seq)

    async def replace(
        self, from_seq: int, events: Sequence[NewEvent], *, expected_head: int | None = None
    ) -> int:
        """Replace everything after ``from_seq`` by ``events`` in one atomic step (a crash
        leaves the old tail or the new one, never a mix); return the new head. Snapshots
        covering a removed event expire. Maintenance such as trimming or rewinding a
        conversation rewrites its tail this way. Cancellation as :meth:`append`.

        Raises: :class:`~stores.InvalidArgumentError` (``from_seq`` past the head), the
        rest as :meth:`append`."""
        actor = self._live_actor()
        check_seq(from_seq, "from_seq")
        check_seq(expected_head, "expected_head", allow_none=True)
        return await actor.replace(from_seq, prepare_events(events), expected_head)

    async def read(
        self,
        *,
        since_seq: int = 0,
        until_seq: int | None = None,
        limit: int | None = None,
        from_end: bool = False,
    ) -> list[StoredEvent]:
        """Read committed events (see :meth:`SessionReader.read`)."""
        self._live_actor()
        return await self._engine.store.read(
            self.session_id,
            since_seq=since_seq,
            until_seq=until_seq,
            limit=limit,
            from_end=from_end,
        )

    async def aclose(self) -> None:
        """Commit what was accepted, then let go of the session (the last writer of the
        session in this runtime releases its lease). Idempotent; not cancellable.

        Raises: :class:`~stores.UnwrittenError` (or
        :class:`~stores.OwnershipLostError`) naming accepted events that could not be
        written (after a few attempts) and are dropped -- a later writer may reuse their
        seqs; :class:`~stores.CommitPendingError` if other handles keep the session's
        writer and the writes are still failing (they stay queued for them)."""
        if self._closed:
            await trio.lowlevel.checkpoint()
            return
        self._closed = True
        with trio.CancelScope(shield=True):
            await self._engine.supervisor.close_handle(self._actor, exclusive=self._exclusive)
        await trio.lowlevel.checkpoint_if_cancelled()

    async def __aenter__(self) -> SessionWriter:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


@final
class SessionReader(metaclass=NoPublicConstructor):
    """A read handle (``rt.open_session(id, "read")``). Reads never block the writer:
    they run on the runtime's reader connection, and each is one short transaction.
    Its async methods are checkpoints."""

    def __init__(self, engine: Engine, session_id: str) -> None:
        self._engine = engine
        self.session_id = validate_session_id(session_id)
        self._closed = False

    def _check(self) -> None:
        if self._closed:
            raise ClosedError(f"the reader of session {self.session_id!r} was closed")

    async def read(
        self,
        *,
        since_seq: int = 0,
        until_seq: int | None = None,
        limit: int | None = None,
        from_end: bool = False,
    ) -> list[StoredEvent]:
        """Committed events with ``since_seq < seq <= until_seq``, at most ``limit`` (the
        newest ``limit`` with ``from_end=True``), in seq order. One thread hop.

        Raises: :class:`~stores.InvalidArgumentError` for bad bounds,
        :class:`~stores.ClosedError`, store errors."""
        self._check()
        return await self._engine.store.read(
            self.session_id,
            since_seq=since_seq,
            until_seq=until_seq,
            limit=limit,
            from_end=from_end,
        )

    async def head(self) -> int:
        """The committed head (0 if the session is empty or was deleted). One thread hop."""
        self._check()
        return await self._engine.store.head(self.session_id)

    async def aclose(self) -> None:
        """Close the handle. Idempotent."""
        self._closed = True
        await trio.lowlevel.checkpoint()

    async def __aenter__(self) -> SessionReader:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
