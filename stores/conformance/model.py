"""Conformance cases: random batches of every kind of op, against the reference store.

Each example draws batches of appends (with no expected head, the right one or a wrong
one), groups of appends, truncates, replaces and deletes over three sessions, applies
each batch to the backend under test and to a fresh :class:`~stores.MemoryStore`, and
requires the same results (a head, or the same error class) and then the same logs.
The expected heads are taken from the reference just before each batch, so a second op
on one session in a batch, or a group after a failed op, exercises the paths where an
op fails alone and what the batch did before it must stand.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from stores import (
    AppendOp,
    BatchResult,
    DeleteOp,
    GroupOp,
    MemoryStore,
    ReplaceOp,
    Store,
    TruncateOp,
    WriteOp,
)
from stores.conformance._support import _QUICK, ConformanceBase, _prepared

__all__ = ["BATCHES", "ModelCases"]

#: ``(who, events, expect)``: an append to session ``who`` of that many events, with no
#: expected head (``None``), the reference's head (``True``) or a wrong one (``False``).
_APPEND = st.tuples(
    st.integers(min_value=0, max_value=2),
    st.integers(min_value=1, max_value=3),
    st.sampled_from([None, True, False]),
)

_OP = st.one_of(
    st.tuples(st.just("append"), _APPEND),
    st.tuples(st.just("group"), st.lists(_APPEND, min_size=1, max_size=3)),
    st.tuples(st.just("truncate"), st.tuples(st.integers(0, 2), st.integers(0, 5))),
    st.tuples(
        st.just("replace"), st.tuples(st.integers(0, 2), st.integers(0, 5), st.integers(0, 2))
    ),
    st.tuples(st.just("delete"), st.integers(min_value=0, max_value=2)),
)

#: Batches of ops as :meth:`ModelCases._replay` takes them.
BATCHES = st.lists(st.lists(_OP, min_size=1, max_size=4), min_size=1, max_size=8)


def _outcome(result: BatchResult) -> object:
    return result if isinstance(result, int) else type(result).__name__


def _log(store: Store, session_id: str) -> tuple[int, list[tuple[int, str, Any, str | None]]]:
    events = store.read(session_id)
    return store.head(session_id), [(e.seq, e.kind, e.data, e.run_id) for e in events]


class ModelCases(ConformanceBase):
    """Random batches of every kind of op give the reference store's results and logs."""

    @_QUICK
    @given(batches=BATCHES)
    def test_random_batches_match_the_reference(
        self, store: Store, batches: list[list[tuple[str, Any]]]
    ) -> None:
        """Any batches of appends (right, wrong or no expected head), groups, truncates,
        replaces and deletes give the reference's per-op results and leave the same logs."""
        self._replay(store, batches)

    def _replay(
        self,
        store: Store,
        batches: list[list[tuple[str, Any]]],
        after: Callable[[Store, int], Store] | None = None,
    ) -> None:
        """Apply ``batches`` to ``store`` and to a fresh reference, comparing as the
        module doc says; ``after(store, i)`` (if given) runs after batch ``i`` and returns
        the store to go on with (a reopened one)."""
        prefix = self._fresh_id("m")
        names = [f"{prefix}-{i}" for i in range(3)]
        reference = MemoryStore()
        tag = 0

        def append(spec: tuple[int, int, bool | None]) -> AppendOp:
            nonlocal tag
            who, count, expect = spec
            head = reference.head(names[who])
            expected = None if expect is None else head if expect else head + 7
            tag += 1
            return AppendOp(names[who], _prepared(count, f"t{tag}"), expected_head=expected)

        for i, batch in enumerate(batches):
            ops: list[WriteOp] = []
            for kind, spec in batch:
                if kind == "append":
                    ops.append(append(spec))
                elif kind == "group":
                    ops.append(GroupOp(tuple(append(member) for member in spec)))
                elif kind == "truncate":
                    ops.append(TruncateOp(names[spec[0]], spec[1]))
                elif kind == "replace":
                    who, from_seq, count = spec
                    tag += 1
                    ops.append(ReplaceOp(names[who], from_seq, _prepared(count, f"t{tag}")))
                else:
                    ops.append(DeleteOp(names[spec]))
            expected = [_outcome(r) for r in reference.write_batch(ops)]
            assert [_outcome(r) for r in store.write_batch(ops)] == expected, ops
            if after is not None:
                store = after(store, i)
            for name in names:
                assert _log(store, name) == _log(reference, name), name
