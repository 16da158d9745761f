"""Conformance cases: seqs, reads, timestamps, expected_head, create/stat, list, delete,
truncate."""

from __future__ import annotations

import time
from typing import Any

import pytest

from stores import (
    JSON,
    ConflictError,
    InvalidArgumentError,
    SessionExistsError,
    SessionInfo,
    Store,
)

__all__ = ["LogCases"]

from stores.conformance._support import (
    ConformanceBase,
    _events,
    _seqs,
)


class LogCases(ConformanceBase):
    """Seqs, read windows, timestamps, expected_head, create/stat, list, delete, truncate."""

    # -- shape ----------------------------------------------------------------------------

    def test_implements_store_protocol(self, store: Store) -> None:
        """The store satisfies the runtime-checkable Store protocol."""
        assert isinstance(store, Store)

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
        assert stat is not None
        assert info is not None
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
        assert stat is not None
        assert stat.header == {}

    def test_create_existing_raises(self, store: Store) -> None:
        """create on an existing id raises SessionExistsError and changes nothing."""
        store.create("s", {"v": 1})
        with pytest.raises(SessionExistsError) as excinfo:
            store.create("s", {"v": 2})
        assert excinfo.value.session_id == "s"
        stat = store.stat("s")
        assert stat is not None
        assert stat.header == {"v": 1}

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
        """list_sessions(order="updated") orders by last update, most recent first."""
        for name in ("a", "b", "c"):
            store.create(name)
            time.sleep(0.01)
        assert [i.id for i in store.list_sessions(order="updated")] == ["c", "b", "a"]
        store.append("a", _events(1))
        time.sleep(0.01)
        assert [i.id for i in store.list_sessions(order="updated")] == ["a", "c", "b"]
        store.append("b", _events(2))
        infos = store.list_sessions(order="updated")
        assert [i.id for i in infos] == ["b", "a", "c"]
        assert [i.head for i in infos] == [2, 1, 0]
        assert [i.id for i in store.list_sessions()] == ["a", "b", "c"]  # default: by id

    def test_list_sessions_limit(self, store: Store) -> None:
        """``limit`` returns the first ones of the order; 0 returns none; a big limit all."""
        for name in ("c", "a", "d", "b"):
            store.append(name, _events(1))
            time.sleep(0.01)
        assert [i.id for i in store.list_sessions(limit=2)] == ["a", "b"]
        assert [i.id for i in store.list_sessions(limit=2, order="updated")] == ["b", "d"]
        assert store.list_sessions(limit=0) == []
        assert [i.id for i in store.list_sessions(limit=10)] == ["a", "b", "c", "d"]

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
        assert stat is not None
        assert stat.head == 2

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
