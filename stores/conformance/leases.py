"""Conformance cases: single-writer leases with fencing, and pins for snapshots."""

from __future__ import annotations

import time

import pytest

from stores import (
    AppendOp,
    OwnershipLostError,
    Pin,
    SessionOwnedError,
    SnapshotExpiredError,
    Store,
)

__all__ = ["LeaseAndPinCases"]

from stores.conformance._support import (
    ConformanceBase,
    _events,
    _prepared,
    _seqs,
)


class LeaseAndPinCases(ConformanceBase):
    """Single-writer leases with fencing, and pins for snapshots."""

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
        """Deleting a session drops its lease: another owner can then acquire it (the last
        call raises SessionOwnedError if the lease survived)."""
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
        assert empty is not None
        assert empty.as_of_seq == 0
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
        assert fresh is not None
        assert fresh.as_of_seq == 3
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
