"""Session handles: the one writer (``SessionWriter``) and any number of readers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import trio

from actors import SessionActor
from stores import (
    ClosedError,
    NewEvent,
    StoredEvent,
    TidelogError,
    check_seq,
    prepare_events,
    validate_session_id,
)

if TYPE_CHECKING:
    from .runtime import Runtime

__all__ = ["SessionReader", "SessionWriter"]


class SessionWriter:
    """The single writer of one session (``rt.open_session(id, mode="write")``).

    Sequence numbers are assigned when a write is *accepted*; :meth:`head` is the last
    accepted seq. Every method raises :class:`~stores.ClosedError` after :meth:`aclose`,
    and :class:`~stores.OwnershipLostError` once another process took the session over.
    """

    def __init__(self, runtime: Runtime, actor: SessionActor) -> None:
        self._runtime = runtime
        self._actor = actor
        self.session_id = actor.session_id
        self._closed = False

    def _live_actor(self) -> SessionActor:
        if self._closed:
            raise ClosedError(f"the writer of session {self.session_id!r} was closed")
        return self._actor

    def head(self) -> int:
        """The last accepted seq (committed or queued). No I/O, not a checkpoint."""
        return self._live_actor().assigned

    @property
    def committed_head(self) -> int:
        """The last seq known to be committed (visible to every reader and process)."""
        return self._actor.committed

    async def append(self, events: Sequence[NewEvent], *, expected_head: int | None = None) -> int:
        """Append ``events`` atomically and return the new head once committed.

        Committed means visible to every reader and process and surviving a process crash;
        :meth:`flush` adds power-loss durability with ``synchronous="normal"``. An empty
        batch writes nothing and returns :meth:`head` (the last *accepted* seq) at once;
        use :meth:`flush` to wait for earlier ``append_nowait`` events.

        Cancellation: all or nothing. If cancelled before the group-commit writer took the
        batch, it is withdrawn and ``head()`` is unchanged; once taken, the commit is
        awaited (shielded) before ``Cancelled`` propagates, and ``head()`` includes it.

        Raises:
            InvalidEventError, InvalidArgumentError: bad input; nothing queued.
            ConflictError: ``expected_head`` is not the last accepted seq; nothing queued.
            StoreError: the commit failed. The events stay queued in order and are retried
                in the background; :meth:`flush` tells when they are safe.
            OwnershipLostError: the lease was taken over; nothing more will be written.
            ClosedError: the handle or runtime is closed.
        """
        actor = self._live_actor()
        if expected_head is not None:
            check_seq(expected_head, "expected_head")
        return await actor.append(prepare_events(events), expected_head)

    def append_nowait(
        self, events: Sequence[NewEvent], *, expected_head: int | None = None
    ) -> tuple[int, int]:
        """Accept ``events`` now and return their seq range ``(first, last)``.

        The group-commit writer commits them within ``batch_window`` seconds; use
        :meth:`flush` to wait for them. An empty batch returns ``(head + 1, head)``.
        A failed background commit keeps the events queued in order and is raised by the
        next ``append``/``flush``. Not a checkpoint.

        Raises: as :meth:`append`, minus the commit errors.
        """
        actor = self._live_actor()
        check_seq(expected_head, "expected_head", allow_none=True)
        prepared = prepare_events(events)
        write = actor.enqueue_append(prepared, expected_head, urgent=False)
        if write is None:
            return actor.assigned + 1, actor.assigned
        return write.first, write.last

    async def flush(self) -> None:
        """Return when every write accepted before the call is durable.

        With ``synchronous="normal"`` this is one fsync barrier, shared with every
        concurrent flush in the runtime. Cancellation only stops the waiting.

        Raises: the commit or sync error if an attempt covering these writes failed (they
        stay queued and are retried); :class:`OwnershipLostError`; :class:`ClosedError`.
        """
        actor = self._live_actor()
        await self._runtime._flush_actors([actor])

    async def truncate(self, to_seq: int) -> int:
        """Remove events after ``to_seq`` (queued ones included); return how many were
        committed-removed. Snapshots covering them expire. Like every write it is ordered
        after the writes accepted before it: it returns once they are committed, also when
        it removes nothing. Cancellation as :meth:`append` (a truncate that removes nothing
        only waits, and cancelling that wait changes nothing).

        Raises: :class:`InvalidArgumentError` (negative or non-int), commit errors as
        :meth:`append`.
        """
        actor = self._live_actor()
        check_seq(to_seq, "to_seq")
        await trio.lowlevel.checkpoint_if_cancelled()
        failures = actor.failures
        write = actor.enqueue_truncate(to_seq)
        if write is None:
            if actor.pending:
                await actor.wait_committed(actor.assigned, failures)
            else:
                await trio.lowlevel.cancel_shielded_checkpoint()
            return 0
        await actor.wait_write(write, failures)
        return write.result or 0

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
        return await self._runtime._read(
            self.session_id, since_seq, until_seq, limit, from_end=from_end
        )

    async def aclose(self) -> None:
        """Commit what is queued, then give up ownership. Idempotent; not cancellable.

        Raises the commit error if queued writes could not be committed (they were retried
        a few times first)."""
        if self._closed:
            await trio.lowlevel.checkpoint()
            return
        self._closed = True
        actor = self._actor
        with trio.CancelScope(shield=True):
            try:
                if actor.pending and actor.fatal is None:
                    await actor.wait_committed(actor.assigned, actor.failures)
            except TidelogError:
                pass  # the drain retries and reports it
            finally:
                self._runtime._supervisor.release(actor, exclusive=True)
                if actor.users == 0:
                    await actor.stopped.wait()
        await trio.lowlevel.checkpoint_if_cancelled()

    close = aclose

    async def __aenter__(self) -> SessionWriter:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


class SessionReader:
    """A read handle (``rt.open_session(id, mode="read")``). Reads never block the writer:
    they run on the runtime's reader connection, and each is one short transaction."""

    def __init__(self, runtime: Runtime, session_id: str) -> None:
        self._runtime = runtime
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

        Raises: :class:`InvalidArgumentError` for negative/non-int bounds,
        :class:`ClosedError`, store errors."""
        self._check()
        return await self._runtime._read(
            self.session_id, since_seq, until_seq, limit, from_end=from_end
        )

    async def head(self) -> int:
        """The committed head (0 if the session is empty or was deleted)."""
        self._check()
        return await self._runtime._head(self.session_id)

    async def aclose(self) -> None:
        """Close the handle. Idempotent."""
        self._closed = True
        await trio.lowlevel.checkpoint()

    close = aclose

    async def __aenter__(self) -> SessionReader:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
