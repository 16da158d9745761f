"""The SQL of SqliteStore's reads, as functions of one connection: a read window's
events (forks included), the pin check, the listing's query.

Like :mod:`stores.sqlite._ops` (the writes): each runs inside a transaction its caller
opened, on the connection's owner thread; errors are tidelog errors (the caller's
``map_errors`` translates driver exceptions).
"""

from __future__ import annotations

from typing import Any, cast

import apsw

from .._checks import prefix_end
from .._contract import Pin
from .._errors import SnapshotExpiredError, StoreCorruptError
from .._records import INFO_COLUMNS, StoredEvent, decode_json, events_from_rows, stored_events
from ._connection import one
from ._lineage import pieces, read_rows

__all__ = ["PACKED_READ_MAX", "check_pin", "list_query", "packed_events", "read_session_events"]


def list_query(
    limit: int | None, prefix: str | None, after: str | None, order: str
) -> tuple[str, tuple[Any, ...]]:
    """The query of a checked :meth:`Store.list_sessions <stores._contract.Store.list_sessions>`
    call and its arguments. SQLite compares text as UTF-8 bytes, which is the code point
    order the contract names; a prefix is a range of the ids' index."""
    where: list[str] = []
    args: list[Any] = []
    if prefix:
        where.append("id >= ?")
        args.append(prefix)
        end = prefix_end(prefix)
        if end is not None:
            where.append("id < ?")
            args.append(end)
    if after is not None:
        where.append("id > ?")
        args.append(after)
    sql = f"SELECT {INFO_COLUMNS} FROM sessions"
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY id LIMIT ?" if order == "id" else " ORDER BY updated_at DESC, id LIMIT ?"
    args.append(-1 if limit is None else limit)
    return sql, tuple(args)


#: Read windows of at most this many events are fetched in one step (:func:`packed_events`).
PACKED_READ_MAX = 1000


def packed_events(
    conn: apsw.Connection,
    session_id: str,
    sid: int,
    since: int,
    until: int,
    limit: int,
    from_end: bool,
) -> list[StoredEvent] | None:
    """The events of one range's read window, fetched in a single step: SQLite packs them
    into one JSON array, so the reading thread takes the GIL back once per read instead of
    once per row (apsw releases it around every step, and a busy writer's threads compete
    for it: each re-take can wait). Each event is one ``printf`` of
    ``[seq, "ts", kind, data, run_id]``: ``data`` spliced in as stored, so one decode of
    the packed text decodes every event (W4's reader) and SQLite only checks the texts,
    never parses them into a tree and prints them back (``json(data)`` did: 5 % more
    instructions per W4 read). The splice is safe because the same statement proves every
    ``data`` in the window is text and strict JSON (``json_valid(data, 1)``), so each is
    one self-delimiting value; ``kind`` and ``run_id`` are quoted by ``json_quote``,
    ``seq`` is a JSON integer and ``ts`` a JSON number with 17 significant digits and a
    point (``%!.17g``: enough for any double, and read back as a float, to the bit, by
    the compiled decoder).

    ``None`` when the window must be read row by row, which reports damage precisely, or
    reads what only it can: a stored data that is not strict JSON text (SQLite's parser
    also accepts JSON5; a BLOB of JSON bytes passes ``json_valid``, hence the ``typeof``),
    a text SQLite cannot parse, or a ``ts`` that is not a finite REAL (no JSON number
    spells an infinity; an INTEGER comes back as stored). Raises :class:`apsw.TooBigError`
    when the packed text would pass the connection's length limit (the caller reads row
    by row too)."""
    try:
        packed, strict = one(
            conn,
            "SELECT '[' || group_concat(printf('[%d,%!.17g,%s,%s,%s]', seq, ts, "
            "json_quote(kind), data, json_quote(run_id)), ',' ORDER BY seq) || ']', "
            "min(typeof(data) = 'text' AND json_valid(data, 1) AND typeof(ts) = 'real' "
            "AND abs(ts) <= 1.7976931348623157e308) FROM (SELECT seq, ts, "
            "kind, data, run_id FROM events WHERE sid=? AND seq>? AND seq<=? "
            + ("ORDER BY seq DESC LIMIT ?)" if from_end else "ORDER BY seq LIMIT ?)"),
            (sid, since, until, limit),
        )
    except (apsw.SQLError, UnicodeDecodeError):
        return None  # a text SQLite cannot parse as JSON: read row by row
    if strict is None:
        return []  # no rows in the window
    if strict != 1:
        return None  # a text that is not strict JSON
    try:
        rows = cast(list[list[Any]], decode_json(packed))
        return stored_events(session_id, rows)
    except (ValueError, TypeError, RecursionError) as exc:
        raise StoreCorruptError(
            f"session {session_id!r}: stored events could not be read back ({exc})"
        ) from exc


def read_session_events(
    conn: apsw.Connection,
    session_id: str,
    since: int,
    until: int,
    limit: int | None,
    from_end: bool,
) -> list[StoredEvent]:
    """The events of a read window, forks included."""
    row = conn.execute(
        "SELECT sid, base_sid, base_seq, head FROM sessions WHERE id=?", (session_id,)
    ).fetchone()
    if row is None:
        return []
    sid, base_sid, base_seq, head = row
    if base_sid is None and limit is not None and limit <= PACKED_READ_MAX:
        try:
            events = packed_events(conn, session_id, sid, since, until, limit, from_end)
        except apsw.TooBigError:
            events = None  # the packed text would pass the length limit
        if events is not None:
            return events
    if base_sid is None:  # the common case: one range, one statement
        rows = [
            tuple(r)
            for r in conn.execute(
                "SELECT seq, ts, kind, data, run_id FROM events "
                "WHERE sid=? AND seq>? AND seq<=? "
                + ("ORDER BY seq DESC LIMIT ?" if from_end else "ORDER BY seq LIMIT ?"),
                (sid, since, until, -1 if limit is None else limit),
            )
        ][:: -1 if from_end else 1]
    else:
        ranges = pieces(conn, sid, base_sid, base_seq, head)
        rows = read_rows(conn, ranges, since, until, limit, from_end)
    return events_from_rows(session_id, rows)


def check_pin(conn: apsw.Connection, session_id: str, pin: Pin) -> None:
    """Raise :class:`SnapshotExpiredError` if ``pin``'s version was destroyed."""
    if pin.session_id != session_id:
        raise SnapshotExpiredError(session_id, pin.as_of_seq, "pin is for another session")
    row = conn.execute("SELECT sid FROM sessions WHERE id=?", (session_id,)).fetchone()
    if row is None or row[0] != pin.incarnation:
        raise SnapshotExpiredError(session_id, pin.as_of_seq, "the session was deleted")
    cut = one(
        conn,
        "SELECT min(to_seq) FROM cuts WHERE sid=? AND epoch>?",
        (pin.incarnation, pin.epoch),
    )[0]
    if cut is not None and cut < pin.as_of_seq:
        raise SnapshotExpiredError(
            session_id, pin.as_of_seq, f"events after seq {cut} were truncated"
        )
