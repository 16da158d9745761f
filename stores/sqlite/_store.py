"""SqliteStore: the embedded backend, SQLite in WAL mode through apsw.

One apsw connection per instance, guarded by a lock. Every write is one ``BEGIN IMMEDIATE``
transaction (it waits up to ``busy_timeout_ms`` for the write lock instead of failing with
``BUSY_SNAPSHOT``); reads are single statements or short deferred transactions, never left
open. The commit point of every write is its ``COMMIT``; with ``synchronous="normal"`` the
WAL is fsynced at checkpoints and by :meth:`SqliteStore.sync` (a ``synchronous=FULL``
commit), with ``"full"`` at every commit. See ``docs/durability.md``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Literal, TypeGuard

import apsw

from .._batching import BatchingStore, check_ops, run_batch
from .._checks import (
    check_create_args,
    check_fork_args,
    check_list_args,
    check_pin_arg,
    check_projection_args,
    check_read_args,
    check_text,
)
from .._contract import (
    AppendOp,
    BatchResult,
    Capabilities,
    ListOrder,
    Pin,
    Store,
    Synchronous,
    WriteOp,
)
from .._errors import ClosedError, ReadOnlyError, TidelogError
from .._records import (
    INFO_COLUMNS,
    JSON,
    SessionInfo,
    StoredEvent,
    check_flag,
    check_seq,
    session_info,
    validate_session_id,
)
from . import _auxiliary as aux
from . import _ops as sqlops
from ._connection import WriteTransaction, in_savepoint, map_errors, one, transaction
from ._leases import SqliteLeases
from ._lineage import find_run as lineage_find_run
from ._lineage import fork_session, ranges_of
from ._maintenance import SqliteMaintenance
from ._read import check_pin, list_query, read_session_events
from ._readonly import ReadOnlyFile, Reread, rereads
from ._schema import (
    check_options,
    check_path,
    open_connection,
)

__all__ = ["CHECKPOINT_FALLBACK_PAGES", "Checkpoints", "SqliteStore"]


#: ``"auto"``: every commit that leaves 1000+ WAL frames checkpoints (SQLite's default).
#: ``"deferred"``: commits leave checkpoints to the owner, who calls :meth:`~SqliteStore.
#: checkpoint` on any handle of the file (the runtime does, on a connection of its own)
#: when :attr:`~SqliteStore.wal_pages` grows; a commit checkpoints itself only past
#: :data:`CHECKPOINT_FALLBACK_PAGES` frames.
Checkpoints = Literal["auto", "deferred"]

#: With ``checkpoints="deferred"``, a commit that leaves this many WAL frames checkpoints.
#: Besides bounding the WAL if nobody else checkpoints, this is what restarts it under a
#: continuous stream of commits: the writer restarts the WAL at a commit that finds it
#: completely checkpointed, which a checkpoint running beside the commits rarely leaves
#: it. Frames that the owner's checkpoints already copied are not copied again, so this
#: checkpoint is short.
CHECKPOINT_FALLBACK_PAGES = 4000


def _plain_appends(ops: Sequence[WriteOp], appends: bool) -> TypeGuard[Sequence[AppendOp]]:
    """True for a batch of appends to distinct sessions (the group-commit fast path);
    ``appends``: :func:`~stores._batching.check_ops` found every op an append of events
    (then only the sessions are looked at)."""
    if not appends and not all(isinstance(op, AppendOp) for op in ops):
        return False
    return len({op.session_id for op in ops}) == len(ops)


def _apply_isolated(conn: apsw.Connection, op: WriteOp, now: float) -> int:
    """One op of a general batch, in a savepoint of its own (see :func:`run_batch`)."""
    return in_savepoint(conn, sqlops.apply_op, op, now)


class _OpByOp(Exception):
    """The fast path met a value too big for SQLite: redo the batch op by op, so that
    the op holding it fails alone (a control-flow signal, never seen by callers)."""


class SqliteStore(SqliteLeases, SqliteMaintenance, BatchingStore):
    """A :class:`~stores._contract.Store` in one SQLite file (WAL, apsw), with the
    operator's methods of :class:`~stores.sqlite._maintenance.SqliteMaintenance`
    (integrity and lineage checks, storage figures, online backup).

    Args:
        path: the database file; created (mode 0644 before umask) if missing.
        synchronous: ``"normal"`` (commits are atomic and survive a process crash; fsync at
            checkpoints and :meth:`sync`) or ``"full"`` (fsync at every commit).
        busy_timeout_ms: how long a write waits for another connection's lock before
            raising :class:`~stores._errors.StoreBusyError`.
        integrity_check_on_open: run ``PRAGMA integrity_check`` at open and refuse a
            damaged file with :class:`~stores._errors.StoreCorruptError`.
        checkpoints: ``"auto"`` (a commit that leaves 1000+ WAL frames copies them into
            the database file, SQLite's default) or ``"deferred"`` (commits leave that to
            the owner, who calls :meth:`checkpoint_wal` on another handle, off the write path;
            see :data:`Checkpoints`).
        read_only: open an existing file for reading only: it is never created, migrated
            or written, and every write method raises :class:`~stores._errors.ReadOnlyError`.
            No file is created beside it either: while nobody has the database open (it
            has no ``-wal``), it is read as immutable (:attr:`immutable`), and a writer
            that comes along is noticed at the next call, which then reads through the
            writer's ``-wal`` (see :mod:`stores.sqlite._readonly`).
        length_limit: SQLite's ``SQLITE_LIMIT_LENGTH`` for this connection, in bytes: the
            longest text and the largest row it stores or reads (``None``: SQLite's
            1,000,000,000). A batch op that would store more fails alone with
            :class:`~stores._errors.InvalidEventError`. Clones inherit it.

    Every option is checked before any file is touched. Raises (at open):
    :class:`~stores._errors.InvalidArgumentError` (bad option or path),
    :class:`~stores._errors.UnsupportedFormatError` for a foreign or newer file (left
    untouched) -- or, read-only, an older one --, :class:`~stores._errors.StoreCorruptError`,
    :class:`~stores._errors.StoreIOError`.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: Synchronous = "normal",
        busy_timeout_ms: int = 5000,
        integrity_check_on_open: bool = False,
        checkpoints: Checkpoints = "auto",
        read_only: bool = False,
        length_limit: int | None = None,
    ) -> None:
        self.path = check_path(path)
        check_options(
            synchronous=synchronous,
            checkpoints=checkpoints,
            busy_timeout_ms=busy_timeout_ms,
            integrity_check=integrity_check_on_open,
            read_only=read_only,
            length_limit=length_limit,
        )
        self.synchronous: Synchronous = synchronous
        self.busy_timeout_ms = busy_timeout_ms
        self.checkpoints: Checkpoints = checkpoints
        self.read_only = read_only
        self.length_limit = length_limit
        #: True while the file is read as immutable: a read-only store of a database that
        #: nobody has open (no ``-wal``), or whose WAL index cannot be created here.
        self.immutable = False
        #: Frames in the WAL after this handle's last commit (kept with ``"deferred"``).
        self.wal_pages = 0
        self._fallback_done = 0
        self._lock = threading.RLock()
        self._conn: apsw.Connection | None
        self._ro: ReadOnlyFile | None = None
        if read_only:
            self._ro = ReadOnlyFile.open(
                self.path,
                busy_timeout_ms=busy_timeout_ms,
                integrity_check=integrity_check_on_open,
                length_limit=length_limit,
            )
            self._conn, self.immutable = self._ro.conn, self._ro.immutable
        else:
            self._conn = open_connection(
                self.path,
                synchronous=synchronous,
                busy_timeout_ms=busy_timeout_ms,
                integrity_check=integrity_check_on_open,
                length_limit=length_limit,
            )
        if checkpoints == "deferred" and not read_only:
            # A WAL hook replaces SQLite's own autocheckpoint (which is such a hook).
            self._conn.set_wal_hook(self._note_wal_pages)
        self._unsynced = False
        self._known = sqlops.KnownHeads()

    @property
    def capabilities(self) -> Capabilities:
        """See :attr:`Store.capabilities`: durable and blocking; WAL upkeep with
        ``checkpoints="deferred"`` (a writing handle); immutable while read as such."""
        return Capabilities(
            durable=True,
            blocking=True,
            syncs_every_commit=self.synchronous == "full",
            wal_upkeep=self.checkpoints == "deferred" and not self.read_only,
            immutable=self.immutable,
        )

    # apsw's WAL hook signature (the connection and database name are not needed here).
    def _note_wal_pages(self, conn: apsw.Connection, name: str, pages: int) -> int:  # noqa: ARG002
        """WAL hook (``checkpoints="deferred"``): runs in the committing thread."""
        if pages < self.wal_pages:
            self._fallback_done = 0  # the WAL was restarted
        self.wal_pages = pages
        return apsw.SQLITE_OK

    # -- plumbing ----------------------------------------------------------------------

    @contextmanager
    def _connection(self, what: str, *, write: bool = False) -> Iterator[apsw.Connection]:
        """Lock the connection and translate driver errors for one operation (``write``:
        see :func:`~stores.sqlite._connection.map_errors`); a write is refused on a read-only
        store, after the closed check."""
        with self._lock:
            conn = self._open(what, write)
            watch = self._ro if self._ro is not None and self._ro.watched is not None else None
            if watch is None:
                with map_errors(what, writing=write):
                    yield conn
                return
            with map_errors(what):
                if watch.changed():  # a writer came or went: read afresh
                    watch.reopen()
                    conn = self._conn = watch.conn
                    self.immutable = watch.immutable
            try:
                with map_errors(what):
                    yield conn
            except TidelogError:
                if watch.changed():
                    raise Reread from None  # a failure caused by the change, maybe
                raise
            if watch.changed():
                raise Reread  # what was read may mix two versions of the file

    def _open(self, what: str, write: bool) -> apsw.Connection:
        """The connection for one operation, under the lock; raises
        :class:`~stores.ClosedError` once closed, and for a ``write``
        :class:`~stores.ReadOnlyError` on a read-only store."""
        conn = self._conn
        if conn is None:
            raise ClosedError(f"{what}: this SqliteStore was closed")
        if write and self.read_only:
            raise ReadOnlyError(what, f"this SqliteStore of {self.path!r} is read-only")
        return conn

    def _write(
        self, what: str, *, sync: bool = False, fast_append: bool = False, touch: bool = False
    ) -> WriteTransaction:
        """One ``BEGIN IMMEDIATE`` transaction; rolled back whole on any exception
        (:class:`~stores.sqlite._connection.WriteTransaction`).

        Any write but the append fast path's (``fast_append``) may change heads or leases
        behind that path's memory (:class:`~stores.sqlite._ops.KnownHeads`): it is forgotten.
        ``touch`` writes a counter, for a ``sync`` transaction that writes nothing else
        (an empty transaction would not reach the WAL, so it would not fsync it).
        """
        return WriteTransaction(
            self._lock,
            functools.partial(self._open_write, what, fast_append),
            what,
            full=sync and self.synchronous == "normal",
            touch=touch,
            committed=self._committed,
        )

    def _open_write(self, what: str, fast_append: bool) -> apsw.Connection:
        conn = self._open(what, True)
        if not fast_append:
            self._known.forget()
        return conn

    def _committed(self, conn: apsw.Connection, full: bool) -> None:
        """After a write's COMMIT (under the lock): is it fsynced yet, and the fallback
        checkpoint if this commit left too many WAL frames."""
        self._unsynced = not (full or self.synchronous == "full")
        if self.wal_pages >= CHECKPOINT_FALLBACK_PAGES:
            self._fallback_checkpoint(conn)

    # -- writes ------------------------------------------------------------------------

    def create(
        self, session_id: str, header: dict[str, JSON] | None = None, *, exist_ok: bool = False
    ) -> SessionInfo:
        """See :meth:`Store.create`."""
        header_json = check_create_args(session_id, header, exist_ok)
        with self._write("create") as conn:
            return sqlops.create_session(
                conn, session_id, header_json, time.time(), exist_ok=exist_ok
            )

    def write_batch(self, ops: Sequence[WriteOp], *, sync: bool = False) -> list[BatchResult]:
        """See :meth:`Store.write_batch`: one transaction, a savepoint per op -- or, for
        appends to distinct sessions, a handful of statements for the whole batch."""
        appends = check_ops(ops, sync)  # every op an append of events (the usual batch)
        writes = appends or any(not isinstance(op, AppendOp) or op.events for op in ops)
        if not writes and not (sync and self._needs_sync()):
            # Nothing to write and nothing to make durable: checks only, no transaction.
            with self._connection("write_batch", write=True) as conn:
                return [sqlops.check_op(conn, op) for op in ops]
        if _plain_appends(ops, appends):
            try:
                with self._write(
                    "write_batch", sync=sync, fast_append=True, touch=not writes
                ) as conn:
                    try:
                        results, committed = sqlops.append_many(conn, ops, time.time(), self._known)
                    except apsw.TooBigError as exc:
                        raise _OpByOp from exc
            except _OpByOp:
                pass  # rolled back whole; the general path below isolates the op
            else:
                committed()
                return results
        return run_batch(
            ops,
            self._write("write_batch", sync=sync, touch=not writes),
            _apply_isolated,
            permanent=sqlops.permanent_error,
        )

    def _needs_sync(self) -> bool:
        """True if commits of this handle are not yet fsynced."""
        return self._unsynced and self.synchronous == "normal"

    def delete(self, session_id: str) -> bool:
        """See :meth:`Store.delete`."""
        validate_session_id(session_id)
        with self._write("delete") as conn:
            return sqlops.delete_session(conn, session_id)

    def fork(
        self,
        source_id: str,
        new_id: str,
        *,
        at_seq: int | None = None,
        header: dict[str, JSON] | None = None,
    ) -> SessionInfo:
        """See :meth:`Store.fork`. O(1): the child shares the source's prefix (see
        :mod:`stores.sqlite._lineage`)."""
        extra = check_fork_args(source_id, new_id, header)
        with self._write("fork") as conn:
            return fork_session(conn, source_id, new_id, at_seq, extra, time.time())

    def truncate(self, session_id: str, to_seq: int) -> int:
        """See :meth:`Store.truncate`."""
        validate_session_id(session_id)
        check_seq(to_seq, "to_seq")
        with self._write("truncate") as conn:
            return sqlops.truncate_session(conn, session_id, to_seq, time.time())

    @rereads
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
        """See :meth:`Store.read`."""
        validate_session_id(session_id)
        bound = check_read_args(since_seq, until_seq, limit, pin, from_end)
        until = (1 << 62) if bound is None else bound
        with self._connection("read") as conn:
            if pin is None:
                return read_session_events(conn, session_id, since_seq, until, limit, from_end)
            with transaction(conn):
                check_pin(conn, session_id, pin)
                return read_session_events(conn, session_id, since_seq, until, limit, from_end)

    @rereads
    def head(self, session_id: str) -> int:
        """See :meth:`Store.head`."""
        validate_session_id(session_id)
        with self._connection("head") as conn:
            row = conn.execute("SELECT head FROM sessions WHERE id=?", (session_id,)).fetchone()
        return 0 if row is None else int(row[0])

    @rereads
    def stat(self, session_id: str) -> SessionInfo | None:
        """See :meth:`Store.stat`."""
        validate_session_id(session_id)
        with self._connection("stat") as conn:
            row = conn.execute(
                f"SELECT {INFO_COLUMNS} FROM sessions WHERE id=?", (session_id,)
            ).fetchone()
        return None if row is None else session_info(row)

    @rereads
    def pin(self, session_id: str) -> Pin | None:
        """See :meth:`Store.pin`."""
        validate_session_id(session_id)
        with self._connection("pin") as conn:
            row = conn.execute(
                "SELECT sid, head, epoch FROM sessions WHERE id=?", (session_id,)
            ).fetchone()
        return None if row is None else Pin(session_id, row[1], row[0], row[2])

    @rereads
    def find_run(self, session_id: str, run_id: str) -> tuple[int, int] | None:
        """See :meth:`Store.find_run` (served by the ``events_by_run`` index)."""
        validate_session_id(session_id)
        check_text(run_id, "run_id")
        with self._connection("find_run") as conn:
            row = conn.execute("SELECT sid FROM sessions WHERE id=?", (session_id,)).fetchone()
            if row is None:
                return None
            return lineage_find_run(conn, ranges_of(conn, row[0]), run_id)

    @rereads
    def refresh_pin(self, pin: Pin) -> Pin:
        """See :meth:`Store.refresh_pin`."""
        check_pin_arg(pin)
        with self._connection("refresh_pin") as conn, transaction(conn):
            check_pin(conn, pin.session_id, pin)
            head, epoch = one(
                conn, "SELECT head, epoch FROM sessions WHERE sid=?", (pin.incarnation,)
            )
        return Pin(pin.session_id, head, pin.incarnation, epoch)

    @rereads
    def list_sessions(
        self,
        *,
        limit: int | None = None,
        prefix: str | None = None,
        after: str | None = None,
        order: ListOrder = "id",
    ) -> list[SessionInfo]:
        """See :meth:`Store.list_sessions`: one range of the ids' unique index."""
        check_list_args(limit, prefix, after, order)
        sql, args = list_query(limit, prefix, after, order)
        with self._connection("list_sessions") as conn:
            rows = conn.execute(sql, args).fetchall()
        return [session_info(r) for r in rows]

    # -- projection checkpoints --------------------------------------------------------

    def save_projection(self, pin: Pin, name: str, version: int, state_json: str) -> None:
        """See :meth:`Store.save_projection`."""
        check_pin_arg(pin)
        check_projection_args(name, version, state_json)
        with self._write("save_projection") as conn:
            aux.save_projection(conn, pin, name, version, state_json)

    @rereads
    def load_projection(self, session_id: str, name: str, version: int) -> tuple[int, str] | None:
        """See :meth:`Store.load_projection`."""
        validate_session_id(session_id)
        check_projection_args(name, version)
        with self._connection("load_projection") as conn, transaction(conn):
            return aux.load_projection(conn, session_id, name, version)

    # -- maintenance, handles ----------------------------------------------------------

    def checkpoint_wal(self) -> int:
        """See :meth:`WalUpkeep.checkpoint_wal`: a PASSIVE WAL checkpoint on this connection."""
        with self._connection("checkpoint_wal", write=True) as conn:
            return self._checkpoint(conn)

    @staticmethod
    def _checkpoint(conn: apsw.Connection) -> int:
        try:
            _, done = conn.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_PASSIVE)
        except apsw.BusyError:
            return 0  # another connection is checkpointing right now
        return int(done)

    def _fallback_checkpoint(self, conn: apsw.Connection) -> None:
        """``checkpoints="deferred"`` and this commit left :data:`CHECKPOINT_FALLBACK_PAGES`
        more frames than this handle last checkpointed: checkpoint here, so the WAL can
        restart (see the constant). Runs after the COMMIT: a failure changes nothing and
        is left for the next time."""
        if self.wal_pages - self._fallback_done < CHECKPOINT_FALLBACK_PAGES:
            return
        with contextlib.suppress(apsw.Error):
            self._fallback_done = self._checkpoint(conn)

    @rereads
    def data_version(self) -> int:
        """``PRAGMA data_version``: changes when another connection or process commits."""
        with self._connection("data_version") as conn:
            version = int(one(conn, "PRAGMA data_version")[0])
        # A reopened read-only connection counts afresh: its generation tells them apart.
        return version + (0 if self._ro is None else self._ro.generation << 32)

    def clone(self, *, read_only: bool | None = None) -> SqliteStore:
        """Another connection to the same file with the same settings; read-only if this
        store is, or if ``read_only`` is True."""
        if read_only is not None:
            check_flag(read_only, "read_only")
        with self._connection("clone"):
            pass
        return SqliteStore(
            self.path,
            synchronous=self.synchronous,
            busy_timeout_ms=self.busy_timeout_ms,
            checkpoints=self.checkpoints,
            read_only=self.read_only or bool(read_only),
            length_limit=self.length_limit,
        )

    def close(self) -> None:
        """Close the connection. Idempotent; later calls raise :class:`ClosedError`."""
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            with map_errors("close"):
                conn.close()


_: type[Store] = SqliteStore
