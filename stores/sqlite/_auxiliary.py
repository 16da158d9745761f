"""The SQL of SqliteStore's auxiliary tables: leases and projection checkpoints.

Like :mod:`stores.sqlite._ops` and :mod:`stores.sqlite._read`: functions of one
connection, run inside the transaction their caller opened, with arguments already
checked; none commits.
"""

from __future__ import annotations

from typing import Any

import apsw

from .._checks import prefix_end
from .._contract import Pin
from .._errors import OwnershipLostError, SessionOwnedError, SnapshotExpiredError
from .._leases import lease_is_free
from .._records import LeaseInfo
from ._read import check_pin

__all__ = [
    "acquire_lease",
    "list_leases",
    "load_projection",
    "release_lease",
    "renew_leases",
    "save_projection",
]


def acquire_lease(
    conn: apsw.Connection, session_id: str, owner: str, holder: str, now: float, ttl: float
) -> None:
    """Take the lease (see :meth:`Store.acquire_lease <stores._contract.Store.acquire_lease>`);
    :class:`SessionOwnedError` if another live owner holds it."""
    row = conn.execute(
        "SELECT owner, holder, expires FROM leases WHERE id=?", (session_id,)
    ).fetchone()
    if row is not None and not lease_is_free((row[0], row[1], row[2]), owner, now):
        raise SessionOwnedError(session_id, row[1])
    conn.execute(
        "INSERT OR REPLACE INTO leases(id, owner, holder, expires) VALUES (?,?,?,?)",
        (session_id, owner, holder, now + ttl),
    )


def renew_leases(
    conn: apsw.Connection, owner: str, session_ids: list[str], expires: float
) -> list[str]:
    """Extend ``owner``'s leases on ``session_ids``; the ids it does not hold."""
    lost: list[str] = []
    for session_id in session_ids:
        conn.execute(
            "UPDATE leases SET expires=? WHERE id=? AND owner=?", (expires, session_id, owner)
        )
        if conn.changes() == 0:
            lost.append(session_id)
    return lost


def renew_lease(conn: apsw.Connection, session_id: str, owner: str, expires: float) -> None:
    """Extend ``owner``'s lease; :class:`OwnershipLostError` if it is not ``owner``'s."""
    if renew_leases(conn, owner, [session_id], expires):
        raise OwnershipLostError(session_id)


def release_lease(conn: apsw.Connection, session_id: str, owner: str) -> None:
    """Drop the lease if ``owner`` holds it."""
    conn.execute("DELETE FROM leases WHERE id=? AND owner=?", (session_id, owner))


def list_leases(conn: apsw.Connection, prefix: str | None) -> list[LeaseInfo]:
    """The stored leases of the sessions whose id starts with ``prefix``, by id."""
    sql, args = "SELECT id, owner, holder, expires FROM leases", []
    if prefix:
        sql += " WHERE id >= ?"
        args.append(prefix)
        end = prefix_end(prefix)
        if end is not None:
            sql += " AND id < ?"
            args.append(end)
    rows: list[Any] = conn.execute(sql + " ORDER BY id", args).fetchall()
    return [LeaseInfo(sid, owner, holder, expires) for sid, owner, holder, expires in rows]


def save_projection(
    conn: apsw.Connection, pin: Pin, name: str, version: int, state_json: str
) -> None:
    """Store a checkpoint of projection ``name``, unless the pinned session is gone."""
    row = conn.execute("SELECT sid FROM sessions WHERE id=?", (pin.session_id,)).fetchone()
    if row is None or row[0] != pin.incarnation:
        return
    conn.execute(
        "INSERT OR REPLACE INTO projections(sid, name, version, seq, epoch, state) "
        "VALUES (?,?,?,?,?,?)",
        (pin.incarnation, name, version, pin.as_of_seq, pin.epoch, state_json),
    )


def load_projection(
    conn: apsw.Connection, session_id: str, name: str, version: int
) -> tuple[int, str] | None:
    """``(seq, state_json)`` of a still valid checkpoint of ``name`` at ``version``."""
    row = conn.execute(
        "SELECT p.sid, p.version, p.seq, p.epoch, p.state FROM projections AS p "
        "JOIN sessions AS s ON s.sid = p.sid WHERE s.id=? AND p.name=?",
        (session_id, name),
    ).fetchone()
    if row is None or row[1] != version:
        return None
    sid, _, seq, epoch, state = row
    try:
        check_pin(conn, session_id, Pin(session_id, seq, sid, epoch))
    except SnapshotExpiredError:
        return None
    return int(seq), str(state)
