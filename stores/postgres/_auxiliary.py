"""Leases across hosts and projection checkpoints, on PostgreSQL.

**Leases.** A lease is a row ``(id, owner, holder, expires, locked)``; ``expires`` comes
from the *server's* clock (``clock_timestamp()`` plus the ttl), never a host's, so hosts
whose clocks disagree still agree on expiry. The rule of
:func:`stores._leases.lease_is_free` applies as on every backend (its own, expired, or a
local holder process that exited), plus one that only a server can offer: the holder
also holds a session-level **advisory lock** (:func:`~stores.postgres._connection.advisory_key`)
on the connection it acquired the lease with, and ``locked`` says so. PostgreSQL
releases that lock the moment the connection ends -- the holder's process died (SIGKILL,
OOM), its host's connection was closed -- so a lease whose ``locked`` is set and whose
advisory lock can be taken is a dead holder's: it is taken over at once, not after the
ttl. A holder that took a lease without getting the lock (an expired lease whose old
holder still lived) gets it at a later renewal.

The advisory lock is an accelerator, never the safety: a network partition can end the
holder's connection (the lock is released) while its process still runs. What makes that
safe is the fence: every write of an owner checks, inside its own transaction, that the
lease still names it, and holds a row lock that a takeover must wait for -- the lease
row's (``FOR SHARE``), or on the append path the session row's, which carries a copy of
the lease's owner that triggers keep exact (:mod:`stores.postgres._schema`, version 2) --
so that a takeover commits either before the write (which then fails with
:class:`OwnershipLostError`) or after it.

**Projection checkpoints** are rows keyed by ``(sid, name)`` holding the pin they were
folded at; a load checks, in the same statement, that no cut since then reaches below it.

Like :mod:`stores.postgres._general`: functions of one connection, arguments already checked.
"""

from __future__ import annotations

import contextlib
from typing import Any

import psycopg

from .._contract import Pin
from .._errors import OwnershipLostError, SessionOwnedError
from .._leases import lease_is_free
from ._connection import advisory_key, one
from ._ops import NOW

__all__ = [
    "acquire_lease",
    "load_projection",
    "release_lease",
    "renew_leases",
    "save_projection",
]

Conn = psycopg.Connection[Any]

_LEASE_ROW = (
    f"SELECT {NOW}, l.owner, l.holder, l.expires, l.locked FROM (SELECT 1) AS x"
    " LEFT JOIN LATERAL (SELECT owner, holder, expires, locked FROM leases"
    " WHERE id = %(id)s FOR UPDATE) AS l ON true"
)


def _try_lock(conn: Conn, key: int) -> bool:
    return bool(one(conn, "SELECT pg_try_advisory_lock(%s)", (key,))[0])


def _unlock_quietly(conn: Conn, keys: list[int]) -> None:
    """Give back advisory locks taken by a call that failed (if the connection died,
    the server released them already)."""
    with contextlib.suppress(psycopg.Error):
        if not conn.broken:
            conn.execute("SELECT pg_advisory_unlock(k) FROM unnest(%b::bigint[]) AS k", (keys,))


def acquire_lease(
    conn: Conn,
    schema: str,
    mine: dict[int, str],
    session_id: str,
    owner: str,
    holder: str,
    ttl: float,
) -> None:
    """Take the lease (see :meth:`Store.acquire_lease
    <stores._contract.Store.acquire_lease>` and the module doc). ``mine`` maps the
    advisory keys this connection holds to the owner whose lease each stands for (one
    connection may serve several owners); it gains this lease's key.
    :class:`SessionOwnedError` if another live owner holds it."""
    key = advisory_key(schema, session_id)
    taken = False
    try:
        with conn.transaction():
            while True:
                row = one(conn, _LEASE_ROW, {"id": session_id})
                now, held_by, held_holder, expires, locked = row
                have = key in mine or taken
                if held_by is not None and not lease_is_free(
                    (held_by, held_holder, expires), owner, now
                ):
                    # Live unless its holder's connection is gone (its advisory lock free).
                    if not locked or have or not _try_lock(conn, key):
                        raise SessionOwnedError(session_id, held_holder)
                    taken = True
                elif not have:
                    taken = _try_lock(conn, key)
                args = (owner, holder, now + ttl, have or taken, session_id)
                if held_by is not None:
                    conn.execute(
                        "UPDATE leases SET owner = %s, holder = %s, expires = %s, locked = %s"
                        " WHERE id = %s",
                        args,
                    )
                    break
                inserted = conn.execute(
                    "INSERT INTO leases(owner, holder, expires, locked, id)"
                    " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (id) DO NOTHING RETURNING 1",
                    args,
                ).fetchone()
                if inserted is not None:
                    break
                # Another connection created the lease meanwhile: look again (locked now).
    except BaseException:
        if taken:
            _unlock_quietly(conn, [key])
        raise
    if taken or key in mine:
        mine[key] = owner


_RENEW = (
    "WITH x AS (SELECT id FROM leases WHERE id = ANY(%(ids)b::text[]) AND owner = %(owner)s"
    " ORDER BY id FOR UPDATE)"
    f" UPDATE leases AS l SET expires = {NOW} + %(ttl)s FROM x WHERE l.id = x.id"
    " RETURNING l.id"
)
_RELOCK = (
    "WITH got AS (SELECT k.id FROM unnest(%(ids)b::text[], %(keys)b::bigint[]) AS k(id, key)"
    " WHERE pg_try_advisory_lock(k.key))"
    " UPDATE leases SET locked = id IN (SELECT id FROM got)"
    " WHERE id = ANY(%(ids)b::text[]) AND owner = %(owner)s RETURNING id, locked"
)


def renew_leases(
    conn: Conn, schema: str, mine: dict[int, str], owner: str, session_ids: list[str], ttl: float
) -> list[str]:
    """Extend ``owner``'s leases on ``session_ids`` (one statement, rows locked in id
    order); return the ids it does not hold. Leases held without this connection's
    advisory lock (taken after an expiry, or held across a reconnect) try to take it,
    and ``locked`` records the outcome; the locks of lost leases are given back."""
    rows = conn.execute(
        _RENEW, {"ids": sorted(set(session_ids)), "owner": owner, "ttl": ttl}
    ).fetchall()
    renewed = {row[0] for row in rows}
    lost = [session_id for session_id in session_ids if session_id not in renewed]
    for session_id in set(lost):
        key = advisory_key(schema, session_id)
        if mine.get(key) == owner:
            del mine[key]
            _unlock_quietly(conn, [key])
    keys = {session_id: advisory_key(schema, session_id) for session_id in sorted(renewed)}
    want = [session_id for session_id, key in keys.items() if key not in mine]
    if want:
        wanted = [keys[session_id] for session_id in want]
        try:
            locked = conn.execute(_RELOCK, {"ids": want, "keys": wanted, "owner": owner}).fetchall()
        except BaseException:
            _unlock_quietly(conn, wanted)
            raise
        mine.update((keys[row[0]], owner) for row in locked if row[1])
    return lost


def renew_lease(
    conn: Conn, schema: str, mine: dict[int, str], session_id: str, owner: str, ttl: float
) -> None:
    """Extend ``owner``'s lease; :class:`OwnershipLostError` if it is not ``owner``'s."""
    if renew_leases(conn, schema, mine, owner, [session_id], ttl):
        raise OwnershipLostError(session_id)


def release_lease(
    conn: Conn, schema: str, mine: dict[int, str], session_id: str, owner: str
) -> None:
    """Drop the lease if ``owner`` holds it, and this connection's advisory lock of it."""
    conn.execute("DELETE FROM leases WHERE id = %s AND owner = %s", (session_id, owner))
    key = advisory_key(schema, session_id)
    if mine.get(key) == owner:
        del mine[key]
        _unlock_quietly(conn, [key])


def save_projection(conn: Conn, pin: Pin, name: str, version: int, state_json: str) -> None:
    """Store a checkpoint of projection ``name``, unless the pinned session is gone (the
    session's row is key-share locked, so a concurrent delete waits or is seen)."""
    conn.execute(
        "INSERT INTO projections(sid, name, version, seq, epoch, state)"
        " SELECT sid, %(name)s, %(version)s, %(seq)s, %(epoch)s, %(state)s FROM sessions"
        " WHERE id = %(id)s AND sid = %(sid)s FOR KEY SHARE"
        " ON CONFLICT (sid, name) DO UPDATE SET version = EXCLUDED.version,"
        " seq = EXCLUDED.seq, epoch = EXCLUDED.epoch, state = EXCLUDED.state",
        {
            "id": pin.session_id,
            "sid": pin.incarnation,
            "name": name,
            "version": version,
            "seq": pin.as_of_seq,
            "epoch": pin.epoch,
            "state": state_json,
        },
    )


def load_projection(conn: Conn, session_id: str, name: str, version: int) -> tuple[int, str] | None:
    """``(seq, state_json)`` of a still valid checkpoint of ``name`` at ``version``."""
    row = conn.execute(
        "SELECT p.version, p.seq, p.state, (SELECT min(to_seq) FROM cuts AS c"
        " WHERE c.sid = p.sid AND c.epoch > p.epoch)"
        " FROM projections AS p JOIN sessions AS s ON s.sid = p.sid"
        " WHERE s.id = %s AND p.name = %s",
        (session_id, name),
    ).fetchone()
    if row is None or row[0] != version:
        return None
    _, seq, state, cut = row
    if cut is not None and cut < seq:
        return None
    return int(seq), str(state)
