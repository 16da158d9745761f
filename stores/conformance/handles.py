"""Conformance cases: close, clones, data_version and concurrent threads."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given

from stores import (
    JSON,
    AppendOp,
    ClosedError,
    NewEvent,
    Store,
)

__all__ = ["HandleCases"]

from stores.conformance._support import (
    _CLOSED_CALLS,
    _OPS,
    _QUICK,
    ConformanceBase,
    _events,
    _prepared,
    _seqs,
)


class HandleCases(ConformanceBase):
    """Close, clones, data_version and concurrent threads."""

    # -- close ---------------------------------------------------------------------------

    def test_close_is_idempotent(self, store: Store) -> None:
        """close may be called repeatedly (passes by not raising)."""
        store.close()
        store.close()

    @pytest.mark.parametrize("method", sorted(_CLOSED_CALLS))
    def test_closed_store_raises_closed(self, store: Store, method: str) -> None:
        """After close, every method raises ClosedError."""
        store.append("s", _events(1))
        store.close()
        with pytest.raises(ClosedError):
            _CLOSED_CALLS[method](store)

    # -- handles ---------------------------------------------------------------------------

    def test_clone_sees_commits_both_ways(self, store: Store) -> None:
        """A clone sees the original's commits, and the original sees the clone's."""
        store.append("s", _events(2))
        other = self._clone(store)
        assert _seqs(other.read("s")) == [1, 2]
        store.append("s", _events(1))
        assert other.head("s") == 3
        other.append("t", _events(1))
        assert store.head("t") == 1
        assert {i.id for i in store.list_sessions()} == {"s", "t"}

    def test_data_version_changes_after_other_handle_commits(self, store: Store) -> None:
        """data_version changes after another handle (a clone) commits."""
        store.append("s", _events(1))
        other = self._clone(store)
        before = store.data_version()
        assert isinstance(before, int)
        other.append("s", _events(1))
        assert store.data_version() != before
        middle = store.data_version()
        other.write_batch([AppendOp("t", _prepared(1))])
        assert store.data_version() != middle

    def test_closing_clone_keeps_original_open(self, store: Store) -> None:
        """Closing a clone leaves the original handle usable."""
        other = self._clone(store)
        other.close()
        assert store.append("s", _events(1)) == 1
        with pytest.raises(ClosedError):
            other.head("s")

    def test_threads_append_gaplessly(self, store: Store) -> None:
        """Ten threads appending one event each through one store end with seqs 1..10."""
        count = 10
        barrier = threading.Barrier(count)
        heads: list[int] = []
        errors: list[BaseException] = []
        lock = threading.Lock()

        def work(index: int) -> None:
            try:
                barrier.wait(timeout=10.0)
                head = store.append("s", [NewEvent("t", {"thread": index})])
                with lock:
                    heads.append(head)
            except BaseException as exc:  # reported below, in the test thread
                with lock:
                    errors.append(exc)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(count)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30.0)
        assert not any(t.is_alive() for t in threads)
        assert errors == []
        assert sorted(heads) == list(range(1, count + 1))
        events = store.read("s")
        assert _seqs(events) == list(range(1, count + 1))
        owners = [e.data.get("thread") for e in events if isinstance(e.data, dict)]
        assert sorted(o for o in owners if isinstance(o, int)) == list(range(count))

    @_QUICK
    @given(ops=_OPS)
    def test_random_append_truncate_stays_gapless(
        self, store: Store, ops: list[tuple[str, int]]
    ) -> None:
        """Any sequence of appends and truncates keeps seqs gapless 1..head with model data."""
        session_id = self._fresh_id()
        model: list[JSON] = []
        created = False
        for step, (op, n) in enumerate(ops):
            if op == "append":
                batch = [NewEvent("k", {"step": step, "j": j}) for j in range(n)]
                created = created or n > 0
                assert store.append(session_id, batch) == len(model) + n
                model.extend(e.data for e in batch)
            else:
                removed = max(0, len(model) - n)
                assert store.truncate(session_id, n) == removed
                del model[n:]
            events = store.read(session_id)
            assert _seqs(events) == list(range(1, len(model) + 1))
            assert [e.data for e in events] == model
            assert store.head(session_id) == len(model)
        assert (store.stat(session_id) is not None) == created
