"""Read-only connections to a tidelog file that create no file and change none.

A reader of a WAL database needs its ``-wal`` and its ``-shm`` index; SQLite creates both
next to the database for any reader that finds them missing -- which leaves files owned
by whoever inspected the database beside it, and fails in a directory the reader may not
write. A read-only store avoids that:

* while the database has no ``-wal`` (no connection has it open: the last one to close
  checkpointed it and removed it), the whole database is in the main file, which is read
  as *immutable* (``immutable=1``: no locks, no ``-wal``, no ``-shm``);
* otherwise the ``-wal`` and ``-shm`` its writers made are used as they are (``mode=ro``);
  only if the ``-shm`` is missing beside an existing ``-wal`` does SQLite create it --
  and where it cannot (a directory this process may not write), an empty ``-wal`` is
  ignored (immutable again) and one holding commits refuses the open, since an
  immutable reader would not see them.

An immutable reader must not miss a writer that comes along, so :class:`ReadOnlyFile`
remembers the state of the files (:class:`FileState`: the database file's identity,
size and times, and the ``-wal``'s) and the store compares it before and after every
call: if anything changed, the call is made again on a connection opened afresh under
the rules above (a writer that came has made the ``-wal``, which is then used). What
remains is a writer that opens, commits, checkpoints and closes within one call and
within the file system's timestamp granularity: it would have to leave the database
file's size, modification and change times as they were.

Nothing here is called on a trio thread.
"""

from __future__ import annotations

import functools
import os
import pathlib
from collections.abc import Callable
from typing import Concatenate, ParamSpec, TypeVar

import apsw
import attrs

from .._errors import StoreBusyError, StoreCorruptError, StoreIOError, UnsupportedFormatError
from ._connection import map_errors
from ._schema import SCHEMA_VERSION, check_identity, check_integrity, check_sqlite_header

__all__ = ["FileState", "ReadOnlyFile", "Reread", "file_state", "rereads"]

P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S")

#: How often a call is made again because a writer changed the file meanwhile, before it
#: gives up (a writer opening and closing the file non-stop).
MAX_REREADS = 50


class Reread(Exception):
    """A writer changed the file while an immutable read-only connection read it: the
    call is made again on a fresh connection (a control-flow signal, never seen by
    callers)."""


def rereads(
    method: Callable[Concatenate[S, P], R],
) -> Callable[Concatenate[S, P], R]:
    """Make a read method again, on a fresh connection, when a writer changed the file
    under it (see :mod:`stores.sqlite._readonly`); give up after :data:`MAX_REREADS`
    tries with :class:`~stores._errors.StoreBusyError`."""

    @functools.wraps(method)
    def call(self: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
        for _ in range(MAX_REREADS):
            try:
                return method(self, *args, **kwargs)
            except Reread:
                continue
        raise StoreBusyError(
            f"{method.__name__}: the database kept changing while it was read as immutable"
        )

    return call


@attrs.frozen
class FileState:
    """What an immutable reader watches: the database file's device, inode, size,
    modification and change times (ns), and the same of its ``-wal`` (``None``: none)."""

    database: tuple[int, int, int, int, int]
    wal: tuple[int, int, int, int, int] | None


def _stat(path: str) -> tuple[int, int, int, int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def file_state(path: str) -> FileState:
    """The current :class:`FileState` of the database at ``path``."""
    database = _stat(path)
    if database is None:
        raise StoreIOError(f"{path!r}: the database file is gone")
    return FileState(database, _stat(path + "-wal"))


@attrs.define
class ReadOnlyFile:
    """The connection of a read-only store, reopened when a writer changes the files
    under an immutable reader (see the module doc)."""

    path: str
    busy_timeout_ms: int
    length_limit: int | None
    conn: apsw.Connection
    #: True while the file is read as immutable.
    immutable: bool
    #: The files' state when the immutable connection was opened; ``None`` otherwise.
    watched: FileState | None
    #: How many times the connection was reopened (it changes what data_version reports).
    generation: int = 0

    @classmethod
    def open(
        cls,
        path: str,
        *,
        busy_timeout_ms: int,
        integrity_check: bool = False,
        length_limit: int | None = None,
    ) -> ReadOnlyFile:
        """Open ``path`` read-only (see the module doc).

        Raises:
            StoreIOError: the file does not exist or cannot be read, or its ``-wal`` holds
                commits that cannot be read from here.
            UnsupportedFormatError: foreign or newer file, or one whose schema is older
                than this tidelog's (it needs a migration, which only a writable open does).
            StoreCorruptError: not a database, or ``integrity_check`` found damage.
        """
        conn, watched = _open(path, busy_timeout_ms, integrity_check, length_limit)
        return cls(path, busy_timeout_ms, length_limit, conn, watched is not None, watched)

    def changed(self) -> bool:
        """True if a writer changed the files since the immutable connection was opened
        (always False for a connection that reads through the ``-wal``)."""
        return self.watched is not None and file_state(self.path) != self.watched

    def reopen(self) -> None:
        """Replace the connection by a fresh one, under the rules of :meth:`open`."""
        self.conn.close()
        self.conn, self.watched = _open(self.path, self.busy_timeout_ms, False, self.length_limit)
        self.immutable = self.watched is not None
        self.generation += 1


def _open(
    path: str, busy_timeout_ms: int, integrity_check: bool, length_limit: int | None
) -> tuple[apsw.Connection, FileState | None]:
    """One read-only connection and, if it is immutable, the state it relies on."""
    if not os.path.isfile(path):
        what = "not a regular file" if os.path.exists(path) else "no such file"
        raise StoreIOError(f"open {path!r} read-only: {what} (a read-only store never creates one)")
    check_sqlite_header(path)
    uri = pathlib.Path(os.path.abspath(path)).as_uri() + "?mode=ro"
    state = file_state(path)  # before the open: a writer coming later changes it
    immutable = state.wal is None
    conn = _connect(path, uri + "&immutable=1" if immutable else uri)
    try:
        with map_errors(f"open {path!r} read-only"):
            conn.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
            conn.set_busy_timeout(busy_timeout_ms)
            try:
                version = check_identity(conn)
            except (apsw.ReadOnlyError, apsw.CantOpenError) as exc:
                if immutable:
                    raise
                _wal_must_be_empty(path, exc)  # and its index cannot be created here
                conn.close()
                conn, immutable = _connect(path, uri + "&immutable=1"), True
                conn.set_busy_timeout(busy_timeout_ms)
                version = check_identity(conn)
            if version < SCHEMA_VERSION:
                raise UnsupportedFormatError(
                    f"open {path!r} read-only: schema version {version} is older than this "
                    f"tidelog's ({SCHEMA_VERSION}); it needs a migration, which a read-only "
                    "open never does: open it once with read_only=False"
                )
            if integrity_check:
                ok, detail = check_integrity(conn)
                if not ok:
                    raise StoreCorruptError(f"open {path!r}: integrity check failed: {detail}")
            if length_limit is not None:
                conn.limit(apsw.SQLITE_LIMIT_LENGTH, length_limit)
    except BaseException:
        conn.close()
        raise
    return conn, (state if immutable else None)


def _connect(path: str, uri: str) -> apsw.Connection:
    flags = apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI | apsw.SQLITE_OPEN_NOFOLLOW
    with map_errors(f"open {path!r} read-only"):
        return apsw.Connection(uri, flags=flags)


def _wal_must_be_empty(path: str, cause: apsw.Error) -> None:
    """Before reading ``path`` as immutable: refuse if its WAL holds commits (an
    immutable reader ignores the WAL, so it would miss them)."""
    try:
        size = os.path.getsize(path + "-wal")
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StoreIOError(f"open {path!r} read-only: cannot inspect its WAL: {exc}") from cause
    if size > 0:
        raise StoreIOError(
            f"open {path!r} read-only: its WAL holds commits, and their index (-shm) cannot "
            f"be created here ({cause}); open it once where it is writable to checkpoint it"
        ) from cause
