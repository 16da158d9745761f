"""Helpers, strategies and the common base of the conformance cases."""

from __future__ import annotations

import contextlib
import itertools
import math
import pathlib
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from stores import (
    JSON,
    AppendOp,
    ClosedError,
    NewEvent,
    PreparedEvent,
    Store,
    StoredEvent,
    prepare_events,
)

__all__ = ["ConformanceBase"]

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


class _ListOf(list[object]):
    """A list subclass (the encoder takes it as a list)."""


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
    # dict/list subclasses and values with many brackets take the general check.
    "tuple_in_ordered_dict": lambda: {"a": OrderedDict(b=(1,))},
    "int_key_in_list_subclass": lambda: _ListOf([{2: "b"}]),
    "tuple_after_many_lists": lambda: [[] for _ in range(300)] + [(1,)],
    "int_key_after_many_dicts": lambda: [{} for _ in range(300)] + [{3: "c"}],
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


class ConformanceBase:
    """What every group of cases shares: the backend hooks, the ``store`` fixture and
    bookkeeping. Subclasses implement :meth:`make_store` (and :meth:`reopen_store`)."""

    _open_stores: list[Store]
    _unique: Iterator[int]

    # -- what a backend provides --------------------------------------------------------

    def make_store(self, tmp_path: pathlib.Path) -> Store:
        """Return a new, empty store (its data may live under ``tmp_path``)."""
        raise NotImplementedError

    # The signature durable backends override (this default uses neither argument).
    def reopen_store(self, store: Store, tmp_path: pathlib.Path) -> Store | None:  # noqa: ARG002
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
