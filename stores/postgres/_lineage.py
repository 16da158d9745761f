"""Forks that share their parent's prefix, and reading a session's log, on PostgreSQL.

The model is :mod:`stores._lineage`'s (the walk is written there): a fork stores only its
own events; its row names a *base* (``base_sid``, ``base_seq``) from which it reads seqs up to
``base_seq`` -- a chain, since the base may be a fork too. Forking is O(1). Before a
destructive change removes events a child still reads through its base (a truncate or
rewrite of the base below the child's ``base_seq``, or deleting the base),
:func:`protect_children` copies exactly those events into the child, in the same
transaction as the change.

Here the chain is walked by the server: :func:`chain_cte` is a recursive CTE yielding
the ``(sid, lo, hi)`` pieces of a log, and every read, lookup of a run and copy is one
statement over it -- one round trip whatever the depth, and one snapshot, so a read never
mixes the state before and after a concurrent change. Copies stay on the server
(``INSERT ... SELECT``).
"""

from __future__ import annotations

from typing import Any

import attrs
import psycopg

from .. import _lineage as lineage
from .._contract import Pin
from .._errors import SnapshotExpiredError
from .._records import JSON, SessionInfo

__all__ = [
    "chain_cte",
    "find_run",
    "fork_session",
    "protect_children",
    "read_window",
    "stored_rows",
]

Conn = psycopg.Connection[Any]
Row = tuple[Any, ...]


def chain_cte(start: str) -> str:
    """``chain(sid, lo, hi, next)``: the pieces of one session's log -- seqs in ``(lo,
    hi]`` are stored under ``sid`` -- for the session row selected by ``start`` (a
    condition on ``sessions``, e.g. ``"id = %(id)s"``). Use after ``WITH RECURSIVE``."""
    return (
        "chain(sid, lo, hi, next) AS ("
        f" SELECT sid, base_seq, head, base_sid FROM sessions WHERE {start}"
        " UNION ALL"
        " SELECT b.sid, LEAST(b.base_seq, c.lo), c.lo, b.base_sid"
        " FROM chain AS c JOIN sessions AS b ON b.sid = c.next WHERE c.lo > 0)"
    )


def _window(direction: str) -> str:
    """The rows ``(seq, ts, kind, data, run_id)`` of ``chain`` with ``since < seq <=
    until``, at most ``limit`` (NULL: all), in ``direction`` order of seq."""
    return (
        "SELECT w.seq, w.ts, w.kind, w.data, w.run_id FROM chain AS c CROSS JOIN LATERAL ("
        " SELECT seq, ts, kind, data, run_id FROM events"
        " WHERE sid = c.sid AND seq > GREATEST(c.lo, %(since)s) AND seq <= LEAST(c.hi, %(until)s)"
        f" ORDER BY seq {direction} LIMIT %(limit)s) AS w"
        f" ORDER BY w.seq {direction} LIMIT %(limit)s"
    )


_READ = {d: f"WITH RECURSIVE {chain_cte('id = %(id)s')} {_window(d)}" for d in ("ASC", "DESC")}
#: A pinned read: the pin's check (the session's sid, the lowest cut after the pin's
#: epoch) on every row -- one statement, so the check and the rows are one snapshot.
_PINNED_READ = {
    d: f"WITH RECURSIVE {chain_cte('id = %(id)s')},"
    " p AS (SELECT (SELECT sid FROM sessions WHERE id = %(id)s) AS sid),"
    " k AS (SELECT p.sid, (SELECT min(to_seq) FROM cuts WHERE sid = p.sid AND epoch > %(epoch)s)"
    " AS cut FROM p)"
    f" SELECT k.sid, k.cut, w.* FROM k LEFT JOIN LATERAL ({_window(d)}) AS w ON true"
    f" ORDER BY w.seq {d}"
    for d in ("ASC", "DESC")
}


def check_cut(session_id: str, pin: Pin, sid: int | None, cut: int | None) -> None:
    """Raise :class:`SnapshotExpiredError` unless the session's current ``sid`` is the
    pin's incarnation and no cut after its epoch (lowest: ``cut``) reaches below
    ``pin.as_of_seq``."""
    if pin.session_id != session_id:
        raise SnapshotExpiredError(session_id, pin.as_of_seq, "pin is for another session")
    if sid is None or sid != pin.incarnation:
        raise SnapshotExpiredError(session_id, pin.as_of_seq, "the session was deleted")
    if cut is not None and cut < pin.as_of_seq:
        raise SnapshotExpiredError(
            session_id, pin.as_of_seq, f"events after seq {cut} were truncated"
        )


def read_window(
    conn: Conn,
    session_id: str,
    since: int,
    until: int,
    limit: int | None,
    from_end: bool,
    pin: Pin | None,
) -> list[Row]:
    """Rows ``(seq, ts, kind, data, run_id)`` of a read window, forks included, in seq
    order -- checked against ``pin`` in the same statement when given."""
    direction = "DESC" if from_end else "ASC"
    args = {"id": session_id, "since": since, "until": until, "limit": limit}
    if pin is None:
        rows = conn.execute(_READ[direction], args).fetchall()
    else:
        if pin.session_id != session_id:
            check_cut(session_id, pin, None, None)
        args["epoch"] = pin.epoch
        found = conn.execute(_PINNED_READ[direction], args).fetchall()
        check_cut(session_id, pin, found[0][0], found[0][1])
        rows = [row[2:] for row in found if row[2] is not None]
    if from_end:
        rows.reverse()
    return rows


_STORED = f"WITH RECURSIVE {chain_cte('sid = %(sid)s')} " + _window("ASC")


def stored_rows(conn: Conn, sid: int, lo: int, hi: int) -> list[Row]:
    """Rows ``(seq, ts, kind, data, run_id)`` of session ``sid`` in ``(lo, hi]``."""
    args = {"sid": sid, "since": lo, "until": hi, "limit": None}
    return conn.execute(_STORED, args).fetchall()


_FIND_RUN = (
    f"WITH RECURSIVE {chain_cte('id = %(id)s')}"
    " SELECT min(e.seq), max(e.seq) FROM chain AS c JOIN events AS e"
    " ON e.sid = c.sid AND e.run_id = %(run)s AND e.seq > c.lo AND e.seq <= c.hi"
)


def find_run(conn: Conn, session_id: str, run_id: str) -> tuple[int, int] | None:
    """First and last seq tagged ``run_id`` across the session's log (index
    ``events_by_run`` per piece)."""
    row = conn.execute(_FIND_RUN, {"id": session_id, "run": run_id}).fetchone()
    if row is None or row[0] is None:
        return None
    return int(row[0]), int(row[1])


def fork_session(
    conn: Conn,
    source_id: str,
    new_id: str,
    at_seq: object,
    header: dict[str, JSON],
    now: float,
) -> SessionInfo:
    """:func:`stores._lineage.fork_session` inside the caller's write transaction. The
    source's row and the chosen base's are locked (``FOR SHARE``), so no truncate of
    either can miss the new child."""
    return lineage.fork_session(_Sql(conn), source_id, new_id, at_seq, header, now)


_COPY = (
    f"WITH RECURSIVE {chain_cte('sid = %(sid)s')}"
    " INSERT INTO events(sid, seq, ts, kind, data, run_id)"
    " SELECT %(child)s, e.seq, e.ts, e.kind, e.data, e.run_id FROM chain AS c JOIN events AS e"
    " ON e.sid = c.sid AND e.seq > GREATEST(c.lo, %(keep)s) AND e.seq <= LEAST(c.hi, %(upto)s)"
)


@attrs.frozen
class _Sql:
    """The lineage statements on one PostgreSQL connection
    (:class:`stores._lineage.LineageSql`): rows read for a fork are locked ``FOR SHARE``,
    children ``FOR UPDATE`` in sid order, and copies stay on the server."""

    conn: Conn

    def exists(self, session_id: str) -> bool:
        found = self.conn.execute("SELECT 1 FROM sessions WHERE id = %s", (session_id,))
        return found.fetchone() is not None

    def source(self, session_id: str) -> tuple[int, int, str, int | None, int] | None:
        row = self.conn.execute(
            "SELECT sid, head, header, base_sid, base_seq FROM sessions WHERE id = %s FOR SHARE",
            (session_id,),
        ).fetchone()
        return None if row is None else (int(row[0]), int(row[1]), row[2], row[3], int(row[4]))

    def base_of(self, sid: int) -> tuple[int | None, int]:
        found = self.conn.execute(
            "SELECT base_sid, base_seq FROM sessions WHERE sid = %s FOR SHARE", (sid,)
        ).fetchone()
        return (None, 0) if found is None else (found[0], int(found[1]))

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
            "parent_seq, base_sid, base_seq) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (new_id, at, now, now, header_json, parent_id, at, base_sid, at),
        )

    def children(self, sid: int) -> list[tuple[int, int]]:
        rows = self.conn.execute(
            "SELECT sid, base_seq FROM sessions WHERE base_sid = %s ORDER BY sid FOR UPDATE",
            (sid,),
        ).fetchall()
        return [(int(row[0]), int(row[1])) for row in rows]

    def copy_prefix(self, sid: int, child: int, keep: int, upto: int) -> None:
        self.conn.execute(_COPY, {"sid": sid, "child": child, "keep": keep, "upto": upto})

    def rebase(self, child: int, base_sid: int | None, base_seq: int) -> None:
        self.conn.execute(
            "UPDATE sessions SET base_sid = %s, base_seq = %s WHERE sid = %s",
            (base_sid, base_seq, child),
        )


def protect_children(conn: Conn, sid: int, cut: int, *, deleting: bool) -> None:
    """:func:`stores._lineage.protect_children` inside the caller's write transaction."""
    lineage.protect_children(_Sql(conn), sid, cut, deleting=deleting)
