"""The compiled JSON codec (:mod:`stores._codec`) against the stdlib path it replaced: for
every value the contract accepts, what the fast path writes reads back (with the fast
decoder, with the stdlib, through every backend's read paths) equal to the input with the
same types; the fast path refuses exactly what the stdlib path refuses, with the same
error; and any text, tidelog's or not, decodes as the stdlib decodes it."""

from __future__ import annotations

import enum
import itertools
import json
import math
import pathlib
import subprocess
import sys
import textwrap
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stores import (
    InvalidEventError,
    JsonlStore,
    MemoryStore,
    NewEvent,
    SqliteStore,
    Store,
    decode_json,
    encode_json,
    prepare_events,
)
from stores import _codec as codec
from stores._codec import MAX_NESTING

SETTINGS = settings(
    max_examples=150, deadline=None, derandomize=True, database=None,
    suppress_health_check=list(HealthCheck),
)  # fmt: skip
STORE_SETTINGS = settings(SETTINGS, max_examples=20)
TEXT_SETTINGS = settings(SETTINGS, max_examples=100)


def same(a: Any, b: Any) -> bool:
    """Equal values of the same types all the way down: ``1``, ``1.0`` and ``True`` differ,
    ``0.0`` and ``-0.0`` differ, NaN equals NaN, and objects keep their key order."""
    if type(a) is not type(b):
        return False
    if type(a) is float:
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    if type(a) is list:
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if type(a) is dict:
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return bool(a == b)


def test_same_tells_types_apart() -> None:
    """The comparator refuses values that are equal in Python but differ in type or sign."""
    assert same({"a": [1, 1.5, None, "x"]}, {"a": [1, 1.5, None, "x"]})
    assert same(math.nan, math.nan)
    for a, b in [(1, 1.0), (1, True), (0.0, -0.0), ({"a": 1, "b": 2}, {"b": 2, "a": 1})]:
        assert not same(a, b)
        assert not same([a], [b])


# -- values -------------------------------------------------------------------------------

#: Integers around every width a compiled codec might stop at, and far past them.
edge_ints = st.sampled_from(
    [0, -1, 2**31, 2**53 + 1, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64 - 1, 2**64,
     -(2**64), 10**19, -(10**19), 10**40, -(10**300), int("9" * 4300)]
)  # fmt: skip
edge_floats = st.sampled_from(
    [0.0, -0.0, 1e-7, 1e16, 1e-300, 5e-324, -5e-324, 2.2250738585072014e-308,
     1.7976931348623157e308, -1.7976931348623157e308, 0.1, 1 / 3, 123456789.123, 1e22, 1e21]
)  # fmt: skip
texts = st.text(max_size=12) | st.sampled_from(
    ['"', "\\", "\n", "\x00", "\x1f", "\x7f", "\u2028", "\ufeff", "é", "🎉", "\U0010ffff"]
)
json_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**200), max_value=2**200),
    edge_ints,
    st.floats(allow_nan=False, allow_infinity=False),
    edge_floats,
    texts,
)
#: Every value the contract accepts (exact types, finite floats, str keys, no surrogates).
json_values = st.recursive(
    json_leaves,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(texts, children, max_size=4),
    max_leaves=16,
)


class Color(enum.IntEnum):
    RED = 1


class Tag(str):
    """A str subclass (the stdlib encoder writes it as its text)."""


class Number(float):
    """A float subclass."""


class Items(list[Any]):
    """A list subclass."""


def _cycle() -> list[Any]:
    value: list[Any] = []
    value.append(value)
    return value


#: Values that are not exactly JSON, or that only the stdlib path takes (subclasses).
odd_leaves = st.one_of(
    st.sampled_from([math.nan, math.inf, -math.inf, "\ud800", "a\udfffb", b"x", 1j]),
    st.sampled_from([Color.RED, Tag("t"), Number(1.5), Number(math.nan)]),
    st.just(4300).map(lambda digits: 10**digits),  # one digit past the limit: unprintable
    st.tuples(st.integers()),
    st.frozensets(st.integers(), max_size=2),
    st.builds(object),
    st.builds(_cycle),
)
odd_keys = st.one_of(
    texts, st.integers(), st.none(), st.booleans(), st.floats(), st.just("\udc00"),
    st.just(Tag("k")), st.tuples(st.integers()),
)  # fmt: skip
any_values = st.recursive(
    st.one_of(json_leaves, json_leaves, odd_leaves),
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(texts, children, max_size=4),
        st.dictionaries(odd_keys, children, max_size=3),
        st.lists(children, max_size=3).map(Items),
        st.dictionaries(texts, children, max_size=3).map(OrderedDict),
        st.tuples(children),
    ),
    max_leaves=12,
)


def nested(depth: int, leaf: Any) -> Any:
    """``leaf`` inside ``depth`` levels of alternating lists and objects."""
    value = leaf
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


# -- writing ------------------------------------------------------------------------------


@SETTINGS
@given(json_values)
def test_accepted_values_read_back_exactly(value: Any) -> None:
    """What the fast path writes decodes, with the fast decoder and with the stdlib, to the
    input with the same types; so does what the stdlib path wrote (old stores)."""
    text, size = codec.json_text(value, 0, "k")
    old, old_size = codec.stdlib_json_text(value, 0, "k")
    assert size == len(text.encode("utf-8"))
    assert old_size == len(old.encode("utf-8"))
    assert "\n" not in text  # a JSONL record is one line
    for decoded in (
        codec.decode(text),
        codec.decode_bytes(text.encode()),
        json.loads(text),
        codec.decode(old),
        codec.decode_bytes(old.encode()),
        decode_json(encode_json(value)),
    ):
        assert same(decoded, value)


@SETTINGS
@given(any_values)
def test_fast_path_refuses_exactly_what_the_stdlib_refuses(value: Any) -> None:
    """The fast path accepts a value iff the stdlib path does, refuses it with the same
    error, and what it writes for an accepted one reads as the stdlib's text does."""
    decided_alike(value)


def decided_alike(value: Any) -> None:
    """Check that the fast path and the stdlib path decide ``value`` alike."""
    old, old_refusal = _encoded(codec.stdlib_json_text, value)
    text, refusal = _encoded(codec.json_text, value)
    assert refusal == old_refusal
    if old is not None:
        assert text is not None
        assert same(codec.decode(text), json.loads(old))
        assert same(json.loads(text), json.loads(old))


def _encoded(
    encode: Callable[[Any, int, str], tuple[str, int]], value: Any
) -> tuple[str | None, tuple[Any, ...] | None]:
    """``(text, None)``, or ``(None, (index, kind, message))`` of the refusal."""
    try:
        return encode(value, 3, "k")[0], None
    except InvalidEventError as exc:
        return None, (exc.index, exc.kind, str(exc))


EDGES: dict[str, Callable[[], Any]] = {
    "deepest": lambda: nested(MAX_NESTING, 1.5),
    "one_deeper": lambda: nested(MAX_NESTING + 1, 1.5),
    "much_deeper": lambda: nested(3 * MAX_NESTING, None),
    "cycle": _cycle,
    "digit_limit": lambda: [int("9" * 4300), 10**4300],
    "nan_deep": lambda: nested(50, math.nan),
    "surrogate_key_deep": lambda: nested(50, {"\ud800": 1}),
    "int_key_deep": lambda: nested(50, {1: 1}),
    "subclasses": lambda: OrderedDict(a=Items([Color.RED, Tag("t"), Number(2.5)])),
}


@pytest.mark.parametrize("make", EDGES.values(), ids=EDGES.keys())
def test_edges_decided_as_the_stdlib_decides(make: Callable[[], Any]) -> None:
    """Nesting at and past the limit, cycles, the digit limit and bad values deep inside
    are accepted or refused by the fast path exactly as by the stdlib path."""
    decided_alike(make())


def test_prepare_events_uses_the_fast_path_and_refuses_as_before() -> None:
    """prepare_events writes the compiled codec's text and names the first bad event."""
    [event] = prepare_events([NewEvent("k", {"f": 1e-7, "n": 2**70})])
    assert event.data_json == '{"f":1e-7,"n":1180591620717411303424}'
    with pytest.raises(InvalidEventError) as refused:
        prepare_events([NewEvent("k", 1), NewEvent("k", {"x": [math.nan]})])
    assert refused.value.index == 1
    assert "Out of range float values are not JSON compliant" in str(refused.value)


def test_the_compiled_codec_loads_on_first_use_from_any_thread(tmp_path: pathlib.Path) -> None:
    """A fresh process has not imported msgspec after importing the stores; the first
    encodes and decodes, made at once by several threads, each give the right value, and
    every later call goes straight to msgspec's encoder and decoder."""
    program = textwrap.dedent(
        """
        import sys, threading
        from stores import _codec as codec, prepare_events, NewEvent
        assert "msgspec" not in sys.modules
        start, results = threading.Barrier(8), []
        def work(i):
            start.wait()
            if i % 2:
                results.append(codec.decode('{"n": %d, "f": 0.5}' % i) == {"n": i, "f": 0.5})
            else:
                [event] = prepare_events([NewEvent("k", {"n": i, "big": 2**70})])
                results.append(event.data_json == '{"n":%d,"big":%d}' % (i, 2**70))
        threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
        for t in threads: t.start()
        for t in threads: t.join()
        assert results == [True] * 8, results
        import msgspec
        assert codec.fast_encode.__self__.__class__ is msgspec.json.Encoder
        assert codec._FAST_DECODE.__self__.__class__ is msgspec.json.Decoder
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", program], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr


# -- reading ------------------------------------------------------------------------------

#: Texts no tidelog wrote, and spellings of tidelog's values both encoders never use.
odd_texts = st.sampled_from(
    ["NaN", "[Infinity,-Infinity]", "1e400", "-1e400", "1E5", "1e-400", "-0", "-0.0",
     "0.1000000000000000055511151231257827021181583404541015625", "1" * 30, "-" + "9" * 4300,
     "9" * 4301, '"\\ud800"', '"\\udc00x\\ud800"', '"\\u00e9\\n"', " [1, 2] ", "\ufeff1", "[1,]",
     "01", '"\t"', "", "{", '{"a":1,"a":2.5,"a":[3]}', '{"a":{"b":1},"a":{"c":2}}', "[" * 300,
     "[" * 300 + "]" * 300, '{"a": 1}\n', "true false"]
)  # fmt: skip


@st.composite
def json_texts(draw: st.DrawFn) -> str:
    """JSON text as a JSON writer might spell it: stdlib spellings (indented, ASCII-only,
    NaN allowed), objects with duplicate keys, or the odd texts above."""
    kind = draw(st.sampled_from(["dumps", "duplicates", "odd"]))
    if kind == "odd":
        return draw(odd_texts)
    if kind == "duplicates":
        pairs = draw(st.lists(st.tuples(st.sampled_from("ab"), json_values), max_size=5))
        return "{" + ",".join(f"{json.dumps(k)}:{json.dumps(v)}" for k, v in pairs) + "}"
    value = draw(
        st.recursive(
            json_leaves | st.sampled_from([math.nan, math.inf, -math.inf]),
            lambda c: st.lists(c, max_size=4) | st.dictionaries(texts, c, max_size=4),
            max_leaves=12,
        )
    )
    return json.dumps(
        value,
        ensure_ascii=draw(st.booleans()),
        indent=draw(st.sampled_from([None, 0, 2])),
        separators=draw(st.sampled_from([None, (",", ":")])),
    )


def _outcome(decode: Callable[[Any], Any], text: Any) -> tuple[str, Any]:
    try:
        return "value", decode(text)
    except (ValueError, RecursionError) as exc:
        return "error", type(exc)


@TEXT_SETTINGS
@given(json_texts())
def test_any_text_decodes_as_the_stdlib_decodes_it(text: str) -> None:
    """decode, decode_small and decode_bytes give what json.loads gives (the same types),
    or raise the error class it raises: old stores and foreign text read as before."""
    as_bytes = text.encode("utf-8", "surrogatepass")
    readers = ((codec.decode, text), (codec.decode_small, text), (codec.decode_bytes, as_bytes))
    for ours, given_text in readers:
        got, want = _outcome(ours, given_text), _outcome(json.loads, given_text)
        assert got[0] == want[0]
        assert same(got[1], want[1]) if got[0] == "value" else got[1] is want[1]


def test_decode_refuses_what_is_not_text() -> None:
    """decode takes only str, as the stdlib decoder: a stored blob is damage, not JSON."""
    with pytest.raises(TypeError):
        codec.decode(b"[1]")  # type: ignore[arg-type]
    assert same(codec.decode(Tag("[1]")), [1])


# -- through the stores' read paths -------------------------------------------------------

_ids = itertools.count()


@pytest.fixture(params=["memory", "sqlite", "jsonl", "jsonl-zstd", "postgres"])
def stores(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Callable[[], Store]]:
    """A factory of store objects on one backend's storage (each new one reads cold)."""
    made: list[Store] = []
    memory = MemoryStore()

    def make() -> Store:  # the first one is closed at the end, the test closes the others
        if request.param == "memory":
            return memory
        if request.param == "sqlite":
            store: Store = SqliteStore(tmp_path / "codec.db")
        elif request.param.startswith("jsonl"):
            store = JsonlStore(tmp_path / "codec", compress=request.param == "jsonl-zstd")
        else:
            from stores import PostgresStore

            dsn, schema = request.getfixturevalue("pg_schema")
            store = PostgresStore(dsn, schema=schema)
        made.append(store)
        return store

    yield make
    if made:
        made[0].close()


def test_every_read_path_gives_the_values_back(stores: Callable[[], Store]) -> None:
    """Values written through the fast path read back with the same types from every read
    path of each backend: a window (SQLite's packed read), row by row, a snapshot's pinned
    read, a cold load by a new store object, and the session header."""
    writer = stores()

    @STORE_SETTINGS
    @given(st.lists(json_values, min_size=1, max_size=4), st.dictionaries(texts, json_values))
    def check(values: list[Any], header: dict[str, Any]) -> None:
        session = f"codec-{next(_ids)}"
        writer.create(session, header)
        writer.append(session, [NewEvent("k", v) for v in values])
        pin = writer.pin(session)
        assert pin is not None
        for store in (writer, stores()):
            for events in (
                store.read(session, limit=len(values)),
                store.read(session),
                store.read(session, limit=2, from_end=True),
                store.read(session, pin=pin),
            ):
                assert events
                for event in events:
                    assert same(event.data, values[event.seq - 1])
            info = store.stat(session)
            assert info is not None
            assert same(info.header, header)
            if store is not writer:
                store.close()

    check()
