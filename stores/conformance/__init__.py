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
Every test is synchronous and pins one behaviour of the contract in ``stores/_contract.py``
(the docstrings there are the specification), including that the store's declared
:class:`~stores.Capabilities` agree with what it does, and that random batches of every
kind of op, leases and forks give the results and logs of :class:`~stores.MemoryStore`,
the reference (:mod:`stores.conformance.model`; across reopens too, for a durable one).
"""

from __future__ import annotations

import pathlib
import time
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stores import AppendOp, ConflictError, GroupOp, NewEvent, Store
from stores.conformance._support import (
    _GOOD_PAYLOADS,
    _QUICK,
    _events,
    _prepared,
    _seqs,
    _strict_equal,
)
from stores.conformance.batches import BatchCases
from stores.conformance.capabilities import CapabilityCases
from stores.conformance.forks import ForkCases
from stores.conformance.handles import HandleCases
from stores.conformance.inputs import InputCases
from stores.conformance.leases import LeaseAndPinCases
from stores.conformance.limits import LimitCases
from stores.conformance.listing import ListingCases
from stores.conformance.log import LogCases
from stores.conformance.model import BATCHES, Handle, ModelCases, replay
from stores.conformance.readonly import ReadOnlyCases
from stores.conformance.restore import RestoreCases

__all__ = ["DurableStoreConformance", "StoreConformance"]


class StoreConformance(
    LogCases,
    ListingCases,
    InputCases,
    LimitCases,
    BatchCases,
    ModelCases,
    LeaseAndPinCases,
    HandleCases,
    ForkCases,
    ReadOnlyCases,
    RestoreCases,
    CapabilityCases,
):
    """Conformance cases for any :class:`~stores._contract.Store`.

    Subclass it (as ``Test...``) and implement :meth:`make_store`.
    """


class DurableStoreConformance(StoreConformance):
    """Adds the durability cases (data survives close + reopen) for durable backends.

    Subclasses implement :meth:`reopen_store` as well as :meth:`make_store`.
    """

    def test_store_is_durable(self, store: Store) -> None:
        """A durable backend says so: its capabilities declare ``durable``."""
        assert store.capabilities.durable is True

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
        """list_sessions orders (most recently updated first, by id) survive reopen."""
        for name in ("a", "b", "c"):
            store.append(name, _events(1))
            time.sleep(0.01)
        store.append("a", _events(1))
        before = store.list_sessions(order="updated")
        assert [i.id for i in before] == ["a", "c", "b"]
        reopened = self._reopen(store, tmp_path)
        assert reopened.list_sessions(order="updated") == before
        assert [i.id for i in reopened.list_sessions()] == ["a", "b", "c"]

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
        assert stat is not None
        assert stat.header == {"h": 1}
        assert reopened.stat("c") is None

    def test_reopen_keeps_a_group_when_a_later_op_fails(
        self, store: Store, tmp_path: pathlib.Path
    ) -> None:
        """A group that landed stays landed, after reopen too, when a later op of the same
        batch fails on its own, and both members take further writes."""
        store.write_batch([AppendOp(s, _prepared(1)) for s in ("a", "b", "c")])
        results = store.write_batch(
            [
                GroupOp((AppendOp("a", _prepared(1, "g")), AppendOp("b", _prepared(1, "g")))),
                AppendOp("c", _prepared(1), expected_head=5),
            ]
        )
        assert results[0] == 2
        assert isinstance(results[1], ConflictError)
        groups = {s: store.read(s) for s in ("a", "b")}
        reopened = self._reopen(store, tmp_path)
        assert {s: reopened.read(s) for s in ("a", "b")} == groups
        assert reopened.write_batch([AppendOp(s, _prepared(1)) for s in ("a", "b", "c")]) == [
            3,
            3,
            2,
        ]
        assert [e.data for e in reopened.read("a")][1] == {"i": 0, "tag": "g"}

    @_QUICK
    @given(batches=BATCHES, reopens=st.sets(st.integers(min_value=0, max_value=7)))
    def test_random_batches_match_the_reference_across_reopens(
        self,
        store: Store,
        tmp_path: pathlib.Path,
        batches: list[Any],
        reopens: set[int],
    ) -> None:
        """Random batches (as ModelCases) give the reference's results and logs when the
        store is closed and reopened after some of them (its leases given up first): what a
        batch acknowledged stays, and nothing it did not."""
        del store  # (the fixture's handle stays open beside the example's own)
        live = [self._track(self.make_store(tmp_path))]

        def reopen(current: Handle) -> Handle:
            assert current is live[-1]
            live.append(self._reopen(live[-1], tmp_path))
            return live[-1]

        try:
            replay(live[0], batches, self._fresh_id("m"), reopen=reopen, at=frozenset(reopens))
        finally:
            live[-1].close()  # (each reopen closed the one before it)

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
        assert stat is not None
        assert stat.header == {"v": 1}

    def test_reopen_keeps_forks(self, store: Store, tmp_path: pathlib.Path) -> None:
        """A fork and its lineage survive reopen, and deleting the parent afterwards keeps
        the child's events."""
        store.append("p", _events(5, tag="p"))
        store.fork("p", "c", at_seq=3)
        reopened = self._reopen(store, tmp_path)
        stat = reopened.stat("c")
        assert stat is not None
        assert stat.parent == ("p", 3)
        expected = [e.data for e in reopened.read("p")][:3]
        reopened.delete("p")
        assert [e.data for e in reopened.read("c")] == expected
