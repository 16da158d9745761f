"""The hand-written ``__init__`` of the per-event values (:mod:`stores._fastinit`)
makes the very values attrs' generated one makes, and :func:`slot_setters` refuses
classes whose ``__init__`` must do more."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from stores import AppendOp, NewEvent, PreparedEvent, StoredEvent
from stores._fastinit import slot_setters


def _generated(cls: type) -> type:
    """``cls`` again, with attrs' own frozen ``__init__`` (the reference)."""
    fields = {f.name: attrs.field(default=f.default, kw_only=f.kw_only) for f in attrs.fields(cls)}
    return attrs.make_class(cls.__name__, fields, frozen=True)


_REFERENCE = {cls: _generated(cls) for cls in (NewEvent, PreparedEvent, AppendOp, StoredEvent)}


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)


@given(st.text(), _JSON, st.none() | st.text())
def test_new_and_prepared_events_take_their_arguments_as_attrs_would(
    kind: str, data: Any, run_id: str | None
) -> None:
    """Positional, keyword and default arguments land in the same fields, the values are
    frozen, and equal values hash alike."""
    cases: list[tuple[Any, Any]] = [
        (NewEvent(kind, data, run_id=run_id), _REFERENCE[NewEvent](kind, data, run_id=run_id)),
        (NewEvent(kind), _REFERENCE[NewEvent](kind)),
        (NewEvent(kind=kind, data=data), _REFERENCE[NewEvent](kind=kind, data=data)),
        (PreparedEvent(kind, "{}", run_id), _REFERENCE[PreparedEvent](kind, "{}", run_id)),
        (PreparedEvent(kind, "[]"), _REFERENCE[PreparedEvent](kind, "[]")),
    ]
    for made, reference in cases:
        assert attrs.astuple(made, recurse=False) == attrs.astuple(reference, recurse=False)
        assert repr(made).split("(", 1)[1] == repr(reference).split("(", 1)[1]
    assert PreparedEvent(kind, "1", run_id) == PreparedEvent(kind, "1", run_id)
    assert hash(PreparedEvent(kind, "1", run_id)) == hash(PreparedEvent(kind, "1", run_id))
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        NewEvent(kind).kind = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        NewEvent(kind, data, run_id)  # type: ignore[call-arg]  # run_id is keyword-only


def test_an_append_op_takes_its_arguments_as_attrs_would() -> None:
    """Every field, positionally or by keyword, and the defaults."""
    events = (PreparedEvent("k", "{}"),)
    reference = _REFERENCE[AppendOp]
    for made, expected in [
        (AppendOp("s", events), reference("s", events)),
        (
            AppendOp("s", events, 3, "o", '{"a":1}', True),
            reference("s", events, 3, "o", '{"a":1}', True),
        ),
        (
            AppendOp("s", events, owner="o", retry=True),
            reference("s", events, owner="o", retry=True),
        ),
    ]:
        assert attrs.astuple(made, recurse=False) == attrs.astuple(expected, recurse=False)
    assert AppendOp("s", events, 1) == AppendOp("s", events, expected_head=1)
    assert hash(AppendOp("s", events, 1)) == hash(AppendOp("s", events, expected_head=1))
    assert attrs.evolve(AppendOp("s", events), retry=True).retry is True


@given(
    st.text(), st.integers(), st.floats(allow_nan=False), st.text(), _JSON, st.none() | st.text()
)
def test_a_stored_event_takes_its_arguments_as_attrs_would(
    session_id: str, seq: int, ts: float, kind: str, data: Any, run_id: str | None
) -> None:
    """Positional, keyword and default arguments land in the same fields; the value is
    frozen, and equal values hash alike."""
    reference = _REFERENCE[StoredEvent]
    for made, expected in [
        (
            StoredEvent(session_id, seq, ts, kind, data, run_id),
            reference(session_id, seq, ts, kind, data, run_id),
        ),
        (StoredEvent(session_id, seq, ts, kind, data), reference(session_id, seq, ts, kind, data)),
        (
            StoredEvent(session_id=session_id, seq=seq, ts=ts, kind=kind, data=data),
            reference(session_id=session_id, seq=seq, ts=ts, kind=kind, data=data),
        ),
    ]:
        assert attrs.astuple(made, recurse=False) == attrs.astuple(expected, recurse=False)
        assert repr(made).split("(", 1)[1] == repr(expected).split("(", 1)[1]
    made = StoredEvent(session_id, seq, ts, kind, "text", run_id)
    assert made == StoredEvent(session_id, seq, ts, kind, "text", run_id)
    assert hash(made) == hash(StoredEvent(session_id, seq, ts, kind, "text", run_id))
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        made.seq = 0  # type: ignore[misc]


@attrs.frozen(init=False)
class _Validated:
    n: int = attrs.field(validator=attrs.validators.instance_of(int))

    def __init__(self, n: int) -> None: ...


@attrs.frozen(init=False)
class _PostInit:
    n: int

    def __init__(self, n: int) -> None: ...

    def __attrs_post_init__(self) -> None: ...


@attrs.frozen
class _Generated:
    n: int


@pytest.mark.parametrize("cls", [_Validated, _PostInit, _Generated, int])
def test_a_class_whose_init_must_do_more_is_refused(cls: type) -> None:
    """Validators, a hook, attrs' own ``__init__``, not attrs: ``TypeError`` at once."""
    with pytest.raises(TypeError):
        slot_setters(cls)
