"""The SQL of PostgresStore's one-statement append path, and the parameters of its
statements (every other batch takes the general path, :mod:`stores.postgres._general`).

**The append path.** A batch of appends to distinct sessions -- the runtime's usual
batch -- is one statement (:data:`APPEND_MANY`), so one round trip and one implicit
transaction. For each existing session it is one row operation, which is check, lock and
fence at once: ``UPDATE sessions SET head = head + n WHERE id = ... AND head = expected
AND owner = me`` (the session row carries its lease's owner, kept exact by triggers:
:mod:`stores.postgres._schema`, version 2). The update locks the row, and a concurrent
writer's or takeover's change of it is waited for and re-checked (PostgreSQL's
read-committed update rule). New sessions are inserted (a fenced one takes its lease's
owner, read ``FOR SHARE``); the events are inserted (arrays unnested on the server) for
the ops that passed, and the NOTIFY issued. If any op did not pass -- a conflict, a lost
lease, a resend, a session created or deleted concurrently -- the statement raises
(``retry_batch()``, SQLSTATE :data:`~stores.postgres._schema.RETRY_SQLSTATE`), which undoes
all of it, and the store runs the batch again through the general path, whose per-op
rules (:mod:`stores._batching`) decide each op's result. The statement only takes the
path where every op succeeds; it applies no rule of its own. Its row locks are not taken
in id order: two hosts' batches that name the same two sessions in opposite order can
deadlock; PostgreSQL then fails one of them (after ``deadlock_timeout``), which wrote
nothing and goes through the general path, which locks in id order. The runtime's
steady state -- one event per op, every session already there, one owner -- has a leaner
statement of the same shape and rule, :data:`APPEND_ONE_EACH` (five arrays instead of
nine, no running sum, no creation branch).

**Sessions the store has met** take the sid-keyed statements of
:mod:`stores.postgres._known`: one row operation per session per batch.

One statement wins at every batch size (one round trip instead of four; ``python -m
bench.probes.pg_paths``, figures in bench/HISTORY.md). Every column goes as one text
parameter that the server splits (:mod:`stores.postgres._packed`): psycopg dumps a list
element by element in Python, and its text format escapes each JSON text with a regular
expression, which costs more than everything else together. A batch whose values cannot
be packed (made without :func:`~stores.prepare_events`) takes the general path.

The caller runs these statements (prepared) and translates errors.
"""

from __future__ import annotations

from collections.abc import Sequence

from .._contract import AppendOp
from ._connection import MAX_PAYLOAD_BYTES
from ._packed import ints, nullable_texts, pack_ints, pack_nullable_texts, pack_texts, texts

__all__ = [
    "APPEND_MANY",
    "APPEND_ONE_EACH",
    "append_many_args",
    "append_one_each_args",
    "distinct_sessions",
    "one_each",
]

#: The server's clock, in float seconds since the epoch (leases and timestamps use it,
#: never a host's: hosts' clocks may disagree).
NOW = "extract(epoch FROM clock_timestamp())::float8"


# -- the append path ----------------------------------------------------------------------

#: One statement for a batch of appends to distinct sessions (see the module doc).
#: Output: the new heads, in op order. It raises ``RETRY_SQLSTATE`` (through the
#: schema's ``retry_batch()``), undoing everything it did, when an op needs the general
#: path.
APPEND_MANY = f"""
WITH ops AS MATERIALIZED (
    SELECT o.n, o.id, o.x, o.owner, o.c, o.h, sum(o.c) OVER (ORDER BY o.n) - o.c AS start
    FROM unnest({texts("ids")}, {ints("expected")}, {nullable_texts("owners")},
        {ints("counts", "int")}, {texts("headers")}) WITH ORDINALITY AS o(id, x, owner, c, h, n)),
now AS MATERIALIZED (SELECT {NOW} AS t),
upd AS (
    UPDATE sessions AS s SET head = s.head + ops.c, updated_at = now.t FROM ops, now
    WHERE s.id = ops.id AND (ops.x IS NULL OR s.head = ops.x)
        AND (ops.owner IS NULL OR s.owner = ops.owner)
    RETURNING ops.n, s.sid, s.head - ops.c AS head),
ins AS (
    INSERT INTO sessions(id, head, created_at, updated_at, header)
    SELECT ops.id, ops.c, now.t, now.t, ops.h FROM ops, now
    WHERE coalesce(ops.x, 0) = 0 AND NOT EXISTS (SELECT FROM sessions AS s WHERE s.id = ops.id)
    ON CONFLICT (id) DO NOTHING RETURNING id, sid, owner),
done AS (
    SELECT upd.n, upd.sid, upd.head FROM upd
    UNION ALL
    SELECT ops.n, ins.sid, 0 FROM ins JOIN ops ON ops.id = ins.id
    WHERE ops.owner IS NULL OR ins.owner = ops.owner),
ev AS (
    INSERT INTO events(sid, seq, ts, kind, data, run_id)
    SELECT done.sid, done.head + e.n - ops.start, now.t, e.kind, e.data, e.run_id
    FROM unnest({ints("ev_op", "int")}, {texts("kinds")}, {texts("datas")},
        {nullable_texts("run_ids")}) WITH ORDINALITY AS e(op, kind, data, run_id, n)
    JOIN ops ON ops.n = e.op JOIN done ON done.n = e.op, now)
SELECT CASE WHEN r.k < %(k)s THEN retry_batch() END, r.heads,
    CASE WHEN r.k = %(k)s AND %(channel)s::text IS NOT NULL
        THEN pg_notify(%(channel)s,
            CASE WHEN octet_length(r.p) <= {MAX_PAYLOAD_BYTES} THEN r.p ELSE '*' END) END,
    CASE WHEN %(sync)s THEN set_config('synchronous_commit', 'on', true) END, r.sids
FROM (SELECT count(*) AS k, array_agg(done.head + ops.c ORDER BY ops.n) AS heads,
        string_agg((done.head + ops.c)::text || ' ' || ops.id, E'\\n' ORDER BY ops.n) AS p,
        array_agg(done.sid ORDER BY ops.n) AS sids
    FROM done JOIN ops ON ops.n = done.n) AS r
"""


#: :data:`APPEND_MANY` for the runtime's usual batch (:func:`one_each`): one event per op,
#: every session existing (an expected head above 0) and one owner (or none) for all ops.
#: It sends five arrays instead of nine and has no running sum and no creation branch
#: (cheaper on the server and in the client: W2pg, ``bench.probes.pg_paths``). Same output
#: and the same rule: any op that does not pass makes the statement undo itself.
APPEND_ONE_EACH = f"""
WITH ops AS MATERIALIZED (
    SELECT o.n, o.id, o.x, o.kind, o.data, o.run_id
    FROM unnest({texts("ids")}, {ints("expected")}, {texts("kinds")}, {texts("datas")},
        {nullable_texts("run_ids")}) WITH ORDINALITY AS o(id, x, kind, data, run_id, n)),
now AS MATERIALIZED (SELECT {NOW} AS t),
upd AS (
    UPDATE sessions AS s SET head = s.head + 1, updated_at = now.t FROM ops, now
    WHERE s.id = ops.id AND s.head = ops.x
        AND (%(owner)s::text IS NULL OR s.owner = %(owner)s::text)
    RETURNING ops.n, s.sid, s.head),
ev AS (
    INSERT INTO events(sid, seq, ts, kind, data, run_id)
    SELECT upd.sid, upd.head, now.t, ops.kind, ops.data, ops.run_id
    FROM upd JOIN ops ON ops.n = upd.n, now)
SELECT CASE WHEN r.k < %(k)s THEN retry_batch() END, r.heads,
    CASE WHEN r.k = %(k)s AND %(channel)s::text IS NOT NULL
        THEN pg_notify(%(channel)s,
            CASE WHEN octet_length(r.p) <= {MAX_PAYLOAD_BYTES} THEN r.p ELSE '*' END) END,
    CASE WHEN %(sync)s THEN set_config('synchronous_commit', 'on', true) END, r.sids
FROM (SELECT count(*) AS k, array_agg(upd.head ORDER BY upd.n) AS heads,
        string_agg(upd.head::text || ' ' || ops.id, E'\\n' ORDER BY upd.n) AS p,
        array_agg(upd.sid ORDER BY upd.n) AS sids
    FROM upd JOIN ops ON ops.n = upd.n) AS r
"""


def one_each(ops: Sequence[AppendOp]) -> bool:
    """True for a batch that :data:`APPEND_ONE_EACH` can write (see there); the caller
    knows every op to be an append of events (:func:`~stores._batching.check_ops`) and
    checked :func:`distinct_sessions`."""
    owner = ops[0].owner
    return all(len(op.events) == 1 and op.expected_head and op.owner == owner for op in ops)


def append_one_each_args(
    ops: Sequence[AppendOp], channel: str | None, *, sync: bool
) -> dict[str, object] | None:
    """The parameters of :data:`APPEND_ONE_EACH` for ``ops`` (see :func:`one_each`);
    ``None`` if a value cannot be packed (:mod:`stores.postgres._packed`): the general
    path takes the batch."""
    events = [op.events[0] for op in ops]
    ids = pack_texts([op.session_id for op in ops])
    kinds = pack_texts([event.kind for event in events])
    datas = pack_texts([event.data_json for event in events])
    run_ids = pack_nullable_texts([event.run_id for event in events])
    if ids is None or kinds is None or datas is None or run_ids is None:
        return None
    return {
        "ids": ids,
        "expected": pack_ints([op.expected_head for op in ops]),
        "kinds": kinds,
        "datas": datas,
        "run_ids": run_ids,
        "owner": ops[0].owner,
        "channel": channel,
        "sync": sync,
        "k": len(ops),
    }


def distinct_sessions(ops: Sequence[AppendOp]) -> bool:
    """True if no two ops name the same session (:data:`APPEND_MANY` and
    :data:`APPEND_ONE_EACH` need that; :data:`~stores.postgres._known.APPEND_KNOWN` does
    not)."""
    return len({op.session_id for op in ops}) == len(ops)


def append_many_args(
    ops: Sequence[AppendOp], channel: str | None, *, sync: bool
) -> dict[str, object] | None:
    """The parameters of :data:`APPEND_MANY` for ``ops`` (appends to distinct sessions):
    one packed column each (:mod:`stores.postgres._packed`), events flattened in op order
    (``ev_op``: each one's op); ``None`` if a value cannot be packed."""
    ids: list[str] = []
    expected: list[int | None] = []
    owners: list[str | None] = []
    counts: list[int] = []
    headers: list[str] = []
    ev_op: list[int] = []
    kinds: list[str] = []
    datas: list[str] = []
    run_ids: list[str | None] = []
    for n, op in enumerate(ops, start=1):
        ids.append(op.session_id)
        expected.append(op.expected_head)
        owners.append(op.owner)
        events = op.events
        counts.append(len(events))
        headers.append(op.header_json)
        for event in events:
            ev_op.append(n)
            kinds.append(event.kind)
            datas.append(event.data_json)
            run_ids.append(event.run_id)
    columns = {
        "ids": pack_texts(ids),
        "owners": pack_nullable_texts(owners),
        "headers": pack_texts(headers),
        "kinds": pack_texts(kinds),
        "datas": pack_texts(datas),
        "run_ids": pack_nullable_texts(run_ids),
    }
    if None in columns.values():
        return None
    return {
        **columns,
        "expected": pack_ints(expected),
        "counts": pack_ints(counts),
        "ev_op": pack_ints(ev_op),
        "channel": channel,
        "sync": sync,
        "k": len(ops),
    }
