"""Conformance cases: payload round trips and refusals, session ids, bad arguments."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given

from stores import (
    JSON,
    InvalidArgumentError,
    InvalidEventError,
    InvalidSessionIdError,
    NewEvent,
    Store,
)

__all__ = ["InputCases"]

from stores._records import MAX_NESTING
from stores.conformance._support import (
    _BAD_IDS,
    _BAD_KINDS,
    _BAD_PAYLOADS,
    _BAD_READ_ARGS,
    _BAD_RUN_IDS,
    _BAD_SEQ_VALUES,
    _GOOD_PAYLOADS,
    _ID_CALLS,
    _JSON_VALUES,
    _QUICK,
    _WEIRD_IDS,
    ConformanceBase,
    _events,
    _seqs,
    _strict_equal,
)


class InputCases(ConformanceBase):
    """Payload round trips and refusals, session ids, bad arguments."""

    # -- payloads ---------------------------------------------------------------------------

    @pytest.mark.parametrize("name", sorted(_GOOD_PAYLOADS))
    def test_payload_round_trips_exactly(self, store: Store, name: str) -> None:
        """A JSON payload comes back with the same value, types and float signs, read whole
        or in a bounded window."""
        payload = _GOOD_PAYLOADS[name]
        store.append("s", [NewEvent("k", payload)])
        (event,) = store.read("s")
        assert _strict_equal(event.data, payload), (event.data, payload)
        for windowed in (store.read("s", limit=1), store.read("s", limit=5, from_end=True)):
            (event,) = windowed  # a bounded window (SQLite: fetched packed, in one step)
            assert _strict_equal(event.data, payload), (event.data, payload)

    @_QUICK
    @given(payload=_JSON_VALUES)
    def test_any_json_payload_round_trips(self, store: Store, payload: JSON) -> None:
        """Any (generated) exactly-JSON payload round-trips exactly, read whole or in a
        bounded window."""
        session_id = self._fresh_id()
        store.append(session_id, [NewEvent("k", payload), NewEvent("k2", [payload])])
        first, second = store.read(session_id)
        assert _strict_equal(first.data, payload)
        assert _strict_equal(second.data, [payload])
        for window in (
            store.read(session_id, limit=2),
            store.read(session_id, limit=9, from_end=True),
        ):
            assert [e.seq for e in window] == [1, 2]
            assert _strict_equal(window[0].data, payload)
            assert _strict_equal(window[1].data, [payload])

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

    def test_refused_payload_leaves_no_trace(self, store: Store) -> None:
        """Containers a refused encode was inside encode normally afterwards (a failed
        encode must not leave them looking like a circular reference)."""
        inner: list[JSON] = [1, float("nan")]
        outer: dict[str, JSON] = {"a": inner}
        with pytest.raises(InvalidEventError):
            store.append("s", [NewEvent("k", outer)])
        inner.pop()
        head = store.append("s", [NewEvent("k", outer), NewEvent("k", inner)])
        assert [e.data for e in store.read("s")] == [{"a": [1]}, [1]]
        assert head == 2

    @pytest.mark.parametrize("wrap", ["list", "dict"])
    def test_nesting_limit_is_exact(self, store: Store, wrap: str) -> None:
        """Data nested MAX_NESTING levels is accepted and reads back; one more is refused
        (short and long texts alike: the check's fast and general paths agree)."""

        def nested(depth: int, leaf: Any = 0) -> Any:
            value = leaf
            for _ in range(depth):
                value = [value] if wrap == "list" else {"k": value}
            return value

        for leaf in (0, "x" * 500):  # a short text, and one past the fast path's length
            deepest = nested(MAX_NESTING, leaf)
            head = store.append("s", [NewEvent("deep", deepest)])
            assert store.read("s", since_seq=head - 1)[0].data == deepest
            with pytest.raises(InvalidEventError, match="deeper"):
                store.append("s", [NewEvent("deeper", nested(MAX_NESTING + 1, leaf))])
            assert store.head("s") == head

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
            assert stat is not None
            assert stat.id == session_id
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
