"""Conformance cases: forks sharing their prefix, and projection checkpoints."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stores import (
    JSON,
    InvalidArgumentError,
    NewEvent,
    SessionExistsError,
    SessionNotFoundError,
    Store,
    StoredEvent,
)

__all__ = ["ForkCases"]

from stores.conformance._support import (
    _QUICK,
    ConformanceBase,
    _events,
    _seqs,
)


class ForkCases(ConformanceBase):
    """Forks sharing their prefix, and projection checkpoints."""

    # -- forks -----------------------------------------------------------------------

    def test_fork_copies_prefix_with_lineage(self, store: Store) -> None:
        """A fork holds the source's first at_seq events, names its parent in the header
        and in SessionInfo.parent, and reads exactly like the source up to at_seq."""
        store.create("src", {"title": "t"})
        store.append("src", [NewEvent("k", i, run_id="r") for i in range(10)])
        info = store.fork("src", "kid", at_seq=6)
        assert info.parent == ("src", 6)
        assert info.head == 6
        assert info.header == {"title": "t", "forked_from": "src", "fork_seq": 6}
        assert store.stat("kid") == info
        assert store.read("kid") == [
            StoredEvent("kid", e.seq, e.ts, e.kind, e.data, e.run_id) for e in store.read("src")[:6]
        ]
        assert _seqs(store.read("kid", since_seq=2, limit=2)) == [3, 4]
        assert _seqs(store.read("kid", limit=2, from_end=True)) == [5, 6]
        assert store.find_run("kid", "r") == (1, 6)
        assert store.fork("src", "all").head == 10

    def test_fork_errors(self, store: Store) -> None:
        """Existing target first, then unknown source, then a bad at_seq; nothing created."""
        store.append("src", _events(3))
        store.append("taken", _events(1))
        with pytest.raises(SessionExistsError):
            store.fork("missing", "taken")
        with pytest.raises(SessionNotFoundError):
            store.fork("missing", "new")
        for bad in (-1, 4, "2", 1.5, True):
            with pytest.raises(InvalidArgumentError):
                store.fork("src", "new", at_seq=bad)  # type: ignore[arg-type]
        assert store.stat("new") is None

    @pytest.mark.parametrize(
        "at_seq",
        [-1, 4, 2**63, "2", 1.5, True, None],
        ids=["negative", "past_head", "too_big", "str", "float", "bool", "none"],
    )
    def test_fork_existing_target_is_reported_first(self, store: Store, at_seq: Any) -> None:
        """An existing target raises SessionExistsError whatever at_seq is (negative, past
        the head, not an int) and whether or not the source exists; it stays unchanged."""
        store.append("src", _events(3))
        store.append("taken", _events(1, tag="mine"))
        before = store.read("taken")
        for source in ("src", "missing"):
            with pytest.raises(SessionExistsError) as info:
                store.fork(source, "taken", at_seq=at_seq)
            assert info.value.session_id == "taken"
        assert store.read("taken") == before
        stat = store.stat("taken")
        assert stat is not None
        assert stat.parent is None

    @pytest.mark.parametrize("at_seq", [-1, 2**63, "2", 1.5], ids=["negative", "big", "str", "f"])
    def test_fork_unknown_source_is_reported_before_at_seq(self, store: Store, at_seq: Any) -> None:
        """With a free target, an unknown source raises SessionNotFoundError whatever at_seq
        is; with a known source, the bad at_seq raises InvalidArgumentError."""
        store.append("src", _events(3))
        with pytest.raises(SessionNotFoundError):
            store.fork("missing", "new", at_seq=at_seq)
        with pytest.raises(InvalidArgumentError):
            store.fork("src", "new", at_seq=at_seq)
        assert store.stat("new") is None

    def test_fork_sides_are_independent(self, store: Store) -> None:
        """Appends, truncates and deletes on either side never change the other."""
        store.append("p", _events(8, tag="p"))
        store.fork("p", "c", at_seq=5)
        store.append("c", _events(2, tag="c"))
        store.append("p", _events(1, tag="p2"))
        kid_before = store.read("c")
        store.truncate("p", 2)
        assert store.read("c") == kid_before
        store.append("p", _events(4, tag="after"))
        assert store.read("c") == kid_before
        store.truncate("c", 1)
        assert _seqs(store.read("p")) == list(range(1, 7))
        kid_before = store.read("c")
        assert store.delete("p")
        assert store.read("c") == kid_before
        store.append("c", _events(1, tag="more"))
        assert _seqs(store.read("c")) == [1, 2]

    def test_fork_chains(self, store: Store) -> None:
        """Forks of forks read through every level and survive changes at any level."""
        store.append("a", _events(10, tag="a"))
        store.fork("a", "b", at_seq=8)
        store.append("b", _events(3, tag="b"))
        store.fork("b", "c", at_seq=10)
        store.fork("b", "d", at_seq=4)
        expect_c = store.read("c")
        expect_d = store.read("d")
        assert [e.data for e in expect_c] == [e.data for e in store.read("b")][:10]
        store.truncate("a", 3)
        store.truncate("b", 6)
        assert store.read("c") == expect_c
        assert store.read("d") == expect_d
        store.delete("b")
        store.delete("a")
        assert store.read("c") == expect_c
        assert store.read("d") == expect_d
        assert store.find_run("c", "x") is None

    def test_fork_keeps_pins_of_the_child_valid(self, store: Store) -> None:
        """Destructive changes on the parent do not expire the child's snapshots."""
        store.append("p", _events(6))
        store.fork("p", "c")
        pin = store.pin("c")
        assert pin is not None
        store.truncate("p", 0)
        assert _seqs(store.read("c", pin=pin)) == list(range(1, 7))

    @_QUICK
    @given(
        ops=st.lists(
            st.tuples(
                st.sampled_from(["append", "truncate", "fork", "delete"]),
                st.integers(min_value=0, max_value=3),
                st.integers(min_value=0, max_value=6),
            ),
            max_size=14,
        )
    )
    def test_random_forks_match_a_copying_model(
        self, store: Store, ops: list[tuple[str, int, int]]
    ) -> None:
        """Any mix of appends, truncates, forks and deletes over a few sessions reads
        exactly like a model in which a fork copies the list."""
        prefix = self._fresh_id()
        names = [f"{prefix}-{i}" for i in range(4)]
        model: dict[str, list[JSON]] = {}
        for step, (op, who, n) in enumerate(ops):
            name = names[who]
            if op == "append":
                batch = [NewEvent("k", {"step": step, "j": j}) for j in range(n)]
                store.append(name, batch)
                if n:
                    model.setdefault(name, []).extend(e.data for e in batch)
            elif op == "truncate":
                store.truncate(name, n)
                if name in model:
                    del model[name][n:]
            elif op == "delete":
                store.delete(name)
                model.pop(name, None)
            else:
                target = names[(who + 1) % 4]
                source = model.get(name)
                if source is None or target in model or store.stat(target) is not None:
                    continue
                at = min(n, len(source))
                store.fork(name, target, at_seq=at)
                model[target] = list(source[:at])
            for other in names:
                expected = model.get(other, [])
                assert [e.data for e in store.read(other)] == expected, (step, other)
                assert store.head(other) == len(expected)

    # -- projection checkpoints --------------------------------------------------------

    def test_projection_checkpoint_round_trip(self, store: Store) -> None:
        """A saved projection state loads back with its seq, for its version only."""
        store.append("s", _events(5))
        pin = store.pin("s")
        assert pin is not None
        assert store.load_projection("s", "stats", 1) is None
        store.save_projection(pin, "stats", 1, '{"n":5}')
        assert store.load_projection("s", "stats", 1) == (5, '{"n":5}')
        assert store.load_projection("s", "stats", 2) is None
        assert store.load_projection("s", "other", 1) is None
        store.append("s", _events(2))
        assert store.load_projection("s", "stats", 1) == (5, '{"n":5}')

    def test_projection_checkpoint_invalidated_by_destruction(self, store: Store) -> None:
        """A truncate below the saved seq, or delete and recreate, drops the checkpoint;
        a truncate above it does not."""
        store.append("s", _events(6))
        pin = store.pin("s")
        assert pin is not None
        store.save_projection(pin, "p", 1, "[]")
        store.append("s", _events(2))
        store.truncate("s", 6)
        assert store.load_projection("s", "p", 1) == (6, "[]")
        store.truncate("s", 3)
        assert store.load_projection("s", "p", 1) is None
        pin = store.pin("s")
        assert pin is not None
        store.save_projection(pin, "p", 1, "[]")
        store.delete("s")
        store.append("s", _events(3))
        assert store.load_projection("s", "p", 1) is None
        store.save_projection(pin, "p", 1, "[]")  # a stale pin: ignored
        assert store.load_projection("s", "p", 1) is None
