"""Conformance cases: the batched write path: write_batch, groups, replace, retries."""

from __future__ import annotations

import pytest

from stores import (
    AppendOp,
    BatchResult,
    ConflictError,
    DeleteOp,
    GroupOp,
    InvalidArgumentError,
    NewEvent,
    OwnershipLostError,
    ReplaceOp,
    SnapshotExpiredError,
    Store,
    TruncateOp,
    prepare_events,
)

__all__ = ["BatchCases"]

from stores.conformance._support import (
    ConformanceBase,
    _events,
    _prepared,
    _seqs,
)


class BatchCases(ConformanceBase):
    """The batched write path: write_batch, groups, replace, retries."""

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
        assert results[2] is results[0]
        assert results[3] is results[0]
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

    def test_retry_replace_that_landed_is_not_repeated(self, store: Store) -> None:
        """A resent ReplaceOp (retry=True) whose rewrite already landed writes nothing
        and reports the head; a different rewrite at the same position still conflicts."""
        store.append("s", _events(4))
        new = _prepared(2, "r")
        assert store.write_batch([ReplaceOp("s", 1, new, expected_head=4)]) == [3]
        again = ReplaceOp("s", 1, new, expected_head=4, retry=True)
        assert store.write_batch([again]) == [3]
        assert [e.data for e in store.read("s", since_seq=1)] == [
            {"i": i, "tag": "r"} for i in range(2)
        ]
        [other] = store.write_batch(
            [ReplaceOp("s", 1, _prepared(2, "q"), expected_head=4, retry=True)]
        )
        assert isinstance(other, ConflictError)
        [plain] = store.write_batch([ReplaceOp("s", 1, new, expected_head=4)])
        assert isinstance(plain, ConflictError)

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
        assert store.head("a") == 1
        assert store.stat("b") is None
        assert store.stat("c") is None
        ok = store.write_batch(
            [GroupOp((AppendOp("a", _prepared(1), expected_head=1), AppendOp("b", _prepared(2))))]
        )
        assert ok == [2]
        assert store.head("a") == 2
        assert store.head("b") == 2

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
        assert fresh.as_of_seq == 4
        assert fresh.incarnation == pin.incarnation
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
        assert new is not None
        assert old is not None
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
