"""Conformance cases: RestoreOp -- writing a session back exactly as a dump recorded it
(commit times, creation time, header, lineage), in bounded pieces."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stores import (
    JSON,
    AppendOp,
    ConflictError,
    GroupOp,
    InvalidArgumentError,
    NewEvent,
    RestoreOp,
    SessionInfo,
    Store,
    StoredEvent,
    prepare_events,
)
from stores._records import encode_json

__all__ = ["RestoreCases"]

from stores.conformance._support import _JSON_VALUES, _QUICK, ConformanceBase, _events, _prepared

HEADER = encode_json({"title": "ünï", "forked_from": "p", "fork_seq": 2})


def _restore(
    session_id: str,
    events: list[NewEvent],
    stamps: list[float],
    expected_head: int = 0,
    **fields: Any,
) -> RestoreOp:
    return RestoreOp(
        session_id, tuple(prepare_events(events)), tuple(stamps), expected_head, **fields
    )


def _rows(events: list[StoredEvent]) -> list[tuple[int, float, str, Any, str | None]]:
    return [(e.seq, e.ts, e.kind, e.data, e.run_id) for e in events]


_BAD_OPS: dict[str, dict[str, Any]] = {
    "stamps_short": {"stamps": (1.0,)},
    "stamps_list": {"stamps": [1.0, 2.0]},
    "stamp_int": {"stamps": (1.0, 2)},
    "stamp_nan": {"stamps": (1.0, float("nan"))},
    "created_inf": {"created_at": float("inf")},
    "updated_str": {"updated_at": "now"},
    "header_not_object": {"header_json": "[1]"},
    "header_not_json": {"header_json": "{"},
    "header_not_canonical": {"header_json": '{"a": 1}'},
    "header_bytes": {"header_json": b"{}"},
    "parent_list": {"parent": ["p", 1]},
    "parent_bad_id": {"parent": ("", 1)},
    "parent_negative_seq": {"parent": ("p", -1)},
    "expected_head_none": {"expected_head": None},
    "expected_head_negative": {"expected_head": -1},
    "share_without_parent": {"share_prefix": True},
    "share_not_bool": {"share_prefix": 1, "parent": ("p", 0)},
}


class RestoreCases(ConformanceBase):
    """RestoreOp: exact restores, pieces, conflicts and refusals."""

    def test_restore_creates_the_session_as_recorded(self, store: Store) -> None:
        """A RestoreOp creates the session with the recorded header, times and parent,
        and its events with their own commit times; stat and read give them back."""
        events = [NewEvent("a", {"i": 1}, run_id="r"), NewEvent("b", [1.5, None])]
        op = _restore(
            "s",
            events,
            [100.25, 101.5],
            header_json=HEADER,
            created_at=99.0,
            updated_at=102.0,
            parent=("p", 2),
        )
        assert store.write_batch([op]) == [2]
        info = store.stat("s")
        assert info == SessionInfo(
            "s", 2, 99.0, 102.0, {"title": "ünï", "forked_from": "p", "fork_seq": 2}, ("p", 2)
        )
        assert _rows(store.read("s")) == [
            (1, 100.25, "a", {"i": 1}, "r"),
            (2, 101.5, "b", [1.5, None], None),
        ]
        assert store.find_run("s", "r") == (1, 1)
        assert store.list_sessions() == [info]

    def test_restore_in_pieces_then_use_normally(self, store: Store) -> None:
        """A session restored in several ops (each after the previous head) reads as one
        log; the header and creation time come from the first op; afterwards it takes
        appends, truncates and forks like any session."""
        first = _restore("s", _events(3), [1.0, 2.0, 3.0], header_json='{"v":1}', created_at=1.0)
        later = _restore(
            "s", _events(2, tag="x"), [4.0, 5.0], 3, header_json='{"v":2}', updated_at=5.0
        )
        assert store.write_batch([first]) == [3]
        assert store.write_batch([later]) == [5]
        info = store.stat("s")
        assert info is not None
        assert (info.header, info.created_at, info.updated_at) == ({"v": 1}, 1.0, 5.0)
        assert [e.ts for e in store.read("s")] == [1.0, 2.0, 3.0, 4.0, 5.0]
        assert store.append("s", _events(1)) == 6
        assert store.truncate("s", 4) == 2
        child = store.fork("s", "child", at_seq=2)
        assert child.parent == ("s", 2)
        assert [e.ts for e in store.read("child")] == [1.0, 2.0]

    def test_restore_of_an_empty_session(self, store: Store) -> None:
        """A RestoreOp without events still creates the session (head 0, its header)."""
        op = _restore("e", [], [], header_json='{"x":[]}', created_at=7.0, updated_at=8.0)
        assert store.write_batch([op]) == [0]
        assert store.stat("e") == SessionInfo("e", 0, 7.0, 8.0, {"x": []}, None)

    def test_restore_with_a_stale_head_conflicts_alone(self, store: Store) -> None:
        """A RestoreOp whose expected_head is not the head fails with ConflictError and
        writes nothing (also not the session's times); the other ops of the batch still
        commit."""
        store.append("s", _events(2))
        before = store.stat("s")
        results = store.write_batch(
            [
                _restore("s", _events(1), [1.0], 0, updated_at=9.0),
                AppendOp("t", _prepared(1)),
                _restore("u", _events(1), [3.0], 1),
            ]
        )
        assert isinstance(results[0], ConflictError)
        assert results[0].actual == 2
        assert results[1] == 1
        assert isinstance(results[2], ConflictError)
        assert results[2].actual == 0
        assert store.stat("s") == before
        assert store.stat("u") is None

    @pytest.mark.parametrize("case", sorted(_BAD_OPS))
    def test_bad_restore_refused_before_anything_is_written(self, store: Store, case: str) -> None:
        """A malformed RestoreOp raises InvalidArgumentError and the whole batch writes
        nothing."""
        fields: dict[str, Any] = {
            "session_id": "s",
            "events": _prepared(2),
            "stamps": (1.0, 2.0),
            "expected_head": 0,
            "header_json": "{}",
            "created_at": 1.0,
            "updated_at": 2.0,
            "parent": None,
        }
        fields.update(_BAD_OPS[case])
        with pytest.raises(InvalidArgumentError):
            store.write_batch([AppendOp("t", _prepared(1)), RestoreOp(**fields)])
        assert store.list_sessions() == []

    def test_restore_sharing_a_prefix_is_a_fork_as_recorded(self, store: Store) -> None:
        """A RestoreOp with share_prefix creates the session as a fork of its parent
        (reading the parent's first events through it, like Store.fork) with the
        recorded header and times, its own events after the fork point -- in pieces
        too; a later truncate of the parent leaves the child's prefix intact."""
        store.write_batch([_restore("p", _events(4), [1.0, 2.0, 3.0, 4.0], created_at=0.5)])
        first = _restore(
            "c",
            _events(1, tag="own"),
            [10.0],
            2,
            header_json=HEADER,
            created_at=9.0,
            updated_at=10.0,
            parent=("p", 2),
            share_prefix=True,
        )
        assert store.write_batch([first]) == [3]
        later = _restore("c", _events(1, tag="more"), [11.0], 3, updated_at=11.0)
        assert store.write_batch([later]) == [4]
        info = store.stat("c")
        header: dict[str, JSON] = {"title": "ünï", "forked_from": "p", "fork_seq": 2}
        assert info == SessionInfo("c", 4, 9.0, 11.0, header, ("p", 2))
        parent = store.read("p")
        child = store.read("c")
        assert [e.ts for e in child] == [1.0, 2.0, 10.0, 11.0]
        assert [(e.kind, e.data) for e in child[:2]] == [(e.kind, e.data) for e in parent[:2]]
        store.truncate("p", 0)
        assert [e.ts for e in store.read("c")] == [1.0, 2.0, 10.0, 11.0]

    def test_restore_sharing_a_prefix_needs_the_parent(self, store: Store) -> None:
        """share_prefix without the parent, with a parent too short, or with
        expected_head other than the fork point fails that op alone and creates
        nothing; on a session that exists it changes nothing."""
        store.append("p", _events(2))
        results = store.write_batch(
            [
                _restore("a", [], [], 1, parent=("nobody", 1), share_prefix=True),
                _restore("b", [], [], 3, parent=("p", 3), share_prefix=True),
                _restore("c", [], [], 0, parent=("p", 2), share_prefix=True),
                _restore("p", _events(1), [5.0], 2, parent=("x", 1), share_prefix=True),
            ]
        )
        assert not isinstance(results[0], int)
        assert isinstance(results[1], InvalidArgumentError)
        assert isinstance(results[2], ConflictError)
        assert results[3] == 3
        assert [info.id for info in store.list_sessions()] == ["p"]

    def test_restore_is_not_allowed_in_a_group(self, store: Store) -> None:
        """A RestoreOp inside a GroupOp is refused with InvalidArgumentError."""
        op = _restore("s", _events(1), [1.0])
        with pytest.raises(InvalidArgumentError):
            store.write_batch([GroupOp((op,))])  # type: ignore[arg-type]
        assert store.list_sessions() == []

    @_QUICK
    @given(
        data=st.lists(st.tuples(_JSON_VALUES, st.floats(0, 2e9)), max_size=8),
        cut=st.integers(min_value=0, max_value=8),
    )
    def test_restore_reproduces_any_events_exactly(
        self, store: Store, data: list[tuple[Any, float]], cut: int
    ) -> None:
        """Property: any events restored in two pieces read back exactly -- data, kinds
        and commit times."""
        sid = self._fresh_id()
        events = [NewEvent(f"k{i}", value) for i, (value, _) in enumerate(data)]
        stamps = [ts for _, ts in data]
        cut = min(cut, len(events))
        store.write_batch([_restore(sid, events[:cut], stamps[:cut], created_at=1.0)])
        store.write_batch([_restore(sid, events[cut:], stamps[cut:], cut, updated_at=2.0)])
        assert _rows(store.read(sid)) == [
            (i, ts, f"k{i - 1}", value, None) for i, (value, ts) in enumerate(data, start=1)
        ]
