"""The shared Store conformance suite: every backend, built-in or third-party, runs it.

Usage, in a test module of the backend::

    from stores.conformance import DurableStoreConformance, StoreConformance

    class TestMyStore(StoreConformance):              # non-durable backend
        def make_store(self, tmp_path):
            return MyStore()

    class TestMyDurableStore(DurableStoreConformance):  # durable backend
        def make_store(self, tmp_path):
            return MyDurableStore(tmp_path / "data")

        def reopen_store(self, store, tmp_path):
            store.close()
            return MyDurableStore(tmp_path / "data")

The base classes are not named ``Test*`` so pytest only collects them through a subclass.
Every test is synchronous and pins one behaviour of the contract in ``stores/contract.py``
(the docstrings there are the specification) and ``DESIGN.md``.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import pathlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stores import (
    JSON,
    AppendOp,
    BatchResult,
    ClosedError,
    ConflictError,
    DeleteOp,
    GroupOp,
    InvalidArgumentError,
    InvalidEventError,
    InvalidSessionIdError,
    NewEvent,
    OwnershipLostError,
    Pin,
    PreparedEvent,
    ReplaceOp,
    SessionExistsError,
    SessionInfo,
    SessionNotFoundError,
    SessionOwnedError,
    SnapshotExpiredError,
    Store,
    StoredEvent,
    TruncateOp,
    prepare_events,
)

__all__ = ["DurableStoreConformance", "StoreConformance"]


# -- helpers ---------------------------------------------------------------------------


def _events(n: int, kind: str = "k", tag: str = "") -> list[NewEvent]:
    """``n`` distinguishable events."""
    return [NewEvent(kind, {"i": i, "tag": tag}) for i in range(n)]


def _prepared(n: int, tag: str = "") -> tuple[PreparedEvent, ...]:
    return tuple(prepare_events(_events(n, tag=tag)))


def _seqs(events: Sequence[StoredEvent]) -> list[int]:
    return [event.seq for event in events]


def _strict_equal(a: object, b: object) -> bool:
    """JSON equality that also distinguishes int/float/bool and the sign of -0.0."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        assert isinstance(b, float)
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    if isinstance(a, list):
        assert isinstance(b, list)
        return len(a) == len(b) and all(_strict_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        assert isinstance(b, dict)
        return a.keys() == b.keys() and all(_strict_equal(a[k], b[k]) for k in a)
    return a == b


def _cyclic_list() -> object:
    cycle: list[object] = [1]
    cycle.append(cycle)
    return cycle


def _cyclic_dict() -> object:
    cycle: dict[str, object] = {}
    cycle["self"] = cycle
    return cycle


class _Custom:
    pass


#: Values that are exactly JSON and must come back exactly (type, sign, text).
_GOOD_PAYLOADS: dict[str, JSON] = {
    "none": None,
    "true": True,
    "false": False,
    "zero": 0,
    "negative_int": -42,
    "big_int": 2**80,
    "negative_big_int": -(2**80),
    "float_0.1": 0.1,
    "float_1e300": 1e300,
    "negative_zero": -0.0,
    "integral_float": 1.0,
    "negative_float": -2.5,
    "denormal_float": 5e-324,
    "empty_string": "",
    "accents": "héllo wörld",
    "emoji": "🎉👩‍💻🚀",
    "cjk": "中文字符 日本語 한국어",
    "nul_inside": "a\x00b",
    "escapes": 'quote " backslash \\ newline \n tab \t',
    "empty_dict": {},
    "empty_list": [],
    "unicode_keys": {"ключ": 1, "🔑": [2], "": "empty key", "a\x00b": None},
    "mixed_list": [1, "a", None, True, False, 1.5, [], {}],
    "nested": {"a": {"b": {"c": [1, [2, [3, {"d": [None, -0.0, 2**70]}]]]}}},
}

#: Factories of values that are not exactly JSON and must be refused.
_BAD_PAYLOADS: dict[str, Callable[[], object]] = {
    "tuple": lambda: (1, 2),
    "nested_tuple": lambda: {"a": [1, (2, 3)]},
    "set": lambda: {1, 2},
    "frozenset": lambda: frozenset({1}),
    "bytes": lambda: b"x",
    "bytearray": lambda: bytearray(b"x"),
    "nan": lambda: float("nan"),
    "inf": lambda: float("inf"),
    "negative_inf": lambda: float("-inf"),
    "nested_nan": lambda: {"a": [float("nan")]},
    "int_key": lambda: {1: "a"},
    "none_key": lambda: {None: "a"},
    "bool_key": lambda: {True: "a"},
    "float_key": lambda: {1.5: "a"},
    "list_cycle": _cyclic_list,
    "dict_cycle": _cyclic_dict,
    "custom_object": _Custom,
    "decimal": lambda: Decimal("1.5"),
    "lone_surrogate": lambda: "\ud800",
    "lone_surrogate_nested": lambda: {"a": ["ok", "x\udc00y"]},
    "lone_surrogate_key": lambda: {"\ud800": 1},
}

_BAD_KINDS: dict[str, object] = {
    "empty": "",
    "int": 5,
    "none": None,
    "bytes": b"k",
    "newline": "a\nb",
    "nul": "a\x00b",
    "del": "a\x7fb",
    "too_long": "k" * 257,
    "lone_surrogate": "\ud800",
}

_BAD_RUN_IDS: dict[str, object] = {
    "empty": "",
    "int": 5,
    "bytes": b"r",
    "tab": "a\tb",
    "too_long": "r" * 257,
    "lone_surrogate": "\udfff",
}

_BAD_IDS: dict[str, object] = {
    "empty": "",
    "int": 5,
    "none": None,
    "bytes": b"x",
    "too_long": "x" * 257,
    "newline": "\n",
    "nul": "a\x00b",
    "tab": "a\tb",
    "del": "a\x7f",
    "lone_surrogate": "a\ud800",
}

_WEIRD_IDS: list[str] = [
    "../etc/passwd",
    "'; DROP TABLE events; --",
    "a b",
    "x" * 256,
    "ünï©ødé",
    "..",
    ".",
    "a/b\\c",
    '"quoted"',
    "%s %d ?",
    "*",
    "🎉",
    "中文",
    "A",
    "a",
]

#: Every store method, called with a session id; each must refuse a bad id.
_ID_CALLS: dict[str, Callable[[Store, Any], object]] = {
    "append": lambda s, i: s.append(i, [NewEvent("k")]),
    "read": lambda s, i: s.read(i),
    "create": lambda s, i: s.create(i),
    "head": lambda s, i: s.head(i),
    "stat": lambda s, i: s.stat(i),
    "delete": lambda s, i: s.delete(i),
    "truncate": lambda s, i: s.truncate(i, 0),
    "pin": lambda s, i: s.pin(i),
    "acquire_lease": lambda s, i: s.acquire_lease(i, "A", ttl=10.0, holder="test"),
    "renew_lease": lambda s, i: s.renew_lease(i, "A", ttl=10.0),
    "release_lease": lambda s, i: s.release_lease(i, "A"),
}

#: Every store method (except close), called with valid arguments on session "s".
_CLOSED_CALLS: dict[str, Callable[[Store], object]] = {
    "append": lambda s: s.append("s", [NewEvent("k")]),
    "read": lambda s: s.read("s"),
    "head": lambda s: s.head("s"),
    "stat": lambda s: s.stat("s"),
    "list_sessions": lambda s: s.list_sessions(),
    "create": lambda s: s.create("new"),
    "delete": lambda s: s.delete("s"),
    "truncate": lambda s: s.truncate("s", 0),
    "write_batch": lambda s: s.write_batch([AppendOp("s", _prepared(1))]),
    "write_batch_empty": lambda s: s.write_batch([]),
    "sync": lambda s: s.sync(),
    "pin": lambda s: s.pin("s"),
    "acquire_lease": lambda s: s.acquire_lease("s", "A", ttl=10.0, holder="test"),
    "renew_lease": lambda s: s.renew_lease("s", "A", ttl=10.0),
    "release_lease": lambda s: s.release_lease("s", "A"),
    "data_version": lambda s: s.data_version(),
    "clone": lambda s: s.clone(),
}

_BAD_READ_ARGS: dict[str, dict[str, Any]] = {
    "negative_since": {"since_seq": -1},
    "str_since": {"since_seq": "1"},
    "float_since": {"since_seq": 1.0},
    "bool_since": {"since_seq": True},
    "none_since": {"since_seq": None},
    "str_until": {"until_seq": "3"},
    "float_until": {"until_seq": 1.5},
    "bool_until": {"until_seq": True},
    "negative_until": {"until_seq": -1},
    "negative_limit": {"limit": -1},
    "float_limit": {"limit": 1.5},
    "str_limit": {"limit": "2"},
    "bool_limit": {"limit": True},
}

_BAD_SEQ_VALUES: dict[str, object] = {
    "negative": -1,
    "str": "1",
    "float": 1.5,
    "bool": True,
}

_JSON_SCALARS: st.SearchStrategy[JSON] = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**100), max_value=2**100),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
)


def _extend_json(children: st.SearchStrategy[JSON]) -> st.SearchStrategy[JSON]:
    return st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.text(max_size=8), children, max_size=4),
    )


_JSON_VALUES: st.SearchStrategy[JSON] = st.recursive(_JSON_SCALARS, _extend_json, max_leaves=12)

_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(min_value=0, max_value=4)),
        st.tuples(st.just("truncate"), st.integers(min_value=0, max_value=12)),
    ),
    max_size=12,
)

_QUICK = settings(
    max_examples=75,
    deadline=None,
    database=None,
    # The store fixture is per test, not per example: each example uses a fresh session id.
    # Every backend subclass runs the same method (intended), hence differing executors.
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.differing_executors],
)


# -- the suite -------------------------------------------------------------------------


class StoreConformance:
    """Conformance cases for any :class:`~stores.contract.Store`.

    Subclass it (as ``Test...``) and implement :meth:`make_store`.
    """

    _open_stores: list[Store]
    _unique: Iterator[int]

    # -- what a backend provides --------------------------------------------------------

    def make_store(self, tmp_path: pathlib.Path) -> Store:
        """Return a new, empty store (its data may live under ``tmp_path``)."""
        raise NotImplementedError

    def reopen_store(self, store: Store, tmp_path: pathlib.Path) -> Store | None:
        """Durable backends: close ``store`` and return a new one on the same data."""
        return None

    # -- plumbing -------------------------------------------------------------------------

    @pytest.fixture
    def store(self, tmp_path: pathlib.Path) -> Iterator[Store]:
        """A fresh store, closed at teardown (with every clone and reopened store)."""
        self._open_stores = []
        self._unique = itertools.count()
        created = self._track(self.make_store(tmp_path))
        yield created
        for each in reversed(self._open_stores):
            with contextlib.suppress(ClosedError):
                each.close()

    def _track(self, store: Store) -> Store:
        self._open_stores.append(store)
        return store

    def _clone(self, store: Store) -> Store:
        return self._track(store.clone())

    def _reopen(self, store: Store, tmp_path: pathlib.Path) -> Store:
        reopened = self.reopen_store(store, tmp_path)
        if reopened is None:
            pytest.skip("backend has no reopen")
        return self._track(reopened)

    def _fresh_id(self, prefix: str = "s") -> str:
        return f"{prefix}-{next(self._unique)}"

    # -- shape ----------------------------------------------------------------------------

    def test_implements_store_protocol(self, store: Store) -> None:
        """The store satisfies the runtime-checkable Store protocol and has a bool ``durable``."""
        assert isinstance(store, Store)
        assert isinstance(store.durable, bool)

    def test_new_store_is_empty(self, store: Store) -> None:
        """A new store lists no sessions."""
        assert store.list_sessions() == []

    # -- ordering and seq assignment --------------------------------------------------------

    def test_first_append_assigns_seq_one(self, store: Store) -> None:
        """The first append numbers events from 1 and returns the new head."""
        assert store.append("s", _events(3)) == 3
        events = store.read("s")
        assert _seqs(events) == [1, 2, 3]
        assert [e.data for e in events] == [{"i": i, "tag": ""} for i in range(3)]
        assert all(e.kind == "k" and e.session_id == "s" for e in events)

    def test_seqs_gapless_across_appends(self, store: Store) -> None:
        """Successive appends continue the seq without gaps; each returns its new head."""
        assert store.append("s", _events(2, tag="a")) == 2
        assert store.append("s", _events(1, tag="b")) == 3
        assert store.append("s", _events(4, tag="c")) == 7
        events = store.read("s")
        assert _seqs(events) == list(range(1, 8))
        assert [e.data["tag"] for e in events if isinstance(e.data, dict)] == list("aabcccc")
        assert store.head("s") == 7

    def test_sessions_have_independent_seqs(self, store: Store) -> None:
        """Each session numbers its own events from 1, unaffected by others."""
        store.append("a", _events(3))
        store.append("b", _events(2))
        store.append("a", _events(1))
        assert _seqs(store.read("a")) == [1, 2, 3, 4]
        assert _seqs(store.read("b")) == [1, 2]
        assert all(e.session_id == "b" for e in store.read("b"))
        assert (store.head("a"), store.head("b")) == (4, 2)

    def test_unknown_session_reads_empty_head_zero(self, store: Store) -> None:
        """An unknown id reads ``[]`` with head 0 and is not created by looking."""
        assert store.read("nope") == []
        assert store.head("nope") == 0
        assert store.stat("nope") is None

    # -- read windows -----------------------------------------------------------------------

    def test_read_since_seq_is_exclusive(self, store: Store) -> None:
        """``since_seq`` excludes its own seq."""
        store.append("s", _events(5))
        assert _seqs(store.read("s", since_seq=0)) == [1, 2, 3, 4, 5]
        assert _seqs(store.read("s", since_seq=2)) == [3, 4, 5]
        assert _seqs(store.read("s", since_seq=4)) == [5]
        assert store.read("s", since_seq=5) == []

    def test_read_until_seq_is_inclusive(self, store: Store) -> None:
        """``until_seq`` includes its own seq; 0 yields nothing; above head yields all."""
        store.append("s", _events(5))
        assert _seqs(store.read("s", until_seq=3)) == [1, 2, 3]
        assert _seqs(store.read("s", until_seq=1)) == [1]
        assert store.read("s", until_seq=0) == []
        assert _seqs(store.read("s", until_seq=99)) == [1, 2, 3, 4, 5]

    def test_read_since_until_window(self, store: Store) -> None:
        """``since_seq < seq <= until_seq`` selects a window; an inverted window is empty."""
        store.append("s", _events(6))
        assert _seqs(store.read("s", since_seq=2, until_seq=4)) == [3, 4]
        assert _seqs(store.read("s", since_seq=3, until_seq=4)) == [4]
        assert store.read("s", since_seq=4, until_seq=4) == []
        assert store.read("s", since_seq=5, until_seq=3) == []

    def test_read_since_beyond_head_is_empty(self, store: Store) -> None:
        """Reading past the head returns ``[]``."""
        store.append("s", _events(2))
        assert store.read("s", since_seq=10) == []

    def test_read_limit_zero(self, store: Store) -> None:
        """``limit=0`` returns no events."""
        store.append("s", _events(3))
        assert store.read("s", limit=0) == []

    def test_read_limit_smaller_takes_first(self, store: Store) -> None:
        """A limit below the count returns the lowest seqs first."""
        store.append("s", _events(5))
        assert _seqs(store.read("s", limit=2)) == [1, 2]
        assert _seqs(store.read("s", since_seq=2, limit=2)) == [3, 4]
        assert _seqs(store.read("s", since_seq=1, until_seq=3, limit=5)) == [2, 3]

    def test_read_limit_larger_returns_all(self, store: Store) -> None:
        """A limit above the count returns every event."""
        store.append("s", _events(3))
        assert _seqs(store.read("s", limit=10)) == [1, 2, 3]
        assert _seqs(store.read("s", limit=3)) == [1, 2, 3]

    # -- timestamps --------------------------------------------------------------------------

    def test_ts_is_float_shared_by_one_append(self, store: Store) -> None:
        """All events of one append share one float commit ``ts`` near the wall clock."""
        before = time.time()
        store.append("s", _events(4))
        after = time.time()
        events = store.read("s")
        stamps = {e.ts for e in events}
        assert len(stamps) == 1
        (ts,) = stamps
        assert type(ts) is float
        assert before - 1.0 <= ts <= after + 1.0

    def test_ts_of_later_append_not_earlier(self, store: Store) -> None:
        """A later append's ``ts`` is not before an earlier append's."""
        store.append("s", _events(1))
        time.sleep(0.01)
        store.append("s", _events(1))
        first, second = store.read("s")
        assert first.ts <= second.ts

    # -- expected_head ---------------------------------------------------------------------------

    def test_stale_expected_head_raises_conflict(self, store: Store) -> None:
        """A stale ``expected_head`` raises ConflictError(session_id, expected, actual)."""
        store.append("s", _events(3))
        before = store.read("s")
        with pytest.raises(ConflictError) as excinfo:
            store.append("s", _events(2, tag="late"), expected_head=1)
        err = excinfo.value
        assert (err.session_id, err.expected, err.actual) == ("s", 1, 3)
        assert store.read("s") == before
        assert store.head("s") == 3

    def test_expected_head_ahead_of_actual_conflicts(self, store: Store) -> None:
        """An ``expected_head`` above the actual head also conflicts and writes nothing."""
        store.append("s", _events(2))
        with pytest.raises(ConflictError) as excinfo:
            store.append("s", _events(1), expected_head=5)
        assert (excinfo.value.expected, excinfo.value.actual) == (5, 2)
        assert store.head("s") == 2

    def test_expected_head_zero_on_unknown_succeeds(self, store: Store) -> None:
        """``expected_head=0`` on an unknown id succeeds and creates it."""
        assert store.append("new", _events(2), expected_head=0) == 2
        assert _seqs(store.read("new")) == [1, 2]

    def test_expected_head_zero_on_nonempty_conflicts(self, store: Store) -> None:
        """``expected_head=0`` on a non-empty session raises ConflictError."""
        store.append("s", _events(1))
        with pytest.raises(ConflictError) as excinfo:
            store.append("s", _events(1), expected_head=0)
        assert (excinfo.value.expected, excinfo.value.actual) == (0, 1)
        assert store.head("s") == 1

    def test_expected_head_on_unknown_nonzero_creates_nothing(self, store: Store) -> None:
        """A non-zero ``expected_head`` on an unknown id conflicts (actual 0), creates nothing."""
        with pytest.raises(ConflictError) as excinfo:
            store.append("ghost", _events(1), expected_head=2)
        assert (excinfo.value.session_id, excinfo.value.expected) == ("ghost", 2)
        assert excinfo.value.actual == 0
        assert store.stat("ghost") is None
        assert store.list_sessions() == []

    def test_matching_expected_head_succeeds(self, store: Store) -> None:
        """An ``expected_head`` equal to the head appends."""
        store.append("s", _events(2))
        assert store.append("s", _events(3), expected_head=2) == 5
        assert store.append("s", _events(1), expected_head=5) == 6
        assert _seqs(store.read("s")) == list(range(1, 7))

    def test_expected_head_zero_on_created_empty_session(self, store: Store) -> None:
        """``expected_head=0`` on a created but empty session succeeds."""
        store.create("s")
        assert store.append("s", _events(1), expected_head=0) == 1

    # -- empty batch ---------------------------------------------------------------------------

    def test_empty_batch_returns_head_unchanged(self, store: Store) -> None:
        """An empty batch returns the current head and writes no event."""
        store.append("s", _events(2))
        info = store.stat("s")
        assert store.append("s", []) == 2
        assert _seqs(store.read("s")) == [1, 2]
        stat = store.stat("s")
        assert stat is not None and info is not None
        assert stat.head == 2

    def test_empty_batch_on_unknown_creates_nothing(self, store: Store) -> None:
        """An empty batch on an unknown id returns 0 and creates no session."""
        assert store.append("ghost", []) == 0
        assert store.stat("ghost") is None
        assert store.list_sessions() == []

    # -- create / stat ---------------------------------------------------------------------------

    def test_create_with_header_then_stat(self, store: Store) -> None:
        """create stores the header; stat shows it with head 0 and created_at <= updated_at."""
        header: dict[str, JSON] = {"title": "Ünïcode 🎉", "n": 2**70, "tags": ["a", None]}
        info = store.create("s", header)
        assert isinstance(info, SessionInfo)
        assert (info.id, info.head, info.header, info.parent) == ("s", 0, header, None)
        stat = store.stat("s")
        assert stat is not None
        assert (stat.id, stat.head, stat.header, stat.parent) == ("s", 0, header, None)
        assert stat.created_at <= stat.updated_at
        assert abs(stat.created_at - time.time()) < 60.0
        assert store.read("s") == []
        assert store.head("s") == 0

    def test_create_without_header_has_empty_header(self, store: Store) -> None:
        """create without a header records ``{}``."""
        info = store.create("s")
        assert info.header == {}
        stat = store.stat("s")
        assert stat is not None and stat.header == {}

    def test_create_existing_raises(self, store: Store) -> None:
        """create on an existing id raises SessionExistsError and changes nothing."""
        store.create("s", {"v": 1})
        with pytest.raises(SessionExistsError) as excinfo:
            store.create("s", {"v": 2})
        assert excinfo.value.session_id == "s"
        stat = store.stat("s")
        assert stat is not None and stat.header == {"v": 1}

    def test_create_after_append_raises(self, store: Store) -> None:
        """A session made by append exists: create raises SessionExistsError."""
        store.append("s", _events(1))
        with pytest.raises(SessionExistsError):
            store.create("s")
        assert store.head("s") == 1

    def test_create_exist_ok_returns_existing_unchanged(self, store: Store) -> None:
        """``exist_ok=True`` returns the existing info unchanged (old header, head kept)."""
        store.create("s", {"v": 1})
        store.append("s", _events(2))
        before = store.stat("s")
        info = store.create("s", {"v": 2}, exist_ok=True)
        assert info == before
        assert store.stat("s") == before
        assert store.head("s") == 2

    def test_create_exist_ok_on_unknown_creates(self, store: Store) -> None:
        """``exist_ok=True`` on an unknown id creates the session normally."""
        info = store.create("s", {"v": 1}, exist_ok=True)
        assert (info.head, info.header) == (0, {"v": 1})
        assert store.stat("s") == info

    @pytest.mark.parametrize(
        "header",
        [[1], "text", 5, {"a": float("nan")}, {1: "a"}, {"a": (1, 2)}],
        ids=["list", "str", "int", "nan_value", "int_key", "tuple_value"],
    )
    def test_create_invalid_header_refused(self, store: Store, header: Any) -> None:
        """A header that is not a JSON object raises InvalidArgumentError; nothing created."""
        with pytest.raises(InvalidArgumentError):
            store.create("s", header)
        assert store.stat("s") is None

    def test_stat_unknown_is_none(self, store: Store) -> None:
        """stat of an unknown id is ``None``."""
        store.append("other", _events(1))
        assert store.stat("unknown") is None

    def test_append_to_unknown_creates_with_empty_header(self, store: Store) -> None:
        """Appending to an unknown id creates it with header ``{}``."""
        store.append("s", _events(2))
        stat = store.stat("s")
        assert stat is not None
        assert (stat.id, stat.head, stat.header, stat.parent) == ("s", 2, {}, None)
        assert stat.created_at <= stat.updated_at

    def test_stat_tracks_head_and_updated_at(self, store: Store) -> None:
        """After an append, stat shows the new head, same created_at, not-earlier updated_at."""
        first = store.create("s")
        time.sleep(0.01)
        store.append("s", _events(3))
        stat = store.stat("s")
        assert stat is not None
        assert stat.head == 3
        assert stat.created_at == first.created_at
        assert stat.updated_at >= first.updated_at

    # -- list_sessions ---------------------------------------------------------------------------

    def test_list_sessions_most_recently_updated_first(self, store: Store) -> None:
        """list_sessions orders by last update, most recent first."""
        for name in ("a", "b", "c"):
            store.create(name)
            time.sleep(0.01)
        assert [i.id for i in store.list_sessions()] == ["c", "b", "a"]
        store.append("a", _events(1))
        time.sleep(0.01)
        assert [i.id for i in store.list_sessions()] == ["a", "c", "b"]
        store.append("b", _events(2))
        infos = store.list_sessions()
        assert [i.id for i in infos] == ["b", "a", "c"]
        assert [i.head for i in infos] == [2, 1, 0]

    def test_list_sessions_limit(self, store: Store) -> None:
        """``limit`` returns the most recent ones; 0 returns none; a big limit returns all."""
        for name in ("a", "b", "c", "d"):
            store.append(name, _events(1))
            time.sleep(0.01)
        assert [i.id for i in store.list_sessions(limit=2)] == ["d", "c"]
        assert store.list_sessions(limit=0) == []
        assert [i.id for i in store.list_sessions(limit=10)] == ["d", "c", "b", "a"]

    def test_list_sessions_matches_stat(self, store: Store) -> None:
        """Each listed SessionInfo equals that session's stat."""
        store.create("a", {"x": 1})
        store.append("b", _events(2))
        for info in store.list_sessions():
            assert store.stat(info.id) == info

    # -- delete ---------------------------------------------------------------------------

    def test_delete_true_then_false(self, store: Store) -> None:
        """delete returns True for an existing session, then False (idempotent)."""
        store.append("s", _events(2))
        assert store.delete("s") is True
        assert store.delete("s") is False

    def test_delete_unknown_returns_false(self, store: Store) -> None:
        """delete of a never-existing id returns False and creates nothing."""
        assert store.delete("ghost") is False
        assert store.list_sessions() == []

    def test_deleted_session_reads_empty(self, store: Store) -> None:
        """A deleted session reads ``[]``, head 0, stat None, and is not listed."""
        store.append("s", _events(3))
        store.append("keep", _events(1))
        store.delete("s")
        assert store.read("s") == []
        assert store.head("s") == 0
        assert store.stat("s") is None
        assert [i.id for i in store.list_sessions()] == ["keep"]
        assert _seqs(store.read("keep")) == [1]

    def test_recreate_after_delete_starts_fresh(self, store: Store) -> None:
        """After delete, the id can be created again from seq 1 with a new header."""
        store.create("s", {"v": 1})
        store.append("s", _events(3, tag="old"))
        store.delete("s")
        info = store.create("s", {"v": 2})
        assert (info.head, info.header) == (0, {"v": 2})
        assert store.append("s", _events(1, tag="new")) == 1
        assert [e.data for e in store.read("s")] == [{"i": 0, "tag": "new"}]

    def test_delete_empty_created_session(self, store: Store) -> None:
        """A created but empty session can be deleted (True)."""
        store.create("s")
        assert store.delete("s") is True
        assert store.stat("s") is None

    # -- truncate ---------------------------------------------------------------------------

    def test_truncate_returns_removed_count(self, store: Store) -> None:
        """truncate removes seqs above ``to_seq`` and returns how many it removed."""
        store.append("s", _events(5))
        assert store.truncate("s", 2) == 3
        assert _seqs(store.read("s")) == [1, 2]
        assert store.head("s") == 2
        stat = store.stat("s")
        assert stat is not None and stat.head == 2

    def test_truncate_then_append_reuses_seqs(self, store: Store) -> None:
        """After truncate, new appends reuse the removed seqs with the new data."""
        store.append("s", _events(5, tag="old"))
        store.truncate("s", 2)
        assert store.append("s", _events(2, tag="new")) == 4
        events = store.read("s")
        assert _seqs(events) == [1, 2, 3, 4]
        assert [e.data for e in events] == [
            {"i": 0, "tag": "old"},
            {"i": 1, "tag": "old"},
            {"i": 0, "tag": "new"},
            {"i": 1, "tag": "new"},
        ]

    def test_truncate_unknown_is_noop(self, store: Store) -> None:
        """truncate of an unknown id returns 0 and creates nothing."""
        assert store.truncate("ghost", 0) == 0
        assert store.truncate("ghost", 5) == 0
        assert store.stat("ghost") is None
        assert store.list_sessions() == []

    def test_truncate_at_or_above_head_is_noop(self, store: Store) -> None:
        """``to_seq >= head`` removes nothing and returns 0."""
        store.append("s", _events(3))
        before = store.read("s")
        assert store.truncate("s", 3) == 0
        assert store.truncate("s", 100) == 0
        assert store.read("s") == before

    def test_truncate_to_zero_keeps_session(self, store: Store) -> None:
        """truncate to 0 empties the session but it still exists with its header."""
        store.create("s", {"keep": True})
        store.append("s", _events(3))
        assert store.truncate("s", 0) == 3
        assert store.read("s") == []
        stat = store.stat("s")
        assert stat is not None
        assert (stat.head, stat.header) == (0, {"keep": True})
        assert store.append("s", _events(1)) == 1

    def test_truncate_leaves_other_sessions(self, store: Store) -> None:
        """truncate touches only its own session."""
        store.append("a", _events(3))
        store.append("b", _events(3))
        store.truncate("a", 1)
        assert _seqs(store.read("b")) == [1, 2, 3]

    # -- payloads ---------------------------------------------------------------------------

    @pytest.mark.parametrize("name", sorted(_GOOD_PAYLOADS))
    def test_payload_round_trips_exactly(self, store: Store, name: str) -> None:
        """A JSON payload comes back with the same value, types and float signs."""
        payload = _GOOD_PAYLOADS[name]
        store.append("s", [NewEvent("k", payload)])
        (event,) = store.read("s")
        assert _strict_equal(event.data, payload), (event.data, payload)

    @_QUICK
    @given(payload=_JSON_VALUES)
    def test_any_json_payload_round_trips(self, store: Store, payload: JSON) -> None:
        """Any (generated) exactly-JSON payload round-trips exactly."""
        session_id = self._fresh_id()
        store.append(session_id, [NewEvent("k", payload), NewEvent("k2", [payload])])
        first, second = store.read(session_id)
        assert _strict_equal(first.data, payload)
        assert _strict_equal(second.data, [payload])

    def test_kind_and_run_id_round_trip(self, store: Store) -> None:
        """``kind`` and ``run_id`` (None or text, incl. non-ASCII) come back as given."""
        store.append(
            "s",
            [
                NewEvent("user", {"a": 1}, run_id="run-1"),
                NewEvent("tool_result", None),
                NewEvent("ünï 🎉", [], run_id="r" * 256),
            ],
        )
        events = store.read("s")
        assert [(e.kind, e.run_id) for e in events] == [
            ("user", "run-1"),
            ("tool_result", None),
            ("ünï 🎉", "r" * 256),
        ]

    def test_stored_data_isolated_from_caller(self, store: Store) -> None:
        """Mutating appended or read data afterwards does not change what is stored."""
        data: dict[str, JSON] = {"a": [1]}
        store.append("s", [NewEvent("k", data)])
        inner = data["a"]
        assert isinstance(inner, list)
        inner.append(2)
        data["b"] = 3
        (event,) = store.read("s")
        assert event.data == {"a": [1]}
        assert isinstance(event.data, dict)
        event.data["c"] = 4
        assert store.read("s")[0].data == {"a": [1]}

    @pytest.mark.parametrize("name", sorted(_BAD_PAYLOADS))
    def test_invalid_payload_refused(self, store: Store, name: str) -> None:
        """Non-JSON data raises InvalidEventError (index, kind) and writes nothing."""
        store.append("s", _events(1))
        bad: Any = _BAD_PAYLOADS[name]()
        batch = [NewEvent("good", 1), NewEvent("bad", bad), NewEvent("after", 2)]
        with pytest.raises(InvalidEventError) as excinfo:
            store.append("s", batch)
        assert excinfo.value.index == 1
        assert excinfo.value.kind == "bad"
        assert isinstance(excinfo.value, ValueError)
        assert store.head("s") == 1
        assert _seqs(store.read("s")) == [1]

    def test_last_event_bad_writes_nothing(self, store: Store) -> None:
        """A batch whose only bad event is the last one writes nothing and creates nothing."""
        store.append("old", _events(2))
        batch = [*_events(3), NewEvent("last", float("nan"))]
        with pytest.raises(InvalidEventError) as excinfo:
            store.append("old", batch)
        assert (excinfo.value.index, excinfo.value.kind) == (3, "last")
        assert store.head("old") == 2
        with pytest.raises(InvalidEventError):
            store.append("new", batch)
        assert store.stat("new") is None
        assert store.read("new") == []
        assert [i.id for i in store.list_sessions()] == ["old"]

    @pytest.mark.parametrize("name", sorted(_BAD_KINDS))
    def test_invalid_kind_refused(self, store: Store, name: str) -> None:
        """A bad event kind raises InvalidEventError naming the index; nothing written."""
        bad: Any = _BAD_KINDS[name]
        with pytest.raises(InvalidEventError) as excinfo:
            store.append("s", [NewEvent("ok"), NewEvent(bad)])
        assert excinfo.value.index == 1
        assert store.stat("s") is None

    @pytest.mark.parametrize("name", sorted(_BAD_RUN_IDS))
    def test_invalid_run_id_refused(self, store: Store, name: str) -> None:
        """A bad run_id raises InvalidEventError naming the index and kind; nothing written."""
        bad: Any = _BAD_RUN_IDS[name]
        with pytest.raises(InvalidEventError) as excinfo:
            store.append("s", [NewEvent("ok"), NewEvent("runner", run_id=bad)])
        assert (excinfo.value.index, excinfo.value.kind) == (1, "runner")
        assert store.stat("s") is None

    @pytest.mark.parametrize(
        "item",
        [{"kind": "x"}, "x", None, ("x", None)],
        ids=["dict", "str", "none", "tuple"],
    )
    def test_non_new_event_item_refused(self, store: Store, item: Any) -> None:
        """A batch item that is not a NewEvent raises InvalidEventError; nothing written."""
        with pytest.raises(InvalidEventError) as excinfo:
            store.append("s", [NewEvent("ok"), item])
        assert excinfo.value.index == 1
        assert store.stat("s") is None

    @pytest.mark.parametrize(
        "events",
        [NewEvent("k"), "kk", None, 5, {"kind": "k"}],
        ids=["bare_event", "str", "none", "int", "dict"],
    )
    def test_events_not_a_sequence_refused(self, store: Store, events: Any) -> None:
        """``events`` that is not a sequence of NewEvent raises InvalidArgumentError."""
        with pytest.raises(InvalidArgumentError):
            store.append("s", events)
        assert store.stat("s") is None

    # -- session ids ---------------------------------------------------------------------------

    @pytest.mark.parametrize("method", sorted(_ID_CALLS))
    @pytest.mark.parametrize("bad_id", sorted(_BAD_IDS))
    def test_invalid_session_id_refused(self, store: Store, bad_id: str, method: str) -> None:
        """Every method refuses a bad session id with InvalidSessionIdError, writing nothing."""
        value = _BAD_IDS[bad_id]
        with pytest.raises(InvalidSessionIdError) as excinfo:
            _ID_CALLS[method](store, value)
        assert isinstance(excinfo.value, InvalidArgumentError)
        assert isinstance(excinfo.value, ValueError)
        assert excinfo.value.session_id == value
        assert store.list_sessions() == []

    def test_weird_valid_ids_are_plain_data(self, store: Store) -> None:
        """Ids with quotes, slashes, spaces, 256 chars or non-ASCII work and stay distinct."""
        for index, session_id in enumerate(_WEIRD_IDS):
            store.append(session_id, [NewEvent("k", {"id": session_id})] * (index % 3 + 1))
        for index, session_id in enumerate(_WEIRD_IDS):
            events = store.read(session_id)
            assert len(events) == index % 3 + 1
            assert all(e.data == {"id": session_id} for e in events)
            assert all(e.session_id == session_id for e in events)
            stat = store.stat(session_id)
            assert stat is not None and stat.id == session_id
        assert sorted(i.id for i in store.list_sessions()) == sorted(_WEIRD_IDS)
        assert store.delete("'; DROP TABLE events; --") is True
        assert len(store.list_sessions()) == len(_WEIRD_IDS) - 1
        assert store.head("../etc/passwd") == 1

    # -- bad arguments ---------------------------------------------------------------------------

    @pytest.mark.parametrize("case", sorted(_BAD_READ_ARGS))
    def test_bad_read_arguments_refused(self, store: Store, case: str) -> None:
        """Negative or non-int since_seq/until_seq/limit raise InvalidArgumentError."""
        store.append("s", _events(3))
        kwargs = _BAD_READ_ARGS[case]
        with pytest.raises(InvalidArgumentError) as excinfo:
            store.read("s", **kwargs)
        assert isinstance(excinfo.value, ValueError)

    @pytest.mark.parametrize("case", sorted([*_BAD_SEQ_VALUES, "none"]))
    def test_bad_truncate_to_seq_refused(self, store: Store, case: str) -> None:
        """A negative or non-int ``to_seq`` raises InvalidArgumentError and removes nothing."""
        store.append("s", _events(3))
        value: Any = None if case == "none" else _BAD_SEQ_VALUES[case]
        with pytest.raises(InvalidArgumentError):
            store.truncate("s", value)
        assert store.head("s") == 3

    @pytest.mark.parametrize("case", sorted(_BAD_SEQ_VALUES))
    def test_bad_expected_head_refused(self, store: Store, case: str) -> None:
        """An ``expected_head`` that is not a non-negative int raises InvalidArgumentError."""
        store.append("s", _events(1))
        value: Any = _BAD_SEQ_VALUES[case]
        with pytest.raises(InvalidArgumentError):
            store.append("s", _events(1), expected_head=value)
        assert store.head("s") == 1

    @pytest.mark.parametrize(
        "value", [-1, "2", 1.5, True], ids=["negative", "str", "float", "bool"]
    )
    def test_bad_list_limit_refused(self, store: Store, value: Any) -> None:
        """A bad ``list_sessions(limit=...)`` raises InvalidArgumentError."""
        store.append("s", _events(1))
        with pytest.raises(InvalidArgumentError):
            store.list_sessions(limit=value)

    # -- write_batch ---------------------------------------------------------------------------

    def test_write_batch_many_sessions(self, store: Store) -> None:
        """One write_batch commits ops for several sessions and returns each new head."""
        store.append("b", _events(2))
        results = store.write_batch(
            [
                AppendOp("a", _prepared(2, "a")),
                AppendOp("b", _prepared(3, "b"), expected_head=2),
                AppendOp("c", _prepared(1, "c"), expected_head=0),
            ]
        )
        assert results == [2, 5, 1]
        assert all(type(r) is int for r in results)
        assert _seqs(store.read("a")) == [1, 2]
        assert _seqs(store.read("b")) == [1, 2, 3, 4, 5]
        assert [e.data for e in store.read("c")] == [{"i": 0, "tag": "c"}]

    def test_write_batch_failing_op_fails_alone(self, store: Store) -> None:
        """A stale op yields a ConflictError in the results; the other ops still commit."""
        store.append("b", _events(2))
        results: list[BatchResult] = store.write_batch(
            [
                AppendOp("a", _prepared(1)),
                AppendOp("b", _prepared(3), expected_head=1),
                AppendOp("c", _prepared(2)),
            ]
        )
        assert len(results) == 3
        assert results[0] == 1
        assert results[2] == 2
        err = results[1]
        assert isinstance(err, ConflictError)
        assert (err.session_id, err.expected, err.actual) == ("b", 1, 2)
        assert store.head("a") == 1
        assert store.head("b") == 2
        assert store.head("c") == 2

    def test_write_batch_conflict_on_new_session_creates_nothing(self, store: Store) -> None:
        """A failing op for an unknown session does not create it."""
        results = store.write_batch(
            [AppendOp("ghost", _prepared(1), expected_head=3), AppendOp("ok", _prepared(1))]
        )
        assert isinstance(results[0], ConflictError)
        assert results[1] == 1
        assert store.stat("ghost") is None

    def test_write_batch_same_session_in_order(self, store: Store) -> None:
        """Two ops for one session in one batch apply in order (the second sees the first)."""
        results = store.write_batch(
            [
                AppendOp("s", _prepared(2, "first")),
                AppendOp("s", _prepared(1, "second"), expected_head=2),
                AppendOp("s", _prepared(1, "stale"), expected_head=2),
            ]
        )
        assert results[:2] == [2, 3]
        assert isinstance(results[2], ConflictError)
        assert [e.data for e in store.read("s")] == [
            {"i": 0, "tag": "first"},
            {"i": 1, "tag": "first"},
            {"i": 0, "tag": "second"},
        ]

    def test_write_batch_failed_session_skips_its_later_ops(self, store: Store) -> None:
        """After one op of a session fails, that session's later ops in the batch are skipped."""
        store.append("s", _events(1))
        results = store.write_batch(
            [
                AppendOp("s", _prepared(1, "stale"), expected_head=0),
                AppendOp("t", _prepared(1, "other")),
                AppendOp("s", _prepared(1, "after")),
                TruncateOp("s", 0),
            ]
        )
        assert isinstance(results[0], ConflictError)
        assert results[1] == 1
        assert results[2] is results[0] and results[3] is results[0]
        assert store.head("s") == 1

    def test_write_batch_truncate_and_delete_ops(self, store: Store) -> None:
        """TruncateOp and DeleteOp apply in order inside a batch and report counts."""
        store.append("s", _events(3))
        store.append("gone", _events(1))
        results = store.write_batch(
            [
                TruncateOp("s", 1),
                AppendOp("s", _prepared(1, "new"), expected_head=1),
                DeleteOp("gone"),
                DeleteOp("never"),
            ]
        )
        assert results == [2, 2, 1, 0]
        assert [e.data for e in store.read("s")][1:] == [{"i": 0, "tag": "new"}]
        assert store.stat("gone") is None

    def test_write_batch_fenced_truncate_and_delete(self, store: Store) -> None:
        """TruncateOp/DeleteOp with a non-matching owner fail with OwnershipLostError."""
        store.append("s", _events(2))
        store.acquire_lease("s", "A", ttl=10.0, holder="A@host")
        results = store.write_batch([TruncateOp("s", 0, owner="B")])
        assert isinstance(results[0], OwnershipLostError)
        results = store.write_batch([DeleteOp("s", owner="B")])
        assert isinstance(results[0], OwnershipLostError)
        assert store.head("s") == 2
        assert store.write_batch([DeleteOp("s", owner="A")]) == [1]

    def test_retry_op_that_landed_is_not_duplicated(self, store: Store) -> None:
        """A resent op (retry=True) whose events already landed succeeds without writing
        again; a different op at the same position still conflicts."""
        events = _prepared(2, "x")
        assert store.write_batch([AppendOp("s", events, expected_head=0)]) == [2]
        assert store.write_batch([AppendOp("s", events, expected_head=0, retry=True)]) == [2]
        assert store.head("s") == 2
        [other] = store.write_batch([AppendOp("s", _prepared(2, "y"), expected_head=0, retry=True)])
        assert isinstance(other, ConflictError)
        [plain] = store.write_batch([AppendOp("s", events, expected_head=0)])
        assert isinstance(plain, ConflictError)

    def test_retry_op_writes_only_the_missing_tail(self, store: Store) -> None:
        """A resent op whose first events landed writes only the rest, in order."""
        events = _prepared(3, "z")
        assert store.write_batch([AppendOp("s", events[:2], expected_head=0)]) == [2]
        assert store.write_batch([AppendOp("s", events, expected_head=0, retry=True)]) == [3]
        assert [e.data for e in store.read("s")] == [{"i": i, "tag": "z"} for i in range(3)]

    def test_read_from_end_takes_the_newest(self, store: Store) -> None:
        """from_end=True takes the last ``limit`` events of the window, in seq order."""
        store.append("s", _events(10))
        assert _seqs(store.read("s", limit=3, from_end=True)) == [8, 9, 10]
        assert _seqs(store.read("s", until_seq=5, limit=2, from_end=True)) == [4, 5]
        assert _seqs(store.read("s", since_seq=8, limit=5, from_end=True)) == [9, 10]
        assert _seqs(store.read("s", from_end=True)) == list(range(1, 11))
        assert store.read("s", limit=0, from_end=True) == []

    def test_replace_op_rewrites_tail_atomically(self, store: Store) -> None:
        """ReplaceOp removes the events after from_seq and appends new ones in one step."""
        store.append("s", _events(5))
        pin = store.pin("s")
        assert pin is not None
        results = store.write_batch([ReplaceOp("s", 2, _prepared(2, "new"), expected_head=5)])
        assert results == [4]
        assert [e.data for e in store.read("s")] == [
            {"i": 0, "tag": ""},
            {"i": 1, "tag": ""},
            {"i": 0, "tag": "new"},
            {"i": 1, "tag": "new"},
        ]
        with pytest.raises(SnapshotExpiredError):
            store.read("s", pin=pin)

    def test_replace_op_checks_head_and_bounds(self, store: Store) -> None:
        """ReplaceOp with a stale expected_head or from_seq past the head changes nothing."""
        store.append("s", _events(2))
        [stale] = store.write_batch([ReplaceOp("s", 0, _prepared(1), expected_head=1)])
        assert isinstance(stale, ConflictError)
        [past] = store.write_batch([ReplaceOp("s", 3, _prepared(1))])
        assert isinstance(past, InvalidArgumentError)
        assert store.head("s") == 2

    def test_group_op_is_all_or_nothing(self, store: Store) -> None:
        """A GroupOp whose last member fails applies none of its members; others commit."""
        store.append("a", _events(1))
        results = store.write_batch(
            [
                GroupOp(
                    (
                        AppendOp("a", _prepared(1, "g"), expected_head=1),
                        AppendOp("b", _prepared(2, "g")),
                        AppendOp("c", _prepared(1, "g"), expected_head=7),
                    )
                ),
                AppendOp("d", _prepared(1)),
            ]
        )
        assert isinstance(results[0], ConflictError)
        assert results[1] == 1
        assert store.head("a") == 1 and store.stat("b") is None and store.stat("c") is None
        ok = store.write_batch(
            [GroupOp((AppendOp("a", _prepared(1), expected_head=1), AppendOp("b", _prepared(2))))]
        )
        assert ok == [2]
        assert store.head("a") == 2 and store.head("b") == 2

    def test_group_op_rejects_nesting_and_empty(self, store: Store) -> None:
        """GroupOps cannot nest or be empty."""
        inner = GroupOp((AppendOp("a", _prepared(1)),))
        with pytest.raises(InvalidArgumentError):
            store.write_batch([GroupOp((inner,))])  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError):
            store.write_batch([GroupOp(())])
        assert store.stat("a") is None

    def test_find_run(self, store: Store) -> None:
        """find_run returns the first and last seq of a run's events, None if absent."""
        store.append("s", [NewEvent("k", 1, run_id="r1"), NewEvent("k", 2)])
        store.append("s", [NewEvent("k", 3, run_id="r2"), NewEvent("k", 4, run_id="r1")])
        assert store.find_run("s", "r1") == (1, 4)
        assert store.find_run("s", "r2") == (3, 3)
        assert store.find_run("s", "r3") is None
        assert store.find_run("other", "r1") is None
        store.truncate("s", 3)
        assert store.find_run("s", "r1") == (1, 1)

    def test_write_batch_rejects_non_ops(self, store: Store) -> None:
        """write_batch refuses items that are not write ops, writing nothing."""
        with pytest.raises(InvalidArgumentError):
            store.write_batch([AppendOp("s", _prepared(1)), "nope"])  # type: ignore[list-item]
        assert store.stat("s") is None

    def test_refresh_pin_advances(self, store: Store) -> None:
        """refresh_pin moves a pin to the current head when nothing below it was destroyed."""
        store.append("s", _events(2))
        pin = store.pin("s")
        assert pin is not None
        store.append("s", _events(3))
        store.truncate("s", 4)
        fresh = store.refresh_pin(pin)
        assert fresh.as_of_seq == 4 and fresh.incarnation == pin.incarnation
        assert fresh.epoch > pin.epoch

    def test_refresh_pin_detects_cut_below(self, store: Store) -> None:
        """refresh_pin raises SnapshotExpiredError after a truncate below the pin, even if
        events were appended again past it."""
        store.append("s", _events(5))
        pin = store.pin("s")
        assert pin is not None
        store.truncate("s", 2)
        store.append("s", _events(5))
        with pytest.raises(SnapshotExpiredError):
            store.refresh_pin(pin)
        store.delete("s")
        with pytest.raises(SnapshotExpiredError):
            store.refresh_pin(pin)

    def test_renew_leases_batch(self, store: Store) -> None:
        """renew_leases renews the owner's leases and returns the ids it does not hold."""
        store.acquire_lease("a", "A", ttl=10.0, holder="A@host")
        store.acquire_lease("b", "B", ttl=10.0, holder="B@host")
        assert store.renew_leases("A", ["a", "b", "c"], ttl=10.0) == ["b", "c"]
        assert store.renew_leases("A", [], ttl=10.0) == []

    def test_write_batch_sync_and_empty(self, store: Store) -> None:
        """write_batch with ``sync=True`` commits; empty ops (with or without sync) return []."""
        assert store.write_batch([AppendOp("s", _prepared(2))], sync=True) == [2]
        assert store.write_batch([]) == []
        assert store.write_batch([], sync=True) == []
        store.sync()
        assert store.head("s") == 2
        assert store.list_sessions()[0].id == "s"

    def test_write_batch_shares_ts_per_op(self, store: Store) -> None:
        """Events of one op share one float ``ts``."""
        store.write_batch([AppendOp("s", _prepared(3))])
        stamps = {e.ts for e in store.read("s")}
        assert len(stamps) == 1
        assert all(type(t) is float for t in stamps)

    def test_write_batch_header_used_on_create(self, store: Store) -> None:
        """``header_json`` becomes the header of a session the op creates, not an existing one."""
        store.create("old", {"v": 1})
        store.write_batch(
            [
                AppendOp("new", _prepared(1), header_json='{"v":2,"name":"ünï"}'),
                AppendOp("old", _prepared(1), header_json='{"v":3}'),
            ]
        )
        new, old = store.stat("new"), store.stat("old")
        assert new is not None and old is not None
        assert new.header == {"v": 2, "name": "ünï"}
        assert old.header == {"v": 1}

    def test_write_batch_round_trips_prepared_events(self, store: Store) -> None:
        """Prepared events (kind, data, run_id) read back as given."""
        events = [NewEvent("a", {"x": [1, 2.5, "ü"]}, run_id="r1"), NewEvent("b", None)]
        store.write_batch([AppendOp("s", tuple(prepare_events(events)))])
        got = store.read("s")
        assert [(e.kind, e.data, e.run_id) for e in got] == [
            ("a", {"x": [1, 2.5, "ü"]}, "r1"),
            ("b", None, None),
        ]

    # -- leases ---------------------------------------------------------------------------

    def test_lease_held_by_other_raises_owned(self, store: Store) -> None:
        """A lease held by A makes B's acquire raise SessionOwnedError."""
        store.append("s", _events(1))
        store.acquire_lease("s", "A", ttl=10.0, holder="A@host")
        with pytest.raises(SessionOwnedError) as excinfo:
            store.acquire_lease("s", "B", ttl=10.0, holder="B@host")
        assert excinfo.value.session_id == "s"

    def test_lease_reacquire_by_owner(self, store: Store) -> None:
        """The owner may acquire its lease again; its fenced ops succeed."""
        store.append("s", _events(1))
        store.acquire_lease("s", "A", ttl=10.0, holder="A@host")
        store.acquire_lease("s", "A", ttl=10.0, holder="A@host")
        store.renew_lease("s", "A", ttl=10.0)
        assert store.write_batch([AppendOp("s", _prepared(1), owner="A")]) == [2]

    def test_lease_release_then_other_acquires(self, store: Store) -> None:
        """After A releases, B can acquire; A's fenced op then fails."""
        store.append("s", _events(1))
        store.acquire_lease("s", "A", ttl=10.0, holder="A@host")
        store.release_lease("s", "A")
        store.acquire_lease("s", "B", ttl=10.0, holder="B@host")
        with pytest.raises(SessionOwnedError):
            store.acquire_lease("s", "A", ttl=10.0, holder="A@host")

    def test_renew_by_non_owner_raises_lost(self, store: Store) -> None:
        """renew by someone who does not hold the lease raises OwnershipLostError."""
        store.append("s", _events(1))
        store.acquire_lease("s", "A", ttl=10.0, holder="A@host")
        with pytest.raises(OwnershipLostError) as excinfo:
            store.renew_lease("s", "B", ttl=10.0)
        assert excinfo.value.session_id == "s"
        store.renew_lease("s", "A", ttl=10.0)

    def test_expired_lease_takeover_fences_old_owner(self, store: Store) -> None:
        """An expired lease is taken over; the old owner's renew and fenced op then fail."""
        store.append("s", _events(1))
        store.acquire_lease("s", "A", ttl=0.05, holder="A@host")
        time.sleep(0.1)
        store.acquire_lease("s", "B", ttl=10.0, holder="B@host")
        with pytest.raises(OwnershipLostError):
            store.renew_lease("s", "A", ttl=10.0)
        [lost] = store.write_batch([AppendOp("s", _prepared(1, "A"), owner="A")])
        assert isinstance(lost, OwnershipLostError)
        assert lost.session_id == "s"
        assert store.write_batch([AppendOp("s", _prepared(1, "B"), owner="B")]) == [2]
        assert [e.data for e in store.read("s")][1:] == [{"i": 0, "tag": "B"}]
        with pytest.raises(SessionOwnedError):
            store.acquire_lease("s", "A", ttl=10.0, holder="A@host")

    def test_release_by_non_owner_is_noop(self, store: Store) -> None:
        """release by a non-owner leaves the owner's lease in place."""
        store.append("s", _events(1))
        store.acquire_lease("s", "A", ttl=10.0, holder="A@host")
        store.release_lease("s", "B")
        with pytest.raises(SessionOwnedError):
            store.acquire_lease("s", "B", ttl=10.0, holder="B@host")
        assert store.write_batch([AppendOp("s", _prepared(1), owner="A")]) == [2]

    def test_fenced_op_without_lease_fails(self, store: Store) -> None:
        """An op with ``owner`` fails with OwnershipLostError when nobody holds the lease."""
        store.append("s", _events(1))
        (result,) = store.write_batch([AppendOp("s", _prepared(1), owner="A")])
        assert isinstance(result, OwnershipLostError)
        assert store.head("s") == 1

    def test_delete_drops_lease(self, store: Store) -> None:
        """Deleting a session drops its lease: another owner can then acquire it."""
        store.append("s", _events(1))
        store.acquire_lease("s", "A", ttl=10.0, holder="A@host")
        store.delete("s")
        store.append("s", _events(1))
        store.acquire_lease("s", "B", ttl=10.0, holder="B@host")

    def test_lease_visible_through_clone(self, store: Store) -> None:
        """A lease taken through one handle is enforced through another (a clone)."""
        store.append("s", _events(1))
        other = self._clone(store)
        store.acquire_lease("s", "A", ttl=10.0, holder="A@host")
        with pytest.raises(SessionOwnedError):
            other.acquire_lease("s", "B", ttl=10.0, holder="B@host")
        (result,) = other.write_batch([AppendOp("s", _prepared(1), owner="A")])
        assert result == 2

    # -- pins ---------------------------------------------------------------------------

    def test_pin_unknown_is_none(self, store: Store) -> None:
        """pin of an unknown id is ``None``."""
        assert store.pin("ghost") is None

    def test_pin_reports_current_head(self, store: Store) -> None:
        """pin returns a Pin of the session at its current head."""
        store.append("s", _events(3))
        pin = store.pin("s")
        assert isinstance(pin, Pin)
        assert (pin.session_id, pin.as_of_seq) == ("s", 3)
        store.create("empty")
        empty = store.pin("empty")
        assert empty is not None and empty.as_of_seq == 0
        assert store.read("empty", pin=empty) == []

    def test_pinned_read_clamped_while_appending(self, store: Store) -> None:
        """A pinned read never goes past ``as_of_seq`` while later appends happen."""
        store.append("s", _events(3))
        pin = store.pin("s")
        assert pin is not None
        store.append("s", _events(2))
        assert _seqs(store.read("s", pin=pin)) == [1, 2, 3]
        assert _seqs(store.read("s", until_seq=10, pin=pin)) == [1, 2, 3]
        assert _seqs(store.read("s", since_seq=1, pin=pin)) == [2, 3]
        assert _seqs(store.read("s", until_seq=2, pin=pin)) == [1, 2]
        assert _seqs(store.read("s", limit=1, pin=pin)) == [1]
        assert store.read("s", since_seq=3, pin=pin) == []
        assert _seqs(store.read("s")) == [1, 2, 3, 4, 5]

    def test_truncate_below_pin_expires_it(self, store: Store) -> None:
        """Truncating below ``as_of_seq`` makes a pinned read raise SnapshotExpiredError."""
        store.append("s", _events(5))
        pin = store.pin("s")
        assert pin is not None
        store.truncate("s", 2)
        with pytest.raises(SnapshotExpiredError) as excinfo:
            store.read("s", pin=pin)
        assert excinfo.value.session_id == "s"
        store.append("s", _events(3, tag="new"))
        with pytest.raises(SnapshotExpiredError):
            store.read("s", pin=pin)

    def test_truncate_above_pin_keeps_it(self, store: Store) -> None:
        """Truncating at or above ``as_of_seq`` leaves a pinned read intact."""
        store.append("s", _events(3, tag="pinned"))
        pin = store.pin("s")
        assert pin is not None
        store.append("s", _events(3, tag="later"))
        store.truncate("s", 4)
        assert [e.data for e in store.read("s", pin=pin)] == [
            {"i": i, "tag": "pinned"} for i in range(3)
        ]
        store.truncate("s", 3)
        assert _seqs(store.read("s", pin=pin)) == [1, 2, 3]
        store.append("s", _events(2))
        assert _seqs(store.read("s", pin=pin)) == [1, 2, 3]

    def test_delete_expires_pin(self, store: Store) -> None:
        """Deleting a session makes a pinned read raise SnapshotExpiredError."""
        store.append("s", _events(2))
        pin = store.pin("s")
        assert pin is not None
        store.delete("s")
        with pytest.raises(SnapshotExpiredError):
            store.read("s", pin=pin)

    def test_delete_and_recreate_expires_pin(self, store: Store) -> None:
        """Delete then recreate (to the same length) still expires the old pin."""
        store.append("s", _events(2, tag="old"))
        pin = store.pin("s")
        assert pin is not None
        store.delete("s")
        store.append("s", _events(3, tag="new"))
        with pytest.raises(SnapshotExpiredError):
            store.read("s", pin=pin)
        fresh = store.pin("s")
        assert fresh is not None and fresh.as_of_seq == 3
        assert len(store.read("s", pin=fresh)) == 3

    def test_pin_through_clone(self, store: Store) -> None:
        """A pin taken on one handle reads (and expires) the same through a clone."""
        store.append("s", _events(2))
        pin = store.pin("s")
        assert pin is not None
        other = self._clone(store)
        store.append("s", _events(2))
        assert _seqs(other.read("s", pin=pin)) == [1, 2]
        store.truncate("s", 1)
        with pytest.raises(SnapshotExpiredError):
            other.read("s", pin=pin)

    # -- close ---------------------------------------------------------------------------

    def test_close_is_idempotent(self, store: Store) -> None:
        """close may be called repeatedly."""
        store.close()
        store.close()

    @pytest.mark.parametrize("method", sorted(_CLOSED_CALLS))
    def test_closed_store_raises_closed(self, store: Store, method: str) -> None:
        """After close, every method raises ClosedError."""
        store.append("s", _events(1))
        store.close()
        with pytest.raises(ClosedError):
            _CLOSED_CALLS[method](store)

    # -- handles ---------------------------------------------------------------------------

    def test_clone_sees_commits_both_ways(self, store: Store) -> None:
        """A clone sees the original's commits, and the original sees the clone's."""
        store.append("s", _events(2))
        other = self._clone(store)
        assert _seqs(other.read("s")) == [1, 2]
        store.append("s", _events(1))
        assert other.head("s") == 3
        other.append("t", _events(1))
        assert store.head("t") == 1
        assert {i.id for i in store.list_sessions()} == {"s", "t"}

    def test_data_version_changes_after_other_handle_commits(self, store: Store) -> None:
        """data_version changes after another handle (a clone) commits."""
        store.append("s", _events(1))
        other = self._clone(store)
        before = store.data_version()
        assert isinstance(before, int)
        other.append("s", _events(1))
        assert store.data_version() != before
        middle = store.data_version()
        other.write_batch([AppendOp("t", _prepared(1))])
        assert store.data_version() != middle

    def test_closing_clone_keeps_original_open(self, store: Store) -> None:
        """Closing a clone leaves the original handle usable."""
        other = self._clone(store)
        other.close()
        assert store.append("s", _events(1)) == 1
        with pytest.raises(ClosedError):
            other.head("s")

    def test_threads_append_gaplessly(self, store: Store) -> None:
        """Ten threads appending one event each through one store end with seqs 1..10."""
        count = 10
        barrier = threading.Barrier(count)
        heads: list[int] = []
        errors: list[BaseException] = []
        lock = threading.Lock()

        def work(index: int) -> None:
            try:
                barrier.wait(timeout=10.0)
                head = store.append("s", [NewEvent("t", {"thread": index})])
                with lock:
                    heads.append(head)
            except BaseException as exc:  # reported below, in the test thread
                with lock:
                    errors.append(exc)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(count)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30.0)
        assert not any(t.is_alive() for t in threads)
        assert errors == []
        assert sorted(heads) == list(range(1, count + 1))
        events = store.read("s")
        assert _seqs(events) == list(range(1, count + 1))
        owners = [e.data.get("thread") for e in events if isinstance(e.data, dict)]
        assert sorted(o for o in owners if isinstance(o, int)) == list(range(count))

    @_QUICK
    @given(ops=_OPS)
    def test_random_append_truncate_stays_gapless(
        self, store: Store, ops: list[tuple[str, int]]
    ) -> None:
        """Any sequence of appends and truncates keeps seqs gapless 1..head with model data."""
        session_id = self._fresh_id()
        model: list[JSON] = []
        created = False
        for step, (op, n) in enumerate(ops):
            if op == "append":
                batch = [NewEvent("k", {"step": step, "j": j}) for j in range(n)]
                created = created or n > 0
                assert store.append(session_id, batch) == len(model) + n
                model.extend(e.data for e in batch)
            else:
                removed = max(0, len(model) - n)
                assert store.truncate(session_id, n) == removed
                del model[n:]
            events = store.read(session_id)
            assert _seqs(events) == list(range(1, len(model) + 1))
            assert [e.data for e in events] == model
            assert store.head(session_id) == len(model)
        assert (store.stat(session_id) is not None) == created

    # -- forks -----------------------------------------------------------------------

    def test_fork_copies_prefix_with_lineage(self, store: Store) -> None:
        """A fork holds the source's first at_seq events, names its parent in the header
        and in SessionInfo.parent, and reads exactly like the source up to at_seq."""
        store.create("src", {"title": "t"})
        store.append("src", [NewEvent("k", i, run_id="r") for i in range(10)])
        info = store.fork("src", "kid", at_seq=6)
        assert info.parent == ("src", 6) and info.head == 6
        assert info.header == {"title": "t", "forked_from": "src", "fork_seq": 6}
        assert store.stat("kid") == info
        assert store.read("kid") == [
            StoredEvent("kid", e.seq, e.ts, e.kind, e.data, e.run_id) for e in store.read("src")[:6]
        ]
        assert _seqs(store.read("kid", since_seq=2, limit=2)) == [3, 4]
        assert _seqs(store.read("kid", limit=2, from_end=True)) == [5, 6]
        assert store.find_run("kid", "r") == (1, 6)
        assert store.fork("src", "all").head == 10

    def test_fork_errors(self, store: Store) -> None:
        """Existing target first, then unknown source, then a bad at_seq; nothing created."""
        store.append("src", _events(3))
        store.append("taken", _events(1))
        with pytest.raises(SessionExistsError):
            store.fork("missing", "taken")
        with pytest.raises(SessionNotFoundError):
            store.fork("missing", "new")
        for bad in (-1, 4, "2", 1.5, True):
            with pytest.raises(InvalidArgumentError):
                store.fork("src", "new", at_seq=bad)  # type: ignore[arg-type]
        assert store.stat("new") is None

    def test_fork_sides_are_independent(self, store: Store) -> None:
        """Appends, truncates and deletes on either side never change the other."""
        store.append("p", _events(8, tag="p"))
        store.fork("p", "c", at_seq=5)
        store.append("c", _events(2, tag="c"))
        store.append("p", _events(1, tag="p2"))
        kid_before = store.read("c")
        store.truncate("p", 2)
        assert store.read("c") == kid_before
        store.append("p", _events(4, tag="after"))
        assert store.read("c") == kid_before
        store.truncate("c", 1)
        assert _seqs(store.read("p")) == list(range(1, 7))
        kid_before = store.read("c")
        assert store.delete("p")
        assert store.read("c") == kid_before
        store.append("c", _events(1, tag="more"))
        assert _seqs(store.read("c")) == [1, 2]

    def test_fork_chains(self, store: Store) -> None:
        """Forks of forks read through every level and survive changes at any level."""
        store.append("a", _events(10, tag="a"))
        store.fork("a", "b", at_seq=8)
        store.append("b", _events(3, tag="b"))
        store.fork("b", "c", at_seq=10)
        store.fork("b", "d", at_seq=4)
        expect_c = store.read("c")
        expect_d = store.read("d")
        assert [e.data for e in expect_c] == [e.data for e in store.read("b")][:10]
        store.truncate("a", 3)
        store.truncate("b", 6)
        assert store.read("c") == expect_c and store.read("d") == expect_d
        store.delete("b")
        store.delete("a")
        assert store.read("c") == expect_c and store.read("d") == expect_d
        assert store.find_run("c", "x") is None

    def test_fork_keeps_pins_of_the_child_valid(self, store: Store) -> None:
        """Destructive changes on the parent do not expire the child's snapshots."""
        store.append("p", _events(6))
        store.fork("p", "c")
        pin = store.pin("c")
        assert pin is not None
        store.truncate("p", 0)
        assert _seqs(store.read("c", pin=pin)) == list(range(1, 7))

    @_QUICK
    @given(
        ops=st.lists(
            st.tuples(
                st.sampled_from(["append", "truncate", "fork", "delete"]),
                st.integers(min_value=0, max_value=3),
                st.integers(min_value=0, max_value=6),
            ),
            max_size=14,
        )
    )
    def test_random_forks_match_a_copying_model(
        self, store: Store, ops: list[tuple[str, int, int]]
    ) -> None:
        """Any mix of appends, truncates, forks and deletes over a few sessions reads
        exactly like a model in which a fork copies the list."""
        prefix = self._fresh_id()
        names = [f"{prefix}-{i}" for i in range(4)]
        model: dict[str, list[JSON]] = {}
        for step, (op, who, n) in enumerate(ops):
            name = names[who]
            if op == "append":
                batch = [NewEvent("k", {"step": step, "j": j}) for j in range(n)]
                store.append(name, batch)
                if n:
                    model.setdefault(name, []).extend(e.data for e in batch)
            elif op == "truncate":
                store.truncate(name, n)
                if name in model:
                    del model[name][n:]
            elif op == "delete":
                store.delete(name)
                model.pop(name, None)
            else:
                target = names[(who + 1) % 4]
                source = model.get(name)
                if source is None or target in model or store.stat(target) is not None:
                    continue
                at = min(n, len(source))
                store.fork(name, target, at_seq=at)
                model[target] = list(source[:at])
            for other in names:
                expected = model.get(other, [])
                assert [e.data for e in store.read(other)] == expected, (step, other)
                assert store.head(other) == len(expected)

    # -- projection checkpoints --------------------------------------------------------

    def test_projection_checkpoint_round_trip(self, store: Store) -> None:
        """A saved projection state loads back with its seq, for its version only."""
        store.append("s", _events(5))
        pin = store.pin("s")
        assert pin is not None
        assert store.load_projection("s", "stats", 1) is None
        store.save_projection(pin, "stats", 1, '{"n":5}')
        assert store.load_projection("s", "stats", 1) == (5, '{"n":5}')
        assert store.load_projection("s", "stats", 2) is None
        assert store.load_projection("s", "other", 1) is None
        store.append("s", _events(2))
        assert store.load_projection("s", "stats", 1) == (5, '{"n":5}')

    def test_projection_checkpoint_invalidated_by_destruction(self, store: Store) -> None:
        """A truncate below the saved seq, or delete and recreate, drops the checkpoint;
        a truncate above it does not."""
        store.append("s", _events(6))
        pin = store.pin("s")
        assert pin is not None
        store.save_projection(pin, "p", 1, "[]")
        store.append("s", _events(2))
        store.truncate("s", 6)
        assert store.load_projection("s", "p", 1) == (6, "[]")
        store.truncate("s", 3)
        assert store.load_projection("s", "p", 1) is None
        pin = store.pin("s")
        assert pin is not None
        store.save_projection(pin, "p", 1, "[]")
        store.delete("s")
        store.append("s", _events(3))
        assert store.load_projection("s", "p", 1) is None
        store.save_projection(pin, "p", 1, "[]")  # a stale pin: ignored
        assert store.load_projection("s", "p", 1) is None


class DurableStoreConformance(StoreConformance):
    """Adds the durability cases (data survives close + reopen) for durable backends.

    Subclasses implement :meth:`reopen_store` as well as :meth:`make_store`.
    """

    def test_store_is_durable(self, store: Store) -> None:
        """A durable backend says so: ``durable`` is True."""
        assert store.durable is True

    def test_reopen_keeps_events_and_heads(self, store: Store, tmp_path: pathlib.Path) -> None:
        """Events (seq, ts, kind, data, run_id) and heads survive reopen."""
        store.append("a", _events(3, tag="a"))
        store.append("a", [NewEvent("r", {"x": 1}, run_id="run")])
        store.append("b", _events(2, tag="b"))
        before_a, before_b = store.read("a"), store.read("b")
        reopened = self._reopen(store, tmp_path)
        assert reopened.read("a") == before_a
        assert reopened.read("b") == before_b
        assert (reopened.head("a"), reopened.head("b")) == (4, 2)

    def test_reopen_keeps_headers_and_stat(self, store: Store, tmp_path: pathlib.Path) -> None:
        """Headers and the whole SessionInfo survive reopen."""
        store.create("a", {"title": "ünï 🎉", "n": 2**70})
        store.create("empty")
        store.append("a", _events(2))
        before = {sid: store.stat(sid) for sid in ("a", "empty")}
        reopened = self._reopen(store, tmp_path)
        assert {sid: reopened.stat(sid) for sid in ("a", "empty")} == before

    def test_reopen_keeps_list_order(self, store: Store, tmp_path: pathlib.Path) -> None:
        """list_sessions order (most recently updated first) survives reopen."""
        for name in ("a", "b", "c"):
            store.append(name, _events(1))
            time.sleep(0.01)
        store.append("a", _events(1))
        before = store.list_sessions()
        assert [i.id for i in before] == ["a", "c", "b"]
        reopened = self._reopen(store, tmp_path)
        assert reopened.list_sessions() == before

    def test_reopen_keeps_truncation(self, store: Store, tmp_path: pathlib.Path) -> None:
        """A truncation survives reopen and later appends reuse the seqs."""
        store.append("s", _events(5, tag="old"))
        store.truncate("s", 2)
        reopened = self._reopen(store, tmp_path)
        assert _seqs(reopened.read("s")) == [1, 2]
        assert reopened.append("s", _events(1, tag="new")) == 3
        assert reopened.read("s")[2].data == {"i": 0, "tag": "new"}

    def test_reopen_keeps_delete(self, store: Store, tmp_path: pathlib.Path) -> None:
        """A deleted session stays deleted after reopen."""
        store.append("gone", _events(2))
        store.append("kept", _events(1))
        store.delete("gone")
        reopened = self._reopen(store, tmp_path)
        assert reopened.stat("gone") is None
        assert reopened.read("gone") == []
        assert [i.id for i in reopened.list_sessions()] == ["kept"]

    def test_reopen_keeps_payloads_exact(self, store: Store, tmp_path: pathlib.Path) -> None:
        """Every round-trip payload is still exact after reopen."""
        names = sorted(_GOOD_PAYLOADS)
        store.append("s", [NewEvent("k", _GOOD_PAYLOADS[name]) for name in names])
        reopened = self._reopen(store, tmp_path)
        events = reopened.read("s")
        assert len(events) == len(names)
        for name, event in zip(names, events, strict=True):
            assert _strict_equal(event.data, _GOOD_PAYLOADS[name]), name

    def test_reopen_keeps_write_batch(self, store: Store, tmp_path: pathlib.Path) -> None:
        """Ops committed by write_batch (sync or not) survive reopen; failed ops stay absent."""
        store.write_batch([AppendOp("a", _prepared(2))])
        store.write_batch(
            [AppendOp("b", _prepared(1), header_json='{"h":1}'), AppendOp("c", _prepared(1), 5)],
            sync=True,
        )
        reopened = self._reopen(store, tmp_path)
        assert (reopened.head("a"), reopened.head("b")) == (2, 1)
        stat = reopened.stat("b")
        assert stat is not None and stat.header == {"h": 1}
        assert reopened.stat("c") is None

    def test_reopen_continues_seqs(self, store: Store, tmp_path: pathlib.Path) -> None:
        """Appends after reopen continue from the stored head, with expected_head checks."""
        store.append("s", _events(3))
        reopened = self._reopen(store, tmp_path)
        with pytest.raises(ConflictError):
            reopened.append("s", _events(1), expected_head=0)
        assert reopened.append("s", _events(2), expected_head=3) == 5
        assert _seqs(reopened.read("s")) == [1, 2, 3, 4, 5]

    def test_reopen_twice(self, store: Store, tmp_path: pathlib.Path) -> None:
        """Data written after one reopen survives the next."""
        store.append("s", _events(1))
        second = self._reopen(store, tmp_path)
        second.append("s", _events(1))
        second.create("t", {"v": 1})
        third = self._reopen(second, tmp_path)
        assert third.head("s") == 2
        stat = third.stat("t")
        assert stat is not None and stat.header == {"v": 1}

    def test_reopen_keeps_forks(self, store: Store, tmp_path: pathlib.Path) -> None:
        """A fork and its lineage survive reopen, and deleting the parent afterwards keeps
        the child's events."""
        store.append("p", _events(5, tag="p"))
        store.fork("p", "c", at_seq=3)
        reopened = self._reopen(store, tmp_path)
        stat = reopened.stat("c")
        assert stat is not None and stat.parent == ("p", 3)
        expected = [e.data for e in reopened.read("p")][:3]
        reopened.delete("p")
        assert [e.data for e in reopened.read("c")] == expected
