"""The SQL of SqliteStore's writes, as functions of one connection (its reads are in
:mod:`stores.sqlite._read`).

Every function runs inside a transaction its caller opened (``BEGIN IMMEDIATE``), on the
connection's owner thread; none commits. Errors are tidelog errors (the caller's
``map_errors`` translates driver exceptions).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import apsw
import attrs

from .._batching import StoredTail, check_replace, resent_tail
from .._contract import (
    AppendOp,
    BatchResult,
    GroupOp,
    ReplaceOp,
    RestoreOp,
    TruncateOp,
    WriteOp,
)
from .._errors import (
    ConflictError,
    InvalidArgumentError,
    InvalidEventError,
    OwnershipLostError,
    SessionExistsError,
    TidelogError,
)
from .._records import (
    INFO_COLUMNS,
    PreparedEvent,
    SessionInfo,
    decode_json_object,
    encode_id_list,
    session_info,
)
from ._connection import INSERT_EVENT, one
from ._lineage import fork_session, protect_children, ranges_of, read_rows


def create_session(
    conn: apsw.Connection, session_id: str, header_json: str, now: float, *, exist_ok: bool
) -> SessionInfo:
    """Create an empty session (see :meth:`Store.create <stores._contract.Store.create>`)."""
    row = conn.execute(f"SELECT {INFO_COLUMNS} FROM sessions WHERE id=?", (session_id,)).fetchone()
    if row is not None:
        if exist_ok:
            return session_info(row)
        raise SessionExistsError(session_id)
    new_session(conn, session_id, now, header_json)
    return SessionInfo(session_id, 0, now, now, decode_json_object(header_json))


def new_session(conn: apsw.Connection, session_id: str, now: float, header_json: str) -> int:
    """Insert the row of a new, empty session; its sid."""
    conn.execute(
        "INSERT INTO sessions(id, created_at, updated_at, header) VALUES (?,?,?,?)",
        (session_id, now, now, header_json),
    )
    return int(conn.last_insert_rowid())


#: What a session's row and lease held after this connection's last commit:
#: ``(sid, head, lease owner or None)``.
Known = tuple[int, int, str | None]


@attrs.define
class KnownHeads:
    """The append fast path's memory of what its own commits left behind, so that a batch
    need not look up every session's row and lease again.

    Valid only while nothing else changed those tables: no other connection committed
    (``PRAGMA data_version``, read inside the write transaction, is unchanged) and this
    connection wrote nothing but fast-path appends (the store calls :meth:`forget` before
    every other write). A transaction that does not commit leaves it invalid.
    """

    rows: dict[str, Known] = attrs.Factory(dict)
    #: ``data_version`` as seen inside the transaction that last filled ``rows``.
    version: int | None = None

    def forget(self) -> None:
        """Invalidate (another write on this connection may change heads or leases)."""
        self.version = None

    def committed(self, version: int, rows: dict[str, Known], *, fresh: bool) -> None:
        """Record what a committed fast-path batch left (``fresh``: from a full lookup)."""
        if fresh or len(self.rows) > 100_000:
            self.rows.clear()
        self.rows.update(rows)
        self.version = version


def append_many(
    conn: apsw.Connection, ops: Sequence[AppendOp], now: float, known: KnownHeads
) -> tuple[list[BatchResult], Callable[[], None]]:
    """The group-commit fast path: appends to distinct sessions, a handful of
    statements per batch instead of several per op.

    All checks (lease owner, expected head) run before anything is written, so an op
    that fails writes nothing; the writes themselves -- one ``executemany`` for all
    events, one for all heads -- can then only fail as a whole (I/O), which fails the
    transaction and every op with it.

    The checks read each session's row and lease in one lookup, or take them from
    ``known`` when that is still exact. Returns the results and a function the caller
    calls once the transaction committed, to update ``known``.
    """
    version = one(conn, "PRAGMA data_version")[0]
    rows = known.rows
    fresh = not (
        known.version == version and all(op.session_id in rows and not op.retry for op in ops)
    )
    known.forget()  # until this transaction commits
    found: Mapping[str, tuple[int | None, int, str | None]]
    if fresh:
        # One lookup for every session's row and lease (LEFT JOINs: either may be missing).
        found = {
            row[0]: (row[1], 0 if row[1] is None else row[2], row[3])
            for row in conn.execute(
                "SELECT j.value, s.sid, s.head, l.owner FROM json_each(?) AS j "
                "LEFT JOIN sessions AS s ON s.id = j.value "
                "LEFT JOIN leases AS l ON l.id = j.value",
                (encode_id_list([op.session_id for op in ops]),),
            )
        }
    else:
        found = rows  # every session is there
    results: list[BatchResult] = []
    rows_after: dict[str, Known] = {}
    events_rows: list[tuple[Any, ...]] = []
    updates: list[tuple[int, float, int]] = []
    for op in ops:
        sid, head, owner = found[op.session_id]
        try:
            if op.owner is not None and owner != op.owner:
                raise OwnershipLostError(op.session_id)
            events = op.events
            if op.expected_head is not None and op.expected_head != head:
                events = resent_tail(op, head, stored_tail(conn, sid))
        except TidelogError as exc:
            results.append(exc)
            if sid is not None:
                rows_after[op.session_id] = (sid, head, owner)
            continue
        if events:
            if sid is None:
                sid = new_session(conn, op.session_id, now, op.header_json)
            if len(events) == 1:  # the usual case: one awaited append
                event = events[0]
                events_rows.append((sid, head + 1, now, event.kind, event.data_json, event.run_id))
            else:
                events_rows.extend(
                    (sid, head + i, now, ev.kind, ev.data_json, ev.run_id)
                    for i, ev in enumerate(events, start=1)
                )
            head += len(events)
            updates.append((head, now, sid))
        if sid is not None:
            rows_after[op.session_id] = (sid, head, owner)
        results.append(head)
    if events_rows:
        conn.executemany(INSERT_EVENT, events_rows)
        conn.executemany("UPDATE sessions SET head=?, updated_at=? WHERE sid=?", updates)
    return results, functools.partial(known.committed, version, rows_after, fresh=fresh)


def apply_op(conn: apsw.Connection, op: WriteOp, now: float) -> int:
    """Apply one op of a general batch (the caller holds a savepoint); its result."""
    if isinstance(op, AppendOp):
        return apply_append(conn, op, now)
    if isinstance(op, RestoreOp):
        return apply_restore(conn, op)
    if isinstance(op, GroupOp):
        for member in op.ops:  # the caller's savepoint makes the group all or nothing
            apply_op(conn, member, now)
        return len(op.ops)
    check_owner(conn, op.session_id, op.owner)
    if isinstance(op, TruncateOp):
        return truncate_session(conn, op.session_id, op.to_seq, now)
    if isinstance(op, ReplaceOp):
        return replace_tail(conn, op, now)
    return int(delete_session(conn, op.session_id))


def apply_restore(conn: apsw.Connection, op: RestoreOp) -> int:
    """Apply a :class:`~stores._contract.RestoreOp`; the new head."""
    row = conn.execute("SELECT sid, head FROM sessions WHERE id=?", (op.session_id,)).fetchone()
    shared = op.parent if row is None and op.share_prefix else None  # a fork's prefix
    head = shared[1] if shared is not None else 0 if row is None else int(row[1])
    if op.expected_head != head:
        raise ConflictError(op.session_id, op.expected_head, head)
    if shared is not None:
        fork_session(conn, shared[0], op.session_id, shared[1], {}, op.created_at)
        conn.execute("UPDATE sessions SET header=? WHERE id=?", (op.header_json, op.session_id))
        sid = int(one(conn, "SELECT sid FROM sessions WHERE id=?", (op.session_id,))[0])
    elif row is None:
        parent_id, parent_seq = (None, None) if op.parent is None else op.parent
        conn.execute(
            "INSERT INTO sessions(id, created_at, updated_at, header, parent_id, parent_seq) "
            "VALUES (?,?,?,?,?,?)",
            (op.session_id, op.created_at, op.updated_at, op.header_json, parent_id, parent_seq),
        )
        sid = int(conn.last_insert_rowid())
    else:
        sid = row[0]
    conn.executemany(
        INSERT_EVENT,
        [
            (sid, head + i, ts, ev.kind, ev.data_json, ev.run_id)
            for i, (ev, ts) in enumerate(zip(op.events, op.stamps, strict=True), start=1)
        ],
    )
    new_head = head + len(op.events)
    conn.execute(
        "UPDATE sessions SET head=?, updated_at=? WHERE sid=?", (new_head, op.updated_at, sid)
    )
    return new_head


def replace_tail(conn: apsw.Connection, op: ReplaceOp, now: float) -> int:
    """Rewrite everything after ``op.from_seq`` (a ReplaceOp); the new head."""
    row = conn.execute("SELECT sid, head FROM sessions WHERE id=?", (op.session_id,)).fetchone()
    head = 0 if row is None else int(row[1])
    if check_replace(op, head, stored_tail(conn, None if row is None else row[0])):
        return head  # a resend of a replace that landed
    sid = new_session(conn, op.session_id, now, "{}") if row is None else row[0]
    truncate_session(conn, op.session_id, op.from_seq, now)
    insert_events(conn, sid, op.from_seq, op.events, now)
    return op.from_seq + len(op.events)


def insert_events(
    conn: apsw.Connection, sid: int, head: int, events: Sequence[PreparedEvent], now: float
) -> None:
    """Insert ``events`` after ``head`` and move the session's head past them."""
    if not events:
        return
    conn.executemany(
        INSERT_EVENT,
        [
            (sid, head + i, now, ev.kind, ev.data_json, ev.run_id)
            for i, ev in enumerate(events, start=1)
        ],
    )
    conn.execute(
        "UPDATE sessions SET head=?, updated_at=? WHERE sid=?", (head + len(events), now, sid)
    )


def permanent_error(conn: apsw.Connection, op: WriteOp, exc: Exception) -> TidelogError | None:
    """For :func:`~stores._batching.run_batch`: the op's own error for a driver failure
    that retrying can never fix -- a value over this connection's length limit
    (``TooBigError``): :class:`InvalidEventError` naming the op's largest event, the one
    that cannot fit (``index`` None when the op has no events: its header did not fit).
    ``None`` for any other failure, which fails the whole batch."""
    if not isinstance(exc, apsw.TooBigError):
        return None
    limit = conn.limit(apsw.SQLITE_LIMIT_LENGTH, -1)
    members = op.ops if isinstance(op, GroupOp) else (op,)
    index, kind, size, session_id = None, None, -1, members[0].session_id
    for member in members:
        for i, event in enumerate(getattr(member, "events", ())):
            bytes_ = len(event.data_json.encode()) + len(event.kind) + len(event.run_id or "")
            if bytes_ > size:
                index, kind, size, session_id = i, event.kind, bytes_, member.session_id
    what = "this event" if index is not None else "a value of this op (its header)"
    error = InvalidEventError(
        index,
        kind,
        f"session {session_id!r}: {what} does not fit in this SQLite store (its length "
        f"limit is {limit} bytes per value and per row); nothing of the op was written",
    )
    error.__cause__ = exc
    return error


def check_op(conn: apsw.Connection, op: WriteOp) -> BatchResult:
    """What an op would do without writing: only used for batches that write nothing
    (empty appends), to report conflicts and fencing all the same."""
    if not isinstance(op, AppendOp):
        raise InvalidArgumentError("check_op only checks appends")
    try:
        row = conn.execute("SELECT head FROM sessions WHERE id=?", (op.session_id,)).fetchone()
        head = 0 if row is None else int(row[0])
        check_owner(conn, op.session_id, op.owner)
        if op.expected_head is not None and op.expected_head != head:
            raise ConflictError(op.session_id, op.expected_head, head)
        return head
    except TidelogError as exc:
        return exc


def check_owner(conn: apsw.Connection, session_id: str, owner: str | None) -> None:
    """Raise :class:`OwnershipLostError` unless ``owner`` holds the lease (fencing)."""
    if owner is not None:
        row = conn.execute("SELECT owner FROM leases WHERE id=?", (session_id,)).fetchone()
        if row is None or row[0] != owner:
            raise OwnershipLostError(session_id)


def apply_append(conn: apsw.Connection, op: AppendOp, now: float) -> int:
    """Apply one AppendOp of a general batch; the new head."""
    row = conn.execute("SELECT sid, head FROM sessions WHERE id=?", (op.session_id,)).fetchone()
    head = 0 if row is None else int(row[1])
    check_owner(conn, op.session_id, op.owner)
    events = op.events
    if op.expected_head is not None and op.expected_head != head:
        events = resent_tail(op, head, stored_tail(conn, None if row is None else row[0]))
    if not events:
        return head
    sid = new_session(conn, op.session_id, now, op.header_json) if row is None else row[0]
    insert_events(conn, sid, head, events, now)
    return head + len(events)


def stored_tail(conn: apsw.Connection, sid: int | None) -> StoredTail:
    """What :func:`~stores._batching.resent_tail` compares a resent op with: the
    ``(kind, data, run_id)`` of the session's events in ``(lo, hi]`` (forks included)."""

    def read(lo: int, hi: int) -> list[tuple[str, str, str | None]]:
        assert sid is not None  # asked only about events that stand
        rows = read_rows(conn, ranges_of(conn, sid), lo, hi, None, False)
        return [(row[2], row[3], row[4]) for row in rows]

    return read


def delete_session(conn: apsw.Connection, session_id: str) -> bool:
    """Delete a session (its forks keep their prefix); False if unknown."""
    conn.execute("DELETE FROM leases WHERE id=?", (session_id,))
    row = conn.execute("SELECT sid FROM sessions WHERE id=?", (session_id,)).fetchone()
    if row is None:
        return False
    sid = row[0]
    protect_children(conn, sid, 0, deleting=True)
    conn.execute("DELETE FROM events WHERE sid=?", (sid,))
    conn.execute("DELETE FROM cuts WHERE sid=?", (sid,))
    conn.execute("DELETE FROM projections WHERE sid=?", (sid,))
    conn.execute("DELETE FROM sessions WHERE sid=?", (sid,))
    return True


def truncate_session(conn: apsw.Connection, session_id: str, to_seq: int, now: float) -> int:
    """Remove events after ``to_seq`` (forks keep their prefix); how many."""
    row = conn.execute("SELECT sid, head, epoch FROM sessions WHERE id=?", (session_id,)).fetchone()
    if row is None or to_seq >= row[1]:
        return 0
    sid, head, epoch = row
    protect_children(conn, sid, to_seq, deleting=False)
    conn.execute("DELETE FROM events WHERE sid=? AND seq>?", (sid, to_seq))
    conn.execute(
        "UPDATE sessions SET head=?, epoch=?, updated_at=?, base_seq=min(base_seq, ?) WHERE sid=?",
        (to_seq, epoch + 1, now, to_seq, sid),
    )
    conn.execute("INSERT INTO cuts(sid, epoch, to_seq) VALUES (?,?,?)", (sid, epoch + 1, to_seq))
    return int(head - to_seq)
