"""Conformance cases: read-only handles (``clone(read_only=True)``) refuse every write with
``ReadOnlyError`` before touching storage, and read what other handles write."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from stores import (
    AppendOp,
    ClosedError,
    NewEvent,
    Pin,
    ReadOnlyError,
    RestoreOp,
    Store,
    TruncateOp,
)

__all__ = ["ReadOnlyCases"]

from stores.conformance._support import ConformanceBase, _events, _prepared, _seqs

#: Every write method of the contract, with valid arguments on a store holding "s".
_WRITES: dict[str, Callable[[Store], object]] = {
    "create": lambda s: s.create("new"),
    "create_exist_ok": lambda s: s.create("s", exist_ok=True),
    "append": lambda s: s.append("s", _events(1)),
    "append_empty": lambda s: s.append("s", []),
    "write_batch": lambda s: s.write_batch([AppendOp("s", _prepared(1))]),
    "write_batch_general": lambda s: s.write_batch([TruncateOp("s", 1)]),
    "write_batch_empty": lambda s: s.write_batch([]),
    "write_batch_sync": lambda s: s.write_batch([], sync=True),
    "write_batch_restore": lambda s: s.write_batch([RestoreOp("r", (), (), 0)]),
    "sync": lambda s: s.sync(),
    "truncate": lambda s: s.truncate("s", 0),
    "delete": lambda s: s.delete("s"),
    "fork": lambda s: s.fork("s", "child"),
    "acquire_lease": lambda s: s.acquire_lease("s", "B", ttl=10.0, holder="test"),
    "renew_lease": lambda s: s.renew_lease("s", "A", ttl=10.0),
    "renew_leases": lambda s: s.renew_leases("A", ["s"], ttl=10.0),
    "renew_leases_empty": lambda s: s.renew_leases("A", [], ttl=10.0),
    "release_lease": lambda s: s.release_lease("s", "A"),
    "save_projection": lambda s: s.save_projection(Pin("s", 2, 1, 0), "p", 1, "{}"),
}


class ReadOnlyCases(ConformanceBase):
    """Read-only handles: writes refused, reads served."""

    def _read_only(self, store: Store) -> Store:
        return self._track(store.clone(read_only=True))

    @pytest.mark.parametrize("method", sorted(_WRITES))
    def test_read_only_handle_refuses_writes(self, store: Store, method: str) -> None:
        """Every write method of a read-only handle raises ReadOnlyError naming the call,
        and nothing changes (events, sessions, leases, projections)."""
        store.append("s", _events(2))
        store.acquire_lease("s", "A", ttl=60.0, holder="test")
        reader = self._read_only(store)
        before = (store.read("s"), store.list_sessions(), store.load_projection("s", "p", 1))
        with pytest.raises(ReadOnlyError) as info:
            _WRITES[method](reader)
        assert info.value.operation
        assert (store.read("s"), store.list_sessions(), store.load_projection("s", "p", 1)) == (
            before
        )
        assert store.renew_leases("A", ["s"], ttl=60.0) == []  # the lease is still A's

    def test_read_only_is_inherited_and_cannot_be_undone(self, store: Store) -> None:
        """``read_only`` is False on a normal handle, True on a read-only clone and on every
        clone of one, even one asked for ``read_only=False``."""
        assert store.read_only is False
        assert self._clone(store).read_only is False
        reader = self._read_only(store)
        assert reader.read_only is True
        assert self._track(reader.clone()).read_only is True
        assert self._track(reader.clone(read_only=False)).read_only is True

    def test_read_only_handle_reads_what_others_write(self, store: Store) -> None:
        """A read-only handle serves every read while another handle keeps writing, and
        sees each commit (data_version changes)."""
        store.append("s", [NewEvent("k", i, run_id="r") for i in range(3)])
        reader = self._read_only(store)
        assert _seqs(reader.read("s")) == [1, 2, 3]
        pin = reader.pin("s")
        assert pin is not None
        version = reader.data_version()
        store.append("s", _events(2))
        store.create("t", {"h": 1})
        assert reader.data_version() != version
        assert reader.head("s") == 5
        assert _seqs(reader.read("s", limit=2, from_end=True)) == [4, 5]
        assert _seqs(reader.read("s", pin=pin)) == [1, 2, 3]
        assert reader.refresh_pin(pin).as_of_seq == 5
        assert reader.find_run("s", "r") == (1, 3)
        stat = reader.stat("t")
        assert stat is not None
        assert stat.header == {"h": 1}
        assert sorted(i.id for i in reader.list_sessions()) == ["s", "t"]
        store.save_projection(pin, "p", 1, "[1]")
        assert reader.load_projection("s", "p", 1) == (3, "[1]")

    def test_closed_read_only_handle_raises_closed(self, store: Store) -> None:
        """A closed read-only handle raises ClosedError for writes too (closed comes first)."""
        reader = self._read_only(store)
        reader.close()
        with pytest.raises(ClosedError):
            reader.append("s", _events(1))
        with pytest.raises(ClosedError):
            reader.read("s")
