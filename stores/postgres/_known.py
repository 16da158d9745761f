"""The append path for sessions a PostgresStore has met: one statement per batch and one
row operation per session per batch, however many of the batch's ops name it.

The id-keyed statements (:data:`~stores.postgres._ops.APPEND_MANY`,
:data:`~stores.postgres._ops.APPEND_ONE_EACH`) return each session's ``sid``, its
incarnation, never reused; the store remembers them. A later batch of appends whose
sessions it all knows, whose ops have one owner (or none) and all say -- or imply,
following an earlier op of the same session -- where they land runs :data:`APPEND_KNOWN`
(one event per op and distinct sessions: :data:`APPEND_KNOWN_ONE_EACH`). The client works
out every seq, every new head and the NOTIFY payload, so the row update and the event
insert do not read each other's output: no ``RETURNING`` to join. Each session's row is
updated once (``head = head + count WHERE sid = ... AND head = expected AND owner = me``:
the check, the lock and the fence in one row operation, as on the id-keyed path). An op
that would not pass, an event seq already taken or a sid that is gone undoes the
statement, and the general path decides each op's result.

That row update is the floor of this layout: per session one heap record more than the
events' own inserts (``python -m bench.probes.pg_paths`` counts them).

Like :mod:`stores.postgres._ops`: SQL and the parameters of one connection's statements;
the caller runs them (prepared) and translates errors.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .._contract import AppendOp, BatchResult
from ._connection import EVERYTHING, MAX_PAYLOAD_BYTES, notify_payload
from ._ops import NOW
from ._packed import ints, nullable_texts, pack_ints, pack_nullable_texts, pack_texts, texts

__all__ = [
    "APPEND_KNOWN",
    "APPEND_KNOWN_ONE",
    "APPEND_KNOWN_ONE_EACH",
    "known_args",
    "known_one_args",
    "known_one_each_args",
]


#: The append path's statement for a batch whose every session the store has met before
#: (it knows its ``sid``, which is the session's incarnation and never reused) and whose
#: ops all say where they land (:func:`known_args`). It may name a session several times:
#: the client already worked out each op's place, so each session's row is updated once
#: per batch (``head = head + count WHERE sid = ... AND head = expected AND owner = me``:
#: the same check, lock and fence in one row operation as the id-keyed statements') and
#: the events are inserted at the seqs the client computed. The two do not read each other's
#: output: no join, no ``RETURNING`` to match, and the new heads and the NOTIFY payload
#: are the client's too. If any session's row does not pass (a stale head, another
#: owner, a session deleted), the statement raises ``RETRY_SQLSTATE`` and undoes itself;
#: an event whose seq is taken (a concurrent writer won) makes it fail with a unique
#: violation, which undoes it as well. The store then runs the batch through the general
#: path.
APPEND_KNOWN = f"""
WITH now AS MATERIALIZED (SELECT {NOW} AS t),
upd AS (
    UPDATE sessions AS s SET head = s.head + o.c, updated_at = now.t
    FROM unnest({ints("sids")}, {ints("expected")}, {ints("counts")}) AS o(sid, x, c), now
    WHERE s.sid = o.sid AND s.head = o.x
        AND (%(owner)s::text IS NULL OR s.owner = %(owner)s::text)
    RETURNING 1),
ev AS (
    INSERT INTO events(sid, seq, ts, kind, data, run_id)
    SELECT e.sid, e.seq, now.t, e.kind, e.data, e.run_id
    FROM unnest({ints("ev_sids")}, {ints("seqs")}, {texts("kinds")}, {texts("datas")},
        {nullable_texts("run_ids")}) AS e(sid, seq, kind, data, run_id), now)
SELECT CASE WHEN (SELECT count(*) FROM upd) < %(k)s THEN retry_batch() END,
    CASE WHEN %(channel)s::text IS NOT NULL THEN pg_notify(%(channel)s, %(payload)s) END,
    CASE WHEN %(sync)s THEN set_config('synchronous_commit', 'on', true) END
"""


#: :data:`APPEND_KNOWN` for the runtime's usual batch (:func:`known_one_each_args`): one
#: event per op, distinct sessions, every op naming its expected head. One set of arrays
#: serves the rows and the events (each op's event lands at ``expected + 1``).
APPEND_KNOWN_ONE_EACH = f"""
WITH ops AS MATERIALIZED (
    SELECT o.sid, o.x, o.kind, o.data, o.run_id
    FROM unnest({ints("sids")}, {ints("expected")}, {texts("kinds")}, {texts("datas")},
        {nullable_texts("run_ids")}) AS o(sid, x, kind, data, run_id)),
now AS MATERIALIZED (SELECT {NOW} AS t),
upd AS (
    UPDATE sessions AS s SET head = s.head + 1, updated_at = now.t FROM ops, now
    WHERE s.sid = ops.sid AND s.head = ops.x
        AND (%(owner)s::text IS NULL OR s.owner = %(owner)s::text)
    RETURNING 1),
ev AS (
    INSERT INTO events(sid, seq, ts, kind, data, run_id)
    SELECT ops.sid, ops.x + 1, now.t, ops.kind, ops.data, ops.run_id FROM ops, now)
SELECT CASE WHEN (SELECT count(*) FROM upd) < %(k)s THEN retry_batch() END,
    CASE WHEN %(channel)s::text IS NOT NULL THEN pg_notify(%(channel)s, %(payload)s) END,
    CASE WHEN %(sync)s THEN set_config('synchronous_commit', 'on', true) END
"""


#: :data:`APPEND_KNOWN` for a batch of one op appending one event at its expected head
#: (:func:`known_one_args`): a lone writer's awaited append, every one of W1pg's. Scalar
#: parameters instead of arrays (psycopg dumps each array in Python: about 60 us of the
#: 250 a lone append took, ``bench/HISTORY.md``), and the event is inserted from the row
#: update's output: a row that does not pass (a stale head, another owner, a sid that is
#: gone) updates nothing, so nothing is inserted and the statement returns no row -- it
#: wrote nothing, and the store runs the op through the general path. An event seq already
#: taken fails it with a unique violation, which undoes the row update with it (the
#: statement is its own transaction).
APPEND_KNOWN_ONE = f"""
WITH upd AS (
    UPDATE sessions SET head = %(x)s + 1, updated_at = {NOW}
    WHERE sid = %(sid)s AND head = %(x)s
        AND (%(owner)s::text IS NULL OR owner = %(owner)s::text)
    RETURNING updated_at),
ev AS (
    INSERT INTO events(sid, seq, ts, kind, data, run_id)
    SELECT %(sid)s, %(x)s + 1, upd.updated_at, %(kind)s, %(data)s, %(run_id)s FROM upd
    RETURNING 1)
SELECT CASE WHEN %(channel)s::text IS NOT NULL THEN pg_notify(%(channel)s, %(payload)s) END,
    CASE WHEN %(sync)s THEN set_config('synchronous_commit', 'on', true) END
FROM ev
"""


def known_one_args(
    op: AppendOp, sids: Mapping[str, int], channel: str | None, *, sync: bool
) -> dict[str, object] | None:
    """The parameters of :data:`APPEND_KNOWN_ONE` for a batch of the one op ``op``;
    ``None`` unless it appends one event to a session of ``sids`` at a given expected
    head. The op's result, when the statement returns its row, is ``expected + 1``."""
    expected = op.expected_head
    sid = sids.get(op.session_id)
    if expected is None or sid is None or len(op.events) != 1:
        return None
    event = op.events[0]
    return {
        "sid": sid,
        "x": expected,
        "owner": op.owner,
        "kind": event.kind,
        "data": event.data_json,
        "run_id": event.run_id,
        "channel": channel,
        # notify_payload's line; one id (at most 256 characters) always fits
        "payload": None if channel is None else f"{expected + 1} {op.session_id}",
        "sync": sync,
    }


def known_one_each_args(
    ops: Sequence[AppendOp], sids: Mapping[str, int], channel: str | None, *, sync: bool
) -> tuple[dict[str, object], list[BatchResult]] | None:
    """The parameters of :data:`APPEND_KNOWN_ONE_EACH` for ``ops`` and the new heads it
    gives when it commits; ``None`` unless every op appends one event to a session of
    ``sids`` at a given expected head, the sessions are distinct, one owner (or none)
    writes them all and their values can be packed (:mod:`stores.postgres._packed`)."""
    owner = ops[0].owner
    try:
        sid_list = [sids[op.session_id] for op in ops]
    except KeyError:
        return None
    expected = [op.expected_head for op in ops]
    if None in expected or len(set(sid_list)) < len(sid_list):
        return None
    events = []
    for op in ops:
        if len(op.events) != 1 or op.owner != owner:
            return None
        events.append(op.events[0])
    heads: list[int] = [x + 1 for x in expected]  # type: ignore[operator]
    payload = None
    if channel is not None:
        lines = [f"{head} {op.session_id}" for head, op in zip(heads, ops, strict=True)]
        payload = "\n".join(lines)
        if len(payload) > MAX_PAYLOAD_BYTES // 4 and len(payload.encode()) > MAX_PAYLOAD_BYTES:
            payload = EVERYTHING
    kinds = pack_texts([event.kind for event in events])
    datas = pack_texts([event.data_json for event in events])
    run_ids = pack_nullable_texts([event.run_id for event in events])
    if kinds is None or datas is None or run_ids is None:
        return None
    args: dict[str, object] = {
        "sids": pack_ints(sid_list),
        "expected": pack_ints(expected),
        "kinds": kinds,
        "datas": datas,
        "run_ids": run_ids,
        "owner": owner,
        "channel": channel,
        "payload": payload,
        "sync": sync,
        "k": len(ops),
    }
    return args, list(heads)


def known_args(
    ops: Sequence[AppendOp], sids: Mapping[str, int], channel: str | None, *, sync: bool
) -> tuple[dict[str, object], list[BatchResult]] | None:
    """The parameters of :data:`APPEND_KNOWN` for ``ops`` (appends of events; a session
    may come several times) and the results it gives when it commits -- or ``None`` when
    it cannot take them: a session whose sid is not in ``sids``, ops of more than one
    owner, a session none of whose ops names its expected head, or ops of one session
    whose expected heads do not follow one another (one of them is bound to fail: the
    general path gives each op its result), or values that cannot be packed
    (:mod:`stores.postgres._packed`)."""
    owner = ops[0].owner
    start: dict[str, int | None] = {}
    count: dict[str, int] = {}
    for op in ops:
        if op.owner != owner or op.session_id not in sids:
            return None
        session_id = op.session_id
        before = count.get(session_id, 0)
        expected = op.expected_head
        if expected is not None:
            base = start.get(session_id)
            if base is None:
                start[session_id] = expected - before
            elif base + before != expected:
                return None
        elif session_id not in start:
            start[session_id] = None
        count[session_id] = before + len(op.events)
    bases = {session_id: base for session_id, base in start.items() if base is not None}
    if len(bases) < len(start):
        return None
    results: list[BatchResult] = []
    ev_sids: list[int] = []
    seqs: list[int] = []
    kinds: list[str] = []
    datas: list[str] = []
    run_ids: list[str | None] = []
    at_head = dict(bases)
    for op in ops:
        sid = sids[op.session_id]
        at = at_head[op.session_id]
        for event in op.events:
            at += 1
            ev_sids.append(sid)
            seqs.append(at)
            kinds.append(event.kind)
            datas.append(event.data_json)
            run_ids.append(event.run_id)
        at_head[op.session_id] = at
        results.append(at)
    packed = (pack_texts(kinds), pack_texts(datas), pack_nullable_texts(run_ids))
    if None in packed:
        return None
    args: dict[str, object] = {
        "sids": pack_ints([sids[session_id] for session_id in bases]),
        "expected": pack_ints(list(bases.values())),
        "counts": pack_ints([count[session_id] for session_id in bases]),
        "owner": owner,
        "ev_sids": pack_ints(ev_sids),
        "seqs": pack_ints(seqs),
        "kinds": packed[0],
        "datas": packed[1],
        "run_ids": packed[2],
        "channel": channel,
        "payload": None if channel is None else notify_payload(at_head),
        "sync": sync,
        "k": len(bases),
    }
    return args, results
