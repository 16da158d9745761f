"""Forks that share their parent's prefix, on SQLite.

A forked session stores only its own events. Its row names a *base*: ``base_sid`` and
``base_seq`` -- seqs up to ``base_seq`` are read from the base session (which may itself
be a fork: reads walk the chain). Forking is therefore O(1) in time and space.

The prefix must never change under a child: before a destructive change removes events
a child still reads through its base (a truncate or rewrite of the base below the
child's ``base_seq``, or deleting the base), :func:`protect_children` copies exactly
those events into the child -- the only copying forks ever do, done in the same
transaction as the change itself.
"""

from __future__ import annotations

from typing import Any

import apsw
import attrs

from .. import _lineage as lineage
from .._records import JSON, SessionInfo
from ._connection import INSERT_EVENT, one

__all__ = ["find_run", "fork_session", "pieces", "protect_children", "ranges_of", "read_rows"]

_COLUMNS = "seq, ts, kind, data, run_id"
Row = tuple[Any, ...]
Range = tuple[int, int, int]


@attrs.frozen
class _Sql:
    """The lineage statements on one SQLite connection (:class:`stores._lineage.LineageSql`)."""

    conn: apsw.Connection

    def exists(self, session_id: str) -> bool:
        return (
            self.conn.execute("SELECT 1 FROM sessions WHERE id=?", (session_id,)).fetchone()
            is not None
        )

    def source(self, session_id: str) -> tuple[int, int, str, int | None, int] | None:
        row = self.conn.execute(
            "SELECT sid, head, header, base_sid, base_seq FROM sessions WHERE id=?", (session_id,)
        ).fetchone()
        return None if row is None else (int(row[0]), int(row[1]), row[2], row[3], int(row[4]))

    def base_of(self, sid: int) -> tuple[int | None, int]:
        base_sid, base_seq = one(
            self.conn, "SELECT base_sid, base_seq FROM sessions WHERE sid=?", (sid,)
        )
        return base_sid, int(base_seq)

    def insert_fork(
        self,
        new_id: str,
        at: int,
        now: float,
        header_json: str,
        parent_id: str,
        base_sid: int | None,
    ) -> None:
        self.conn.execute(
            "INSERT INTO sessions(id, head, created_at, updated_at, header, parent_id, "
            "parent_seq, base_sid, base_seq) VALUES (?,?,?,?,?,?,?,?,?)",
            (new_id, at, now, now, header_json, parent_id, at, base_sid, at),
        )

    def children(self, sid: int) -> list[tuple[int, int]]:
        rows = self.conn.execute("SELECT sid, base_seq FROM sessions WHERE base_sid=?", (sid,))
        return [(int(row[0]), int(row[1])) for row in rows]

    def copy_prefix(self, sid: int, child: int, keep: int, upto: int) -> None:
        source = [r for r in ranges_of(self.conn, sid) if r[2] > keep]
        rows = read_rows(self.conn, source, keep, upto, None, False)
        self.conn.executemany(INSERT_EVENT, [(child, *row) for row in rows])

    def rebase(self, child: int, base_sid: int | None, base_seq: int) -> None:
        self.conn.execute(
            "UPDATE sessions SET base_sid=?, base_seq=? WHERE sid=?", (base_sid, base_seq, child)
        )


def fork_session(
    conn: apsw.Connection,
    source_id: str,
    new_id: str,
    at_seq: object,
    header: dict[str, JSON],
    now: float,
) -> SessionInfo:
    """:func:`stores._lineage.fork_session` on ``conn``, in the caller's write transaction."""
    return lineage.fork_session(_Sql(conn), source_id, new_id, at_seq, header, now)


def pieces(
    conn: apsw.Connection, sid: int, base_sid: int | None, base_seq: int, head: int
) -> list[Range]:
    """The ``(sid, lo, hi)`` ranges that make up a session's log, ascending: seqs in
    ``(lo, hi]`` live under ``sid``."""
    out = [(sid, base_seq, head)]
    hi = base_seq
    while base_sid is not None and hi > 0:
        row = conn.execute(
            "SELECT base_sid, base_seq FROM sessions WHERE sid=?", (base_sid,)
        ).fetchone()
        next_sid, next_seq = (None, 0) if row is None else (row[0], row[1])
        lo = min(next_seq, hi)
        out.append((base_sid, lo, hi))
        base_sid, hi = next_sid, lo
    out.reverse()
    return [p for p in out if p[2] > p[1]]


def ranges_of(conn: apsw.Connection, sid: int) -> list[Range]:
    """The ``(sid, lo, hi)`` ranges of a session's log (one unless it is a fork)."""
    base_sid, base_seq, head = one(
        conn, "SELECT base_sid, base_seq, head FROM sessions WHERE sid=?", (sid,)
    )
    return pieces(conn, sid, base_sid, base_seq, head)


def read_rows(
    conn: apsw.Connection,
    ranges: list[Range],
    since: int,
    until: int,
    limit: int | None,
    from_end: bool,
) -> list[Row]:
    """Rows ``(seq, ts, kind, data, run_id)`` with ``since < seq <= until`` across the
    ranges, at most ``limit`` (the last ones with ``from_end``), in seq order."""
    rows: list[Row] = []
    order = reversed(ranges) if from_end else iter(ranges)
    for sid, lo, hi in order:
        lo, hi = max(lo, since), min(hi, until)
        if hi <= lo:
            continue
        want = -1 if limit is None else limit - len(rows)
        if want == 0:
            break
        direction = "DESC" if from_end else "ASC"
        got = conn.execute(
            f"SELECT {_COLUMNS} FROM events WHERE sid=? AND seq>? AND seq<=? "
            f"ORDER BY seq {direction} LIMIT ?",
            (sid, lo, hi, want),
        ).fetchall()
        rows.extend(tuple(r) for r in got)
    if from_end:
        rows.reverse()
    return rows


def find_run(conn: apsw.Connection, ranges: list[Range], run_id: str) -> tuple[int, int] | None:
    """First and last seq tagged ``run_id`` across the ranges."""
    found: list[tuple[int, int]] = []
    for sid, lo, hi in ranges:
        lo_seq, hi_seq = one(
            conn,
            "SELECT min(seq), max(seq) FROM events WHERE sid=? AND run_id=? AND seq>? AND seq<=?",
            (sid, run_id, lo, hi),
        )
        if lo_seq is not None:
            found.append((int(lo_seq), int(hi_seq)))
    return (found[0][0], found[-1][1]) if found else None


def protect_children(conn: apsw.Connection, sid: int, cut: int, *, deleting: bool) -> None:
    """:func:`stores._lineage.protect_children` on ``conn``."""
    lineage.protect_children(_Sql(conn), sid, cut, deleting=deleting)
