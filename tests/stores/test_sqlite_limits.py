"""SQLite limits: constructor options refused before any file exists, and values over
SQLite's length limit failing one op, not the batch (real files, a lowered
``SQLITE_LIMIT_LENGTH`` through the ``length_limit`` option; no mocks)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import apsw
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stores import (
    AppendOp,
    BatchResult,
    ConflictError,
    GroupOp,
    InvalidArgumentError,
    InvalidEventError,
    NewEvent,
    ReplaceOp,
    SqliteStore,
    TruncateOp,
    prepare_events,
)

LIMIT = 4096  # bytes: SQLite's length limit in these tests (a value or a row)
BIG = 6000  # characters of data: over the limit
SMALL = 100  # characters of data: far below it


def op(session_id: str, size: int, **kwargs: Any) -> AppendOp:
    """An append of one event whose data is a string of ``size`` characters."""
    return AppendOp(session_id, tuple(prepare_events([NewEvent("k", "x" * size)])), **kwargs)


@pytest.fixture
def db(tmp_path: Path) -> str:
    return str(tmp_path / "limits.db")


@pytest.fixture
def limited(db: str) -> Iterator[SqliteStore]:
    """A store whose connection refuses values and rows over LIMIT bytes."""
    store = SqliteStore(db, length_limit=LIMIT)
    yield store
    store.close()


# -- options ---------------------------------------------------------------------------------

_BAD_OPTIONS: dict[str, dict[str, Any]] = {
    "busy_timeout_2**31": {"busy_timeout_ms": 2**31},
    "busy_timeout_negative": {"busy_timeout_ms": -1},
    "busy_timeout_str": {"busy_timeout_ms": "5000"},
    "busy_timeout_float": {"busy_timeout_ms": 5000.0},
    "busy_timeout_bool": {"busy_timeout_ms": True},
    "synchronous_off": {"synchronous": "off"},
    "synchronous_none": {"synchronous": None},
    "integrity_check_str": {"integrity_check_on_open": "yes"},
    "integrity_check_int": {"integrity_check_on_open": 1},
    "checkpoints_bad": {"checkpoints": "never"},
    "read_only_str": {"read_only": "no"},
    "read_only_none": {"read_only": None},
    "length_limit_zero": {"length_limit": 0},
    "length_limit_negative": {"length_limit": -5},
    "length_limit_too_big": {"length_limit": 2**31},
    "length_limit_str": {"length_limit": "4096"},
    "length_limit_bool": {"length_limit": True},
}


@pytest.mark.parametrize("case", sorted(_BAD_OPTIONS))
def test_bad_option_refused_before_any_file_exists(tmp_path: Path, case: str) -> None:
    """A bad constructor option raises InvalidArgumentError and creates no file at all
    (2**31 ms once created the file, then failed with a raw OverflowError)."""
    with pytest.raises(InvalidArgumentError):
        SqliteStore(tmp_path / "x.db", **_BAD_OPTIONS[case])
    assert os.listdir(tmp_path) == []


def test_largest_options_are_accepted(db: str) -> None:
    """The largest busy timeout (2**31 - 1 ms) and length limit are accepted and set."""
    store = SqliteStore(db, busy_timeout_ms=2**31 - 1, length_limit=1_000_000_000)
    try:
        assert store._conn is not None
        row = store._conn.execute("PRAGMA busy_timeout").fetchone()
        assert row is not None
        assert row[0] == 2**31 - 1
        assert store._conn.limit(apsw.SQLITE_LIMIT_LENGTH, -1) == 1_000_000_000
        assert store.append("s", [NewEvent("k", 1)]) == 1
    finally:
        store.close()


# -- values over the length limit -----------------------------------------------------------


def test_too_big_op_fails_alone_on_the_fast_path(limited: SqliteStore) -> None:
    """In a batch of appends to distinct sessions, the op whose event is over the limit
    fails alone with InvalidEventError (index and kind, TooBigError as cause); the others
    commit and the store stays usable."""
    results = limited.write_batch([op("a", SMALL), op("big", BIG), op("c", SMALL)])
    assert results[0] == 1
    assert results[2] == 1
    error = results[1]
    assert isinstance(error, InvalidEventError)
    assert (error.index, error.kind) == (0, "k")
    assert isinstance(error.__cause__, apsw.TooBigError)
    assert limited.stat("big") is None
    assert (limited.head("a"), limited.head("c")) == (1, 1)
    assert limited.write_batch([op("a", SMALL), op("big", SMALL)]) == [2, 1]


def test_too_big_op_fails_alone_on_the_general_path(limited: SqliteStore) -> None:
    """Through savepoints (a batch with a truncate, a group and a replace): the too-big
    op, group or replace fails alone; the session's later ops report the same error."""
    limited.append("a", [NewEvent("k", i) for i in range(3)])
    limited.append("r", [NewEvent("k", 1)])
    results = limited.write_batch(
        [
            TruncateOp("a", 1),
            op("big", BIG),
            op("big", SMALL),
            GroupOp((op("g1", SMALL), op("g2", BIG))),
            ReplaceOp("r", 0, op("r", BIG).events),
            op("a", SMALL, expected_head=1),
        ]
    )
    assert results[0] == 2
    assert results[5] == 2
    for failed in results[1:5]:
        assert isinstance(failed, InvalidEventError)
    assert results[2] is results[1]
    group_error = results[3]
    assert isinstance(group_error, InvalidEventError)
    assert "'g2'" in str(group_error)
    assert [limited.stat(s) for s in ("big", "g1", "g2")] == [None, None, None]
    assert [e.data for e in limited.read("r")] == [1]
    assert limited.head("a") == 2


def test_too_big_append_raises_invalid_event(limited: SqliteStore) -> None:
    """A single append() over the limit raises InvalidEventError and writes nothing; a
    too-big header for create() is InvalidArgumentError: neither is a StoreError a retry
    could fix."""
    with pytest.raises(InvalidEventError) as info:
        limited.append("s", [NewEvent("small", 1), NewEvent("big", "y" * BIG)])
    assert (info.value.index, info.value.kind) == (1, "big")
    assert limited.stat("s") is None
    with pytest.raises(InvalidArgumentError):
        limited.create("h", {"pad": "z" * BIG})
    assert limited.stat("h") is None
    assert limited.append("s", [NewEvent("small", 1)]) == 1


def test_packed_reads_fall_back_below_the_limit(limited: SqliteStore) -> None:
    """A read window whose packed text would pass the limit, of events that each fit, is
    read row by row: every event comes back."""
    data = ["x" * 1500 for _ in range(8)]
    limited.append("s", [NewEvent("k", d) for d in data])
    for from_end in (False, True):
        assert [e.data for e in limited.read("s", limit=8, from_end=from_end)] == data


def test_clone_inherits_the_length_limit(limited: SqliteStore) -> None:
    """A clone has the same length_limit, so it refuses the same values."""
    clone = limited.clone()
    try:
        assert clone.length_limit == LIMIT
        [error] = clone.write_batch([op("s", BIG)])
        assert isinstance(error, InvalidEventError)
    finally:
        clone.close()


_BATCH = st.lists(
    st.tuples(st.sampled_from("abc"), st.booleans(), st.booleans()), min_size=1, max_size=8
)


@settings(
    max_examples=40,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(batch=_BATCH)
def test_batches_with_too_big_ops_match_a_model(
    make: Callable[[], SqliteStore], batch: list[tuple[str, bool, bool]]
) -> None:
    """For any batch of small and too-big appends (with or without expected heads, on the
    fast path or the general one), exactly the model's ops commit: a stale head is a
    conflict, a too-big op fails alone, and a session's ops after its failure report that
    same error."""
    store = make()
    try:
        heads = {s: store.head(s) for s in "abc"}
        ops = [
            op(s, BIG if big else SMALL, expected_head=heads[s] if expect else None)
            for s, big, expect in batch
        ]
        results = store.write_batch(ops)
        failed: dict[str, BatchResult] = {}
        model = dict(heads)
        for (session, big, expect), result in zip(batch, results, strict=True):
            if session in failed:
                assert result is failed[session]
            elif expect and heads[session] != model[session]:  # checked before writing
                assert isinstance(result, ConflictError)
                failed[session] = result
            elif big:
                assert isinstance(result, InvalidEventError)
                failed[session] = result
            else:
                model[session] += 1
                assert result == model[session]
        assert {s: store.head(s) for s in "abc"} == model
    finally:
        store.close()


@pytest.fixture
def make(db: str) -> Callable[[], SqliteStore]:
    """Open the test's (limited) store again: examples share the file and go on from it."""
    return lambda: SqliteStore(db, length_limit=LIMIT)
