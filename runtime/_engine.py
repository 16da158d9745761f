"""The engine behind the runtime's handles: what ``Runtime``, ``SessionWriter``,
``SessionReader``, ``Snapshot``, ``Tail`` and ``Watch`` share.

One object holds the running parts -- the store seen through its lanes
(:class:`StoreView`), the group-commit writer, the supervisor of the session actors, the
change hub, the WAL checkpointer, the registered projections -- and the few operations
every handle needs: :meth:`Engine.check_open`, :meth:`Engine.flush` and best-effort
background work. ``Runtime`` is its public face; the handles hold the engine, never the
``Runtime``, so they import nothing from the facade.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import trio

from actors import (
    ActorState,
    ChangeHub,
    GroupCommitWriter,
    SessionActor,
    StoreLane,
    Supervisor,
    WalCheckpointer,
)
from stores import (
    ClosedError,
    Pin,
    SessionInfo,
    Store,
    StoredEvent,
    StoreError,
    check_count,
    check_flag,
    check_seq,
)

from ._projections import Projection, StatsProjection

__all__ = ["Engine", "StoreView", "barrier_failed"]

T = TypeVar("T")


class StoreView:
    """The runtime's store as an async view: the :class:`~stores.Store` methods the
    runtime uses, under their own names, each one hop on the lane that owns the
    connection -- reads on the reader's (they never queue behind a commit), writes that
    bypass the session actors (``fork``, ``save_projection``) on the writer's.

    The named methods raise :class:`~stores.ClosedError` once the runtime closed;
    :meth:`reading` and :meth:`writing` run a batch of store calls in one hop."""

    def __init__(self, reader: StoreLane, writer: StoreLane, check_open: Callable[[], None]):
        self._reader = reader
        self._writer = writer
        self._check_open = check_open

    @property
    def reader_store(self) -> Store:
        """The reader lane's store handle."""
        return self._reader.store

    async def reading(self, fn: Callable[..., T], *args: object) -> T:
        """``fn(store, *args)`` on the reader's lane: one hop for many reads."""
        return await self._reader.run(fn, self._reader.store, *args)

    async def writing(self, fn: Callable[..., T], *args: object) -> T:
        """``fn(store, *args)`` on the writer's lane, between two commits."""
        return await self._writer.run(fn, self._writer.store, *args)

    async def stat(self, session_id: str) -> SessionInfo | None:
        self._check_open()
        return await self._reader.run(self._reader.store.stat, session_id)

    async def pin(self, session_id: str) -> Pin | None:
        self._check_open()
        return await self._reader.run(self._reader.store.pin, session_id)

    async def head(self, session_id: str) -> int:
        self._check_open()
        return await self._reader.run(self._reader.store.head, session_id)

    async def find_run(self, session_id: str, run_id: str) -> tuple[int, int] | None:
        self._check_open()
        return await self._reader.run(self._reader.store.find_run, session_id, run_id)

    async def read(
        self,
        session_id: str,
        *,
        since_seq: int = 0,
        until_seq: int | None = None,
        limit: int | None = None,
        pin: Pin | None = None,
        from_end: bool = False,
    ) -> list[StoredEvent]:
        """:meth:`Store.read <stores.Store.read>`, its bounds checked on the trio thread
        (a bad one raises before any hop)."""
        self._check_open()
        check_seq(since_seq, "since_seq")
        check_seq(until_seq, "until_seq", allow_none=True)
        check_count(limit, "limit")
        check_flag(from_end, "from_end")
        store = self._reader.store
        return await self._reader.run(
            lambda: store.read(
                session_id,
                since_seq=since_seq,
                until_seq=until_seq,
                limit=limit,
                pin=pin,
                from_end=from_end,
            )
        )

    async def fork(self, source_id: str, new_id: str, *, at_seq: int) -> SessionInfo:
        self._check_open()
        store = self._writer.store
        return await self._writer.run(lambda: store.fork(source_id, new_id, at_seq=at_seq))


class Engine:
    """The running parts of one runtime (see the module doc). Made by ``open_runtime``,
    closed by its shutdown."""

    def __init__(
        self,
        *,
        supervisor: Supervisor,
        writer: GroupCommitWriter,
        read_lane: StoreLane,
        hub: ChangeHub,
        wal: WalCheckpointer | None,
        services: trio.Nursery,
    ) -> None:
        self.supervisor = supervisor
        self.writer = writer
        self.hub = hub
        #: The WAL checkpointer, for a store whose capabilities declare ``wal_upkeep``.
        self.wal = wal
        self.store = StoreView(read_lane, writer.lane, self.check_open)
        #: The registered projections by name (``Snapshot.values``, ``Runtime.watch``).
        self.projections: dict[str, Projection] = {"stats": StatsProjection()}
        self._services = services
        self._closed = False
        self._housekeeping = 0
        self._housekeeping_done = trio.Event()

    @property
    def write_store(self) -> Store:
        """The writer's store handle (white-box tests look at it directly)."""
        return self.writer.lane.store

    @property
    def read_store(self) -> Store:
        """The reader's store handle (white-box tests look at it directly)."""
        return self.store.reader_store

    def check_open(self) -> None:
        """Raise :class:`~stores.ClosedError` once the runtime closed."""
        if self._closed:
            raise ClosedError("the runtime was closed")

    def close(self) -> None:
        """Stop accepting calls (the end of the shutdown) and wake every tail, which then
        raises :class:`~stores.ClosedError`."""
        self._closed = True
        self.hub.notify_all()

    def background(self, fn: Callable[..., Awaitable[None]], *args: object) -> None:
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

    async def wait_housekeeping(self) -> None:
        """Let background housekeeping finish: it is part of a clean exit. The caller
        bounds the wait."""
        while self._housekeeping:
            await self._housekeeping_done.wait()

    async def flush(self, actors: Sequence[SessionActor], *, strict: bool) -> None:
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
        writer = self.writer
        if not writer.needs_sync and not waits:
            await trio.lowlevel.checkpoint()
            return
        number = writer.request_sync()
        for actor in waits:
            await actor.wait_committed()
        if any(actor.last_batch > number for actor in waits):
            number = writer.request_sync()  # a retry committed them after that barrier
        try:
            await writer.wait_synced(number)
        except StoreError as exc:
            raise barrier_failed(
                exc,
                "flush",
                "the writes accepted before the flush are committed, not yet "
                "known durable: call flush again",
            ) from exc


def barrier_failed(error: StoreError, what: str, state: str) -> StoreError:
    """The error a runtime call raises when its fsync barrier failed with ``error``: of
    the same class (callers' handlers still match), saying what failed and ``state``
    (what stands and what to do). The store's own message speaks to a direct caller of
    the write (on PostgreSQL: resend it with ``retry=True``), advice a runtime user must
    not follow: the runtime keeps accepted writes and retries them itself. Chain
    ``error`` as its ``__cause__`` (``raise ... from error``, or set it where it is
    raised later, as the close does)."""
    return type(error)(f"{what}: the durability barrier failed ({error}); {state}")
