"""The SQL of PostgresStore's general write path -- every batch the one-statement append
paths (:mod:`stores.postgres._ops`, :mod:`stores.postgres._known`) do not take -- and of
its single writes (create, delete, truncate), as functions of one connection.

**The general path.** :func:`~stores._batching.run_batch` with one transaction per batch
(:func:`prelock` first locks every lease and session row the batch names, in id order,
so two batches never deadlock on them) and a savepoint per op (:func:`apply_op`).

Every function runs inside the transaction its caller opened; none commits. Errors are
tidelog errors (the caller's ``map_errors`` translates psycopg's).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import psycopg

from .._batching import StoredTail, check_replace, resent_tail, session_ids_of
from .._contract import (
    AppendOp,
    BatchResult,
    DeleteOp,
    GroupOp,
    ReplaceOp,
    RestoreOp,
    TruncateOp,
    WriteOp,
)
from .._errors import (
    ConflictError,
    InvalidEventError,
    OwnershipLostError,
    SessionExistsError,
    TidelogError,
)
from .._records import INFO_COLUMNS, PreparedEvent, SessionInfo, decode_json_object, session_info
from ._connection import notify_payload, one
from ._lineage import fork_session, protect_children, stored_rows
from ._ops import NOW

__all__ = [
    "Tx",
    "apply_op",
    "check_ops_only",
    "create_session",
    "delete_session",
    "deleted_ids",
    "notify",
    "permanent_error",
    "prelock",
    "truncate_session",
]

Conn = psycopg.Connection[Any]


@attrs.define
class Tx:
    """The handle of a general-path write transaction: its connection, the server's time
    (one timestamp for the whole batch) and the heads it moved (for the NOTIFY)."""

    conn: Conn
    now: float
    heads: dict[str, int] = attrs.Factory(dict)


def prelock(conn: Conn, session_ids: Sequence[str]) -> float:
    """Lock the lease rows (``FOR SHARE``: the fence) and the session rows (``FOR
    UPDATE``) of ``session_ids``, each in id order; return the server's time, read after
    the locks were granted."""
    (now,) = one(
        conn,
        "WITH l AS MATERIALIZED (SELECT 1 FROM leases WHERE id = ANY(%(ids)b::text[])"
        " ORDER BY id FOR SHARE),"
        " s AS MATERIALIZED (SELECT 1 FROM sessions WHERE id = ANY(%(ids)b::text[])"
        " AND (SELECT count(*) FROM l) >= 0 ORDER BY id FOR UPDATE)"
        f" SELECT {NOW} FROM (SELECT count(*) FROM s) AS x",
        {"ids": sorted(set(session_ids))},
    )
    return float(now)


def deleted_ids(ops: Sequence[WriteOp]) -> list[str]:
    """The sessions a batch's delete ops name (groups' members included)."""
    members = (m for op in ops for m in (op.ops if isinstance(op, GroupOp) else (op,)))
    return [member.session_id for member in members if isinstance(member, DeleteOp)]


def batch_ids(ops: Sequence[WriteOp]) -> list[str]:
    """Every session a batch touches."""
    return [session_id for op in ops for session_id in session_ids_of(op)]


def apply_isolated(tx: Tx, op: WriteOp, _now: float) -> int:
    """One op of a general batch, in a savepoint of its own (see ``run_batch``); the
    heads it moved are noted for the NOTIFY only once it succeeded."""
    moved: dict[str, int] = {}
    with tx.conn.transaction():
        result = apply_op(tx.conn, op, tx.now, moved)
    tx.heads.update(moved)
    return result


def apply_op(conn: Conn, op: WriteOp, now: float, moved: dict[str, int]) -> int:
    """Apply one op (the caller holds a savepoint); its result. ``moved`` gets the new
    head of every session it changed."""
    if isinstance(op, AppendOp):
        return apply_append(conn, op, now, moved)
    if isinstance(op, RestoreOp):
        return apply_restore(conn, op, moved)
    if isinstance(op, GroupOp):
        for member in op.ops:  # the caller's savepoint makes the group all or nothing
            apply_op(conn, member, now, moved)
        return len(op.ops)
    check_owner(conn, op.session_id, op.owner)
    if isinstance(op, TruncateOp):
        return truncate_session(conn, op.session_id, op.to_seq, now, moved)
    if isinstance(op, ReplaceOp):
        return replace_tail(conn, op, now, moved)
    return int(delete_session(conn, op.session_id, moved))


def check_owner(conn: Conn, session_id: str, owner: str | None) -> None:
    """Raise :class:`OwnershipLostError` unless ``owner`` holds the lease (fencing: the
    row is locked ``FOR SHARE`` until the transaction ends, so no takeover commits in
    between)."""
    if owner is not None:
        row = conn.execute(
            "SELECT owner FROM leases WHERE id = %s FOR SHARE", (session_id,)
        ).fetchone()
        if row is None or row[0] != owner:
            raise OwnershipLostError(session_id)


def _session_row(conn: Conn, session_id: str) -> tuple[int, int] | None:
    """``(sid, head)`` of a session, its row locked for the rest of the transaction."""
    row = conn.execute(
        "SELECT sid, head FROM sessions WHERE id = %s FOR UPDATE", (session_id,)
    ).fetchone()
    return None if row is None else (int(row[0]), int(row[1]))


def new_session(conn: Conn, session_id: str, now: float, header_json: str) -> int | None:
    """Insert the row of a new, empty session and return its sid -- or ``None`` if
    another transaction created the session meanwhile (it waited for that one to commit;
    the row now exists)."""
    row = conn.execute(
        "INSERT INTO sessions(id, created_at, updated_at, header) VALUES (%s, %s, %s, %s)"
        " ON CONFLICT (id) DO NOTHING RETURNING sid",
        (session_id, now, now, header_json),
    ).fetchone()
    return None if row is None else int(row[0])


def apply_append(conn: Conn, op: AppendOp, now: float, moved: dict[str, int]) -> int:
    """Apply one AppendOp of a general batch; the new head."""
    check_owner(conn, op.session_id, op.owner)
    while True:
        row = _session_row(conn, op.session_id)
        head = 0 if row is None else row[1]
        events = op.events
        if op.expected_head is not None and op.expected_head != head:
            events = resent_tail(op, head, stored_tail(conn, None if row is None else row[0]))
        if not events:
            return head
        sid = row[0] if row is not None else new_session(conn, op.session_id, now, op.header_json)
        if sid is not None:
            break  # else created concurrently: look again (nothing written yet)
    insert_events(conn, sid, head, events, now)
    moved[op.session_id] = head + len(events)
    return head + len(events)


def insert_events(
    conn: Conn, sid: int, head: int, events: Sequence[PreparedEvent], now: float
) -> None:
    """Insert ``events`` after ``head`` and move the session's head past them: one
    statement (the events' columns as arrays, unnested by the server)."""
    conn.execute(
        "WITH ev AS (INSERT INTO events(sid, seq, ts, kind, data, run_id)"
        " SELECT %(sid)s, %(head)s + e.n, %(now)s, e.kind, e.data, e.run_id"
        " FROM unnest(%(kinds)b::text[], %(datas)b::text[], %(run_ids)b::text[])"
        " WITH ORDINALITY AS e(kind, data, run_id, n))"
        " UPDATE sessions SET head = %(new)s, updated_at = %(now)s WHERE sid = %(sid)s",
        {
            "sid": sid,
            "head": head,
            "now": now,
            "new": head + len(events),
            "kinds": [event.kind for event in events],
            "datas": [event.data_json for event in events],
            "run_ids": [event.run_id for event in events],
        },
    )


def apply_restore(conn: Conn, op: RestoreOp, moved: dict[str, int]) -> int:
    """Apply a :class:`~stores._contract.RestoreOp` (events with their recorded times; a
    missing session created as recorded, or as a fork sharing its parent's prefix); the
    new head. One statement for the events."""
    while True:
        row = _session_row(conn, op.session_id)
        if row is None and op.share_prefix and op.parent is not None:
            base_id, head = op.parent
            if op.expected_head != head:
                raise ConflictError(op.session_id, op.expected_head, head)
            # Created concurrently meanwhile: SessionExistsError, this op alone fails.
            fork_session(conn, base_id, op.session_id, head, {}, op.created_at)
            sid = one(
                conn,
                "UPDATE sessions SET header = %s WHERE id = %s RETURNING sid",
                (op.header_json, op.session_id),
            )[0]
            break
        head = 0 if row is None else row[1]
        if op.expected_head != head:
            raise ConflictError(op.session_id, op.expected_head, head)
        if row is not None:
            sid = row[0]
            break
        parent_id, parent_seq = (None, None) if op.parent is None else op.parent
        created = conn.execute(
            "INSERT INTO sessions(id, created_at, updated_at, header, parent_id, parent_seq)"
            " VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (id) DO NOTHING RETURNING sid",
            (op.session_id, op.created_at, op.updated_at, op.header_json, parent_id, parent_seq),
        ).fetchone()
        if created is not None:
            sid = int(created[0])
            break
        # Created concurrently (this waited for that commit): look again, nothing written.
    new_head = head + len(op.events)
    conn.execute(
        "WITH ev AS (INSERT INTO events(sid, seq, ts, kind, data, run_id)"
        " SELECT %(sid)s, %(head)s + e.n, e.ts, e.kind, e.data, e.run_id"
        " FROM unnest(%(stamps)b::float8[], %(kinds)b::text[], %(datas)b::text[],"
        " %(run_ids)b::text[]) WITH ORDINALITY AS e(ts, kind, data, run_id, n))"
        " UPDATE sessions SET head = %(new)s, updated_at = %(updated)s WHERE sid = %(sid)s",
        {
            "sid": sid,
            "head": head,
            "new": new_head,
            "updated": op.updated_at,
            "stamps": list(op.stamps),
            "kinds": [event.kind for event in op.events],
            "datas": [event.data_json for event in op.events],
            "run_ids": [event.run_id for event in op.events],
        },
    )
    if op.events:
        moved[op.session_id] = new_head
    return new_head


def stored_tail(conn: Conn, sid: int | None) -> StoredTail:
    """What :func:`~stores._batching.resent_tail` compares a resent op with."""

    def read(lo: int, hi: int) -> list[tuple[str, str, str | None]]:
        assert sid is not None  # asked only about events that stand
        return [(row[2], row[3], row[4]) for row in stored_rows(conn, sid, lo, hi)]

    return read


def replace_tail(conn: Conn, op: ReplaceOp, now: float, moved: dict[str, int]) -> int:
    """Rewrite everything after ``op.from_seq``; the new head."""
    while True:
        row = _session_row(conn, op.session_id)
        head = 0 if row is None else row[1]
        if check_replace(op, head, stored_tail(conn, None if row is None else row[0])):
            return head  # a resend of a replace that landed
        sid = row[0] if row is not None else new_session(conn, op.session_id, now, "{}")
        if sid is not None:
            break
    truncate_session(conn, op.session_id, op.from_seq, now, moved)
    if op.events:
        insert_events(conn, sid, op.from_seq, op.events, now)
    moved[op.session_id] = op.from_seq + len(op.events)
    return op.from_seq + len(op.events)


def truncate_session(
    conn: Conn, session_id: str, to_seq: int, now: float, moved: dict[str, int]
) -> int:
    """Remove events after ``to_seq`` (forks keep their prefix); how many. One cut is
    recorded (pins and projection checkpoints below it expire)."""
    row = conn.execute(
        "SELECT sid, head, epoch FROM sessions WHERE id = %s FOR UPDATE", (session_id,)
    ).fetchone()
    if row is None or to_seq >= row[1]:
        return 0
    sid, head, epoch = row
    protect_children(conn, sid, to_seq, deleting=False)
    conn.execute(
        "WITH d AS (DELETE FROM events WHERE sid = %(sid)s AND seq > %(to)s),"
        " c AS (INSERT INTO cuts(sid, epoch, to_seq) VALUES (%(sid)s, %(epoch)s, %(to)s))"
        " UPDATE sessions SET head = %(to)s, epoch = %(epoch)s, updated_at = %(now)s,"
        " base_seq = LEAST(base_seq, %(to)s) WHERE sid = %(sid)s",
        {"sid": sid, "to": to_seq, "epoch": epoch + 1, "now": now},
    )
    moved[session_id] = to_seq
    return int(head - to_seq)


def delete_session(conn: Conn, session_id: str, moved: dict[str, int]) -> bool:
    """Delete a session with its lease (its forks keep their prefix); False if unknown."""
    conn.execute("DELETE FROM leases WHERE id = %s", (session_id,))
    row = conn.execute(
        "SELECT sid FROM sessions WHERE id = %s FOR UPDATE", (session_id,)
    ).fetchone()
    if row is None:
        return False
    sid = row[0]
    protect_children(conn, sid, 0, deleting=True)
    conn.execute(
        "WITH e AS (DELETE FROM events WHERE sid = %(sid)s),"
        " c AS (DELETE FROM cuts WHERE sid = %(sid)s),"
        " p AS (DELETE FROM projections WHERE sid = %(sid)s)"
        " DELETE FROM sessions WHERE sid = %(sid)s",
        {"sid": sid},
    )
    moved[session_id] = 0
    return True


def create_session(
    conn: Conn, session_id: str, header_json: str, now: float, *, exist_ok: bool
) -> tuple[SessionInfo, bool]:
    """Create an empty session (see :meth:`Store.create <stores._contract.Store.create>`);
    its info and whether it was created."""
    while True:
        row = conn.execute(
            f"SELECT {INFO_COLUMNS} FROM sessions WHERE id = %s", (session_id,)
        ).fetchone()
        if row is not None:
            if exist_ok:
                return session_info(row), False
            raise SessionExistsError(session_id)
        if new_session(conn, session_id, now, header_json) is not None:
            return SessionInfo(session_id, 0, now, now, decode_json_object(header_json)), True


def check_ops_only(conn: Conn, ops: Sequence[WriteOp]) -> list[BatchResult]:
    """The results of a batch of empty appends, which write nothing: each op's head, or
    its conflict or lost ownership -- read in one statement (one snapshot)."""
    ids = [op.session_id for op in ops if isinstance(op, AppendOp)]
    rows = conn.execute(
        "SELECT o.id, s.head, l.owner FROM unnest(%b::text[]) AS o(id)"
        " LEFT JOIN sessions AS s ON s.id = o.id LEFT JOIN leases AS l ON l.id = o.id",
        (sorted(set(ids)),),
    ).fetchall()
    found = {row[0]: (0 if row[1] is None else int(row[1]), row[2]) for row in rows}
    results: list[BatchResult] = []
    for op in ops:
        assert isinstance(op, AppendOp)
        head, owner = found[op.session_id]
        if op.owner is not None and owner != op.owner:
            results.append(OwnershipLostError(op.session_id))
        elif op.expected_head is not None and op.expected_head != head:
            results.append(ConflictError(op.session_id, op.expected_head, head))
        else:
            results.append(head)
    return results


def notify(conn: Conn, channel: str | None, heads: dict[str, int]) -> None:
    """Issue the NOTIFY of a commit that moved ``heads`` (inside its transaction: it is
    delivered when, and only if, the transaction commits)."""
    if channel is not None and heads:
        conn.execute("SELECT pg_notify(%s, %s)", (channel, notify_payload(heads)))


def permanent_error(_tx: Tx, op: WriteOp, exc: Exception) -> TidelogError | None:
    """For :func:`~stores._batching.run_batch`: the op's own error for a value
    PostgreSQL can never store -- a NUL character (U+0000) in a text value (a
    hand-built :class:`PreparedEvent` or ``header_json``; what :func:`prepare_events`
    makes never holds one: JSON escapes it), or a value past a server limit --:
    :class:`InvalidEventError` naming the event. ``None`` for any other failure, which
    fails the whole batch."""
    refused = isinstance(exc, psycopg.DataError) or getattr(exc, "sqlstate", None) == "54000"
    if not refused:
        return None
    members = op.ops if isinstance(op, GroupOp) else (op,)
    index: int | None = None
    kind: str | None = None
    session_id = members[0].session_id
    for member in members:
        for i, event in enumerate(getattr(member, "events", ())):
            if "\x00" in f"{event.kind}{event.data_json}{event.run_id or ''}":
                index, kind, session_id = i, event.kind, member.session_id
                break
        if index is not None:
            break
    what = "this event" if index is not None else "a value of this op"
    error = InvalidEventError(
        index,
        kind,
        f"session {session_id!r}: PostgreSQL cannot store {what} ({exc}); nothing of the "
        "op was written",
    )
    error.__cause__ = exc
    return error
