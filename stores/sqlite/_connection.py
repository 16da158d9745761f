"""What every SQLite module of tidelog uses: error translation at the store boundary
(:func:`map_errors`) and the connection helpers (:func:`one`, :func:`transaction`,
:func:`in_savepoint`, :data:`INSERT_EVENT`). Nothing here is called on a trio thread.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
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

__all__ = ["INSERT_EVENT", "in_savepoint", "map_errors", "one", "transaction"]

T = TypeVar("T")


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
    except apsw.TooBigError as exc:
        if writing:
            raise InvalidArgumentError(
                f"{what}: a value is larger than SQLite accepts on this connection ({exc})"
            ) from exc
        raise StoreError(
            f"{what}: a stored value is larger than this connection's length limit ({exc})"
        ) from exc
    except (apsw.BusyError, apsw.LockedError) as exc:
        raise StoreBusyError(f"{what}: the database stayed locked ({exc})") from exc
    except (apsw.CorruptError, apsw.NotADBError) as exc:
        raise StoreCorruptError(f"{what}: the database file is corrupt ({exc})") from exc
    except (
        apsw.IOError,
        apsw.FullError,
        apsw.CantOpenError,
        apsw.PermissionsError,
        apsw.ReadOnlyError,
    ) as exc:
        raise StoreIOError(f"{what}: I/O failure ({exc})") from exc
    except (apsw.ConnectionClosedError, apsw.CursorClosedError) as exc:
        raise ClosedError(f"{what}: the connection is closed") from exc
    except UnicodeDecodeError as exc:  # damaged text in a page that still parses
        raise StoreCorruptError(f"{what}: stored text is not UTF-8 ({exc})") from exc
    except apsw.Error as exc:
        raise StoreError(f"{what}: {type(exc).__name__}: {exc}") from exc


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
