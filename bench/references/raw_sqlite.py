"""The physical reference: plain apsw on one SQLite file, no tidelog code.

Schema in the spirit of tidelog's: one table keyed by ``(session, seq)``, WAL,
``BEGIN IMMEDIATE`` per write transaction, a 5 s busy timeout. Two layouts
(:data:`RawLayout`): ``"clustered"`` by ``(session, seq)`` (``WITHOUT ROWID``, like
tidelog's ``events`` table up to format 3) and ``"commit-order"`` (a rowid table with a
unique index on ``(session, seq)``, like format 4).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Literal, cast

import apsw
import msgspec

__all__ = ["RawLayout", "RawSync", "encode_compiled", "insert_rows", "open_raw", "read_last"]

RawSync = Literal["NORMAL", "FULL"]
RawLayout = Literal["clustered", "commit-order"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS events(
    session TEXT NOT NULL,
    seq INTEGER NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY(session, seq)
) WITHOUT ROWID
"""

_SCHEMA_COMMIT_ORDER = """
CREATE TABLE IF NOT EXISTS events(session TEXT NOT NULL, seq INTEGER NOT NULL, data TEXT NOT NULL);
CREATE UNIQUE INDEX IF NOT EXISTS events_by_seq ON events(session, seq)
"""

_DECODER = json.JSONDecoder()
_COMPILED = msgspec.json.Encoder().encode


def encode_compiled(payload: object) -> str:
    """The payload's compact JSON by the compiled codec tidelog uses (msgspec), no checks:
    the tightest loop a user could write (the raw rows ``...-compiled``)."""
    return _COMPILED(payload).decode()


def open_raw(path: Path, synchronous: RawSync, layout: RawLayout = "clustered") -> apsw.Connection:
    """Open (and create if needed) the reference database; the caller closes it."""
    conn = apsw.Connection(str(path))
    try:
        conn.set_busy_timeout(5000)
        mode = conn.execute("PRAGMA journal_mode=WAL").fetchall()
        if mode != [("wal",)]:
            raise RuntimeError(f"cannot enable WAL: {mode}")
        conn.execute(f"PRAGMA synchronous={synchronous}")
        conn.execute(_SCHEMA if layout == "clustered" else _SCHEMA_COMMIT_ORDER)
    except BaseException:
        conn.close()
        raise
    return conn


def insert_rows(conn: apsw.Connection, rows: Sequence[tuple[str, int, str]]) -> None:
    """Commit ``rows`` (session, seq, data) in one ``BEGIN IMMEDIATE`` transaction."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.executemany("INSERT INTO events(session, seq, data) VALUES (?,?,?)", rows)
        conn.execute("COMMIT")
    except BaseException:
        if not conn.get_autocommit():
            conn.execute("ROLLBACK")
        raise


def read_last(conn: apsw.Connection, session: str, count: int) -> list[tuple[int, object]]:
    """Look up the head, read the last ``count`` events and decode them: two statements in
    one thread hop (what a raw reader does)."""
    row = conn.execute("SELECT max(seq) FROM events WHERE session=?", (session,)).fetchone()
    head = 0 if row is None or row[0] is None else int(row[0])
    rows = conn.execute(
        "SELECT seq, data FROM events WHERE session=? AND seq>? ORDER BY seq",
        (session, max(0, head - count)),
    ).fetchall()
    decode = _DECODER.decode
    return [(cast(int, seq), decode(cast(str, data))) for seq, data in rows]
