"""The SQLite file format of tidelog: schema, markers, migrations and connection setup.

Every connection tidelog opens goes through :func:`open_connection`, the one place where
pragmas are set and the file's identity is checked. Nothing here is called on a trio thread.

The file is marked with ``PRAGMA application_id`` (:data:`APPLICATION_ID`) and
``PRAGMA user_version`` (:data:`SCHEMA_VERSION`). A file with another application id, or an
unmarked file that already has tables, is foreign and refused untouched; a file from a newer
tidelog is refused untouched; an older one is migrated step by step in one transaction.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable

import apsw

from .._contract import Synchronous
from .._errors import (
    InvalidArgumentError,
    StoreCorruptError,
    StoreError,
    StoreIOError,
    TidelogError,
    UnsupportedFormatError,
)
from .._records import check_flag
from ._connection import map_errors, transaction

__all__ = [
    "APPLICATION_ID",
    "MAX_BUSY_TIMEOUT_MS",
    "MAX_LENGTH_LIMIT",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "check_identity",
    "check_integrity",
    "check_options",
    "check_path",
    "check_sqlite_header",
    "open_connection",
]

#: ``PRAGMA application_id`` of every tidelog database: the bytes "tdlg".
APPLICATION_ID = 0x74646C67
#: The schema version this code writes (``PRAGMA user_version``).
SCHEMA_VERSION = 4

_SCHEMA = """
CREATE TABLE sessions(
    sid INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    head INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    header TEXT NOT NULL DEFAULT '{}',
    parent_id TEXT,
    parent_seq INTEGER,
    epoch INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX sessions_by_update ON sessions(updated_at DESC, id);
CREATE TABLE events(
    sid INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    ts REAL NOT NULL,
    kind TEXT NOT NULL,
    data TEXT NOT NULL,
    run_id TEXT,
    PRIMARY KEY(sid, seq)
) WITHOUT ROWID;
CREATE TABLE cuts(
    sid INTEGER NOT NULL,
    epoch INTEGER NOT NULL,
    to_seq INTEGER NOT NULL,
    PRIMARY KEY(sid, epoch)
) WITHOUT ROWID;
CREATE TABLE leases(
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    holder TEXT NOT NULL,
    expires REAL NOT NULL
) WITHOUT ROWID;
CREATE TABLE meta(key TEXT PRIMARY KEY, value) WITHOUT ROWID;
INSERT INTO meta(key, value) VALUES ('sync_epoch', 0);
"""


#: Migration steps: ``MIGRATIONS[v]`` upgrades a version-``v`` file to ``v + 1``. Version 0
#: is a new, empty file. All pending steps run in one ``BEGIN IMMEDIATE`` transaction.
def _create_schema(conn: apsw.Connection) -> None:
    conn.execute(_SCHEMA)


def _index_runs(conn: apsw.Connection) -> None:
    """Version 2: find a run's events without scanning the session (history idempotency),
    and drop the index on ``sessions.updated_at``: every append moved each touched
    session's entry in it (extra WAL pages per commit) only to speed up
    ``list_sessions``, which now sorts instead."""
    conn.execute("CREATE INDEX events_by_run ON events(sid, run_id, seq) WHERE run_id IS NOT NULL")
    conn.execute("DROP INDEX IF EXISTS sessions_by_update")


def _forks_and_projections(conn: apsw.Connection) -> None:
    """Version 3: forks share their parent's prefix (``base_sid``/``base_seq``), and
    projection checkpoints get a table."""
    conn.execute("ALTER TABLE sessions ADD COLUMN base_sid INTEGER")
    conn.execute("ALTER TABLE sessions ADD COLUMN base_seq INTEGER NOT NULL DEFAULT 0")
    conn.execute("CREATE INDEX sessions_by_base ON sessions(base_sid) WHERE base_sid IS NOT NULL")
    conn.execute(
        "CREATE TABLE projections(sid INTEGER NOT NULL, name TEXT NOT NULL, "
        "version INTEGER NOT NULL, seq INTEGER NOT NULL, epoch INTEGER NOT NULL, "
        "state TEXT NOT NULL, PRIMARY KEY(sid, name)) WITHOUT ROWID"
    )


def _events_in_commit_order(conn: apsw.Connection) -> None:
    """Version 4: events in a rowid table (rows in commit order) with a unique index on
    ``(sid, seq)``, instead of clustered by ``(sid, seq)`` (``WITHOUT ROWID``).

    Chosen by measurement (``python -m bench.probes.layout``; W2, W3, W5; figures in
    bench/HISTORY.md): a group-commit batch appends to many sessions, and clustered by
    session each of their rows lands on another leaf page; in commit order they fill the
    last pages and only the small index entries scatter, so W2's commits write far less
    WAL and the file is smaller. The price: reading one session whose rows interleave with
    others' follows the index to scattered pages (W3 a little slower). The table is
    copied in seq order (a migrated file keeps each session's rows together)."""
    conn.execute(
        """
        CREATE TABLE events_v4(
            sid INTEGER NOT NULL,
            seq INTEGER NOT NULL,
            ts REAL NOT NULL,
            kind TEXT NOT NULL,
            data TEXT NOT NULL,
            run_id TEXT
        );
        INSERT INTO events_v4(sid, seq, ts, kind, data, run_id)
            SELECT sid, seq, ts, kind, data, run_id FROM events ORDER BY sid, seq;
        DROP TABLE events;
        ALTER TABLE events_v4 RENAME TO events;
        CREATE UNIQUE INDEX events_by_seq ON events(sid, seq);
        CREATE INDEX events_by_run ON events(sid, run_id, seq) WHERE run_id IS NOT NULL;
        """
    )


MIGRATIONS: dict[int, Callable[[apsw.Connection], None]] = {
    0: _create_schema,
    1: _index_runs,
    2: _forks_and_projections,
    3: _events_in_commit_order,
}


def _scalar(conn: apsw.Connection, sql: str) -> object:
    row = conn.execute(sql).fetchone()
    return None if row is None else row[0]


def check_identity(conn: apsw.Connection) -> int:
    """Return the file's schema version, or raise if it is not ours (reads only)."""
    app_id = _scalar(conn, "PRAGMA application_id")
    version = _scalar(conn, "PRAGMA user_version")
    assert isinstance(app_id, int) and isinstance(version, int)
    if app_id == 0:
        tables = _scalar(conn, "SELECT count(*) FROM sqlite_schema")
        if version != 0 or tables != 0:
            raise UnsupportedFormatError(
                "not a tidelog database: a SQLite file of another application "
                f"(application_id 0, {tables} schema objects)"
            )
        return 0
    if app_id != APPLICATION_ID:
        raise UnsupportedFormatError(
            f"not a tidelog database: application_id {app_id:#x}, expected {APPLICATION_ID:#x}"
        )
    if version > SCHEMA_VERSION:
        raise UnsupportedFormatError(
            f"database schema version {version} is newer than this tidelog "
            f"(knows up to {SCHEMA_VERSION}); upgrade tidelog"
        )
    return version


def _migrate(conn: apsw.Connection) -> None:
    """Bring the file to :data:`SCHEMA_VERSION` in one transaction (re-checked inside)."""
    with transaction(conn, "BEGIN IMMEDIATE"):
        version = check_identity(conn)
        while version < SCHEMA_VERSION:
            try:
                MIGRATIONS[version](conn)
            except (apsw.Error, TidelogError):
                raise  # apsw errors are translated by the caller's map_errors
            except Exception as exc:
                raise StoreError(
                    f"migration of schema version {version} to {version + 1} failed: {exc!r}"
                ) from exc
            version += 1
        conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")


_MAGIC = b"SQLite format 3\x00"
_HEADER_SIZE = 100


def check_sqlite_header(path: str) -> None:
    """Refuse, untouched, a non-empty file that cannot be a whole SQLite database (no
    SQLite header, or cut before the end of it): SQLite would treat some of these as a
    new, empty database and we would write a schema into them."""
    try:
        with open(path, "rb") as f:
            head = f.read(_HEADER_SIZE)
    except OSError as exc:
        raise StoreIOError(f"cannot read database file {path!r}: {exc}") from exc
    if not head:
        return  # a new (empty) file
    if len(head) < _HEADER_SIZE or not head.startswith(_MAGIC):
        what = "a truncated SQLite file" if _MAGIC.startswith(head[:16]) else "not a database"
        raise StoreCorruptError(f"open {path!r}: {what} ({len(head)}+ bytes, no full header)")


def _create_file(path: str) -> None:
    """Create the database file owner-writable only (no group/world write)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return
    except OSError as exc:
        raise StoreIOError(f"cannot create database file {path!r}: {exc}") from exc
    os.close(fd)


#: The longest ``busy_timeout_ms`` (SQLite takes a C ``int`` of milliseconds: ~24.8 days).
MAX_BUSY_TIMEOUT_MS = 2**31 - 1
#: The largest ``length_limit`` SQLite is built to accept here (its ``SQLITE_MAX_LENGTH``).
MAX_LENGTH_LIMIT = 1_000_000_000


def check_path(path: object) -> str:
    """The file name of a database path (``str`` or ``os.PathLike``), refused with
    :class:`InvalidArgumentError` if SQLite could not take it as a plain file name."""
    if not isinstance(path, str | os.PathLike):
        raise InvalidArgumentError(f"path must be a str or PathLike, not {type(path).__name__}")
    name = os.fspath(path)
    if not isinstance(name, str):
        raise InvalidArgumentError(f"path must name a file with a str, not {name!r}")
    if "\x00" in name:
        raise InvalidArgumentError(f"path contains a NUL character: {name!r}")
    try:
        name.encode("utf-8")  # SQLite takes UTF-8 file names
    except UnicodeEncodeError:
        raise InvalidArgumentError(f"path is not valid UTF-8: {name!r}") from None
    if not name or name == ":memory:" or name.startswith("file:"):
        raise InvalidArgumentError(
            f"path must name a file (use MemoryStore for in-memory data), not {name!r}"
        )
    return name


def check_options(
    *,
    synchronous: object,
    checkpoints: object,
    busy_timeout_ms: object,
    integrity_check: object,
    read_only: object,
    length_limit: object,
) -> None:
    """Refuse bad options of an open with :class:`InvalidArgumentError` -- before any
    file is created or opened."""
    if synchronous not in ("normal", "full"):
        raise InvalidArgumentError(f"synchronous must be 'normal' or 'full', not {synchronous!r}")
    if checkpoints not in ("auto", "deferred"):
        raise InvalidArgumentError(f"checkpoints must be 'auto' or 'deferred', not {checkpoints!r}")
    if type(busy_timeout_ms) is not int or not 0 <= busy_timeout_ms <= MAX_BUSY_TIMEOUT_MS:
        raise InvalidArgumentError(
            f"busy_timeout_ms must be an int in 0..{MAX_BUSY_TIMEOUT_MS}, not {busy_timeout_ms!r}"
        )
    check_flag(integrity_check, "integrity_check_on_open")
    check_flag(read_only, "read_only")
    if length_limit is not None and (
        type(length_limit) is not int or not 1 <= length_limit <= MAX_LENGTH_LIMIT
    ):
        raise InvalidArgumentError(
            f"length_limit must be None or an int in 1..{MAX_LENGTH_LIMIT}, not {length_limit!r}"
        )


def open_connection(
    path: str,
    *,
    synchronous: Synchronous,
    busy_timeout_ms: int,
    integrity_check: bool = False,
    length_limit: int | None = None,
) -> apsw.Connection:
    """Open, identify, migrate and configure one connection for reads and writes, creating
    the file if missing. Options are already checked (:func:`check_options`).

    Raises:
        UnsupportedFormatError: foreign or newer file (left untouched).
        StoreCorruptError: not a database, or ``integrity_check`` found damage.
        StoreIOError: the file cannot be created or opened.
        StoreBusyError: another process held the lock past ``busy_timeout_ms`` (setup).
    """
    _create_file(path)
    check_sqlite_header(path)
    sidecars = {suffix: os.path.exists(path + suffix) for suffix in ("-wal", "-shm")}
    with map_errors(f"open {path!r}"):
        conn = apsw.Connection(path, flags=apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_NOFOLLOW)
    try:
        with map_errors(f"open {path!r}"):
            # Until the file is known to be ours and sound, nothing may change it: no
            # checkpoint of a WAL found next to it on close, no journal-mode switch, no
            # migration. A refused file is left exactly as it was.
            conn.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
            conn.set_busy_timeout(busy_timeout_ms)
            version = check_identity(conn)
            if integrity_check and version > 0:
                ok, detail = check_integrity(conn)
                if not ok:
                    raise StoreCorruptError(f"open {path!r}: integrity check failed: {detail}")
            if version < SCHEMA_VERSION:
                mode = _scalar(conn, "PRAGMA journal_mode=WAL")
                if mode != "wal":
                    raise StoreIOError(f"open {path!r}: cannot enable WAL (journal_mode {mode})")
                _migrate(conn)
            else:
                mode = _scalar(conn, "PRAGMA journal_mode")
                if mode != "wal":
                    _scalar(conn, "PRAGMA journal_mode=WAL")
            conn.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 0)
            conn.execute(f"PRAGMA synchronous={synchronous.upper()}")
            if length_limit is not None:
                conn.limit(apsw.SQLITE_LIMIT_LENGTH, length_limit)
    except BaseException:
        conn.close()
        _remove_new_sidecars(path, sidecars)
        raise
    return conn


def _remove_new_sidecars(path: str, existed: dict[str, bool]) -> None:
    """After refusing a file: remove the empty -wal and the -shm that opening created."""
    for suffix, was_there in existed.items():
        sidecar = path + suffix
        if was_there or not os.path.exists(sidecar):
            continue
        if suffix == "-wal" and os.path.getsize(sidecar) != 0:
            continue  # never delete frames: they may be someone's data
        with contextlib.suppress(OSError):
            os.remove(sidecar)


def check_integrity(conn: apsw.Connection) -> tuple[bool, str]:
    """Run ``PRAGMA integrity_check``; return ``(ok, detail)``."""
    rows = [str(r[0]) for r in conn.execute("PRAGMA integrity_check")]
    ok = rows == ["ok"]
    return ok, "\n".join(rows)
