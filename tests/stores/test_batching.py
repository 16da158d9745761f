"""stores._batching.check_ops: what it tells the stores about a batch it accepts."""

from __future__ import annotations

import uuid

from hypothesis import given
from hypothesis import strategies as st

from stores import AppendOp, DeleteOp, GroupOp, NewEvent, TruncateOp, WriteOp, prepare_events
from stores._batching import check_ops

_EVENTS = tuple(prepare_events([NewEvent("message", {"n": n}) for n in range(2)]))


def _op(kind: str) -> WriteOp:
    """One valid op of the given kind (a fresh session id where the kind says so)."""
    fresh = f"s-{uuid.uuid4().hex}"  # not yet in the validated-ids cache
    ops: dict[str, WriteOp] = {
        "one": AppendOp("a", _EVENTS[:1], expected_head=3),
        "two": AppendOp("a", _EVENTS),
        "none": AppendOp("a", ()),
        "fresh": AppendOp(fresh, _EVENTS[:1]),
        "fresh-none": AppendOp(fresh, ()),
        "list": AppendOp("a", list(_EVENTS)),  # type: ignore[arg-type]
        "resend": AppendOp("a", _EVENTS[:1], expected_head=1, retry=True),
        "truncate": TruncateOp("a", 1),
        "delete": DeleteOp("a"),
        "group": GroupOp((AppendOp("a", _EVENTS[:1]), AppendOp("b", _EVENTS[:1]))),
    }
    return ops[kind]


_KINDS = ["one", "two", "none", "fresh", "fresh-none", "list", "resend", "truncate", "delete"]
_APPENDS_OF_EVENTS = {"one", "two", "fresh", "list", "resend"}


@given(st.lists(st.sampled_from([*_KINDS, "group"]), max_size=6))
def test_check_ops_says_whether_every_op_is_an_append_of_events(kinds: list[str]) -> None:
    """check_ops returns True exactly for a non-empty batch of AppendOps of one event or
    more, however each op is checked (inline, or in full for a resend, an id not seen
    yet, a list of events)."""
    ops = [_op(kind) for kind in kinds]
    expected = bool(kinds) and all(kind in _APPENDS_OF_EVENTS for kind in kinds)
    assert check_ops(ops) is expected
    assert check_ops(tuple(ops), True) is expected
