"""Conformance cases: the declared :class:`~stores.Capabilities` agree with the store."""

from __future__ import annotations

import time

import attrs
import pytest

from stores import Capabilities, ReadOnlyError, Store, WalUpkeep
from stores._listening import ChangeFeed
from stores.conformance._support import ConformanceBase, _events

__all__ = ["CapabilityCases"]


class CapabilityCases(ConformanceBase):
    """Every handle declares a capabilities record, and its values hold."""

    def test_every_handle_declares_capabilities(self, store: Store) -> None:
        """The store, a clone and a read-only clone each declare a Capabilities of bools;
        a clone is as durable and as blocking as its source."""
        handles = [store, self._clone(store), self._track(store.clone(read_only=True))]
        for handle in handles:
            caps = handle.capabilities
            assert type(caps) is Capabilities
            assert all(type(value) is bool for value in attrs.astuple(caps))
            assert (caps.durable, caps.blocking) == (
                store.capabilities.durable,
                store.capabilities.blocking,
            )

    def test_capabilities_are_consistent(self, store: Store) -> None:
        """Only a durable store can sync every commit; an immutable handle is read-only;
        a read-only handle leaves no WAL upkeep to its owner (it never writes)."""
        for handle in (store, self._track(store.clone(read_only=True))):
            caps = handle.capabilities
            assert caps.durable or not caps.syncs_every_commit
            assert handle.read_only or not caps.immutable
            assert not (handle.read_only and caps.wal_upkeep)

    def test_wal_upkeep_changes_no_data(self, store: Store) -> None:
        """A store declaring WAL upkeep is a WalUpkeep; checkpoint_wal (of any WalUpkeep,
        from any writing handle) returns a count >= 0 and changes no read; a read-only
        handle refuses it."""
        if store.capabilities.wal_upkeep:
            assert isinstance(store, WalUpkeep)
        if not isinstance(store, WalUpkeep):
            return  # nothing to check: the declaration was checked above
        store.append("s", _events(3))
        other = self._clone(store)
        before = (store.read("s"), store.stat("s"), store.head("s"))
        for handle in (store, other):
            assert isinstance(handle, WalUpkeep)
            done = handle.checkpoint_wal()
            assert type(done) is int
            assert done >= 0
        assert (store.read("s"), store.stat("s"), store.head("s")) == before
        assert type(store.wal_pages) is int
        assert store.wal_pages >= 0
        assert store.append("s", _events(1)) == 4
        reader = self._track(store.clone(read_only=True))
        assert isinstance(reader, WalUpkeep)
        with pytest.raises(ReadOnlyError, match="checkpoint_wal"):
            reader.checkpoint_wal()

    def test_change_feed_announces_commits(self, store: Store) -> None:
        """A store declaring a change feed has ``listen()``, whose listener reports a
        clone's commit (its session, or None for "look at everything"). Nothing to check
        for a store without one (it is polled)."""
        if not store.capabilities.change_feed:
            return
        feed: ChangeFeed = store  # type: ignore[assignment]  # declared by its capabilities
        listener = feed.listen()
        try:
            other = self._clone(store)
            other.append("s", _events(1))
            deadline = time.monotonic() + 10.0
            seen: set[str] | None = set()
            while seen is not None and "s" not in seen and time.monotonic() < deadline:
                got = listener.wait(0.5)
                seen = None if got is None else seen | got
            assert seen is None or "s" in seen
        finally:
            listener.close()
