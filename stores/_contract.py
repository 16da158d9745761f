"""The Store contract: what every backend (memory, SQLite, JSONL, PostgreSQL) provides.

A store is *synchronous* and knows nothing of trio. Each instance serialises its own calls
with a lock, so it is safe to call from several threads, but the runtime gives every
instance one owner thread lane anyway (one connection, one thread, a batch per hop).
:meth:`Store.clone` opens another handle on the same data for another lane (the runtime's
readers), so readers never queue behind the writer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol, TypeAlias, final, runtime_checkable

import attrs

from ._errors import TidelogError
from ._fastinit import drafted
from ._records import (
    JSON,
    LeaseInfo,
    NewEvent,
    PreparedEvent,
    SessionInfo,
    StoredEvent,
)

__all__ = [
    "AppendOp",
    "BatchResult",
    "Capabilities",
    "DeleteOp",
    "GroupOp",
    "ListOrder",
    "Pin",
    "ReplaceOp",
    "RestoreOp",
    "Store",
    "Synchronous",
    "TruncateOp",
    "WalUpkeep",
    "WriteOp",
]

#: A store's durability setting, for the backends that have one: ``"normal"`` (a commit
#: survives a process crash; power-loss durability comes with the next flush barrier) or
#: ``"full"`` (every commit is durable against power loss when it returns).
Synchronous: TypeAlias = Literal["normal", "full"]


@attrs.frozen(kw_only=True)
class Capabilities:
    """What a store handle declares about itself (:attr:`Store.capabilities`): the
    actors and the runtime read it instead of probing the store for attributes, and
    :mod:`stores.conformance` checks it against the store's behaviour.

    ``durable``: committed data survives closing the store and reopening it.
    ``blocking``: calls may block on I/O, so the runtime runs them in a worker thread; a
    non-blocking store (memory) is called inline on the event loop.
    ``syncs_every_commit``: every commit is already durable against power loss when it
    returns (SQLite, JSONL or PostgreSQL with ``synchronous="full"``), so the writer
    needs no separate barrier for a flush.
    ``change_feed``: the store pushes other handles' commits: it has a ``listen()`` method
    returning a :class:`~stores._listening.ChangeListener` (the :class:`ChangeFeed
    <stores._listening.ChangeFeed>` protocol); without one, changes are found by polling
    :meth:`Store.data_version`.
    ``wal_upkeep``: the store leaves its write-ahead log's checkpoints to its owner
    (SQLite with ``checkpoints="deferred"``): it is a :class:`WalUpkeep`, and the runtime
    runs its WAL checkpointer only for such a store.
    ``immutable``: a read-only handle that reads the data as a file nobody writes (SQLite
    without a ``-wal``: no locks); implies ``read_only``.
    """

    durable: bool
    blocking: bool
    syncs_every_commit: bool = False
    change_feed: bool = False
    wal_upkeep: bool = False
    immutable: bool = False


@runtime_checkable
class WalUpkeep(Protocol):
    """What a store whose :attr:`Capabilities.wal_upkeep` is True adds to :class:`Store`."""

    #: Frames in the store's write-ahead log after this handle's last commit; the owner
    #: calls :meth:`checkpoint_wal` (on another handle) when it grows.
    wal_pages: int

    def checkpoint_wal(self) -> int:
        """Copy committed data from the write-ahead log into the main store without waiting
        for readers or writers (SQLite: a PASSIVE checkpoint); it changes no data and no
        durability guarantee. Returns how many log frames are checkpointed now (0 when
        another checkpoint was running). Raises :class:`~stores._errors.ReadOnlyError` on a
        read-only handle."""
        ...


@final  # (see drafted)
@drafted
@attrs.frozen(weakref_slot=False)
class AppendOp:
    """One append inside a batch given to :meth:`Store.write_batch`.

    Each op is atomic on its own: it lands whole or not at all, and its failure does not
    affect the other ops of the batch.

    ``expected_head`` is checked like :meth:`Store.append`'s. ``owner``, when given, is a
    lease token: the op fails with :class:`~stores._errors.OwnershipLostError` unless the
    session's lease is held by exactly that token at commit time (fencing). ``header`` is
    the JSON text of the header used if the op creates the session.

    ``retry=True`` marks a resend of writes whose earlier commit reported an error but may
    have landed anyway: if the events stored after ``expected_head`` are exactly a prefix
    of ``events`` (kind, data, run_id), only the rest is written instead of raising
    :class:`~stores._errors.ConflictError` -- each event lands exactly once.

    A final class: it cannot be subclassed.
    """

    session_id: str
    events: tuple[PreparedEvent, ...]
    expected_head: int | None = None
    owner: str | None = None
    header_json: str = "{}"
    retry: bool = False


@attrs.frozen
class TruncateOp:
    """Remove a session's events after ``to_seq`` inside a batch (see :meth:`Store.truncate`).

    ``owner`` fences like :attr:`AppendOp.owner`. Result: the number of events removed."""

    session_id: str
    to_seq: int
    owner: str | None = None


@attrs.frozen
class DeleteOp:
    """Delete a session inside a batch (see :meth:`Store.delete`). Result: 1 or 0."""

    session_id: str
    owner: str | None = None


@attrs.frozen
class ReplaceOp:
    """Replace a session's tail: remove events after ``from_seq`` and append ``events``
    after it, as one atomic step (maintenance such as trim and rewind rewrites history
    this way). Snapshots covering a removed event expire as with a truncate.

    ``expected_head`` and ``owner`` are checked as for :class:`AppendOp`; ``from_seq``
    must not exceed the head. ``retry=True`` marks a resend of a replace whose earlier
    commit reported an error but may have landed: if the session's tail after
    ``from_seq`` is exactly ``events`` already, nothing is written and the result is the
    head -- the replace lands exactly once. Result: the new head."""

    session_id: str
    from_seq: int
    events: tuple[PreparedEvent, ...]
    expected_head: int | None = None
    owner: str | None = None
    retry: bool = False


@attrs.frozen
class RestoreOp:
    """Write part of a session exactly as it was recorded elsewhere (a dump being
    imported): the events keep their commit times, the session its creation time, header
    and lineage, instead of taking the current time and an empty lineage.

    ``events`` land after ``expected_head``, which must be the session's head (else
    :class:`~stores._errors.ConflictError`; a missing session's head is 0), with the commit
    times ``stamps`` (one finite float per event). If the session does not exist (then
    ``expected_head`` is 0), the op creates it -- even with no events -- with
    ``header_json`` (a JSON object's canonical text, as ``encode_json`` writes it),
    ``created_at`` and ``parent`` (``(session_id, seq)`` of a fork; informational: the
    events are the op's own, nothing is shared) -- unless ``share_prefix``: then the new
    session is created as a fork of ``parent`` that shares the parent's first ``seq``
    events exactly as :meth:`Store.fork` does (no copy; the caller has checked they are
    the recorded ones), its head before ``events`` is ``seq``, so ``expected_head`` must be
    ``seq`` (:class:`~stores._errors.SessionNotFoundError` without the parent,
    :class:`~stores._errors.InvalidArgumentError` if it has fewer events); on a session
    that exists ``share_prefix`` changes nothing. The session's ``updated_at`` becomes
    ``updated_at`` afterwards. Writing a session in several ops (``expected_head`` = the
    previous op's result) restores any length in bounded memory. Not allowed in a
    :class:`GroupOp`. Result: the new head."""

    session_id: str
    events: tuple[PreparedEvent, ...]
    stamps: tuple[float, ...]
    expected_head: int
    header_json: str = "{}"
    created_at: float = 0.0
    updated_at: float = 0.0
    parent: tuple[str, int] | None = None
    share_prefix: bool = False


@attrs.frozen
class GroupOp:
    """Several ops (possibly for several sessions) applied all or nothing inside a batch:
    if any of them fails, none of them is applied and the group's result is that error.
    Result on success: the number of ops. Groups do not nest."""

    ops: tuple[AppendOp | TruncateOp | DeleteOp | ReplaceOp, ...]

    @property
    def session_id(self) -> str:
        """The first member's session (groups are keyed by it for ordering)."""
        return self.ops[0].session_id if self.ops else ""


#: Anything :meth:`Store.write_batch` accepts.
WriteOp = AppendOp | TruncateOp | DeleteOp | ReplaceOp | GroupOp | RestoreOp

#: Per op: an int on success (the new head for an append or a restore, the count removed
#: for a truncate, 1/0 for a delete), or the (tidelog) error that failed that op alone.
BatchResult = int | TidelogError


@attrs.frozen
class Pin:
    """A session's version at one moment: what a snapshot holds instead of a transaction.

    ``incarnation`` changes when the session is deleted and created again; ``epoch`` counts
    destructive changes (truncates). A read through a pin raises
    :class:`~stores._errors.SnapshotExpiredError` if anything at or below ``as_of_seq`` was
    removed or replaced since the pin was taken.
    """

    session_id: str
    as_of_seq: int
    incarnation: int
    epoch: int


#: The orders :meth:`Store.list_sessions` lists sessions in: ``"id"`` (by id, in code point
#: order -- the UTF-8 byte order; the only order a cursor pages through) or ``"updated"``
#: (most recently updated first, ties by id; one page only, since a session updated while
#: paging would move between pages).
ListOrder: TypeAlias = Literal["id", "updated"]


@runtime_checkable
class Store(Protocol):
    """The synchronous storage contract: these docstrings are its specification, and
    :mod:`stores.conformance` the suite every backend runs against it.

    Every method raises :class:`~stores._errors.ClosedError` after :meth:`close`, and
    :class:`~stores._errors.InvalidSessionIdError` / :class:`~stores._errors.InvalidArgumentError`
    for bad arguments before touching storage. Backend failures are
    :class:`~stores._errors.StoreError` subclasses.
    """

    #: What this handle declares about itself (see :class:`Capabilities`).
    @property
    def capabilities(self) -> Capabilities: ...

    #: True for a handle that only reads (opened with ``read_only=True``, or a clone of
    #: one): every write method -- :meth:`create`, :meth:`append`, :meth:`write_batch`,
    #: :meth:`sync`, :meth:`truncate`, :meth:`delete`, :meth:`fork`, the lease methods,
    #: :meth:`save_projection` -- raises
    #: :class:`~stores._errors.ReadOnlyError` before touching storage (after
    #: :class:`~stores._errors.ClosedError` and the argument checks).
    read_only: bool

    def create(
        self, session_id: str, header: dict[str, JSON] | None = None, *, exist_ok: bool = False
    ) -> SessionInfo:
        """Create an empty session; :class:`SessionExistsError` if present (unless exist_ok,
        which returns the existing session's info unchanged)."""
        ...

    def append(
        self, session_id: str, events: Sequence[NewEvent], *, expected_head: int | None = None
    ) -> int:
        """Append a batch atomically and return the new head (creating an unknown session).

        A stale ``expected_head`` raises :class:`ConflictError` (expected, actual) and
        changes nothing; ``expected_head=0`` on an unknown id succeeds. An empty batch
        returns the head unchanged and writes nothing."""
        ...

    def write_batch(self, ops: Sequence[WriteOp], *, sync: bool = False) -> list[BatchResult]:
        """Commit many writes, for any sessions, in one transaction (group commit).

        Ops apply in order, each atomic on its own; an op that fails (conflict, lost
        ownership) yields its error in the result list and the others still commit. Once an
        op for a session failed, that session's later ops in the same batch are not applied
        and report the same error, so one session's writes never apply out of order. With
        ``sync=True`` the commit is also made durable against power loss (one fsync
        barrier that covers every earlier commit of this handle too), even if ``ops`` is
        empty.

        Raises a :class:`StoreError` only if the transaction as a whole failed; then none
        of the ops was written."""
        ...

    def sync(self) -> None:
        """Make every commit made so far through this handle durable against power loss
        (one fsync barrier; nothing to do if they already are)."""
        ...

    def read(
        self,
        session_id: str,
        *,
        since_seq: int = 0,
        until_seq: int | None = None,
        limit: int | None = None,
        pin: Pin | None = None,
        from_end: bool = False,
    ) -> list[StoredEvent]:
        """Events with ``since_seq < seq <= until_seq`` in seq order, at most ``limit``.

        Unknown id: ``[]``. With ``pin``, the read is clamped to ``pin.as_of_seq`` and
        raises :class:`SnapshotExpiredError` if the pinned version was destroyed. With
        ``from_end=True`` the ``limit`` events taken are the *last* of the window (still
        returned in seq order): "the newest n events" in one call."""
        ...

    def refresh_pin(self, pin: Pin) -> Pin:
        """Advance ``pin`` to the session's current version, checking nothing at or below
        ``pin.as_of_seq`` was destroyed since (else :class:`SnapshotExpiredError`).

        Atomic: a live tail uses it to move forward without ever missing a truncation."""
        ...

    def find_run(self, session_id: str, run_id: str) -> tuple[int, int] | None:
        """The first and last seq of the session's events tagged ``run_id``, or ``None``.

        Indexed: cost does not grow with the session's length."""
        ...

    def head(self, session_id: str) -> int:
        """The session's last seq, 0 if empty or unknown."""
        ...

    def stat(self, session_id: str) -> SessionInfo | None:
        """The session's info, or ``None`` if unknown."""
        ...

    def pin(self, session_id: str) -> Pin | None:
        """Pin the session's current version (``None`` if unknown). Holds no lock."""
        ...

    def list_sessions(
        self,
        *,
        limit: int | None = None,
        prefix: str | None = None,
        after: str | None = None,
        order: ListOrder = "id",
    ) -> list[SessionInfo]:
        """Sessions whose id starts with ``prefix`` (default: all), at most ``limit``.

        ``order="id"`` (default): by id in code point order (which is also the UTF-8 byte
        order), only those after the id ``after`` -- a cursor: pass the last id of a page
        to get the next one. Paging this way is stable under concurrent writes: every
        session that exists throughout is listed exactly once, whatever is created, written
        or deleted meanwhile (a session created behind the cursor shows up only if its id
        sorts after it). ``order="updated"``: most recently updated first (ties by id);
        this order has no cursor (``after`` must be ``None``), since a session written
        between two pages would move from one to the other.

        Raises :class:`InvalidArgumentError` for a bad ``limit``, ``order`` or ``prefix``
        (a ``str`` of at most 256 characters without lone surrogates), an ``after`` that
        is not a valid id, or ``after`` with ``order="updated"``."""
        ...

    def delete(self, session_id: str) -> bool:
        """Delete a session with its events and lease; ``False`` if it did not exist."""
        ...

    def fork(
        self,
        source_id: str,
        new_id: str,
        *,
        at_seq: int | None = None,
        header: dict[str, JSON] | None = None,
    ) -> SessionInfo:
        """Create ``new_id`` whose history is ``source_id``'s first ``at_seq`` events
        (default: all of them), independent from then on: later changes to either side
        never show in the other. The new header is the source's, updated with ``header``
        and ``{"forked_from": source_id, "fork_seq": at_seq}``; ``parent`` is
        ``(source_id, at_seq)``.

        Raises, in this order: :class:`SessionExistsError`, :class:`SessionNotFoundError`,
        :class:`InvalidArgumentError` (``at_seq`` negative, past the head, not an int).
        The ids and ``header`` are checked before storage is touched; ``at_seq`` only once
        both sessions were looked up (see :func:`stores._checks.check_fork`), so an
        existing target is reported whatever ``at_seq`` is. Nothing is written unless all
        checks pass."""
        ...

    def truncate(self, session_id: str, to_seq: int) -> int:
        """Remove events with ``seq > to_seq``; return how many. Later appends reuse the seqs.

        An unknown id is a no-op that creates nothing; ``to_seq >= head`` removes nothing."""
        ...

    # -- projection checkpoints (a cache: losing one only costs a refold) ------------------

    def save_projection(self, pin: Pin, name: str, version: int, state_json: str) -> None:
        """Remember projection ``name``'s ``state_json`` folded up to ``pin.as_of_seq``
        (replacing the previous one). Ignored if the session is gone or was recreated."""
        ...

    def load_projection(self, session_id: str, name: str, version: int) -> tuple[int, str] | None:
        """``(seq, state_json)`` of the saved checkpoint of ``name`` -- only if it was saved
        with ``version`` and nothing at or below ``seq`` was destroyed since (else None)."""
        ...

    # -- single-writer leases (cross-process ownership) ---------------------------------

    def acquire_lease(self, session_id: str, owner: str, *, ttl: float, holder: str) -> None:
        """Take the session's write lease for ``owner`` (a unique token).

        Succeeds if the lease is free, already ``owner``'s, expired (not renewed for
        ``ttl`` seconds: a takeover), or held by a process of this host that has exited
        (see :mod:`stores._leases`). ``holder`` describes the owner
        (:func:`stores._leases.local_holder`). Raises :class:`SessionOwnedError` otherwise."""
        ...

    def renew_lease(self, session_id: str, owner: str, *, ttl: float) -> None:
        """Extend ``owner``'s lease; :class:`OwnershipLostError` if it was taken over."""
        ...

    def renew_leases(self, owner: str, session_ids: Sequence[str], *, ttl: float) -> list[str]:
        """Extend all of ``owner``'s leases on ``session_ids`` in one transaction (the
        runtime's heartbeat); return the ids whose lease is no longer ``owner``'s."""
        ...

    def release_lease(self, session_id: str, owner: str) -> None:
        """Give up ``owner``'s lease; a no-op if it is not (or no longer) ``owner``'s."""
        ...

    def list_leases(self, *, prefix: str | None = None) -> list[LeaseInfo]:
        """The leases stored for sessions whose id starts with ``prefix`` (default: all),
        by session id: expired ones too (``expires`` tells). Operators read it to see who
        writes what; :class:`InvalidArgumentError` for a bad ``prefix`` (as in
        :meth:`list_sessions`)."""
        ...

    # -- change detection, handles ------------------------------------------------------

    def data_version(self) -> int:
        """A number that changes whenever *another* handle (or process) commits."""
        ...

    def clone(self, *, read_only: bool | None = None) -> Store:
        """Another handle on the same data, for use by another thread lane: read-only if
        ``read_only`` is True or this handle is read-only (``None``: as this handle)."""
        ...

    def close(self) -> None:
        """Release resources. Idempotent; every later call raises :class:`ClosedError`."""
        ...
