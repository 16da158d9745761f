"""The errors tidelog raises: one hierarchy rooted at :class:`TidelogError`.

Every error documents *when* it is raised and *what to do*. Driver errors (apsw, psycopg,
the file system's ``OSError``) never cross the store boundary: they are translated into one
of these classes and chained with ``raise ... from``, so ``__cause__`` keeps the original
for debugging. Their public home is :mod:`stores`; :mod:`runtime` re-exports the ones a
runtime user meets (the same classes, not copies).

Two families are kept apart on purpose:

* "You did something wrong or closed it" -- :class:`InvalidArgumentError` (and its
  subclasses), :class:`ClosedError`, :class:`ConflictError`, :class:`SessionOwnedError`...
  Fix the call; nothing was written.
* "It broke" -- :class:`StoreError` and its subclasses (busy, I/O, corrupt). The operation
  failed as a whole; data committed before it is intact.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # records imports this module: the import is for annotations only
    from ._records import NewEvent

__all__ = [
    "BrokenError",
    "ClosedError",
    "CommitPendingError",
    "ConflictError",
    "InvalidArgumentError",
    "InvalidEventError",
    "InvalidSessionIdError",
    "OwnershipLostError",
    "ReadOnlyError",
    "SessionExistsError",
    "SessionNotFoundError",
    "SessionOwnedError",
    "SnapshotExpiredError",
    "StoreBusyError",
    "StoreCorruptError",
    "StoreError",
    "StoreIOError",
    "TidelogError",
    "UnsupportedFormatError",
    "UnwrittenError",
]


class TidelogError(Exception):
    """Base class of every error tidelog raises on purpose.

    Catch this to handle any tidelog failure; catch a subclass to handle one cause.
    """


class InvalidArgumentError(TidelogError, ValueError):
    """An argument has the wrong type or value (negative seq, bad mode, bad header...).

    Raised before anything is written or queued. Fix the call and retry. Also a
    :class:`ValueError`, so generic validation handlers catch it.
    """


class InvalidSessionIdError(InvalidArgumentError):
    """A session id is not a non-empty ``str`` of at most 256 characters without
    control characters (or surrogates).

    Raised before anything is written. ``session_id`` holds the offending value.
    """

    def __init__(self, session_id: object, reason: str) -> None:
        self.session_id = session_id
        self.reason = reason
        super().__init__(f"invalid session id {session_id!r}: {reason}")


class InvalidEventError(InvalidArgumentError):
    """An event (kind, data or run_id) is not acceptable: ``data`` must be exactly JSON
    (dict with str keys, list, str, int, finite float, bool, None; no tuples, sets, bytes,
    NaN/inf, cycles or lone surrogates).

    Raised before anything is written; in a batch, *nothing* of the batch is written.
    ``index`` is the event's position in the batch (``None`` for a lone value such as a
    header) and ``kind`` its kind.
    """

    def __init__(self, index: int | None, kind: object, reason: str) -> None:
        self.index = index
        self.kind = kind
        self.reason = reason
        where = "value" if index is None else f"event {index} (kind {kind!r})"
        super().__init__(f"invalid {where}: {reason}")


class ConflictError(TidelogError):
    """An append's ``expected_head`` did not match the session's actual head.

    Nothing of the append was written. Re-read the session (``actual`` is the head now),
    decide, and retry with the new head.
    """

    def __init__(self, session_id: str, expected: int, actual: int) -> None:
        self.session_id = session_id
        self.expected = expected
        self.actual = actual
        super().__init__(f"session {session_id!r}: expected head {expected}, actual head {actual}")


class SessionNotFoundError(TidelogError, KeyError):
    """The session does not exist (a read open, a snapshot, a fork source...).

    Also a :class:`KeyError`. Create it (a write open or an append creates it).
    """

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(session_id)

    def __str__(self) -> str:
        return f"session {self.session_id!r} does not exist"


class SessionExistsError(TidelogError):
    """``create`` (or a fork target) names a session that already exists. Nothing changed."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(f"session {session_id!r} already exists")


class SessionOwnedError(TidelogError):
    """A write open found the session owned by another writer (this process or another).

    Raised at open; nothing was written. Wait for the owner to close, or for its lease to
    expire (``lease_ttl`` seconds without a heartbeat) if it died. ``owner`` describes the
    holder when known (pid, host).
    """

    def __init__(self, session_id: str, owner: str | None = None) -> None:
        self.session_id = session_id
        self.owner = owner
        extra = f" (held by {owner})" if owner else ""
        super().__init__(f"session {session_id!r} is owned by another writer{extra}")


class UnwrittenError(TidelogError):
    """Events that a write call had *accepted* (they were given seqs ``first..last``) will
    never be written: the final drain of a closing writer or runtime could not commit
    them, or a permanent failure refused them after they were queued.

    Raised by the call that waited for them (``append``, ``flush``, ``close``, the exit of
    ``open_runtime``...); ``__cause__`` says why. The writer gives them up: those seqs may
    be handed out again. ``events`` are the events concerned, as :class:`~stores.NewEvent`
    values. What the store holds is told by its head ``H`` (:attr:`store_head` when the
    store reported it -- a :class:`ConflictError` cause --, else read ``head()``), against
    the range ``first..last`` (:meth:`outcome`):

    * ``H == first - 1`` (``"unwritten"``): nothing of ``first..last`` is stored; resend
      ``events`` with ``expected_head=first - 1`` if you still want them.
    * ``H >= first`` (``"stored"``): seqs ``first..min(H, last)`` stand. An attempt whose
      acknowledgement was lost (an error reported after the commit reached the store)
      stored part or all of ``first..last`` -- or another writer wrote the session. Read
      them: those equal to the leading ``events`` landed; resend the rest with
      ``expected_head=H``.
    * ``H < first - 1`` (``"lost"``): the store lost events it had acknowledged,
      ``H + 1..first - 1`` (a server that acknowledges before its disk has a commit --
      PostgreSQL with ``synchronous="normal"``, files before a flush barrier -- crashed or
      restarted). Nothing of ``first..last`` is stored either; to restore the session,
      resend what it lost (if you kept it), then ``events``, from ``expected_head=H``.

    An empty range (``first > last``) means the call itself had nothing accepted.
    """

    @property
    def store_head(self) -> int | None:
        """The session's head as the store reported it when it refused the writer's next
        commit (the ``actual`` of a :class:`ConflictError` cause), else None."""
        cause = self.__cause__
        return cause.actual if isinstance(cause, ConflictError) else None

    def outcome(self, head: int | None = None) -> str:
        """Which case of the class doc the store's head ``head`` (default
        :attr:`store_head`) means for ``first..last``: ``"unwritten"``, ``"stored"`` or
        ``"lost"``. Raises ``ValueError`` if no head is given or known."""
        if head is None:
            head = self.store_head
        if head is None:
            raise ValueError("the store's head is not known: pass head() to outcome()")
        if head == self.first - 1:
            return "unwritten"
        return "stored" if head >= self.first else "lost"

    def __init__(
        self,
        session_id: str,
        first: int,
        last: int,
        events: tuple[NewEvent, ...] = (),
        *,
        reason: str = "",
    ) -> None:
        self.session_id = session_id
        self.first = first
        self.last = last
        self.events = events
        self.reason = reason
        what = f"seqs {first}..{last}" if first <= last else "no events"
        because = f": {reason}" if reason else ""
        super().__init__(f"session {session_id!r}: {what} were accepted but not written{because}")


class CommitPendingError(TidelogError):
    """The commit attempt covering accepted writes failed (``__cause__`` holds the store
    error), and they stay **accepted**: queued in order with seqs ``first..last``, retried
    in the background with backoff, committed exactly once when the store recovers.

    Do **not** resend them (that would store them twice). Wait for them with the writer's
    ``wait_committed()`` or ``flush()`` (each raises this error again while attempts keep
    failing), or let leaving the block drain them. If they are finally given up, the call
    that waits for them raises :class:`UnwrittenError` with the events instead.
    ``what`` names the pending write (``"append"``, ``"truncate"``, ``"replace"``,
    ``"delete"``, ``"group"`` or ``"writes"`` for everything queued).
    """

    def __init__(self, session_id: str, first: int, last: int, what: str = "writes") -> None:
        self.session_id = session_id
        self.first = first
        self.last = last
        self.what = what
        span = f"seqs {first}..{last}" if first <= last else f"the {what}"
        super().__init__(
            f"session {session_id!r}: {span} accepted, commit failed; retrying in the "
            "background (do not resend; wait_committed() or flush() waits for them)"
        )


class OwnershipLostError(UnwrittenError):
    """This writer's lease was taken over (it expired and another writer claimed it).

    Raised on the write that discovered it, and on every later write through this handle:
    nothing more is written. Accepted events that were still queued are dropped (fenced
    writes are never written): ``first..last`` and ``events`` name them (an empty range
    when the call had nothing queued). Close the handle and reopen to become the owner
    again; the new owner decides whether to resend them.
    """

    def __init__(
        self,
        session_id: str,
        first: int = 1,
        last: int = 0,
        events: tuple[NewEvent, ...] = (),
    ) -> None:
        TidelogError.__init__(
            self, f"session {session_id!r}: this writer's lease was taken over by another writer"
        )
        self.session_id = session_id
        self.first = first
        self.last = last
        self.events = events
        self.reason = "the lease was taken over"


class ReadOnlyError(TidelogError):
    """A write was attempted through a read handle or a read-only store (one opened with
    ``read_only=True``, or its clone).

    Raised before anything is touched: nothing changed. ``operation`` names the refused
    call. Write through a handle opened for writing (``read_only=False``) instead.
    """

    def __init__(self, operation: str, reason: str = "this store is read-only") -> None:
        self.operation = operation
        self.reason = reason
        super().__init__(f"{operation} refused: {reason}; nothing was changed")


class ClosedError(TidelogError):
    """The store, runtime or handle was closed by its user before this call.

    This is "you closed it", not "it broke" (that is :class:`BrokenError`): reopen to
    continue.
    """


class BrokenError(TidelogError):
    """A part this call needs broke earlier and refuses all work: a session's writer died
    of a failure it cannot recover from (another connection wrote the session under its
    lease, an internal error), or the runtime's commit task stopped. ``__cause__`` holds
    the original failure.

    This is "it broke", not "you closed it" (:class:`ClosedError`). Nothing of this call
    was accepted. Close the handle and reopen it; if it keeps happening, look at the cause.
    """


class SnapshotExpiredError(TidelogError):
    """Destructive maintenance (truncate, delete, rewind, trim) changed events a snapshot
    covers, so the snapshot can no longer be served without mixing versions.

    Raised on the snapshot's next read. Take a new snapshot.
    """

    def __init__(self, session_id: str, as_of_seq: int, reason: str) -> None:
        self.session_id = session_id
        self.as_of_seq = as_of_seq
        super().__init__(f"snapshot of session {session_id!r} at seq {as_of_seq} expired: {reason}")


class UnsupportedFormatError(TidelogError):
    """The database file is not a tidelog database (a foreign SQLite file) or was written
    by a newer tidelog (schema version higher than this code knows).

    Raised at open; the file is left byte-for-byte untouched. Use the right file or upgrade.
    """


class StoreError(TidelogError):
    """The storage backend failed ("it broke"). Subclasses name the cause.

    The failing operation wrote nothing; data committed before is intact. ``__cause__``
    holds the driver's exception.
    """


class StoreBusyError(StoreError):
    """Another connection held the database lock for longer than ``busy_timeout_ms``.

    Nothing was written. Retry later, or raise ``busy_timeout_ms``.
    """


class StoreIOError(StoreError):
    """The operating system failed an I/O call (EIO, disk full, permission, cannot open).

    The failing operation is not visible to anyone now, except in the *ambiguous* cases,
    where a commit's acknowledgement is lost (as with any database): when the fsync of a
    commit fails, a SQLite transaction's frames may already be in the WAL, and a crash
    before the next write can make it reappear, whole, after recovery; and when the
    connection to a PostgreSQL server fails during a write, the server may have
    committed it before the answer was lost (the message says so). Retry with
    ``expected_head`` and ``AppendOp(retry=True)`` to land it exactly once -- the
    runtime does this for you: it keeps queued events and retries them once the store
    recovers.
    """


class StoreCorruptError(StoreError):
    """The database file is corrupt or is not a database at all.

    Raised at open (with ``integrity_check_on_open=True`` also for damage deep in the file)
    or when a read meets the damage. Restore from a backup.
    """
