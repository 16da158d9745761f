"""What an operator asks of a SQLite tidelog file beyond the Store contract: integrity,
the stored lineage of forks, storage figures and an online backup.

:class:`SqliteMaintenance` is a part of :class:`~stores.SqliteStore`; every method
runs on the store's connection (read-only ones included) and, like its reads, again on a
fresh connection if a writer changed a file read as immutable. Nothing here is called on
a trio thread.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import apsw
import attrs

from .._errors import InvalidArgumentError, StoreIOError
from .._records import validate_session_id
from ._connection import map_errors, one, transaction
from ._readonly import rereads
from ._schema import check_integrity, check_path

__all__ = ["SessionStorage", "SqliteMaintenance", "StorageInfo"]

#: Pages copied per step of :meth:`SqliteMaintenance.backup` (between progress reports).
BACKUP_STEP_PAGES = 2048


@attrs.frozen
class StorageInfo:
    """The file's identity and size: ``application_id`` and ``schema_version`` (its
    format), ``page_size`` x ``page_count`` bytes of which ``free_pages`` unused,
    ``file_bytes`` and ``wal_bytes`` on disk, ``sessions`` and ``stored_events`` (events
    a fork shares with its parent are stored once)."""

    application_id: int
    schema_version: int
    page_size: int
    page_count: int
    free_pages: int
    file_bytes: int
    wal_bytes: int
    sessions: int
    stored_events: int


@attrs.frozen
class SessionStorage:
    """What one session stores itself (not what it shares with a parent): ``events`` and
    ``bytes`` (the UTF-8 length of their kinds, data and run ids)."""

    session_id: str
    events: int
    bytes: int


class SqliteMaintenance:
    """The operator's methods of :class:`~stores.SqliteStore` (a mixin)."""

    path: str

    def _connection(self, what: str, *, write: bool = False) -> AbstractContextManager[Any]:
        raise NotImplementedError  # pragma: no cover  (SqliteStore's)

    @rereads
    def check_integrity(self) -> tuple[bool, str]:
        """Run ``PRAGMA integrity_check``: ``(True, "ok")`` or ``(False, what is wrong)``."""
        with self._connection("check_integrity") as conn:
            try:
                return check_integrity(conn)
            except (apsw.CorruptError, apsw.NotADBError) as exc:
                # Damage that stops the check itself is a finding, not a failure to check.
                return False, f"{type(exc).__name__}: {exc}"

    @rereads
    def check_lineage(self, session_id: str) -> list[str]:
        """What is wrong with how the session's log is stored (``[]``: nothing): every seq
        from 1 to its head must be stored exactly once along its chain of fork bases
        (the session itself for seqs after its base point, each base for the seqs it
        lends), and no event may lie past the head. ``[]`` for an unknown session.

        Cost: a count per link of the chain (indexed), not a read of the events."""
        validate_session_id(session_id)
        with self._connection("check_lineage") as conn, transaction(conn):
            return _lineage_problems(conn, session_id)

    @rereads
    def storage(self) -> StorageInfo:
        """The file's format and sizes (see :class:`StorageInfo`)."""
        with self._connection("storage") as conn, transaction(conn):
            pragmas = ("application_id", "user_version", "page_size", "page_count")
            app, version, page_size, pages = (int(one(conn, f"PRAGMA {p}")[0]) for p in pragmas)
            free = int(one(conn, "PRAGMA freelist_count")[0])
            sessions = int(one(conn, "SELECT count(*) FROM sessions")[0])
            events = int(one(conn, "SELECT count(*) FROM events")[0])
        return StorageInfo(
            application_id=app,
            schema_version=version,
            page_size=page_size,
            page_count=pages,
            free_pages=free,
            file_bytes=_size(self.path),
            wal_bytes=_size(self.path + "-wal"),
            sessions=sessions,
            stored_events=events,
        )

    @rereads
    def largest_sessions(self, limit: int = 10) -> list[SessionStorage]:
        """The ``limit`` sessions that store the most bytes, largest first. Reads every
        event's length once (one pass over the events table)."""
        if type(limit) is not int or limit < 0:
            raise InvalidArgumentError(f"limit must be an int >= 0, not {limit!r}")
        with self._connection("largest_sessions") as conn:
            rows = conn.execute(
                "SELECT s.id, e.n, e.bytes FROM (SELECT sid, count(*) AS n, "
                "sum(length(CAST(kind AS BLOB)) + length(CAST(data AS BLOB)) "
                "+ coalesce(length(CAST(run_id AS BLOB)), 0)) AS bytes "
                "FROM events GROUP BY sid) AS e JOIN sessions AS s ON s.sid = e.sid "
                "ORDER BY e.bytes DESC, s.id LIMIT ?",
                (limit,),
            ).fetchall()
        return [SessionStorage(str(r[0]), int(r[1]), int(r[2])) for r in rows]

    @rereads
    def backup(
        self,
        dest: str | os.PathLike[str],
        *,
        progress: Callable[[int, int], None] | None = None,
    ) -> None:
        """Copy the database into the new file ``dest``, consistently, while writers go
        on (SQLite's online backup, from one read snapshot held for the whole copy, so no
        writer waits and no change restarts it). ``progress(done_pages, total_pages)``
        is called after every step; an exception from it stops the backup.

        The copy is written to a temporary file beside ``dest``, made durable (fsync),
        then linked as ``dest``: an interrupted or failed backup leaves no ``dest`` and no
        temporary file. Raises :class:`InvalidArgumentError` if ``dest`` exists,
        :class:`StoreIOError` if it cannot be written."""
        target = check_path(dest)
        if os.path.lexists(target):
            raise InvalidArgumentError(f"backup destination {target!r} already exists")
        directory = os.path.dirname(os.path.abspath(target))
        try:
            temporary = _new_file(directory)
        except OSError as exc:
            raise StoreIOError(f"backup: cannot create a file in {directory!r}: {exc}") from exc
        try:
            with self._connection("backup") as conn:
                _copy(conn, temporary, progress)
            with map_errors("backup"):
                _fsync(temporary)
                try:
                    os.link(temporary, target)  # never replaces a file that appeared since
                except FileExistsError:
                    raise InvalidArgumentError(
                        f"backup destination {target!r} already exists"
                    ) from None
                except OSError as exc:
                    raise StoreIOError(f"backup: cannot create {target!r}: {exc}") from exc
                _fsync(directory)
        finally:
            for suffix in ("", "-journal", "-wal", "-shm"):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(temporary + suffix)


def _copy(
    conn: apsw.Connection, temporary: str, progress: Callable[[int, int], None] | None
) -> None:
    """SQLite's backup of ``conn``'s database into ``temporary``, in steps, within one
    read transaction of ``conn`` (its snapshot stays fixed, so writers never restart it)."""
    destination = apsw.Connection(temporary)
    try:
        with transaction(conn):
            conn.execute("SELECT count(*) FROM sessions").fetchall()  # takes the snapshot
            with destination.backup("main", conn, "main") as step:
                while not step.done:
                    step.step(BACKUP_STEP_PAGES)
                    if progress is not None:
                        total = step.page_count
                        progress(total - step.remaining, total)
    finally:
        destination.close()


def _new_file(directory: str) -> str:
    """A new empty file in ``directory``, created like any new file (its mode follows the
    umask; ``tempfile.mkstemp`` would make it 0600, and the backup keeps the mode)."""
    while True:
        path = os.path.join(directory, f".tidelog-backup-{secrets.token_hex(8)}")
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
        except FileExistsError:
            continue
        os.close(fd)
        return path


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except FileNotFoundError:
        return 0


def _count(conn: apsw.Connection, sid: int, lo: int, hi: int) -> int:
    """How many events are stored under ``sid`` with ``lo < seq <= hi``."""
    sql = "SELECT count(*) FROM events WHERE sid=? AND seq>? AND seq<=?"
    return int(one(conn, sql, (sid, lo, hi))[0])


def _lineage_problems(conn: apsw.Connection, session_id: str) -> list[str]:
    row = conn.execute(
        "SELECT sid, head, base_sid, base_seq FROM sessions WHERE id=?", (session_id,)
    ).fetchone()
    if row is None:
        return []
    sid, head, base_sid, base_seq = row
    problems: list[str] = []
    own = int(
        one(
            conn,
            "SELECT count(*) FROM events WHERE sid=? AND seq>? AND seq<=?",
            (sid, base_seq, head),
        )[0]
    )
    if own != head - base_seq:
        problems.append(f"seqs {base_seq + 1}..{head}: {own} events stored of {head - base_seq}")
    beyond = int(one(conn, "SELECT count(*) FROM events WHERE sid=? AND seq>?", (sid, head))[0])
    if beyond:
        problems.append(f"{beyond} events stored past the head {head}")
    hi = base_seq
    seen = {sid}
    while base_sid is not None and hi > 0:
        link = conn.execute(
            "SELECT id, base_sid, base_seq FROM sessions WHERE sid=?", (base_sid,)
        ).fetchone()
        if link is None:
            problems.append(f"seqs 1..{hi} are lent by a session that no longer exists")
            break
        if base_sid in seen:
            problems.append("its chain of fork bases loops")
            break
        seen.add(base_sid)
        name, next_sid, next_seq = link
        lo = min(next_seq, hi)
        lent = _count(conn, base_sid, lo, hi)
        if lent != hi - lo:
            problems.append(f"seqs {lo + 1}..{hi}, lent by {name!r}: {lent} stored of {hi - lo}")
        base_sid, hi = next_sid, lo
    return problems
