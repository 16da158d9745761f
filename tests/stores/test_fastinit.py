"""The positional constructors of :mod:`stores._fastinit` make the very values the
classes' own ``__init__`` makes, and refuse classes they would make differently."""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from stores import AppendOp, PreparedEvent
from stores._fastinit import positional_constructor

_new_prepared = positional_constructor(PreparedEvent)
_new_append = positional_constructor(AppendOp)


@given(st.text(), st.text(), st.none() | st.text())
def test_a_prepared_event_made_positionally_is_the_same_value(
    kind: str, data: str, run_id: str | None
) -> None:
    """Equal, same hash and repr, frozen: nothing tells the two ways of making it apart."""
    fast, usual = _new_prepared(kind, data, run_id), PreparedEvent(kind, data, run_id)
    assert type(fast) is PreparedEvent
    assert fast == usual
    assert hash(fast) == hash(usual)
    assert repr(fast) == repr(usual)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        fast.kind = "other"  # type: ignore[misc]


def test_an_append_op_made_positionally_is_the_same_value() -> None:
    """Every field in declaration order, as the class's ``__init__`` takes them."""
    events = (PreparedEvent("k", "{}"),)
    fast = _new_append("s", events, 3, "owner", '{"a":1}', True)
    usual = AppendOp("s", events, expected_head=3, owner="owner", header_json='{"a":1}', retry=True)
    assert fast == usual
    assert hash(fast) == hash(usual)
    assert repr(fast) == repr(usual)


@attrs.frozen
class _Validated:
    n: int = attrs.field(validator=attrs.validators.instance_of(int))


@attrs.frozen
class _Converted:
    n: int = attrs.field(converter=int)


@attrs.frozen
class _PostInit:
    n: int

    def __attrs_post_init__(self) -> None:
        pass


@attrs.frozen(cache_hash=True)
class _CachedHash:
    n: int


@attrs.frozen(slots=False)
class _NoSlots:
    n: int


@pytest.mark.parametrize("cls", [_Validated, _Converted, _PostInit, _CachedHash, _NoSlots, int])
def test_a_class_whose_init_does_more_is_refused(cls: type) -> None:
    """Validators, converters, hooks, a cached hash or no slots: ``TypeError``, at once."""
    with pytest.raises(TypeError):
        positional_constructor(cls)
