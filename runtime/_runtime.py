"""open_runtime() and Runtime: the public face of tidelog's actor runtime."""

from __future__ import annotations

import math
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Literal

import attrs
import trio

from actors import (
    ActorState,
    ChangeHub,
    Checkpointer,
    GroupCommitWriter,
    SessionActor,
    StoreLane,
    Supervisor,
)
from stores import (
    JSON,
    ClosedError,
    InvalidArgumentError,
    Pin,
    SessionExistsError,
    SessionInfo,
    SessionNotFoundError,
    SessionOwnedError,
    SqliteStore,
    Store,
    StoredEvent,
    TidelogError,
    check_seq,
    validate_session_id,
)
from stores.records import check_count, validate_header
from stores.sqlite_schema import Synchronous

from ._errors import plain_errors
from .checkpoints import RuntimeCheckpointer
from .forking import check_fork_point
from .handles import SessionReader, SessionWriter
from .history import RuntimeHistory
from .projections import BUILTIN_PROJECTIONS, Projection
from .snapshot import Snapshot
from .tail import Tail
from .views import Watch

__all__ = ["Runtime", "RuntimeStatistics", "open_runtime"]

_PAGE = 1000


@attrs.frozen
class RuntimeStatistics:
    """A point-in-time record of the runtime's work (``Runtime.statistics()``)."""

    sessions: int
    mailbox_depth: int
    batches_committed: int
    events_committed: int
    mean_batch_size: float
    failed_batches: int
    flushes: int
    fsyncs: int
    #: WAL checkpoints run off the write path (see ``actors.checkpointer``), and failed ones.
    wal_checkpoints: int = 0
    failed_wal_checkpoints: int = 0


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
        wal_checkpointer: Checkpointer,
    ) -> None:
        self._supervisor = supervisor
        self._writer = writer
        self._read_lane = read_lane
        self._hub = hub
        self._wal_checkpointer = wal_checkpointer
        self._closed = False
        self._checkpoints: RuntimeCheckpointer | None = None
        self._history: RuntimeHistory | None = None
        self._projections: dict[str, Projection] = {p.name: p for p in BUILTIN_PROJECTIONS}
        self._housekeeping = 0
        self._housekeeping_done = trio.Event()

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("the runtime was closed")

    # -- conversations and runs ----------------------------------------------------------

    @property
    def checkpoints(self) -> RuntimeCheckpointer:
        """Run checkpoints kept on this runtime (run ``R`` is session ``run:R``)."""
        if self._checkpoints is None:
            self._checkpoints = RuntimeCheckpointer(self)
        return self._checkpoints

    @property
    def history(self) -> RuntimeHistory:
        """Conversation history on this runtime (rewinds delete ``checkpoints`` of the
        rewound runs; trimmed outputs are archived)."""
        if self._history is None:
            self._history = RuntimeHistory(self, checkpointer=self.checkpoints)
        return self._history

    # -- projections and forks ------------------------------------------------------------

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
        """The registered projections by name (``stats``, ``conversation``, ``turns``...)."""
        return dict(self._projections)

    def watch(self, session_id: str, name: str) -> Watch:
        """``async for value in rt.watch(id, name)``: the projection's value, then each new
        value as commits change it (see :class:`~runtime.views.Watch`)."""
        self._check_open()
        validate_session_id(session_id)
        if name not in self._projections:
            raise InvalidArgumentError(f"no projection named {name!r}")
        return Watch(self, session_id, self._projections[name])

    async def fork(
        self,
        source: str,
        new_id: str,
        *,
        at_seq: int | None = None,
        allow_open_run: bool = False,
    ) -> SessionInfo:
        """Create ``new_id`` holding ``source``'s first ``at_seq`` events (default: all
        committed, including what this runtime's writer of ``source`` had accepted).

        The child is independent: later appends, truncates, rewinds or deletes on either
        side never change the other. It shares the parent's prefix (constant time and
        space); the header names the parent and the seed length, ``parent`` is
        ``(source, at_seq)``. Refused, unless ``allow_open_run``, if ``at_seq`` falls
        inside a run with unanswered tool calls.

        Raises: :class:`SessionExistsError` (checked first), :class:`SessionNotFoundError`,
        :class:`InvalidArgumentError` (``at_seq`` negative, past the head, not an int;
        also a ``ValueError``), :class:`ForkPointError`.
        """
        self._check_open()
        validate_session_id(source)
        validate_session_id(new_id)
        check_seq(at_seq, "at_seq", allow_none=True)
        if await self.stat(new_id) is not None:
            raise SessionExistsError(new_id)
        actor = self._supervisor.actors.get(source)
        if actor is not None and actor.pending:
            await actor.wait_committed(actor.assigned, actor.failures)
        info = await self.stat(source)
        if info is None:
            raise SessionNotFoundError(source)
        at = info.head if at_seq is None else at_seq
        if at > info.head:
            raise InvalidArgumentError(f"at_seq {at} is past the head {info.head} of {source!r}")
        if not allow_open_run:
            await check_fork_point(self, source, at)
        lane = self._supervisor.lane
        return await lane.run(lambda: lane.store.fork(source, new_id, at_seq=at))

    def _background(self, fn: Callable[..., Awaitable[None]], *args: object) -> None:
        """Run ``fn(*args)`` in the runtime's nursery (best-effort housekeeping that the
        runtime's exit waits for, up to a few seconds, before closing its lanes)."""
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
        self._supervisor._nursery.start_soon(tracked)

    async def _wait_housekeeping(self) -> None:
        """Let background housekeeping finish: it is part of a clean exit. The caller
        bounds the wait."""
        while self._housekeeping:
            await self._housekeeping_done.wait()

    # -- sessions ----------------------------------------------------------------------

    @asynccontextmanager
    async def open_session(
        self,
        session_id: str,
        *,
        mode: Literal["write", "read"] = "write",
        header: dict[str, JSON] | None = None,
    ) -> AsyncIterator[SessionWriter | SessionReader]:
        """Open a session handle for the ``async with`` block.

        ``mode="write"`` makes this runtime the session's single writer: it creates the
        session (with ``header``) if missing, takes its lease, and yields a
        :class:`SessionWriter`; leaving the block commits what is queued and releases the
        lease. ``mode="read"`` yields a :class:`SessionReader` (unlimited).

        Raises:
            SessionOwnedError: another writer holds it, here or in another process.
            SessionNotFoundError: a read open of a missing session.
            InvalidSessionIdError, InvalidArgumentError: bad id, mode or header.
        """
        self._check_open()
        validate_session_id(session_id)
        if mode == "write":
            header_json = validate_header(header)
            actor = await self._supervisor.acquire(
                session_id, header_json=header_json, exclusive=True
            )
            writer = SessionWriter(self, actor)
            try:
                yield writer
            finally:
                await writer.aclose()
        elif mode == "read":
            if header is not None:
                raise InvalidArgumentError("header is only accepted with mode='write'")
            if await self._read_lane.run(self._read_lane.store.stat, session_id) is None:
                raise SessionNotFoundError(session_id)
            reader = SessionReader(self, session_id)
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
        """Live iterator over committed events after ``since_seq`` (see :class:`Tail`)."""
        self._check_open()
        validate_session_id(session_id)
        check_seq(since_seq, "since_seq")
        return Tail(self, session_id, since_seq)

    async def stat(self, session_id: str) -> SessionInfo | None:
        """The session's committed info, or ``None`` if it does not exist."""
        self._check_open()
        validate_session_id(session_id)
        return await self._read_lane.run(self._read_lane.store.stat, session_id)

    async def list_sessions(self, *, limit: int | None = None) -> list[SessionInfo]:
        """Sessions, most recently updated first."""
        self._check_open()
        check_count(limit, "limit")
        store = self._read_lane.store
        return await self._read_lane.run(lambda: store.list_sessions(limit=limit))

    async def delete(self, session_id: str) -> bool:
        """Delete a session and its events; ``False`` if it did not exist.

        Open snapshots of it expire. Raises :class:`SessionOwnedError` while a writer
        handle is open on it (here or in another process)."""
        self._check_open()
        validate_session_id(session_id)
        existing = self._supervisor.actors.get(session_id)
        if existing is not None and existing.handle_open:
            raise SessionOwnedError(session_id, "a writer handle in this process")
        actor = await self._supervisor.acquire(session_id, header_json=None, exclusive=False)
        try:
            if actor.handle_open:
                raise SessionOwnedError(session_id, "a writer handle in this process")
            write = actor.enqueue_delete()
            with trio.CancelScope(shield=True):
                await actor.wait_done(write, actor.failures)
            return bool(write.result)
        finally:
            self._supervisor.release(actor, exclusive=False)

    async def flush(self) -> None:
        """Return when every write accepted so far, by every writer, is durable."""
        self._check_open()
        await self._flush_actors(list(self._supervisor.actors.values()), strict=False)

    async def flush_sessions(self, session_ids: Sequence[str]) -> None:
        """Make everything this runtime accepted for ``session_ids`` durable (one fsync
        barrier), ignoring other sessions' troubles. The run loop's barrier."""
        self._check_open()
        actors = [a for i in session_ids if (a := self._supervisor.actors.get(i)) is not None]
        await self._flush_actors(actors, strict=False)

    def statistics(self) -> RuntimeStatistics:
        """Counters of the group-commit writer and the actor registry."""
        w = self._writer.statistics()
        return RuntimeStatistics(
            len(self._supervisor.actors),
            w.mailbox_depth,
            w.batches_committed,
            w.events_committed,
            w.mean_batch_size,
            w.failed_batches,
            w.flushes,
            w.fsyncs,
            self._wal_checkpointer.checkpoints,
            self._wal_checkpointer.failures,
        )

    # -- internals shared by handles, history and checkpoints ---------------------------

    @asynccontextmanager
    async def _using(
        self, session_id: str, *, header: dict[str, JSON] | None = None
    ) -> AsyncIterator[SessionActor]:
        """Attach to the session's actor (creating the session with ``header`` if missing)
        as an internal user: it shares the actor with an open writer handle, if any."""
        self._check_open()
        actor = await self._supervisor.acquire(
            session_id, header_json=validate_header(header), exclusive=False
        )
        try:
            yield actor
        finally:
            self._supervisor.release(actor, exclusive=False)

    async def _flush_actors(self, actors: Sequence[SessionActor], *, strict: bool = True) -> None:
        """Wait until everything ``actors`` accepted is committed, then one fsync barrier.

        ``strict``: each actor's own fatal error or unseen fault is raised (a writer
        handle's flush). Not strict (runtime-wide and run-loop barriers): actors that are
        starting, draining or dead are skipped -- they are someone else's business, and
        a draining actor commits its queue itself."""
        waits = []
        for actor in actors:
            if strict:
                actor.check_writable()
            elif actor.state is not ActorState.RUNNING or actor.fatal is not None:
                continue
            waits.append((actor, actor.failures))
        if not self._writer.needs_sync and not any(a.pending for a, _ in waits):
            await trio.lowlevel.checkpoint()
            return
        number = self._writer.request_sync()
        for actor, failures in waits:
            await actor.wait_committed(actor.assigned, failures)
        await self._writer.wait_synced(number)

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

    async def _read_all(self, session_id: str, *, since_seq: int = 0) -> list[StoredEvent]:
        """Every committed event after ``since_seq``, read page by page."""
        events: list[StoredEvent] = []
        while True:
            page = await self._read(session_id, since_seq, None, _PAGE)
            events.extend(page)
            if len(page) < _PAGE:
                return events
            since_seq = page[-1].seq

    async def _head(self, session_id: str) -> int:
        self._check_open()
        return await self._read_lane.run(self._read_lane.store.head, session_id)


def _check_options(
    synchronous: object,
    busy_timeout_ms: object,
    lease_ttl: object,
    idle_timeout: object,
    batch_window: object,
    poll_interval: object,
) -> None:
    if synchronous not in ("normal", "full"):
        raise InvalidArgumentError(f"synchronous must be 'normal' or 'full', not {synchronous!r}")
    if type(busy_timeout_ms) is not int or busy_timeout_ms < 0:
        raise InvalidArgumentError(f"busy_timeout_ms must be an int >= 0, not {busy_timeout_ms!r}")
    for name, value, low in (
        ("lease_ttl", lease_ttl, 0.0),
        ("idle_timeout", idle_timeout, -1.0),
        ("batch_window", batch_window, -1.0),
        ("poll_interval", poll_interval, 0.0),
    ):
        if (
            not isinstance(value, int | float)
            or isinstance(value, bool)
            or not math.isfinite(value)
            or value <= low
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
) -> AsyncIterator[Runtime]:
    """Run a tidelog runtime for the ``async with`` block.

    ``target`` is a database path (an embedded :class:`~stores.SqliteStore` is opened with
    ``synchronous`` and ``busy_timeout_ms``, and closed at exit) or any
    :class:`~stores.Store` instance (used as is; the caller keeps owning it).

    ``lease_ttl``: seconds a session lease lives without a heartbeat before another process
    may take it over. ``idle_timeout``: seconds an unused actor is kept. ``batch_window``:
    how long ``append_nowait`` batches may wait to be grouped. ``poll_interval``: how often
    tails look for other processes' commits.

    Leaving the block drains every actor (queued writes are committed), makes everything
    durable (one fsync barrier), releases the leases and closes the connections; this
    cleanup is shielded from cancellation. If the drain failed and the block itself raised
    nothing, the drain's error is raised.

    Raises: :class:`~stores.InvalidArgumentError` for bad options, the store's open errors
    (:class:`~stores.UnsupportedFormatError`, :class:`~stores.StoreCorruptError`...).
    """
    _check_options(
        synchronous, busy_timeout_ms, lease_ttl, idle_timeout, batch_window, poll_interval
    )
    if isinstance(target, str | os.PathLike):
        path = target

        def _open() -> SqliteStore:
            return SqliteStore(
                path,
                synchronous=synchronous,
                busy_timeout_ms=busy_timeout_ms,
                # NORMAL: commits never fsync, and a checkpoint in a commit costs two
                # fsyncs; the Checkpointer runs them beside the commits instead. FULL:
                # every commit fsyncs the WAL anyway, and a concurrent checkpoint's fsync
                # only competes with it (measured slower here), so SQLite's default stays.
                checkpoints="deferred" if synchronous == "normal" else "auto",
            )

        store: Store = await trio.to_thread.run_sync(_open)
        owns_store = True
    elif isinstance(target, Store):
        store = target
        owns_store = False
    else:
        raise InvalidArgumentError(
            f"open_runtime takes a path or a Store, not {type(target).__name__}"
        )
    write_lane = StoreLane(store, name="writer")
    try:
        read_store = await write_lane.run(store.clone)
    except BaseException:
        if owns_store:
            with trio.CancelScope(shield=True):
                await write_lane.aclose()
        write_lane.stop()  # the caller's store stays open
        raise
    read_lane = StoreLane(read_store, name="reader")
    hub = ChangeHub(read_lane, poll_interval=poll_interval)
    checkpointer = Checkpointer(write_lane)

    def on_commit(changed: set[str]) -> None:
        hub.notify(changed)
        checkpointer.poke()

    writer = GroupCommitWriter(write_lane, batch_window=batch_window, on_commit=on_commit)
    close_errors: list[TidelogError] = []
    body_failed = True
    with plain_errors():
        try:
            async with trio.open_nursery() as nursery:
                supervisor = Supervisor(
                    nursery,
                    writer,
                    owner=uuid.uuid4().hex,
                    lease_ttl=lease_ttl,
                    idle_timeout=idle_timeout,
                )
                runtime = Runtime(supervisor, writer, read_lane, hub, checkpointer)
                nursery.start_soon(writer.run)
                nursery.start_soon(checkpointer.run)
                nursery.start_soon(hub.run_poller)
                nursery.start_soon(supervisor.run_heartbeat)
                try:
                    yield runtime
                    body_failed = False
                finally:
                    with trio.CancelScope(shield=True):
                        await _shutdown(runtime, supervisor, writer, hub)
                        nursery.cancel_scope.cancel()
        finally:
            # Every task has ended, so no lane is in use: close the connections.
            with trio.CancelScope(shield=True):
                closers = [checkpointer.aclose, read_lane.aclose]
                if owns_store:
                    closers.append(write_lane.aclose)
                for close in closers:
                    try:
                        await close()
                    except TidelogError as exc:  # never mask the body's own error
                        close_errors.append(exc)
                write_lane.stop()  # the caller's store stays open
        errors = supervisor.drain_errors + close_errors
        if errors and not body_failed:
            raise errors[0]


async def _shutdown(
    runtime: Runtime, supervisor: Supervisor, writer: GroupCommitWriter, hub: ChangeHub
) -> None:
    """Finish housekeeping, drain actors, make everything durable, stop accepting calls."""
    with trio.move_on_after(5.0):
        await runtime._wait_housekeeping()
    await supervisor.stop_all()
    if writer.running and writer.needs_sync:
        number = writer.request_sync()
        try:
            await writer.wait_synced(number)
        except Exception as exc:
            if isinstance(exc, ClosedError):
                pass
            else:
                supervisor.drain_errors.append(exc)  # type: ignore[arg-type]
    runtime._closed = True
    hub.notify_all()
