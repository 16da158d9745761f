"""``open_runtime``: opening a runtime (its store, lanes, engine and service tasks) and
its shutdown (drain, final barrier, close)."""

from __future__ import annotations

import functools
import os
import uuid
from collections.abc import AsyncIterator, Collection, Sequence
from contextlib import asynccontextmanager

import attrs
import trio

from actors import ChangeHub, GroupCommitWriter, StoreLane, Supervisor, WalCheckpointer
from stores import (
    InvalidArgumentError,
    Store,
    StoreError,
    Synchronous,
    TidelogError,
    UnwrittenError,
    open_store,
)

from ._engine import Engine, barrier_failed
from ._groups import plain_errors
from ._options import RuntimeOptions
from ._published import StatisticsPublisher
from ._runtime import Runtime, new_runtime

__all__ = ["open_runtime"]

#: How long the exit waits for the statistics publisher to end and remove its record.
_PUBLISHER_STOP_SECONDS = 5.0
#: How long the exit waits for background housekeeping (projection caches).
_HOUSEKEEPING_SECONDS = 5.0


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
    or any :class:`~stores.Store` instance (used as is; the caller keeps owning it, and
    ``synchronous`` and ``busy_timeout_ms`` do not apply). The backend that opens an
    address checks those two options; the others are the runtime's own.

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
    are raised together as a group, so neither is hidden. Otherwise a failure of the
    final barrier or of closing a connection is raised at exit (the first; the others as
    its notes): every accepted write is committed then, and a failed barrier's error
    says to open the store again and flush.

    Raises: :class:`~stores.InvalidArgumentError` for bad options (nothing is created),
    the store's open errors (:class:`~stores.UnsupportedFormatError`,
    :class:`~stores.StoreCorruptError`...).
    """
    options = RuntimeOptions(
        lease_ttl=lease_ttl,
        idle_timeout=idle_timeout,
        batch_window=batch_window,
        poll_interval=poll_interval,
        publish_statistics=publish_statistics,
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
                # fsync only competes with it (slower in W2 FULL), so SQLite's default
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
            _running(write_lane, read_lane, cleanup_errors, options) as runtime,
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
    options: RuntimeOptions,
) -> AsyncIterator[Runtime]:
    """The runtime's tasks for the block, then the shutdown: accepted writes that could
    not be written are raised here (with the body's own exception, if any); lesser exit
    failures go to ``cleanup_errors``."""
    hub = ChangeHub(read_lane, poll_interval=options.poll_interval)
    wal = WalCheckpointer(write_lane) if write_lane.store.capabilities.wal_upkeep else None

    def on_commit(changed: Collection[str]) -> None:
        hub.notify(changed)
        if wal is not None:
            wal.poke()

    writer = GroupCommitWriter(
        write_lane,
        batch_window=options.batch_window,
        on_commit=on_commit if wal is not None else hub.notify,  # (one call fewer per batch)
    )
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
                    lease_ttl=options.lease_ttl,
                    idle_timeout=options.idle_timeout,
                )
                engine = Engine(
                    supervisor=supervisor,
                    writer=writer,
                    read_lane=read_lane,
                    hub=hub,
                    wal=wal,
                    services=services.nursery,
                )
                runtime = new_runtime(engine)
                services.nursery.start_soon(writer.run)
                if wal is not None:
                    services.nursery.start_soon(wal.run)
                services.nursery.start_soon(hub.run_poller)
                services.nursery.start_soon(supervisor.run_heartbeat)
                publisher = None
                interval = options.publish_statistics
                if interval is not None and not write_lane.store.read_only:
                    publisher = StatisticsPublisher(runtime, engine.store, interval)
                    services.nursery.start_soon(publisher.run)
                try:
                    yield runtime
                finally:
                    with trio.CancelScope(shield=True):
                        if publisher is not None:
                            with trio.move_on_after(_PUBLISHER_STOP_SECONDS):
                                await publisher.stop()
                        unwritten += await _shutdown(engine, cleanup_errors)
            finally:
                services.scope.cancel()
    except BaseException as exc:
        failure = exc  # the body's exception, or the group of a crashed runtime task
        raise
    finally:
        # Every task has ended, so the checkpointer's lane is idle: close it.
        if wal is not None:
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


async def _shutdown(engine: Engine, cleanup_errors: list[TidelogError]) -> list[UnwrittenError]:
    """Finish housekeeping, drain actors, make everything durable, stop accepting calls.
    Returns the accepted writes that could not be written; a failed final barrier goes to
    ``cleanup_errors``."""
    with trio.move_on_after(_HOUSEKEEPING_SECONDS):
        await engine.wait_housekeeping()
    unwritten = await engine.supervisor.stop_all()
    writer = engine.writer
    if writer.running and writer.needs_sync:
        number = writer.request_sync()
        try:
            await writer.wait_synced(number)
        except StoreError as exc:
            error = barrier_failed(
                exc,
                "closing the runtime",
                "every accepted write is committed, not yet "
                "known durable: open the store again and flush to make it durable",
            )
            error.__cause__ = exc
            cleanup_errors.append(error)
        except TidelogError as exc:
            cleanup_errors.append(exc)
    writer.closed = True
    engine.close()
    return unwritten
