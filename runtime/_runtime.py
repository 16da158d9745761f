"""open_runtime() and Runtime: the session runtime's entry point."""

from __future__ import annotations

import functools
import math
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager as AsyncContextManagerT
from contextlib import asynccontextmanager
from typing import Literal, overload

import attrs
import trio

from actors import (
    ActorState,
    ChangeHub,
    CreateMode,
    GroupCommitWriter,
    GroupWrite,
    SessionActor,
    StoreLane,
    Supervisor,
    WalCheckpointer,
    WriterStatistics,
)
from stores import (
    JSON,
    ClosedError,
    InvalidArgumentError,
    InvalidSessionIdError,
    ListOrder,
    NewEvent,
    Pin,
    PreparedEvent,
    SessionExistsError,
    SessionInfo,
    SessionNotFoundError,
    SessionOwnedError,
    Store,
    StoredEvent,
    TidelogError,
    UnwrittenError,
    check_seq,
    prepare_events,
    validate_session_id,
)
from stores._checks import check_list_args
from stores._records import MAX_ID_LENGTH, check_count, check_flag, validate_header
from stores._urls import open_store
from stores.sqlite._schema import Synchronous
from stores.sqlite._schema import check_options as check_sqlite_options

from ._folding import Watch
from ._groups import plain_errors
from ._handles import SessionReader, SessionWriter
from ._projections import Projection, StatsProjection
from ._published import StatisticsPublisher
from ._snapshot import Snapshot
from ._tail import Tail

__all__ = ["INTERNAL_PREFIX", "Runtime", "RuntimeStatistics", "open_runtime"]

#: Session ids that start with this are reserved for layers built on the runtime (the
#: agent layer keeps run checkpoints and archives there): a write open of one needs
#: ``internal=True``, and ``list_sessions`` hides them unless asked.
INTERNAL_PREFIX = "tidelog/"
#: How long the exit waits for the statistics publisher to end and remove its record.
_PUBLISHER_STOP_SECONDS = 5.0
#: Events read per step by :meth:`Runtime.iter_events`.
PAGE_SIZE = 1000
_CREATE_MODES = ("if_missing", "new", "never")


@attrs.frozen
class RuntimeStatistics:
    """A point-in-time record of the runtime's work (``Runtime.statistics()``).

    ``sessions``: live session actors. ``writer``: the group-commit writer's counters.
    ``wal_checkpoints`` / ``failed_wal_checkpoints``: WAL checkpoints run off the write
    path (see ``actors._wal_checkpointer``)."""

    sessions: int
    writer: WriterStatistics
    wal_checkpoints: int = 0
    failed_wal_checkpoints: int = 0


def _check_user_id(session_id: object, *, internal: bool) -> str:
    """A valid session id, refused if it is in the reserved namespace and ``internal``
    was not asked for."""
    sid = validate_session_id(session_id)
    if not internal and sid.startswith(INTERNAL_PREFIX):
        raise InvalidSessionIdError(
            sid, f"ids starting with {INTERNAL_PREFIX!r} are reserved (pass internal=True)"
        )
    return sid


class Runtime:
    """A running tidelog runtime; get one from :func:`open_runtime`.

    Every method raises :class:`~stores.ClosedError` once ``open_runtime``'s block exited.
    Async methods are checkpoints. Errors are the plain documented ones, never groups.
    """

    def __init__(
        self,
        supervisor: Supervisor,
        writer: GroupCommitWriter,
        read_lane: StoreLane,
        hub: ChangeHub,
        wal_checkpointer: WalCheckpointer,
        services: trio.Nursery,
    ) -> None:
        self._supervisor = supervisor
        self._writer = writer
        self._read_lane = read_lane
        self._hub = hub
        self._wal_checkpointer = wal_checkpointer
        self._services = services
        self._closed = False
        self._projections: dict[str, Projection] = {"stats": StatsProjection()}
        self._housekeeping = 0
        self._housekeeping_done = trio.Event()

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("the runtime was closed")

    # -- sessions: handles -----------------------------------------------------------------

    @overload
    def open_session(
        self,
        session_id: str,
        mode: Literal["write"] = "write",
        *,
        header: dict[str, JSON] | None = None,
        create: CreateMode = "if_missing",
        shared: bool = False,
        internal: bool = False,
    ) -> AsyncContextManagerT[SessionWriter]: ...

    @overload
    def open_session(
        self,
        session_id: str,
        mode: Literal["read"],
        *,
        internal: bool = False,
    ) -> AsyncContextManagerT[SessionReader]: ...

    def open_session(
        self,
        session_id: str,
        mode: Literal["write", "read"] = "write",
        *,
        header: dict[str, JSON] | None = None,
        create: CreateMode = "if_missing",
        shared: bool = False,
        internal: bool = False,
    ) -> AsyncContextManagerT[SessionWriter] | AsyncContextManagerT[SessionReader]:
        """Open a session handle for an ``async with`` block: a :class:`SessionWriter`
        (``mode="write"``, the default) or a :class:`SessionReader` (``mode="read"``).

        A write open makes this runtime the session's single writer: it takes the
        session's lease (one writer per session across processes) and, as ``create``
        says, creates the session with ``header``: ``"if_missing"`` (default) creates it
        unless it exists, ``"new"`` raises :class:`SessionExistsError` if it exists,
        ``"never"`` raises :class:`SessionNotFoundError` if it does not. ``header`` is
        only used when the open creates the session; an existing session keeps its own.
        Leaving the block commits what the handle accepted and, for the last user,
        releases the lease.

        ``shared=False`` (default): the handle is this runtime's one writer of the
        session; a second exclusive open raises :class:`SessionOwnedError`. ``shared=True``
        joins the session's writer with other shared handles and the exclusive one (one
        lease, one order of seqs): for layers that append now and then, like
        conversation history. ``internal=True`` is needed to write a session whose id
        starts with :data:`INTERNAL_PREFIX`.

        A read open raises :class:`SessionNotFoundError` for a missing session; readers
        are unlimited and never block the writer.

        Raises (at the open, nothing changed): :class:`SessionOwnedError`,
        :class:`SessionExistsError`, :class:`SessionNotFoundError`,
        :class:`InvalidSessionIdError`, :class:`InvalidArgumentError` (mode, create,
        header), store errors of the lease/create. Cancellation: nothing stays open.
        """
        handle = self._open(session_id, mode, header, create, shared, internal)
        return handle  # type: ignore[return-value]  # the overloads say which handle

    @asynccontextmanager
    async def _open(
        self,
        session_id: str,
        mode: str,
        header: dict[str, JSON] | None,
        create: CreateMode,
        shared: bool,
        internal: bool,
    ) -> AsyncIterator[SessionWriter | SessionReader]:
        self._check_open()
        if mode == "write":
            sid = _check_user_id(session_id, internal=internal)
            if create not in _CREATE_MODES:
                raise InvalidArgumentError(f"create must be one of {_CREATE_MODES}, not {create!r}")
            check_flag(shared, "shared")
            check_flag(internal, "internal")
            header_json = validate_header(header)
            actor = await self._supervisor.acquire(
                sid, header_json=header_json, exclusive=not shared, create=create
            )
            self._hub.notify((sid,))  # a tail waiting for it to be created
            writer = SessionWriter(self, actor, exclusive=not shared)
            try:
                yield writer
            except GeneratorExit:
                # Never exited: the garbage collector finalizes the block, where nobody
                # sees what the close raises, so the runtime's exit reports it instead.
                try:
                    await writer.aclose()
                except TidelogError as close_error:
                    self._supervisor.report_at_exit(close_error)
                raise
            except BaseException as failure:
                try:
                    await writer.aclose()
                except TidelogError as close_error:  # neither may hide the other
                    raise BaseExceptionGroup(
                        "the writer's block and its close both failed", [failure, close_error]
                    ) from None
                raise
            await writer.aclose()
        elif mode == "read":
            sid = validate_session_id(session_id)
            if header is not None or create != "if_missing" or shared:
                raise InvalidArgumentError("header, create and shared need mode='write'")
            if await self._read_lane.run(self._read_lane.store.stat, sid) is None:
                raise SessionNotFoundError(sid)
            reader = SessionReader(self, sid)
            try:
                yield reader
            finally:
                await reader.aclose()
        else:
            raise InvalidArgumentError(f"mode must be 'write' or 'read', not {mode!r}")

    @asynccontextmanager
    async def snapshot(self, session_id: str) -> AsyncIterator[Snapshot]:
        """Pin the session's committed state for the ``async with`` block.

        Raises: :class:`SessionNotFoundError` if it does not exist."""
        self._check_open()
        validate_session_id(session_id)
        pin = await self._read_lane.run(self._read_lane.store.pin, session_id)
        if pin is None:
            raise SessionNotFoundError(session_id)
        snap = Snapshot(self, pin)
        try:
            yield snap
        finally:
            snap.close()

    def tail(self, session_id: str, since_seq: int = 0) -> Tail:
        """Live iterator over committed events after ``since_seq`` (see :class:`Tail`).
        A tail of a session that does not exist yet waits for it to be created."""
        self._check_open()
        validate_session_id(session_id)
        check_seq(since_seq, "since_seq")
        return Tail(self, session_id, since_seq)

    # -- sessions: reads -------------------------------------------------------------------

    async def stat(self, session_id: str) -> SessionInfo | None:
        """The session's committed info, or ``None`` if it does not exist."""
        self._check_open()
        validate_session_id(session_id)
        return await self._read_lane.run(self._read_lane.store.stat, session_id)

    async def read(
        self,
        session_id: str,
        *,
        since_seq: int = 0,
        until_seq: int | None = None,
        limit: int | None = None,
        from_end: bool = False,
    ) -> list[StoredEvent]:
        """Committed events with ``since_seq < seq <= until_seq``, at most ``limit`` (the
        newest ``limit`` with ``from_end=True``), in seq order; ``[]`` for a missing
        session. One thread hop on the reader connection; never blocks the writer.

        Raises: :class:`InvalidArgumentError` (bad bounds), store errors."""
        self._check_open()
        validate_session_id(session_id)
        return await self._read(session_id, since_seq, until_seq, limit, from_end=from_end)

    async def iter_events(
        self, session_id: str, *, since_seq: int = 0, until_seq: int | None = None
    ) -> AsyncIterator[StoredEvent]:
        """``async for event in rt.iter_events(id)``: the committed events after
        ``since_seq`` (up to ``until_seq``), read :data:`PAGE_SIZE` at a time, so memory
        stays flat however long the session is. Events committed while iterating may or
        may not be included; use a :meth:`snapshot` for a fixed view.

        Raises: as :meth:`read`."""
        self._check_open()
        validate_session_id(session_id)
        check_seq(since_seq, "since_seq")
        check_seq(until_seq, "until_seq", allow_none=True)
        cursor = since_seq
        while True:
            page = await self._read(session_id, cursor, until_seq, PAGE_SIZE)
            for event in page:
                yield event
            if len(page) < PAGE_SIZE:
                return
            cursor = page[-1].seq

    async def find_run(self, session_id: str, run_id: str) -> tuple[int, int] | None:
        """The first and last committed seq of the session's events tagged ``run_id``, or
        ``None``. Indexed: its cost does not grow with the session's length."""
        self._check_open()
        validate_session_id(session_id)
        if not isinstance(run_id, str):
            raise InvalidArgumentError(f"run_id must be a str, not {type(run_id).__name__}")
        lane = self._read_lane
        return await lane.run(lane.store.find_run, session_id, run_id)

    async def list_sessions(
        self,
        *,
        limit: int | None = None,
        prefix: str | None = None,
        after: str | None = None,
        order: ListOrder = "id",
        include_internal: bool = False,
    ) -> list[SessionInfo]:
        """Committed sessions whose id starts with ``prefix`` (default: all), at most
        ``limit``; those in the reserved namespace (:data:`INTERNAL_PREFIX`) only with
        ``include_internal``.

        ``order="id"`` (default): by id in code point order, after the id ``after``: pass
        the last id of a page to get the next one. Paging is stable under concurrent
        writes (every session that exists throughout is listed exactly once).
        ``order="updated"``: most recently updated first, one page (no ``after``). See
        :meth:`Store.list_sessions <stores.Store.list_sessions>`.

        Raises: :class:`InvalidArgumentError` (bad limit, prefix, cursor or order)."""
        self._check_open()
        check_list_args(limit, prefix, after, order)
        check_flag(include_internal, "include_internal")
        store = self._read_lane.store
        if include_internal:
            return await self._read_lane.run(
                lambda: store.list_sessions(limit=limit, prefix=prefix, after=after, order=order)
            )
        if order != "id":
            infos = await self._read_lane.run(
                lambda: store.list_sessions(prefix=prefix, order=order)
            )
            shown = [info for info in infos if not info.id.startswith(INTERNAL_PREFIX)]
            return shown[:limit]
        return await self._read_lane.run(_list_public, store, limit, prefix, after)

    # -- sessions: whole-session changes ----------------------------------------------------

    async def delete(self, session_id: str) -> bool:
        """Delete a session and its events after the writes this runtime accepted for it;
        ``False`` if it did not exist. Open snapshots of it expire. Not cancellable once
        accepted.

        Raises: :class:`SessionOwnedError` while a writer handle is open on it (here or in
        another process); :class:`CommitPendingError` if the commit failed (the delete
        stays queued and is retried)."""
        self._check_open()
        validate_session_id(session_id)
        if self._supervisor.handle_open(session_id):
            raise SessionOwnedError(session_id, "a writer handle in this process")
        try:
            actor = await self._supervisor.acquire(
                session_id, header_json="{}", exclusive=False, create="never"
            )
        except SessionNotFoundError:
            return False
        try:
            if self._supervisor.handle_open(session_id):
                raise SessionOwnedError(session_id, "a writer handle in this process")
            return await actor.delete()
        finally:
            self._supervisor.release(actor, exclusive=False)

    async def fork(self, source: str, new_id: str, *, at_seq: int | None = None) -> SessionInfo:
        """Create ``new_id`` holding ``source``'s first ``at_seq`` events (default: all,
        including what this runtime's writer of ``source`` had accepted).

        The child is independent: later appends, truncates, rewrites or deletes on either
        side never change the other. It shares the parent's prefix (constant time and
        space); the header names the parent and the seed length, ``parent`` is
        ``(source, at_seq)``.

        Raises, in this order: :class:`InvalidSessionIdError`, :class:`SessionExistsError`,
        :class:`InvalidArgumentError` (``at_seq`` negative, past the head, not an int),
        :class:`SessionNotFoundError`."""
        self._check_open()
        validate_session_id(source)
        validate_session_id(new_id)
        if await self.stat(new_id) is not None:
            raise SessionExistsError(new_id)
        check_seq(at_seq, "at_seq", allow_none=True)
        actor = self._supervisor.get(source)
        if actor is not None:
            await actor.wait_committed()
        info = await self.stat(source)
        if info is None:
            raise SessionNotFoundError(source)
        at = info.head if at_seq is None else at_seq
        if at > info.head:
            raise InvalidArgumentError(f"at_seq {at} is past the head {info.head} of {source!r}")
        lane = self._supervisor.lane
        return await lane.run(lambda: lane.store.fork(source, new_id, at_seq=at))

    # -- writes across sessions -------------------------------------------------------------

    async def append_atomic(
        self,
        appends: Mapping[SessionWriter, Sequence[NewEvent]],
        *,
        expected_heads: Mapping[SessionWriter, int] | None = None,
    ) -> dict[str, int]:
        """Append to several sessions at once, all or nothing: one commit holds every
        part or none (a crash never leaves one without the others). ``appends`` maps open
        writer handles of this runtime (of distinct sessions) to their events;
        ``expected_heads`` optionally checks each handle's accepted head, as
        :meth:`SessionWriter.append` does. Returns each session's new head.

        Not cancellable once accepted (it cannot be withdrawn part-way).

        Raises, before anything is accepted: :class:`InvalidArgumentError` (no parts, a
        session twice, a handle of another runtime), :class:`InvalidEventError`,
        :class:`ConflictError`, :class:`ClosedError`; after: as
        :meth:`SessionWriter.append` (:class:`CommitPendingError`: the whole group stays
        queued; :class:`UnwrittenError`)."""
        self._check_open()
        expected = dict(expected_heads or {})
        parts: list[tuple[SessionActor, Sequence[PreparedEvent], int | None]] = []
        for handle, events in appends.items():
            if not isinstance(handle, SessionWriter) or handle._runtime is not self:
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

    async def flush(self) -> None:
        """Return when every write this runtime accepted so far, for every session, is
        committed and durable (one fsync barrier, shared with concurrent flushes).
        Cancellation only stops the waiting.

        Raises: :class:`CommitPendingError` for a session whose writes are failing to
        commit (they stay queued), the store error if the barrier itself failed."""
        self._check_open()
        await self._flush(self._supervisor.actors(), strict=False)

    async def flush_sessions(self, session_ids: Sequence[str]) -> None:
        """:meth:`flush` for the writes accepted for ``session_ids`` only, whatever other
        sessions are doing (the run loop's barrier)."""
        self._check_open()
        actors = [a for i in session_ids if (a := self._supervisor.get(i)) is not None]
        await self._flush(actors, strict=False)

    # -- projections -----------------------------------------------------------------------

    def register_projection(self, projection: Projection) -> None:
        """Add (or replace, by name) a projection read by ``Snapshot.values()``. One
        registered after events exist folds the existing log on its first read."""
        if not isinstance(projection, Projection) or not projection.name:
            raise InvalidArgumentError("register_projection takes a named Projection")
        if type(projection.version) is not int:
            raise InvalidArgumentError("Projection.version must be an int")
        self._projections[projection.name] = projection

    @property
    def projections(self) -> dict[str, Projection]:
        """The registered projections by name (``stats`` is built in)."""
        return dict(self._projections)

    def watch(self, session_id: str, name: str) -> Watch:
        """``async for value in rt.watch(id, name)``: the projection's value, then each new
        value as commits change it (see :class:`Watch`)."""
        self._check_open()
        validate_session_id(session_id)
        if name not in self._projections:
            raise InvalidArgumentError(f"no projection named {name!r}")
        return Watch(self, session_id, self._projections[name])

    def statistics(self) -> RuntimeStatistics:
        """Counters of the group-commit writer and the actor registry."""
        return RuntimeStatistics(
            len(self._supervisor),
            self._writer.statistics(),
            self._wal_checkpointer.checkpoints,
            self._wal_checkpointer.failures,
        )

    # -- internals shared by handles, snapshots and tails ----------------------------------

    def _background(self, fn: Callable[..., Awaitable[None]], *args: object) -> None:
        """Run ``fn(*args)`` as a service task (best-effort housekeeping that the runtime's
        exit waits for, up to a few seconds, before closing its lanes)."""
        if self._closed:
            return

        async def tracked() -> None:
            try:
                await fn(*args)
            finally:
                self._housekeeping -= 1
                if self._housekeeping == 0:
                    self._housekeeping_done.set()
                    self._housekeeping_done = trio.Event()

        self._housekeeping += 1
        self._services.start_soon(tracked)

    async def _wait_housekeeping(self) -> None:
        """Let background housekeeping finish: it is part of a clean exit. The caller
        bounds the wait."""
        while self._housekeeping:
            await self._housekeeping_done.wait()

    async def _flush(self, actors: Sequence[SessionActor], *, strict: bool) -> None:
        """Wait until everything ``actors`` accepted is committed, then one fsync barrier
        that covers those commits.

        ``strict``: a dead actor's refusal is raised (a writer handle's flush). Not
        strict (runtime-wide and run-loop barriers): actors that are starting, stopped or
        dead are skipped -- a draining actor commits its queue itself."""
        waits = []
        for actor in actors:
            if strict:
                actor.check_writable()
            elif actor.fatal is not None or actor.state.value is not ActorState.RUNNING:
                continue
            if actor.pending:
                waits.append(actor)
        writer = self._writer
        if not writer.needs_sync and not waits:
            await trio.lowlevel.checkpoint()
            return
        number = writer.request_sync()
        for actor in waits:
            await actor.wait_committed()
        if any(actor.last_batch > number for actor in waits):
            number = writer.request_sync()  # a retry committed them after that barrier
        await writer.wait_synced(number)

    async def _read(
        self,
        session_id: str,
        since_seq: int,
        until_seq: int | None,
        limit: int | None,
        *,
        pin: Pin | None = None,
        from_end: bool = False,
    ) -> list[StoredEvent]:
        self._check_open()
        check_seq(since_seq, "since_seq")
        check_seq(until_seq, "until_seq", allow_none=True)
        check_count(limit, "limit")
        check_flag(from_end, "from_end")
        store = self._read_lane.store
        return await self._read_lane.run(
            lambda: store.read(
                session_id,
                since_seq=since_seq,
                until_seq=until_seq,
                limit=limit,
                pin=pin,
                from_end=from_end,
            )
        )

    async def _head(self, session_id: str) -> int:
        self._check_open()
        return await self._read_lane.run(self._read_lane.store.head, session_id)


#: The greatest possible id in the reserved namespace: a cursor past every internal id.
_PAST_INTERNAL = INTERNAL_PREFIX + "\U0010ffff" * (MAX_ID_LENGTH - len(INTERNAL_PREFIX))


def _list_public(
    store: Store, limit: int | None, prefix: str | None, after: str | None
) -> list[SessionInfo]:
    """A page of ``list_sessions`` in id order without the internal sessions: pages of
    the store, jumping over the reserved namespace (one range of ids) once it is met."""
    shown: list[SessionInfo] = []
    cursor = after
    while True:
        want = None if limit is None else limit - len(shown)
        if want == 0:
            return shown
        page = store.list_sessions(limit=want, prefix=prefix, after=cursor)
        shown += [info for info in page if not info.id.startswith(INTERNAL_PREFIX)]
        if want is None or len(page) < want:
            return shown
        cursor = page[-1].id
        if cursor.startswith(INTERNAL_PREFIX):
            cursor = _PAST_INTERNAL


def _check_options(
    synchronous: object,
    busy_timeout_ms: object,
    lease_ttl: object,
    idle_timeout: object,
    batch_window: object,
    poll_interval: object,
    publish_statistics: object = None,
) -> None:
    check_sqlite_options(
        synchronous=synchronous,
        checkpoints="auto",
        busy_timeout_ms=busy_timeout_ms,
        integrity_check=False,
        read_only=False,
        length_limit=None,
    )
    for name, value, low in (
        ("lease_ttl", lease_ttl, 0.0),
        ("idle_timeout", idle_timeout, -1.0),
        ("batch_window", batch_window, -1.0),
        ("poll_interval", poll_interval, 0.0),
        *(
            [("publish_statistics", publish_statistics, 0.0)]
            if publish_statistics is not None
            else []
        ),
    ):
        if (
            not isinstance(value, int | float)
            or isinstance(value, bool)
            or not math.isfinite(value)
            or value <= low
            or value > 1e9
        ):
            raise InvalidArgumentError(f"{name} must be a finite number > {max(low, 0)}")


@asynccontextmanager
async def open_runtime(
    target: str | os.PathLike[str] | Store,
    *,
    synchronous: Synchronous = "normal",
    busy_timeout_ms: int = 5000,
    lease_ttl: float = 10.0,
    idle_timeout: float = 30.0,
    batch_window: float = 0.002,
    poll_interval: float = 0.025,
    publish_statistics: float | None = None,
) -> AsyncIterator[Runtime]:
    """Run a tidelog runtime for the ``async with`` block.

    ``target`` is a database path (an embedded :class:`~stores.SqliteStore` is opened with
    ``synchronous`` and ``busy_timeout_ms``, and closed at exit; an existing directory
    opens a :class:`~stores.JsonlStore` the same way), a PostgreSQL URL
    ``postgresql://...`` or ``postgres://...`` (a :class:`~stores.PostgresStore`,
    likewise; a ``schema`` query parameter chooses its schema, see ``docs/many-machines.md``)
    or any :class:`~stores.Store` instance (used as is; the caller keeps owning it).

    ``lease_ttl``: seconds a session lease lives without a heartbeat before another process
    may take it over. ``idle_timeout``: seconds an unused actor is kept. ``batch_window``:
    how long ``append_nowait`` batches may wait to be grouped. ``poll_interval``: how often
    tails look for other processes' commits. ``publish_statistics``: every that many
    seconds, save :meth:`Runtime.statistics` in the store for other processes and hosts
    (``tidelog stats`` shows them; see ``runtime._published``), ``None`` (default): never;
    ignored on a read-only store.

    Leaving the block -- normally, by an exception, or because an enclosing scope was
    cancelled -- drains every actor (accepted writes are committed: the runtime's tasks
    are shielded from the caller's cancellation until then), makes everything durable
    (one fsync barrier), releases the leases and closes the connections. Accepted writes
    that could not be committed are raised as :class:`~stores.UnwrittenError` (several
    as an exception group); if the block itself raised, that exception and those errors
    are raised together as a group, so neither is hidden.

    Raises: :class:`~stores.InvalidArgumentError` for bad options (nothing is created),
    the store's open errors (:class:`~stores.UnsupportedFormatError`,
    :class:`~stores.StoreCorruptError`...).
    """
    _check_options(
        synchronous,
        busy_timeout_ms,
        lease_ttl,
        idle_timeout,
        batch_window,
        poll_interval,
        publish_statistics,
    )
    if isinstance(target, str | os.PathLike):  # an address: stores._urls decides the backend
        store: Store = await trio.to_thread.run_sync(
            functools.partial(
                open_store,
                target,
                synchronous=synchronous,
                busy_timeout_ms=busy_timeout_ms,
                # SQLite, NORMAL: commits never fsync, and a checkpoint in a commit costs
                # two fsyncs; the WalCheckpointer runs them beside the commits instead.
                # FULL: every commit fsyncs the WAL anyway, and a concurrent checkpoint's
                # fsync only competes with it (measured slower here), so SQLite's default
                # stays.
                sqlite_checkpoints="deferred" if synchronous == "normal" else "auto",
            )
        )
        owns_store = True
    elif isinstance(target, Store):
        store = target
        owns_store = False
    else:
        raise InvalidArgumentError(
            f"open_runtime takes a path or a Store, not {type(target).__name__}"
        )
    cleanup_errors: list[TidelogError] = []
    body_failed = True
    with plain_errors():
        async with (
            _open_lanes(store, owns_store, cleanup_errors) as (write_lane, read_lane),
            _running(
                write_lane,
                read_lane,
                cleanup_errors,
                lease_ttl=lease_ttl,
                idle_timeout=idle_timeout,
                batch_window=batch_window,
                poll_interval=poll_interval,
                publish_statistics=publish_statistics,
            ) as runtime,
        ):
            yield runtime
            body_failed = False
        if cleanup_errors and not body_failed:
            # Nothing accepted was lost (that would have been raised above): report the
            # first failure, and the others as notes on it.
            first = cleanup_errors[0]
            for other in cleanup_errors[1:]:
                first.add_note(f"also while closing: {type(other).__name__}: {other}")
            raise first


@asynccontextmanager
async def _open_lanes(
    store: Store, owns_store: bool, cleanup_errors: list[TidelogError]
) -> AsyncIterator[tuple[StoreLane, StoreLane]]:
    """The writer's lane on ``store`` and the reader's on a clone; both closed at exit
    (the writer's store only if the runtime opened it), shielded. Failures to close are
    added to ``cleanup_errors`` instead of being raised."""
    write_lane = StoreLane(store, name="writer")
    try:
        read_store = await write_lane.run(store.clone)
    except BaseException:
        with trio.CancelScope(shield=True):
            if owns_store:
                await write_lane.aclose()
            write_lane.stop()
        raise
    read_lane = StoreLane(read_store, name="reader")
    try:
        yield write_lane, read_lane
    finally:
        with trio.CancelScope(shield=True):
            closers = [read_lane.aclose, write_lane.aclose] if owns_store else [read_lane.aclose]
            for close in closers:
                try:
                    await close()
                except TidelogError as exc:
                    cleanup_errors.append(exc)
            write_lane.stop()  # the caller's store stays open


@attrs.define
class _Services:
    """The runtime's own tasks, in a nursery shielded from the caller's cancellation."""

    nursery: trio.Nursery
    scope: trio.CancelScope


async def _serve(*, task_status: trio.TaskStatus[_Services]) -> None:
    """Host the runtime's service nursery until its scope is cancelled (by the shutdown,
    after the drain): an enclosing cancel never reaches the writer or the actors."""
    with trio.CancelScope(shield=True) as scope:
        async with trio.open_nursery() as nursery:
            task_status.started(_Services(nursery, scope))
            await trio.sleep_forever()


@asynccontextmanager
async def _running(
    write_lane: StoreLane,
    read_lane: StoreLane,
    cleanup_errors: list[TidelogError],
    *,
    lease_ttl: float,
    idle_timeout: float,
    batch_window: float,
    poll_interval: float,
    publish_statistics: float | None = None,
) -> AsyncIterator[Runtime]:
    """The runtime's tasks for the block, then the shutdown: accepted writes that could
    not be written are raised here (with the body's own exception, if any); lesser exit
    failures go to ``cleanup_errors``."""
    hub = ChangeHub(read_lane, poll_interval=poll_interval)
    wal = WalCheckpointer(write_lane)

    def on_commit(changed: set[str]) -> None:
        hub.notify(changed)
        wal.poke()

    writer = GroupCommitWriter(write_lane, batch_window=batch_window, on_commit=on_commit)
    unwritten: list[UnwrittenError] = []
    failure: BaseException | None = None
    try:
        async with trio.open_nursery() as nursery:
            with trio.CancelScope(shield=True):  # started, it must be stopped below
                services: _Services = await nursery.start(_serve)
            try:
                supervisor = Supervisor(
                    services.nursery,
                    writer,
                    owner=uuid.uuid4().hex,
                    lease_ttl=lease_ttl,
                    idle_timeout=idle_timeout,
                )
                runtime = Runtime(supervisor, writer, read_lane, hub, wal, services.nursery)
                services.nursery.start_soon(writer.run)
                services.nursery.start_soon(wal.run)
                services.nursery.start_soon(hub.run_poller)
                services.nursery.start_soon(supervisor.run_heartbeat)
                publisher = None
                if publish_statistics is not None and not getattr(
                    write_lane.store, "read_only", False
                ):
                    publisher = StatisticsPublisher(runtime, publish_statistics)
                    services.nursery.start_soon(publisher.run)
                try:
                    yield runtime
                finally:
                    with trio.CancelScope(shield=True):
                        if publisher is not None:
                            with trio.move_on_after(_PUBLISHER_STOP_SECONDS):
                                await publisher.stop()
                        unwritten += await _shutdown(
                            runtime, supervisor, writer, hub, cleanup_errors
                        )
            finally:
                services.scope.cancel()
    except BaseException as exc:
        failure = exc  # the body's exception, or the group of a crashed runtime task
        raise
    finally:
        # Every task has ended, so the checkpointer's lane is idle: close it.
        with trio.CancelScope(shield=True):
            try:
                await wal.aclose()
            except TidelogError as exc:
                cleanup_errors.append(exc)
        if unwritten:
            _raise_exit_errors(unwritten, failure)


def _raise_exit_errors(errors: Sequence[TidelogError], failure: BaseException | None) -> None:
    """Raise what the exit could not do, next to the body's own exception if any."""
    if failure is None:
        if len(errors) == 1:
            raise errors[0]
        raise ExceptionGroup("the runtime's exit failed", list(errors))
    raise BaseExceptionGroup("the runtime's block and its exit both failed", [failure, *errors])


async def _shutdown(
    runtime: Runtime,
    supervisor: Supervisor,
    writer: GroupCommitWriter,
    hub: ChangeHub,
    cleanup_errors: list[TidelogError],
) -> list[UnwrittenError]:
    """Finish housekeeping, drain actors, make everything durable, stop accepting calls.
    Returns the accepted writes that could not be written; a failed final barrier goes to
    ``cleanup_errors``."""
    with trio.move_on_after(5.0):
        await runtime._wait_housekeeping()
    unwritten = await supervisor.stop_all()
    if writer.running and writer.needs_sync:
        number = writer.request_sync()
        try:
            await writer.wait_synced(number)
        except TidelogError as exc:
            cleanup_errors.append(exc)
    writer.closed = True
    runtime._closed = True
    hub.notify_all()
    return unwritten
