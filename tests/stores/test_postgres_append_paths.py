"""PostgresStore's one-statement appends to sessions it has met (``APPEND_KNOWN``,
``APPEND_KNOWN_ONE_EACH`` and ``APPEND_KNOWN_ONE``: one row operation per session per
batch, keyed by the sid it learnt): what they write when every op passes, that they
undo themselves otherwise, and that the store's results stay those of the general rules
(a model store beside it).

The real server, a schema per test, raw psycopg connections for the other host.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("psycopg", reason="psycopg is not installed (pip install -e '.[postgres]')")

import psycopg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stores import (
    AppendOp,
    BatchResult,
    ConflictError,
    DeleteOp,
    MemoryStore,
    NewEvent,
    OwnershipLostError,
    PostgresStore,
    Store,
    prepare_events,
)
from stores.postgres import _known as pgops
from stores.postgres import _schema as pg_schema

Opener = Callable[..., PostgresStore]


def op(session_id: str, n: int, tag: str = "x", **kwargs: Any) -> AppendOp:
    events = [NewEvent("k", {"tag": tag, "i": i}) for i in range(n)]
    return AppendOp(session_id, tuple(prepare_events(events)), **kwargs)


def sids_of(conn: psycopg.Connection[Any], ids: list[str]) -> dict[str, int]:
    rows = conn.execute("SELECT id, sid FROM sessions WHERE id = ANY(%s)", (ids,)).fetchall()
    return {row[0]: row[1] for row in rows}


def counts(conn: psycopg.Connection[Any]) -> dict[str, int]:
    rows = conn.execute(
        "SELECT s.id, count(e.seq) FROM sessions AS s LEFT JOIN events AS e ON e.sid = s.sid"
        " GROUP BY s.id"
    ).fetchall()
    return {row[0]: row[1] for row in rows}


def test_known_statements_commit_or_undo_themselves(
    pg_open: Opener, pg_raw: psycopg.Connection[Any]
) -> None:
    """Both sid-keyed statements, run as the store runs them, write every event at the
    seq the client worked out and move each session's row once; with one session that
    does not pass (a stale head, another owner, a sid that is gone, a seq taken) they
    write nothing at all."""
    store = pg_open()
    for i in ("a", "b", "c"):
        store.acquire_lease(i, "me", ttl=60, holder="h")
        assert store.write_batch([op(i, 2, expected_head=0, owner="me")]) == [2]
    sids = sids_of(pg_raw, ["a", "b", "c"])
    one_each = [op(i, 1, expected_head=2, owner="me") for i in ("a", "b", "c")]
    known = pgops.known_one_each_args(one_each, sids, None, sync=False)
    assert known is not None
    pg_raw.execute(pgops.APPEND_KNOWN_ONE_EACH, known[0])
    assert known[1] == [3, 3, 3]
    grouped = [
        op("a", 2, expected_head=3, owner="me"),
        op("b", 1, expected_head=3, owner="me"),
        op("a", 1, owner="me"),
        op("a", 1, expected_head=6, owner="me"),
    ]
    assert pgops.known_one_each_args(grouped, sids, None, sync=False) is None
    known = pgops.known_args(grouped, sids, "chan", sync=False)
    assert known is not None
    assert known[1] == [5, 4, 6, 7]
    assert known[0]["payload"] == "7 a\n4 b"
    pg_raw.execute(pgops.APPEND_KNOWN, known[0])
    assert counts(pg_raw) == {"a": 7, "b": 4, "c": 3}
    assert [e.seq for e in store.read("a")] == list(range(1, 8))
    assert [store.head(i) for i in "abc"] == [7, 4, 3]

    pg_raw.execute("INSERT INTO events VALUES (%s, 4, 0, 'k', '{}', NULL)", (sids["c"],))
    failing = [
        [op("a", 1, expected_head=6, owner="me"), op("b", 1, expected_head=4, owner="me")],
        [op("a", 1, expected_head=7, owner="other"), op("b", 1, expected_head=4, owner="other")],
        [op("a", 1, expected_head=7, owner="me"), op("c", 1, expected_head=3, owner="me")],
    ]
    gone = dict(sids, b=10**12)
    for batch, known_sids in [*((b, sids) for b in failing), (failing[0][1:], gone)]:
        for make, sql in (
            (pgops.known_one_each_args, pgops.APPEND_KNOWN_ONE_EACH),
            (pgops.known_args, pgops.APPEND_KNOWN),
        ):
            args = make(batch, known_sids, None, sync=False)
            assert args is not None
            with pytest.raises(psycopg.DatabaseError) as info:
                pg_raw.execute(sql, args[0])
            assert info.value.sqlstate in (pg_schema.RETRY_SQLSTATE, "23505")
    assert counts(pg_raw) == {"a": 7, "b": 4, "c": 4}


def test_the_lone_append_statement_commits_or_writes_nothing(
    pg_open: Opener, pg_raw: psycopg.Connection[Any]
) -> None:
    """APPEND_KNOWN_ONE, run as the store runs it, writes the event at ``expected + 1``
    and moves the session's row, with its NOTIFY; a stale head, another owner or a sid
    that is gone return no row and write nothing, and a taken seq fails it whole."""
    store = pg_open()
    for i in ("a", "c"):
        store.acquire_lease(i, "me", ttl=60, holder="h")
        assert store.write_batch([op(i, 2, expected_head=0, owner="me")]) == [2]
    sids = sids_of(pg_raw, ["a", "c"])
    pg_raw.execute("LISTEN chan")
    args = pgops.known_one_args(op("a", 1, expected_head=2, owner="me"), sids, "chan", sync=True)
    assert args is not None
    assert pg_raw.execute(pgops.APPEND_KNOWN_ONE, args).fetchone() is not None
    assert [n.payload for n in pg_raw.notifies(timeout=5, stop_after=1)] == ["3 a"]
    assert [e.seq for e in store.read("a")] == [1, 2, 3]
    assert store.head("a") == 3

    assert pgops.known_one_args(op("a", 2, expected_head=3), sids, None, sync=False) is None
    assert pgops.known_one_args(op("a", 1), sids, None, sync=False) is None
    assert pgops.known_one_args(op("z", 1, expected_head=0), sids, None, sync=False) is None
    nothing = [
        (op("a", 1, expected_head=2, owner="me"), sids),
        (op("a", 1, expected_head=3, owner="other"), sids),
        (op("a", 1, expected_head=3, owner="me"), dict(sids, a=10**12)),
    ]
    for lone, known_sids in nothing:
        args = pgops.known_one_args(lone, known_sids, None, sync=False)
        assert args is not None
        assert pg_raw.execute(pgops.APPEND_KNOWN_ONE, args).fetchone() is None
    pg_raw.execute("INSERT INTO events VALUES (%s, 3, 0, 'k', '{}', NULL)", (sids["c"],))
    args = pgops.known_one_args(op("c", 1, expected_head=2, owner="me"), sids, None, sync=False)
    assert args is not None
    with pytest.raises(psycopg.errors.UniqueViolation):
        pg_raw.execute(pgops.APPEND_KNOWN_ONE, args)
    assert counts(pg_raw) == {"a": 3, "c": 3}
    assert [store.head(i) for i in "ac"] == [3, 2]


def test_known_args_refuse_what_they_cannot_decide() -> None:
    """The client-side plan of APPEND_KNOWN is ``None`` for an unknown session, two
    owners, a session none of whose ops names a head, or heads that do not follow one
    another: those batches go to the general path."""
    sids = {"a": 1, "b": 2}
    cases = [
        [op("a", 1, expected_head=0), op("z", 1, expected_head=0)],
        [op("a", 1, expected_head=0, owner="x"), op("b", 1, expected_head=0, owner="y")],
        [op("a", 1, expected_head=0), op("b", 1), op("b", 1)],
        [op("a", 2, expected_head=0), op("a", 1, expected_head=3)],
    ]
    for batch in cases:
        assert pgops.known_args(batch, sids, None, sync=False) is None
        assert pgops.known_one_each_args(batch, sids, None, sync=False) is None
    repeated = [op("a", 1, expected_head=0), op("a", 1, expected_head=1)]
    assert pgops.known_one_each_args(repeated, sids, None, sync=False) is None
    assert pgops.known_args(repeated, sids, None, sync=False) is not None


def test_a_stale_sid_goes_to_the_general_path(pg_open: Opener) -> None:
    """A session another host deleted and created again has a new sid: the batch that
    names the old one writes nothing through it, and the general path gives every op its
    exact result (the log holds the accepted events once each)."""
    mine, other = pg_open(), pg_open()
    assert mine.write_batch([op("s", 2, expected_head=0), op("t", 1, expected_head=0)]) == [2, 1]
    assert mine.write_batch([op("s", 1, expected_head=2), op("t", 1, expected_head=1)]) == [3, 2]
    assert other.delete("s")
    assert other.write_batch([op("s", 1, "new", expected_head=0)]) == [1]
    results = mine.write_batch([op("s", 1, expected_head=3), op("t", 1, expected_head=2)])
    assert isinstance(results[0], ConflictError)
    assert (results[0].expected, results[0].actual) == (3, 1)
    assert results[1] == 3
    assert mine.write_batch([op("s", 1, "mine", expected_head=1)]) == [2]
    assert [e.data for e in other.read("s")] == [{"tag": "new", "i": 0}, {"tag": "mine", "i": 0}]
    assert [e.seq for e in other.read("t")] == [1, 2, 3]


def test_a_known_append_meeting_a_takeover_waits_and_is_refused(
    pg_open: Opener, pg_raw: psycopg.Connection[Any], pg_where: tuple[str, str]
) -> None:
    """The sid-keyed statement fences like the others: meeting a takeover in flight it
    waits for it, then refuses the old owner (OwnershipLostError) and writes nothing."""
    store = pg_open(busy_timeout_ms=30_000)
    store.acquire_lease("s", "A", ttl=3600.0, holder="elsewhere")
    assert store.write_batch([op("s", 3, expected_head=0, owner="A")]) == [3]
    assert store.write_batch([op("s", 1, expected_head=3, owner="A")]) == [4]  # now by sid
    takeover = psycopg.connect(pg_where[0])
    takeover.execute(f"UPDATE {pg_where[1]}.leases SET owner = 'B' WHERE id = 's'")
    results: list[BatchResult] = []
    batch = [op("s", 1, expected_head=4, owner="A"), op("s", 1, expected_head=5, owner="A")]
    pid = store.backend_pid
    thread = threading.Thread(target=lambda: results.extend(store.write_batch(batch)))
    thread.start()
    try:
        for _ in range(3000):
            row = pg_raw.execute(
                "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)
            ).fetchone()
            if row is not None and row[0] == "Lock":
                break
            threading.Event().wait(0.01)
        else:
            raise AssertionError("the write never waited for the takeover")
        takeover.commit()
        thread.join(timeout=30)
    finally:
        takeover.close()
    assert len(results) == 2
    assert all(isinstance(result, OwnershipLostError) for result in results)
    assert store.head("s") == 4


def summary(result: BatchResult) -> object:
    if isinstance(result, ConflictError):
        return ("conflict", result.expected, result.actual)
    if isinstance(result, BaseException):
        return type(result).__name__
    return result


_counter = itertools.count()

#: One op of a generated batch: (session index, events, expected head: exact / off by
#: one / not given, owner: the lease holder's or a stranger's).
_ops = st.tuples(
    st.integers(0, 2),
    st.integers(1, 3),
    st.sampled_from(["exact", "stale", "none"]),
    st.sampled_from(["me", "me", "me", "stranger"]),
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(batches=st.lists(st.lists(_ops, min_size=1, max_size=6), min_size=1, max_size=5))
def test_batches_give_the_model_stores_results(
    pg_open: Opener, batches: list[list[tuple[int, int, str, str]]]
) -> None:
    """For batches of appends naming sessions once or several times, with heads right,
    wrong or not given and owners right or wrong, PostgresStore gives each op the result
    the model store gives and holds the same events: whichever statement took them."""
    store = pg_open()
    model = MemoryStore()
    prefix = f"p{next(_counter)}-"
    ids = [f"{prefix}{i}" for i in range(3)]
    stores: tuple[Store, ...] = (store, model)
    for target in stores:
        for session_id in ids:
            target.acquire_lease(session_id, "me", ttl=600, holder="h")
            assert target.write_batch([op(session_id, 1, expected_head=0, owner="me")]) == [1]
    for specs in batches:
        heads = {session_id: model.head(session_id) for session_id in ids}
        ops: list[AppendOp] = []
        for index, n, head, owner in specs:
            session_id = ids[index]
            expected = {"exact": heads[session_id], "stale": heads[session_id] + 1, "none": None}
            ops.append(op(session_id, n, f"{len(ops)}", expected_head=expected[head], owner=owner))
            heads[session_id] += n
        got = [summary(result) for result in store.write_batch(ops)]
        want = [summary(result) for result in model.write_batch(ops)]
        assert got == want
    for session_id in ids:
        assert [(e.seq, e.data) for e in store.read(session_id)] == [
            (e.seq, e.data) for e in model.read(session_id)
        ]


def test_several_ops_of_sessions_a_handle_never_wrote(pg_open: Opener) -> None:
    """A handle whose first batch names sessions (that another handle made) several times
    each gets each op's exact head, and a session deleted in a later batch of its own and
    made again is written at its new head."""
    other, mine = pg_open(), pg_open()
    assert other.write_batch([op("s", 2, expected_head=0), op("t", 1, expected_head=0)]) == [2, 1]
    batch = [
        op("s", 1, expected_head=2),
        op("t", 2, expected_head=1),
        op("s", 1),
        op("t", 1, expected_head=3),
    ]
    assert mine.write_batch(batch) == [3, 3, 4, 4]
    results = mine.write_batch([DeleteOp("s"), op("t", 1, expected_head=4)])
    assert results == [1, 5]
    assert mine.write_batch([op("s", 1, expected_head=0), op("s", 1, expected_head=1)]) == [1, 2]
    assert [e.seq for e in other.read("s")] == [1, 2]
    assert [e.seq for e in other.read("t")] == [1, 2, 3, 4, 5]
