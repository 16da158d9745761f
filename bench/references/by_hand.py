"""The by-hand loop: tidelog's own format, written by a hand-written loop with no runtime.

W2's raw loops (:mod:`bench.references.raw_sqlite`) write what a user's own table would
hold: ``(session, seq, data)``, no checks. tidelog does more per event than that, for
reasons of the contract and not of its code: every event is checked exactly as the
contract says (``prepare_events``: the kind, the data's exactness walk, the size limits)
and encoded once; each row holds what a :class:`~stores.StoredEvent` reads back (session,
seq, commit time, kind, data, run id); and each batch moves each session's head and
update time on its row of ``sessions`` (the head every append is checked against, the
order ``list_sessions(order="updated")`` pages in).

The by-hand loop does exactly that work and nothing else: the caller makes each event a
:class:`~stores.NewEvent` and checks and encodes it with the public ``prepare_events``;
one writer commits the queued rows in one ``BEGIN IMMEDIATE`` transaction per thread hop
with two ``executemany`` (the events, then the heads), the statements tidelog's SQLite
store runs for a batch of appends. No handles, session actors, write ops, leases or
resend bookkeeping. So ``tidelog / by-hand`` is what tidelog's layers cost, and
``by-hand / raw`` is what the contract's work in this format costs the raw loop itself
(the speed issue's targets are against the raw loops): a system reads above it only by
spending less than the raw loop on its machinery, not less on the work.

The file is tidelog's: :func:`open_by_hand` lets a :class:`~stores.SqliteStore` create it
and its sessions, and ``tests/project/test_bench_smoke.py`` reads what the loop wrote back
with tidelog, event for event, so the reference cannot drift from the format it stands for.

On PostgreSQL (:func:`open_by_hand_pg`, W2pg) the schema and sessions are made by a
:class:`~stores.PostgresStore` too, and each batch is the one statement the store sends for
a batch of one-event appends to distinct known sessions
(``stores.postgres._known.APPEND_KNOWN_ONE_EACH``: the events inserted, each session's row
moved only where its head is the one expected -- the fence -- with its columns packed
as the store packs them, and the ``NOTIFY`` of the new heads on the store's channel that
other processes' tails wake on), imported rather than copied: a statement of that size
copied here would drift from the store's.

On the JSONL file store (:func:`open_by_hand_jsonl`, W2 on files) a
:class:`~stores.JsonlStore` makes the store and its session files, and each batch appends
to each session's file the line format 4 gives an event committed alone: seq, commit
time, kind, data, the commit mark, the events before it not yet known durable (``"s"``,
at NORMAL), the file's tag and the line's CRC-32; then it adds the store's change-log
byte that other handles watch, and at FULL fsyncs each file written. It keeps no sidecar
index (a reader rebuilds it from the lines). The test reads the files back with tidelog.
"""

from __future__ import annotations

import json
import os
import time
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import apsw

from stores import JsonlStore, NewEvent, SqliteStore, Store, open_store, prepare_events

from .raw_pg import PgLevel, url_of
from .raw_sqlite import RawSync

if TYPE_CHECKING:
    from stores import JSON

__all__ = [
    "ByHandFiles",
    "ByHandInsert",
    "by_hand_encode",
    "open_by_hand",
    "open_by_hand_jsonl",
    "open_by_hand_pg",
]

#: The row queued per event: session id, seq, the event's data as checked JSON text.
Queued = tuple[str, int, str]
ByHandInsert = Callable[[Any, Sequence[Queued]], None]

#: Format 4's statements for a batch of appends (``stores/sqlite``'s batch path runs the
#: same two; the read-back test named above fails if the format moves away from them).
_INSERT = "INSERT INTO events(sid, seq, ts, kind, data, run_id) VALUES (?,?,?,?,?,?)"
_HEAD = "UPDATE sessions SET head=?, updated_at=? WHERE sid=?"
#: Every event of the workloads is a "message" with no run id.
_KIND = "message"


def _create(store: Store, sessions: Sequence[str]) -> None:
    """Let tidelog's own ``store`` create ``sessions`` (so the by-hand loop writes into
    what tidelog made), then close it."""
    try:
        for session in sessions:
            store.create(session)
    finally:
        store.close()


def by_hand_encode(payload: object) -> str:
    """The payload as the contract takes it: made a :class:`~stores.NewEvent`, checked
    and encoded by ``prepare_events``; its data's JSON text. Raises what
    ``prepare_events`` raises for data that is not exactly JSON."""
    return prepare_events([NewEvent(_KIND, cast("JSON", payload))])[0].data_json


def open_by_hand(
    path: Path, synchronous: RawSync, sessions: Sequence[str]
) -> tuple[apsw.Connection, ByHandInsert]:
    """Create a tidelog SQLite file at ``path`` with ``sessions`` (by tidelog's store),
    then open it with plain apsw; returns the connection (the caller closes it) and the
    insert function the group-commit loop runs in its thread."""
    _create(SqliteStore(path), sessions)
    conn = apsw.Connection(str(path))
    try:
        conn.set_busy_timeout(5000)
        conn.execute(f"PRAGMA synchronous={synchronous}")
        sids: dict[str, int] = {
            str(name): int(sid) for name, sid in conn.execute("SELECT id, sid FROM sessions")
        }
    except BaseException:
        conn.close()
        raise
    return conn, _inserter(sids)


def _inserter(sids: dict[str, int]) -> ByHandInsert:
    def insert(conn: apsw.Connection, rows: Sequence[Queued]) -> None:
        """Commit ``rows`` and their sessions' heads in one ``BEGIN IMMEDIATE``
        transaction (each session at most once per batch: W2's clients await each
        append)."""
        now = time.time()
        conn.execute("BEGIN IMMEDIATE")
        try:
            events = [(sids[session], seq, now, _KIND, data, None) for session, seq, data in rows]
            conn.executemany(_INSERT, events)
            conn.executemany(_HEAD, [(seq, now, sids[session]) for session, seq, _ in rows])
            conn.execute("COMMIT")
        except BaseException:
            if not conn.get_autocommit():
                conn.execute("ROLLBACK")
            raise

    return insert


def open_by_hand_pg(
    dsn: str, schema: str, level: PgLevel, sessions: Sequence[str]
) -> tuple[Any, ByHandInsert]:
    """Create tidelog's schema ``schema`` on the server of ``dsn`` with ``sessions`` (by
    tidelog's store), then open a plain psycopg connection to it (autocommit: each batch's
    statement is its transaction, ``synchronous_commit`` ``level``); returns it (the
    caller closes it) and the insert function the group-commit loop runs in its thread."""
    import psycopg

    from stores.postgres import _connection, _known, _packed

    _create(open_store(url_of(dsn, schema)), sessions)
    conn = psycopg.connect(dsn, autocommit=True)
    try:
        conn.execute(f"SET search_path = {schema}")
        conn.execute(f"SET synchronous_commit = {level}")
        sids: dict[str, int] = dict(conn.execute("SELECT id, sid FROM sessions").fetchall())
    except BaseException:
        conn.close()
        raise
    statement = _known.APPEND_KNOWN_ONE_EACH
    channel, notify_payload = _connection.channel_name(schema), _connection.notify_payload
    pack_ints, pack_texts = _packed.pack_ints, _packed.pack_texts
    run_ids = _packed.pack_nullable_texts

    def insert(conn: psycopg.Connection[Any], rows: Sequence[Queued]) -> None:
        """Commit ``rows`` (each session at most once: W2's clients await each append)
        and move their sessions' heads, fenced on the heads expected, and notify the new
        heads, in one statement."""
        count = len(rows)
        args = {
            "sids": pack_ints([sids[session] for session, _, _ in rows]),
            "expected": pack_ints([seq - 1 for _, seq, _ in rows]),
            "kinds": pack_texts([_KIND] * count),
            "datas": pack_texts([data for _, _, data in rows]),
            "run_ids": run_ids([None] * count),
            "owner": None,
            "channel": channel,
            "payload": notify_payload({session: seq for session, seq, _ in rows}),
            "k": count,
            "sync": False,
        }
        conn.execute(statement, args, prepare=True)

    return conn, insert


class ByHandFiles:
    """The by-hand loop's open files on a JSONL store: each session's file (``O_APPEND``),
    its tag and how many of its events are not yet known durable, and the change log."""

    def __init__(self, root: Path, synchronous: RawSync) -> None:
        self.fsync = synchronous == "FULL"
        self.fds: dict[str, int] = {}
        self.tags: dict[str, str] = {}
        self.unsynced: dict[str, int] = {}
        flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW  # never through a planted link
        self.changes = os.open(root / "changes", flags | os.O_CREAT, 0o644)
        try:
            for path in sorted((root / "sessions").glob("*.jsonl")):
                with open(path, "rb") as f:
                    header = json.loads(f.readline())
                session = str(header["id"])
                # format 4's tag: the CRC-32 of the id's JSON text and the incarnation
                key = json.dumps(session, ensure_ascii=False).encode()
                key += b"\x00%d" % header["incarnation"]
                self.tags[session] = f',"f":"{zlib.crc32(key):08x}"'
                self.unsynced[session] = 0
                self.fds[session] = os.open(path, flags)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Close every file (idempotent)."""
        for fd in [*self.fds.values(), self.changes]:
            if fd >= 0:
                os.close(fd)
        self.fds.clear()
        self.changes = -1


def open_by_hand_jsonl(
    root: Path, synchronous: RawSync, sessions: Sequence[str]
) -> tuple[ByHandFiles, ByHandInsert]:
    """Create a tidelog JSONL store at ``root`` (a new directory) with ``sessions`` (by
    tidelog's store), then open their files; returns them (the caller closes them) and
    the insert function the group-commit loop runs in its thread."""
    root.mkdir()
    _create(JsonlStore(root), sessions)
    files = ByHandFiles(root, synchronous)

    def insert(files: ByHandFiles, rows: Sequence[Queued]) -> None:
        """Append each row's line to its session's file (each session at most once: W2's
        clients await each append), the change-log byte, and at FULL an fsync a file."""
        now = repr(time.time())
        written = []
        for session, seq, data in rows:
            lag = files.unsynced[session]
            mark = f',"s":{lag}' if lag else ""
            line = (
                f'{{"seq":{seq},"ts":{now},"kind":"{_KIND}","data":{data},'
                f'"end":1{mark}{files.tags[session]}'
            ).encode()
            os.write(files.fds[session], line + b',"crc":%d}\n' % zlib.crc32(line))
            written.append(session)
        os.write(files.changes, b"+")
        for session in written:
            if files.fsync:
                os.fsync(files.fds[session])
            else:
                files.unsynced[session] += 1

    return files, insert
