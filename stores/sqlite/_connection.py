"""What every SQLite module of tidelog uses: error translation at the store boundary
(:func:`map_errors`, :func:`store_error`) and the connection helpers (:func:`one`,
:func:`transaction`, :class:`WriteTransaction`, :func:`in_savepoint`,
:data:`INSERT_EVENT`). Nothing here is called on a trio thread.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from types import TracebackType
from typing import Any, TypeVar

import apsw

from .._errors import (
    ClosedError,
    InvalidArgumentError,
    StoreBusyError,
    StoreCorruptError,
    StoreError,
    StoreIOError,
)

__all__ = [
    "INSERT_EVENT",
    "WriteTransaction",
    "in_savepoint",
    "map_errors",
    "one",
    "store_error",
    "transaction",
]

T = TypeVar("T")


def store_error(exc: BaseException, what: str, *, writing: bool = False) -> BaseException:
    """The tidelog error that stands for driver exception ``exc`` (see :func:`map_errors`),
    or ``exc`` itself if it is none of the driver's."""
    if isinstance(exc, apsw.TooBigError):
        if writing:
            return InvalidArgumentError(
                f"{what}: a value is larger than SQLite accepts on this connection ({exc})"
            )
        return StoreError(
            f"{what}: a stored value is larger than this connection's length limit ({exc})"
        )
    if isinstance(exc, apsw.BusyError | apsw.LockedError):
        return StoreBusyError(f"{what}: the database stayed locked ({exc})")
    if isinstance(exc, apsw.CorruptError | apsw.NotADBError):
        return StoreCorruptError(f"{what}: the database file is corrupt ({exc})")
    if isinstance(
        exc,
        apsw.IOError
        | apsw.FullError
        | apsw.CantOpenError
        | apsw.PermissionsError
        | apsw.ReadOnlyError,
    ):
        return StoreIOError(f"{what}: I/O failure ({exc})")
    if isinstance(exc, apsw.ConnectionClosedError | apsw.CursorClosedError):
        return ClosedError(f"{what}: the connection is closed")
    if isinstance(exc, UnicodeDecodeError):  # damaged text in a page that still parses
        return StoreCorruptError(f"{what}: stored text is not UTF-8 ({exc})")
    if isinstance(exc, apsw.Error):
        return StoreError(f"{what}: {type(exc).__name__}: {exc}")
    return exc


@contextmanager
def map_errors(what: str, *, writing: bool = False) -> Iterator[None]:
    """Translate apsw exceptions raised inside the block into tidelog errors.

    ``what`` names the operation for the message. The apsw exception is kept as
    ``__cause__``; no driver exception leaves this block. A value over SQLite's length
    limit (``TooBigError``) is the caller's when ``writing`` -- an
    :class:`InvalidArgumentError`: retrying the same write can never succeed -- and a
    :class:`StoreError` when reading (a stored value longer than this connection's
    ``length_limit``).
    """
    try:
        yield
    except (apsw.Error, UnicodeDecodeError) as exc:
        raise store_error(exc, what, writing=writing) from exc


#: The one statement that stores events (appends, rewrites, copies protecting a fork).
INSERT_EVENT = "INSERT INTO events(sid, seq, ts, kind, data, run_id) VALUES (?,?,?,?,?,?)"


def one(conn: apsw.Connection, sql: str, args: tuple[Any, ...] = ()) -> tuple[Any, ...]:
    """Run a query that always yields exactly one row and return it."""
    row = conn.execute(sql, args).fetchone()
    assert row is not None, sql
    return tuple(row)


@contextmanager
def transaction(conn: apsw.Connection, begin: str = "BEGIN") -> Iterator[None]:
    """One transaction around the block: ``begin`` (``"BEGIN"`` for a read,
    ``"BEGIN IMMEDIATE"`` for a write), COMMIT at the end, ROLLBACK on any exception.

    The rollback is skipped when SQLite already ended the transaction itself (an I/O error
    rolls it back), so the original error is what propagates. A read transaction that
    ended that way has nothing left to commit; a write transaction always runs its COMMIT,
    so one that SQLite ended early fails there instead of passing for committed.
    """
    conn.execute(begin)
    try:
        yield
    except BaseException:
        if not conn.get_autocommit():
            conn.execute("ROLLBACK")
        raise
    if begin != "BEGIN" or not conn.get_autocommit():
        conn.execute("COMMIT")


class WriteTransaction:
    """One write under its connection's lock: ``BEGIN IMMEDIATE`` ... ``COMMIT``,
    ``ROLLBACK`` on any exception (unless SQLite already ended the transaction), and
    driver errors translated as :func:`map_errors` does for a write.

    The same as ``with lock, map_errors(what, writing=True), transaction(conn, "BEGIN
    IMMEDIATE")``, with ``PRAGMA synchronous=FULL`` set around the transaction for
    ``full`` (a durability barrier on a ``synchronous="normal"`` connection) and
    ``committed(conn, full)`` called after the COMMIT, under the lock. ``open_conn`` runs
    first under the lock and returns the connection or raises (a closed or read-only
    handle: its errors are not translated). A class, not nested ``@contextmanager``
    generators: every batch opens one, and the four generators it replaced cost about
    40k instructions, more than a lone append's own statements (``bench/HISTORY.md``).
    """

    __slots__ = ("_committed", "_conn", "_full", "_lock", "_open", "_touch", "_what")

    def __init__(
        self,
        lock: AbstractContextManager[Any],
        open_conn: Callable[[], apsw.Connection],
        what: str,
        *,
        full: bool,
        touch: bool,
        committed: Callable[[apsw.Connection, bool], None],
    ) -> None:
        self._lock = lock
        self._open = open_conn
        self._what = what
        self._full = full
        self._touch = touch
        self._committed = committed

    def __enter__(self) -> apsw.Connection:
        lock = self._lock
        lock.__enter__()
        try:
            conn = self._conn = self._open()
            try:
                if self._full:
                    conn.execute("PRAGMA synchronous=FULL")
                try:
                    conn.execute("BEGIN IMMEDIATE")
                except BaseException:
                    if self._full:
                        conn.execute("PRAGMA synchronous=NORMAL")
                    raise
            except (apsw.Error, UnicodeDecodeError) as exc:
                raise store_error(exc, self._what, writing=True) from exc
        except BaseException:
            lock.__exit__(None, None, None)
            raise
        return conn

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        conn = self._conn
        try:
            try:
                try:
                    if kind is None and self._touch:
                        try:
                            # A sync barrier that writes nothing else must still reach
                            # the WAL to be fsynced: it bumps a counter.
                            conn.execute("UPDATE meta SET value=value+1 WHERE key='sync_epoch'")
                        except BaseException:
                            if not conn.get_autocommit():
                                conn.execute("ROLLBACK")
                            raise
                    if kind is None:
                        conn.execute("COMMIT")
                        self._committed(conn, self._full)
                    elif not conn.get_autocommit():
                        conn.execute("ROLLBACK")
                finally:
                    if self._full:
                        conn.execute("PRAGMA synchronous=NORMAL")
            except (apsw.Error, UnicodeDecodeError) as exc:
                raise store_error(exc, self._what, writing=True) from exc
            if error is not None and isinstance(error, apsw.Error | UnicodeDecodeError):
                raise store_error(error, self._what, writing=True) from error
        finally:
            self._lock.__exit__(None, None, None)


def in_savepoint(conn: apsw.Connection, apply: Callable[..., T], *args: Any) -> T:
    """``apply(conn, *args)`` made atomic inside the caller's transaction: on any exception
    its changes are rolled back (the transaction goes on) and the exception propagates.

    A plain function rather than a context manager: it runs once per op of a batch, and a
    generator-based context manager costs as much as the two statements."""
    conn.execute("SAVEPOINT op")
    try:
        result = apply(conn, *args)
    except BaseException:
        if not conn.get_autocommit():  # else SQLite already rolled everything back
            conn.execute("ROLLBACK TO op")
            conn.execute("RELEASE op")
        raise
    conn.execute("RELEASE op")
    return result
