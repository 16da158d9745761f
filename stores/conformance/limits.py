"""Conformance cases: the limits of arguments -- seqs and counts within 64 bits, exact
flags, event and batch sizes, and the other values a store keeps (pins, projection
names and versions, lease tokens and ttls). Every refusal is an ``InvalidArgumentError``
before anything is written, on every backend."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from stores import (
    MAX_EVENT_BYTES,
    MAX_SEQ,
    AppendOp,
    ConflictError,
    InvalidArgumentError,
    InvalidEventError,
    NewEvent,
    Pin,
    ReplaceOp,
    Store,
    TruncateOp,
)

__all__ = ["LimitCases"]

from stores.conformance._support import ConformanceBase, _events, _prepared, _seqs

_TOO_BIG = MAX_SEQ + 1

#: Calls on a store holding session "s" (3 events), each with one argument out of range
#: or of the wrong type.
_OUT_OF_RANGE: dict[str, Callable[[Store], object]] = {
    "read_since": lambda s: s.read("s", since_seq=_TOO_BIG),
    "read_until": lambda s: s.read("s", until_seq=_TOO_BIG),
    "read_limit": lambda s: s.read("s", limit=_TOO_BIG),
    "read_limit_from_end": lambda s: s.read("s", limit=_TOO_BIG, from_end=True),
    "truncate": lambda s: s.truncate("s", _TOO_BIG),
    "append_expected_head": lambda s: s.append("s", _events(1), expected_head=_TOO_BIG),
    "list_limit": lambda s: s.list_sessions(limit=_TOO_BIG),
    "fork_at_seq": lambda s: s.fork("s", "child", at_seq=_TOO_BIG),
    "batch_expected_head": lambda s: s.write_batch([AppendOp("s", _prepared(1), _TOO_BIG)]),
    "batch_to_seq": lambda s: s.write_batch([TruncateOp("s", _TOO_BIG)]),
    "batch_from_seq": lambda s: s.write_batch([ReplaceOp("s", _TOO_BIG, _prepared(1))]),
    "batch_negative_expected_head": lambda s: s.write_batch([AppendOp("s", _prepared(1), -1)]),
    "batch_events_not_a_tuple": lambda s: s.write_batch([AppendOp("s", None)]),  # type: ignore[arg-type]
    "batch_events_a_str": lambda s: s.write_batch([ReplaceOp("s", 0, "kk")]),  # type: ignore[arg-type]
    "pin_seq": lambda s: s.read("s", pin=Pin("s", _TOO_BIG, 1, 0)),
    "pin_epoch": lambda s: s.read("s", pin=Pin("s", 1, 1, -1)),
    "pin_type": lambda s: s.read("s", pin=("s", 1, 1, 0)),  # type: ignore[arg-type]
    "refresh_pin": lambda s: s.refresh_pin(Pin("s", 1, _TOO_BIG, 0)),
    "save_projection_version": lambda s: s.save_projection(Pin("s", 3, 1, 0), "p", 2**63, "{}"),
    "save_projection_name": lambda s: s.save_projection(Pin("s", 3, 1, 0), "", 1, "{}"),
    "save_projection_state": lambda s: s.save_projection(Pin("s", 3, 1, 0), "p", 1, None),  # type: ignore[arg-type]
    "load_projection_version": lambda s: s.load_projection("s", "p", "1"),  # type: ignore[arg-type]
    "load_projection_name": lambda s: s.load_projection("s", 7, 1),  # type: ignore[arg-type]
    "find_run_id": lambda s: s.find_run("s", 5),  # type: ignore[arg-type]
    "acquire_nan_ttl": lambda s: s.acquire_lease("s", "A", ttl=float("nan"), holder="h"),
    "acquire_negative_ttl": lambda s: s.acquire_lease("s", "A", ttl=-1.0, holder="h"),
    "acquire_str_ttl": lambda s: s.acquire_lease("s", "A", ttl="5", holder="h"),  # type: ignore[arg-type]
    "acquire_bool_ttl": lambda s: s.acquire_lease("s", "A", ttl=True, holder="h"),
    "acquire_huge_ttl": lambda s: s.acquire_lease("s", "A", ttl=10**400, holder="h"),
    "acquire_owner": lambda s: s.acquire_lease("s", "", ttl=1.0, holder="h"),
    "acquire_holder": lambda s: s.acquire_lease("s", "A", ttl=1.0, holder=5),  # type: ignore[arg-type]
    "renew_ttl": lambda s: s.renew_lease("s", "A", ttl=float("inf")),
    "renew_owner": lambda s: s.renew_lease("s", None, ttl=1.0),  # type: ignore[arg-type]
    "renew_leases_str": lambda s: s.renew_leases("A", "s", ttl=1.0),
    "release_owner": lambda s: s.release_lease("s", b"A"),  # type: ignore[arg-type]
}

#: Flags given something other than True/False (taken by its truth value, it would act).
_NOT_BOOLS: dict[str, Callable[[Store], object]] = {
    "read_from_end_str": lambda s: s.read("s", limit=1, from_end="no"),  # type: ignore[arg-type]
    "read_from_end_int": lambda s: s.read("s", limit=1, from_end=1),  # type: ignore[arg-type]
    "read_from_end_none": lambda s: s.read("s", limit=1, from_end=None),  # type: ignore[arg-type]
    "create_exist_ok": lambda s: s.create("s", exist_ok="yes"),  # type: ignore[arg-type]
    "write_batch_sync": lambda s: s.write_batch([AppendOp("s", _prepared(1))], sync=1),  # type: ignore[arg-type]
    "append_op_retry": lambda s: s.write_batch([AppendOp("s", _prepared(1), 3, retry="no")]),  # type: ignore[arg-type]
    "clone_read_only": lambda s: s.clone(read_only="no"),  # type: ignore[arg-type]
}


class LimitCases(ConformanceBase):
    """Seqs and counts within 64 bits, exact flags, event sizes, stored argument values."""

    @pytest.mark.parametrize("call", sorted(_OUT_OF_RANGE))
    def test_out_of_range_argument_refused(self, store: Store, call: str) -> None:
        """A seq, count, pin, projection or lease argument out of range or of the wrong
        type raises InvalidArgumentError and changes nothing (never OverflowError)."""
        store.append("s", _events(3))
        store.acquire_lease("s", "A", ttl=60.0, holder="h")
        before = (store.read("s"), store.list_sessions())
        with pytest.raises(InvalidArgumentError):
            _OUT_OF_RANGE[call](store)
        assert (store.read("s"), store.list_sessions()) == before
        store.release_lease("s", "A")

    @pytest.mark.parametrize("call", sorted(_NOT_BOOLS))
    def test_flag_that_is_not_a_bool_refused(self, store: Store, call: str) -> None:
        """A flag given "no", 1 or None raises InvalidArgumentError and writes nothing."""
        store.append("s", _events(3))
        with pytest.raises(InvalidArgumentError):
            _NOT_BOOLS[call](store)
        assert _seqs(store.read("s")) == [1, 2, 3]

    def test_largest_seq_values_are_accepted(self, store: Store) -> None:
        """MAX_SEQ (2**63 - 1) itself is a valid seq, limit and expected head everywhere."""
        store.append("s", _events(3))
        assert store.read("s", since_seq=MAX_SEQ) == []
        assert _seqs(store.read("s", until_seq=MAX_SEQ, limit=MAX_SEQ)) == [1, 2, 3]
        assert _seqs(store.read("s", limit=MAX_SEQ, from_end=True)) == [1, 2, 3]
        assert store.truncate("s", MAX_SEQ) == 0
        assert len(store.list_sessions(limit=MAX_SEQ)) == 1
        with pytest.raises(ConflictError) as info:
            store.append("s", _events(1), expected_head=MAX_SEQ)
        assert (info.value.expected, info.value.actual) == (MAX_SEQ, 3)
        [stale] = store.write_batch([AppendOp("s", _prepared(1), MAX_SEQ, retry=True)])
        assert isinstance(stale, ConflictError)
        with pytest.raises(InvalidArgumentError, match="past the head"):
            store.fork("s", "child", at_seq=MAX_SEQ)
        assert store.head("s") == 3
        assert store.stat("child") is None

    def test_event_of_max_bytes_round_trips(self, store: Store) -> None:
        """An event of exactly MAX_EVENT_BYTES of data JSON is stored and read back."""
        data = "x" * (MAX_EVENT_BYTES - 2)
        assert store.append("s", [NewEvent("big", data)]) == 1
        assert store.read("s")[0].data == data

    @pytest.mark.parametrize("char", ["x", "é"])
    def test_event_over_max_bytes_refused(self, store: Store, char: str) -> None:
        """An event over MAX_EVENT_BYTES of UTF-8 data JSON is refused with
        InvalidEventError (index, kind) and nothing of its batch is written."""
        store.append("s", _events(1))
        big: Any = char * (MAX_EVENT_BYTES // len(char.encode()))
        with pytest.raises(InvalidEventError, match="MAX_EVENT_BYTES") as info:
            store.append("s", [NewEvent("ok", 1), NewEvent("huge", big)])
        assert (info.value.index, info.value.kind) == (1, "huge")
        assert store.head("s") == 1
