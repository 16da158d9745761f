"""PostgresStore: the backend for many machines, PostgreSQL through psycopg 3.

One psycopg connection per instance (synchronous API), guarded by a lock; the runtime
gives each handle a thread lane of its own, exactly as for SQLite (psycopg's async API
would need asyncio). The connection is in autocommit mode: every write is one explicit
transaction -- or, for a batch of appends, one statement, which PostgreSQL runs as one
transaction (:mod:`stores.postgres._ops`) --, reads are single statements (a pinned read
checks its pin in the same statement, so in the same snapshot), and nothing is left open
between calls. A connection the server dropped is opened again at the next call. The
reads and the leases are mixins of their own (:mod:`stores.postgres._read`,
:mod:`stores.postgres._leases`).

**Commit point and durability.** The commit point of every write is its transaction's
commit: from then on every connection sees it, whole. With ``synchronous="normal"`` (the
default) commits run with ``synchronous_commit = off``: they survive a crash of the
*client* at once and a crash of the *server* once the WAL writer flushed them (within
``3 x wal_writer_delay``, 600 ms by default); a flush barrier -- ``write_batch(...,
sync=True)`` or :meth:`PostgresStore.sync` -- commits with ``synchronous_commit = on``,
which flushes the WAL up to that commit and so makes every earlier commit, of any
connection, durable too (concurrent barriers share one flush). With ``"full"`` every
commit waits for its WAL flush. See ``docs/durability.md`` and ``docs/many-machines.md``.

**Notifications.** Every commit that moves a session's head also issues ``NOTIFY`` on
the store's channel (:func:`~stores.postgres._connection.channel_name`) with the new heads
(:func:`~stores.postgres._connection.notify_payload`): other hosts' runtimes wake their tails
from it (:meth:`PostgresStore.listen`). ``notify=False`` turns that off.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar, cast

import attrs
import psycopg

from .._batching import BatchingStore, check_ops, run_batch
from .._checks import check_create_args, check_fork_args, check_pin_arg, check_projection_args
from .._contract import (
    AppendOp,
    BatchResult,
    Capabilities,
    Pin,
    Store,
    Synchronous,
    WriteOp,
)
from .._errors import ClosedError, InvalidArgumentError, ReadOnlyError, StoreIOError
from .._records import JSON, SessionInfo, check_flag, check_seq, validate_session_id
from . import _auxiliary as aux
from . import _general as general
from . import _known as known_path
from . import _ops as pgops
from ._connection import (
    Link,
    PgOptions,
    channel_name,
    check_options,
    describe_dsn,
    map_errors,
    one,
    split_url,
)
from ._leases import PgLeases
from ._lineage import fork_session
from ._listen import PgListener
from ._read import PgReads
from ._schema import RETRY_SQLSTATE, open_store_schema

__all__ = ["PostgresStore"]

Conn = psycopg.Connection[Any]
T = TypeVar("T")


#: A flush barrier with nothing else to write: a transactional WAL record (a logical
#: message, ignored by everything but logical decoding) committed synchronously.
#: PostgreSQL flushes the WAL at commit only for a transaction that wrote some: one with
#: only a transaction id would not wait.
_BARRIER = "pg_logical_emit_message(true, 'tidelog', 'flush')"

#: At most this many sessions' sids are remembered (then forgotten all at once).
_MAX_SIDS = 100_000


class PostgresStore(PgReads, PgLeases, BatchingStore):
    """A :class:`~stores._contract.Store` in a schema of a PostgreSQL database.

    Args:
        dsn: a libpq connection string, ``"host=... dbname=..."`` or a URI
            ``"postgresql://user@host:5432/db"`` (``postgres://`` too). Passwords are
            never shown in messages.
        schema: the schema that holds the store (created if missing; refused if it holds
            another application's objects). Lowercase letters, digits and ``_``.
        synchronous: ``"normal"`` (commits asynchronous, flush barriers durable) or
            ``"full"`` (every commit durable); see the module doc.
        busy_timeout_ms: how long a write waits for another connection's row lock
            (PostgreSQL's ``lock_timeout``) before :class:`~stores._errors.StoreBusyError`.
        statement_timeout_ms: PostgreSQL's ``statement_timeout`` for this connection
            (``None``: the server's); a statement past it fails with
            :class:`~stores._errors.StoreBusyError` and writes nothing.
        connect_timeout: seconds to wait for the server at connect (unless the DSN says).
        read_only: read an existing store only: nothing is created or migrated, every write
            method raises :class:`~stores._errors.ReadOnlyError`, and the connection itself
            refuses writes (``default_transaction_read_only``).
        notify: issue a ``NOTIFY`` at every commit that moves a head (see the module doc).

    Every option is checked before connecting. Raises (at open):
    :class:`~stores._errors.InvalidArgumentError` (bad option or DSN),
    :class:`~stores._errors.StoreIOError` (the server cannot be reached, refuses the login,
    or -- read only -- holds no store there), :class:`~stores._errors.UnsupportedFormatError`
    (another application's schema, a newer format; left untouched).
    """

    @property
    def capabilities(self) -> Capabilities:
        """See :attr:`Store.capabilities`: durable, blocking, with a change feed
        (:meth:`listen`); PostgreSQL checkpoints its WAL itself."""
        return Capabilities(
            durable=True,
            blocking=True,
            syncs_every_commit=self.synchronous == "full",
            change_feed=True,
        )

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = "tidelog",
        synchronous: Synchronous = "normal",
        busy_timeout_ms: int = 5000,
        statement_timeout_ms: int | None = None,
        connect_timeout: int = 10,
        read_only: bool = False,
        notify: bool = True,
    ) -> None:
        options = PgOptions(
            dsn,
            schema,
            synchronous,
            busy_timeout_ms,
            statement_timeout_ms,
            connect_timeout,
            read_only,
            notify,
        )
        check_options(options)
        self.options = options
        self.schema = schema
        self.synchronous: Synchronous = synchronous
        self.read_only = read_only
        #: The NOTIFY channel of this store (``None`` with ``notify=False``).
        self.channel = channel_name(schema) if notify else None
        self._lock = threading.RLock()
        self._link = Link(options)
        self._closed = False
        self._unsynced = False
        #: Advisory lock keys this handle's connection holds, with the owner of the lease
        #: each stands for (see :mod:`stores.postgres._auxiliary`).
        self._advisory: dict[int, str] = {}
        self._connection_number = 0
        #: The ``sid`` of sessions this handle appended to (a session's incarnation,
        #: never reused): what :data:`~stores.postgres._known.APPEND_KNOWN` needs. A stale
        #: entry (the session was deleted since) only sends a batch to the general path.
        self._sids: dict[str, int] = {}
        try:
            with map_errors(f"open PostgreSQL store {schema!r} at {describe_dsn(dsn)}"):
                conn = self._link.connection()
                self._connection_number = self._link.connects
                open_store_schema(conn, schema, read_only=read_only)
        except BaseException:
            self._link.close()
            raise

    @classmethod
    def from_url(cls, url: str, **options: Any) -> PostgresStore:
        """Open the store a ``postgresql://`` (or ``postgres://``) URL names, with
        ``options`` as the constructor's. A ``schema`` query parameter, tidelog's own,
        chooses the schema (``postgresql://host/db?schema=agents``); every other part of
        the URL goes to libpq as is."""
        dsn, schema = split_url(url)
        if schema is not None:
            if "schema" in options:
                raise InvalidArgumentError("schema is given twice (in the URL and as an option)")
            options["schema"] = schema
        return cls(dsn, **options)

    # -- plumbing ----------------------------------------------------------------------

    @property
    def backend_pid(self) -> int | None:
        """The PostgreSQL server process of this handle's connection (what
        ``pg_stat_activity`` and ``pg_terminate_backend`` name), ``None`` while it has
        none (closed, or dropped and not yet reopened)."""
        with self._lock:
            return self._link.backend_pid

    @contextmanager
    def _connection(self, what: str, *, write: bool = False) -> Iterator[Conn]:
        """Lock the handle and translate driver errors for one operation; a write is
        refused on a read-only store, after the closed check. A connection opened again
        (the previous one was dropped) holds none of the old one's advisory locks."""
        with self._lock:
            if self._closed:
                raise ClosedError(f"{what}: this PostgresStore was closed")
            if write and self.read_only:
                raise ReadOnlyError(
                    what, f"this PostgresStore of schema {self.schema!r} is read-only"
                )
            with map_errors(what, writing=write):
                conn = self._link.connection()
                if self._link.connects != self._connection_number:
                    self._connection_number = self._link.connects
                    self._advisory.clear()
                yield conn

    def _read(self, what: str, query: Callable[..., T], *args: Any) -> T:
        """Run the read ``query(conn, *args)`` -- once more on a new connection if the
        server had dropped this one (a restart, ``pg_terminate_backend``): a read has
        nothing to undo, so a reader never sees a dropped connection that is back. A
        write is never repeated here (its outcome may be unknown: the caller decides)."""
        with self._lock:
            try:
                with self._connection(what) as conn:
                    return query(conn, *args)
            except StoreIOError:
                if self._closed or self._link.alive:
                    raise
            with self._connection(what) as conn:
                return query(conn, *args)

    @contextmanager
    def _write(self, what: str, session_ids: Sequence[str]) -> Iterator[general.Tx]:
        """One write transaction: the lease and session rows of ``session_ids`` locked
        first (in id order), the server's time read, the NOTIFY issued before commit."""
        with self._connection(what, write=True) as conn, conn.transaction():
            tx = general.Tx(conn, general.prelock(conn, session_ids))
            yield tx
            general.notify(conn, self.channel, tx.heads)
        self._unsynced = self.synchronous == "normal"

    @contextmanager
    def _batch(self, conn: Conn, ops: Sequence[WriteOp], sync: bool) -> Iterator[general.Tx]:
        """The transaction of a general batch (see :func:`run_batch`)."""
        with conn.transaction():
            if sync:  # flushed even if every op fails
                conn.execute(f"SELECT {_BARRIER}, set_config('synchronous_commit', 'on', true)")
            tx = general.Tx(conn, general.prelock(conn, general.batch_ids(ops)))
            yield tx
            general.notify(conn, self.channel, tx.heads)

    # -- writes ------------------------------------------------------------------------

    def create(
        self, session_id: str, header: dict[str, JSON] | None = None, *, exist_ok: bool = False
    ) -> SessionInfo:
        """See :meth:`Store.create`."""
        header_json = check_create_args(session_id, header, exist_ok)
        with self._write("create", [session_id]) as tx:
            info, created = general.create_session(
                tx.conn, session_id, header_json, tx.now, exist_ok=exist_ok
            )
            if created:
                tx.heads[session_id] = 0
            return info

    def write_batch(self, ops: Sequence[WriteOp], *, sync: bool = False) -> list[BatchResult]:
        """See :meth:`Store.write_batch`: appends to distinct sessions in one statement,
        anything else in one transaction with a savepoint per op."""
        appends = check_ops(ops, sync)  # every op an append of events (the usual batch)
        barrier = sync and self.synchronous == "normal"
        with self._connection("write_batch", write=True) as conn:
            writes = appends or any(not isinstance(op, AppendOp) or op.events for op in ops)
            if not writes and not (barrier and self._unsynced):
                # Nothing to write and nothing to make durable: checks only.
                return general.check_ops_only(conn, ops) if ops else []
            if not ops:  # a flush barrier only
                one(conn, f"SELECT {_BARRIER}, set_config('synchronous_commit', 'on', true)")
                results: list[BatchResult] | None = []
            elif appends:
                results = self._append_many(conn, cast("Sequence[AppendOp]", ops), barrier)
            else:
                results = None
            if results is None:
                self._forget_sids(general.deleted_ids(ops))
                results = run_batch(
                    ops,
                    self._batch(conn, ops, barrier),
                    general.apply_isolated,
                    permanent=general.permanent_error,
                )
            self._unsynced = not barrier and self.synchronous == "normal"
            return results

    def _append_many(
        self, conn: Conn, ops: Sequence[AppendOp], sync: bool
    ) -> list[BatchResult] | None:
        """The one-statement paths; ``None`` if nothing was written because an op needs
        the general path (a check failed, a resend, a session created concurrently, a
        value PostgreSQL refuses or that cannot be packed, or several ops of one session
        that :data:`~stores.postgres._known.APPEND_KNOWN` cannot take)."""
        if len(ops) == 1:  # a lone writer's awaited append: scalar parameters
            lone = known_path.known_one_args(ops[0], self._sids, self.channel, sync=sync)
            if lone is not None:
                if self._run_append(conn, known_path.APPEND_KNOWN_ONE, lone) is not None:
                    return [cast(int, lone["x"]) + 1]
                self._forget_sids([ops[0].session_id])  # its sid may be gone
                return None
        sql = known_path.APPEND_KNOWN_ONE_EACH
        known = known_path.known_one_each_args(ops, self._sids, self.channel, sync=sync)
        if known is None:
            sql = known_path.APPEND_KNOWN
            known = known_path.known_args(ops, self._sids, self.channel, sync=sync)
        if known is None:
            distinct = pgops.distinct_sessions(ops)
            if not distinct and self._learn_sids(conn, ops):
                known = known_path.known_args(ops, self._sids, self.channel, sync=sync)
        if known is not None:  # every session met before: one row operation per session
            args, results = known
            if self._run_append(conn, sql, args) is not None:
                return results
            self._forget_sids([op.session_id for op in ops])  # a sid may be gone
            return None
        if not distinct:
            return None
        if pgops.one_each(ops):  # the usual batch: a leaner statement (see there)
            sql, id_args = (
                pgops.APPEND_ONE_EACH,
                pgops.append_one_each_args(ops, self.channel, sync=sync),
            )
        else:
            sql, id_args = pgops.APPEND_MANY, pgops.append_many_args(ops, self.channel, sync=sync)
        if id_args is None:  # values that cannot be packed
            return None
        row = self._run_append(conn, sql, id_args)
        if row is None:
            return None
        if len(self._sids) > _MAX_SIDS:
            self._sids.clear()
        self._sids.update(zip((op.session_id for op in ops), row[4], strict=True))
        return list(row[1])

    def _run_append(self, conn: Conn, sql: str, args: dict[str, object]) -> Any:
        """Run one of the one-statement appends (prepared); its row, or ``None`` if it
        wrote nothing because an op needs the general path (it undid itself, or, for
        :data:`~stores.postgres._known.APPEND_KNOWN_ONE`, returned no row)."""
        try:
            row = conn.execute(sql, args, prepare=True).fetchone()
        except (
            psycopg.errors.NotNullViolation,
            psycopg.errors.UniqueViolation,
            psycopg.DataError,
        ):
            return None  # rolled back whole (the statement was its own transaction)
        except psycopg.DatabaseError as exc:
            if isinstance(exc, psycopg.errors.DeadlockDetected) or exc.sqlstate == RETRY_SQLSTATE:
                return None  # likewise: it undid itself
            raise
        return row

    def _learn_sids(self, conn: Conn, ops: Sequence[AppendOp]) -> bool:
        """Look up the sids of the batch's sessions this handle does not know (a batch
        naming a session several times, which the id-keyed statements cannot take, so
        cannot teach either); True if that found any."""
        missing = sorted({op.session_id for op in ops} - self._sids.keys())
        if not missing:
            return False
        rows = conn.execute(
            "SELECT id, sid FROM sessions WHERE id = ANY(%b::text[])", (missing,)
        ).fetchall()
        self._sids.update((row[0], int(row[1])) for row in rows)
        return bool(rows)

    def _forget_sids(self, session_ids: Sequence[str]) -> None:
        """Drop what this handle knows of these sessions' rows (deleted, or named by a
        sid-keyed statement that undid itself: a sid may be gone); the next append to
        them learns them again."""
        for session_id in session_ids:
            self._sids.pop(session_id, None)

    def delete(self, session_id: str) -> bool:
        """See :meth:`Store.delete`."""
        validate_session_id(session_id)
        with self._write("delete", [session_id]) as tx:
            self._forget_sids([session_id])
            return general.delete_session(tx.conn, session_id, tx.heads)

    def fork(
        self,
        source_id: str,
        new_id: str,
        *,
        at_seq: int | None = None,
        header: dict[str, JSON] | None = None,
    ) -> SessionInfo:
        """See :meth:`Store.fork`. O(1): the child shares the source's prefix (see
        :mod:`stores.postgres._lineage`)."""
        extra = check_fork_args(source_id, new_id, header)
        with self._write("fork", [source_id, new_id]) as tx:
            info = fork_session(tx.conn, source_id, new_id, at_seq, extra, tx.now)
            tx.heads[new_id] = info.head
            return info

    def truncate(self, session_id: str, to_seq: int) -> int:
        """See :meth:`Store.truncate`."""
        validate_session_id(session_id)
        check_seq(to_seq, "to_seq")
        with self._write("truncate", [session_id]) as tx:
            return general.truncate_session(tx.conn, session_id, to_seq, tx.now, tx.heads)

    # -- projection checkpoints --------------------------------------------------------

    def save_projection(self, pin: Pin, name: str, version: int, state_json: str) -> None:
        """See :meth:`Store.save_projection`."""
        check_pin_arg(pin)
        check_projection_args(name, version, state_json)
        with self._connection("save_projection", write=True) as conn:
            aux.save_projection(conn, pin, name, version, state_json)
        self._unsynced = self.synchronous == "normal"

    def load_projection(self, session_id: str, name: str, version: int) -> tuple[int, str] | None:
        """See :meth:`Store.load_projection`."""
        validate_session_id(session_id)
        check_projection_args(name, version)
        return self._read("load_projection", aux.load_projection, session_id, name, version)

    # -- change detection, handles -----------------------------------------------------

    def data_version(self) -> int:
        """A hash of the server's current snapshot (``pg_current_snapshot()``): it
        changes whenever any transaction that wrote commits or ends -- on this store or
        elsewhere on the server (a spurious change only costs a re-read)."""
        sql = "SELECT hashtextextended(pg_current_snapshot()::text, 0)"
        return int(self._read("data_version", one, sql)[0])

    def listen(self) -> PgListener:
        """A feed of this store's change notifications -- every commit of any handle, on
        any host, that moved a head -- on a connection of its own (see
        :class:`~stores.postgres._listen.PgListener`). The runtime's change hub wakes tails
        with it. Raises :class:`~stores._errors.StoreIOError` if the server cannot be
        reached now."""
        with self._connection("listen"):
            pass
        with map_errors("listen"):
            return PgListener(self.options, channel_name(self.schema))

    def clone(self, *, read_only: bool | None = None) -> PostgresStore:
        """Another connection to the same store with the same settings; read-only if this
        store is, or if ``read_only`` is True."""
        if read_only is not None:
            check_flag(read_only, "read_only")
        with self._connection("clone"):
            pass
        options = attrs.evolve(self.options, read_only=self.read_only or bool(read_only))
        return PostgresStore(
            options.dsn,
            schema=options.schema,
            synchronous=options.synchronous,
            busy_timeout_ms=options.busy_timeout_ms,
            statement_timeout_ms=options.statement_timeout_ms,
            connect_timeout=options.connect_timeout,
            read_only=options.read_only,
            notify=options.notify,
        )

    def close(self) -> None:
        """Close the connection, releasing its advisory locks first (so a lease whose
        row this owner left behind is taken over at once). Idempotent;
        later calls raise :class:`ClosedError`."""
        with self._lock:
            self._closed = True
            held = bool(self._advisory)
            self._advisory.clear()
            with map_errors("close"):
                self._link.close(unlock=held)


_: type[Store] = PostgresStore
