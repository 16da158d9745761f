"""Runtime: the session runtime's public face, a thin facade over its engine
(:mod:`runtime._engine`). ``open_runtime`` (:mod:`runtime._opening`) makes it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager as AsyncContextManagerT
from contextlib import asynccontextmanager
from typing import Literal, final, overload

import attrs

from actors import CreateMode, WriterStatistics
from stores import (
    JSON,
    MAX_ID_LENGTH,
    InvalidArgumentError,
    InvalidSessionIdError,
    ListOrder,
    NewEvent,
    SessionExistsError,
    SessionInfo,
    SessionNotFoundError,
    SessionOwnedError,
    Store,
    StoredEvent,
    TidelogError,
    check_flag,
    check_list_args,
    check_seq,
    validate_header,
    validate_session_id,
)

from ._constructors import NoPublicConstructor
from ._engine import Engine
from ._folding import Watch, new_watch
from ._handles import SessionReader, SessionWriter, append_atomic, new_reader, new_writer
from ._options import CREATE_MODES
from ._projections import Projection
from ._snapshot import Snapshot, new_snapshot
from ._tail import Tail, new_tail

__all__ = ["INTERNAL_PREFIX", "PAGE_SIZE", "Runtime", "RuntimeStatistics", "new_runtime"]

#: Session ids that start with this are reserved for layers built on the runtime (the
#: agent layer keeps run checkpoints and archives there): a write open of one needs
#: ``internal=True``, and ``list_sessions`` hides them unless asked.
INTERNAL_PREFIX = "tidelog/"
#: Events read per step by :meth:`Runtime.iter_events`.
PAGE_SIZE = 1000


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


def new_runtime(engine: Engine) -> Runtime:
    """The public face of ``engine`` (``open_runtime``)."""
    return Runtime._create(engine)


@final
class Runtime(metaclass=NoPublicConstructor):
    """A running tidelog runtime; get one from :func:`open_runtime`.

    Every method raises :class:`~stores.ClosedError` once ``open_runtime``'s block exited.
    Async methods are checkpoints. Errors are the plain documented ones, never groups.
    """

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

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
        self._engine.check_open()
        if mode == "write":
            sid = _check_user_id(session_id, internal=internal)
            if create not in CREATE_MODES:
                raise InvalidArgumentError(f"create must be one of {CREATE_MODES}, not {create!r}")
            check_flag(shared, "shared")
            check_flag(internal, "internal")
            header_json = validate_header(header)
            engine = self._engine
            actor = await engine.supervisor.acquire(
                sid, header_json=header_json, exclusive=not shared, create=create
            )
            engine.hub.notify((sid,))  # a tail waiting for it to be created
            writer = new_writer(engine, actor, exclusive=not shared)
            try:
                yield writer
            except GeneratorExit:
                # Never exited: the garbage collector finalizes the block, where nobody
                # sees what the close raises, so the runtime's exit reports it instead.
                try:
                    await writer.aclose()
                except TidelogError as close_error:
                    engine.supervisor.report_at_exit(close_error)
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
            if await self._engine.store.stat(sid) is None:
                raise SessionNotFoundError(sid)
            reader = new_reader(self._engine, sid)
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
        self._engine.check_open()
        validate_session_id(session_id)
        pin = await self._engine.store.pin(session_id)
        if pin is None:
            raise SessionNotFoundError(session_id)
        snap = new_snapshot(self._engine, pin)
        try:
            yield snap
        finally:
            snap.close()

    def tail(self, session_id: str, since_seq: int = 0) -> Tail:
        """Live iterator over committed events after ``since_seq`` (see :class:`Tail`).
        A tail of a session that does not exist yet waits for it to be created."""
        self._engine.check_open()
        validate_session_id(session_id)
        check_seq(since_seq, "since_seq")
        return new_tail(self._engine, session_id, since_seq)

    # -- sessions: reads -------------------------------------------------------------------

    async def stat(self, session_id: str) -> SessionInfo | None:
        """The session's committed info, or ``None`` if it does not exist."""
        self._engine.check_open()
        validate_session_id(session_id)
        return await self._engine.store.stat(session_id)

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
        self._engine.check_open()
        validate_session_id(session_id)
        return await self._engine.store.read(
            session_id, since_seq=since_seq, until_seq=until_seq, limit=limit, from_end=from_end
        )

    async def iter_events(
        self, session_id: str, *, since_seq: int = 0, until_seq: int | None = None
    ) -> AsyncIterator[StoredEvent]:
        """``async for event in rt.iter_events(id)``: the committed events after
        ``since_seq`` (up to ``until_seq``), read :data:`PAGE_SIZE` at a time, so memory
        stays flat however long the session is. Events committed while iterating may or
        may not be included; use a :meth:`snapshot` for a fixed view.

        Raises: as :meth:`read`."""
        self._engine.check_open()
        validate_session_id(session_id)
        check_seq(since_seq, "since_seq")
        check_seq(until_seq, "until_seq", allow_none=True)
        cursor = since_seq
        while True:
            page = await self._engine.store.read(
                session_id, since_seq=cursor, until_seq=until_seq, limit=PAGE_SIZE
            )
            for event in page:
                yield event
            if len(page) < PAGE_SIZE:
                return
            cursor = page[-1].seq

    async def find_run(self, session_id: str, run_id: str) -> tuple[int, int] | None:
        """The first and last committed seq of the session's events tagged ``run_id``, or
        ``None``. Indexed: its cost does not grow with the session's length."""
        self._engine.check_open()
        validate_session_id(session_id)
        if not isinstance(run_id, str):
            raise InvalidArgumentError(f"run_id must be a str, not {type(run_id).__name__}")
        return await self._engine.store.find_run(session_id, run_id)

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
        self._engine.check_open()
        check_list_args(limit, prefix, after, order)
        check_flag(include_internal, "include_internal")
        view = self._engine.store
        if include_internal:
            return await view.reading(
                lambda store: store.list_sessions(
                    limit=limit, prefix=prefix, after=after, order=order
                )
            )
        if order != "id":
            infos = await view.reading(
                lambda store: store.list_sessions(prefix=prefix, order=order)
            )
            shown = [info for info in infos if not info.id.startswith(INTERNAL_PREFIX)]
            return shown[:limit]
        return await view.reading(_list_public, limit, prefix, after)

    # -- sessions: whole-session changes ----------------------------------------------------

    async def delete(self, session_id: str) -> bool:
        """Delete a session and its events after the writes this runtime accepted for it;
        ``False`` if it did not exist. Open snapshots of it expire. Not cancellable once
        accepted.

        Raises: :class:`SessionOwnedError` while a writer handle is open on it (here or in
        another process); :class:`CommitPendingError` if the commit failed (the delete
        stays queued and is retried)."""
        self._engine.check_open()
        validate_session_id(session_id)
        supervisor = self._engine.supervisor
        if supervisor.handle_open(session_id):
            raise SessionOwnedError(session_id, "a writer handle in this process")
        try:
            actor = await supervisor.acquire(
                session_id, header_json="{}", exclusive=False, create="never"
            )
        except SessionNotFoundError:
            return False
        try:
            if supervisor.handle_open(session_id):
                raise SessionOwnedError(session_id, "a writer handle in this process")
            return await actor.delete()
        finally:
            supervisor.release(actor, exclusive=False)

    async def fork(
        self, source: str, new_id: str, *, at_seq: int | None = None, internal: bool = False
    ) -> SessionInfo:
        """Create ``new_id`` holding ``source``'s first ``at_seq`` events (default: all,
        including what this runtime's writer of ``source`` had accepted).

        The child is independent: later appends, truncates, rewrites or deletes on either
        side never change the other. It shares the parent's prefix (constant time and
        space); the header names the parent and the seed length, ``parent`` is
        ``(source, at_seq)``. As for a write open, ``internal=True`` is needed for a
        ``new_id`` that starts with :data:`INTERNAL_PREFIX`.

        Raises, in this order: :class:`InvalidSessionIdError` (also for a reserved
        ``new_id`` without ``internal``), :class:`SessionExistsError`,
        :class:`InvalidArgumentError` (``at_seq`` negative, past the head, not an int),
        :class:`SessionNotFoundError`."""
        self._engine.check_open()
        validate_session_id(source)
        _check_user_id(new_id, internal=internal)
        if await self.stat(new_id) is not None:
            raise SessionExistsError(new_id)
        check_seq(at_seq, "at_seq", allow_none=True)
        actor = self._engine.supervisor.get(source)
        if actor is not None:
            await actor.wait_committed()
        info = await self.stat(source)
        if info is None:
            raise SessionNotFoundError(source)
        at = info.head if at_seq is None else at_seq
        if at > info.head:
            raise InvalidArgumentError(f"at_seq {at} is past the head {info.head} of {source!r}")
        return await self._engine.store.fork(source, new_id, at_seq=at)

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
        return await append_atomic(self._engine, appends, expected_heads)

    async def flush(self) -> None:
        """Return when every write this runtime accepted so far, for every session, is
        committed and durable (one fsync barrier, shared with concurrent flushes).
        Cancellation only stops the waiting.

        Raises: :class:`CommitPendingError` for a session whose writes are failing to
        commit (they stay queued); if the barrier itself failed, an error of the store
        error's class (the store's chained) saying to call again."""
        self._engine.check_open()
        await self._engine.flush(self._engine.supervisor.actors(), strict=False)

    async def flush_sessions(self, session_ids: Sequence[str]) -> None:
        """:meth:`flush` for the writes accepted for ``session_ids`` only, whatever other
        sessions are doing (the run loop's barrier)."""
        self._engine.check_open()
        supervisor = self._engine.supervisor
        actors = [a for i in session_ids if (a := supervisor.get(i)) is not None]
        await self._engine.flush(actors, strict=False)

    # -- projections -----------------------------------------------------------------------

    def register_projection(self, projection: Projection) -> None:
        """Add (or replace, by name) a projection read by ``Snapshot.values()``. One
        registered after events exist folds the existing log on its first read."""
        if not isinstance(projection, Projection) or not projection.name:
            raise InvalidArgumentError("register_projection takes a named Projection")
        if type(projection.version) is not int:
            raise InvalidArgumentError("Projection.version must be an int")
        self._engine.projections[projection.name] = projection

    @property
    def projections(self) -> dict[str, Projection]:
        """The registered projections by name (``stats`` is built in)."""
        return dict(self._engine.projections)

    def watch(self, session_id: str, name: str) -> Watch:
        """``async for value in rt.watch(id, name)``: the projection's value, then each new
        value as commits change it (see :class:`Watch`)."""
        self._engine.check_open()
        validate_session_id(session_id)
        projections = self._engine.projections
        if name not in projections:
            raise InvalidArgumentError(f"no projection named {name!r}")
        return new_watch(self._engine, session_id, projections[name])

    def statistics(self) -> RuntimeStatistics:
        """Counters of the group-commit writer and the actor registry."""
        engine = self._engine
        wal = engine.wal
        return RuntimeStatistics(
            len(engine.supervisor),
            engine.writer.statistics(),
            wal.checkpoints if wal is not None else 0,
            wal.failures if wal is not None else 0,
        )


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
