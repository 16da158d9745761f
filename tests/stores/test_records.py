"""Value checks of :mod:`stores._records`: the size limits of events and batches, the range of
seqs and counts, flags. The same rules reach every backend through ``prepare_events`` and
the ``check_*`` functions (the conformance suite checks them through the stores)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stores import (
    MAX_BATCH_BYTES,
    MAX_EVENT_BYTES,
    MAX_SEQ,
    InvalidArgumentError,
    InvalidEventError,
    NewEvent,
    prepare_events,
)
from stores import _records as records_module
from stores._records import check_count, check_flag, check_seq


def _text_of(size: int, char: str = "x") -> str:
    """A JSON string value whose encoded text is exactly ``size`` bytes (ASCII ``char``)."""
    return char * (size - 2)


def test_event_of_exactly_max_bytes_is_accepted() -> None:
    """An event whose data JSON is exactly MAX_EVENT_BYTES bytes is accepted."""
    [prepared] = prepare_events([NewEvent("big", _text_of(MAX_EVENT_BYTES))])
    assert len(prepared.data_json) == MAX_EVENT_BYTES


def test_event_one_byte_over_max_is_refused() -> None:
    """One byte more than MAX_EVENT_BYTES is refused with InvalidEventError (index, kind)."""
    events = [NewEvent("small", 1), NewEvent("big", _text_of(MAX_EVENT_BYTES + 1))]
    with pytest.raises(InvalidEventError, match="MAX_EVENT_BYTES") as info:
        prepare_events(events)
    assert (info.value.index, info.value.kind) == (1, "big")


def test_event_limit_counts_utf8_bytes_not_characters() -> None:
    """Non-ASCII data is measured in UTF-8 bytes: fewer characters than the limit can
    still be too many bytes."""
    data = "é" * (MAX_EVENT_BYTES // 2)  # MAX_EVENT_BYTES + 2 bytes, about half as many chars
    assert len(data) < MAX_EVENT_BYTES
    with pytest.raises(InvalidEventError, match="MAX_EVENT_BYTES") as info:
        prepare_events([NewEvent("accents", data)])
    assert info.value.index == 0


def test_batch_limit_names_the_event_that_crossed_it() -> None:
    """Events that together pass MAX_BATCH_BYTES are refused whole, naming the first event
    that took the batch past the limit; exactly MAX_BATCH_BYTES is accepted."""
    per_event = MAX_BATCH_BYTES // 4
    assert per_event <= MAX_EVENT_BYTES
    full = [NewEvent(f"part{i}", _text_of(per_event)) for i in range(4)]
    assert sum(len(p.data_json) for p in prepare_events(full)) == MAX_BATCH_BYTES
    with pytest.raises(InvalidEventError, match="MAX_BATCH_BYTES") as info:
        prepare_events([*full, NewEvent("last", None)])
    assert (info.value.index, info.value.kind) == (4, "last")


@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(st.integers(min_value=2, max_value=60), max_size=12))
def test_size_limits_match_a_model(sizes: list[int]) -> None:
    """For any batch, prepare_events refuses exactly when an event is over the event limit
    or the running total passes the batch limit, naming the first such event (checked with
    small limits, so every case is cheap)."""
    limits = {"MAX_EVENT_BYTES": 40, "MAX_BATCH_BYTES": 120}
    events = [NewEvent(f"k{i}", _text_of(size)) for i, size in enumerate(sizes)]
    expected: int | None = None
    total = 0
    for index, size in enumerate(sizes):
        total += size
        if size > limits["MAX_EVENT_BYTES"] or total > limits["MAX_BATCH_BYTES"]:
            expected = index
            break
    with pytest.MonkeyPatch.context() as patch:
        for name, value in limits.items():
            patch.setattr(records_module, name, value)
        if expected is None:
            assert [len(p.data_json) for p in prepare_events(events)] == sizes
        else:
            with pytest.raises(InvalidEventError) as info:
                prepare_events(events)
            assert (info.value.index, info.value.kind) == (expected, f"k{expected}")


def test_a_cycle_is_refused_in_every_thread() -> None:
    """Data that contains itself is refused as InvalidEventError (never a RecursionError or
    a hang), from several threads at once, and the encoder keeps working afterwards."""
    cycle: list[Any] = [1]
    cycle.append({"again": cycle})
    failures: list[BaseException] = []

    def work() -> None:
        for _ in range(20):
            try:
                prepare_events([NewEvent("loop", cycle)])
            except InvalidEventError:
                pass
            except BaseException as exc:  # reported below, in the test thread
                failures.append(exc)
            assert prepare_events([NewEvent("ok", [{"a": [1]}])])[0].data_json == '[{"a":[1]}]'

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert failures == []
    with pytest.raises(InvalidEventError, match="contains itself"):
        prepare_events([NewEvent("loop", cycle)])


@pytest.mark.parametrize("value", [0, 1, MAX_SEQ])
def test_check_seq_accepts_the_whole_range(value: int) -> None:
    """check_seq and check_count accept every int from 0 to MAX_SEQ (2**63 - 1)."""
    assert check_seq(value, "x") == value
    assert check_count(value, "limit") == value


@pytest.mark.parametrize("value", [-1, MAX_SEQ + 1, 2**64, -(2**63), 2**200])
def test_check_seq_refuses_ints_outside_the_range(value: int) -> None:
    """Ints outside 0..2**63-1 are InvalidArgumentError naming the argument, never a
    driver's OverflowError later."""
    for check in (check_seq, check_count):
        with pytest.raises(InvalidArgumentError, match="since_seq"):
            check(value, "since_seq")


@pytest.mark.parametrize("value", [1, 0, "no", "", None, 1.0, [True]])
def test_check_flag_refuses_what_is_not_a_bool(value: object) -> None:
    """A flag must be exactly True or False: truthy or falsy stand-ins are refused."""
    with pytest.raises(InvalidArgumentError, match="from_end"):
        check_flag(value, "from_end")
    assert check_flag(True, "from_end") is True
    assert check_flag(False, "from_end") is False
