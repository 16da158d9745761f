"""The per-event values made from drafts (:mod:`stores._fastinit`) are the very values
attrs' generated ``__init__`` makes, copied and pickled alike; :func:`drafted` refuses
classes whose construction must do more, or whose layout CPython will not swap."""

from __future__ import annotations

import copy
import pickle
from typing import Any, final

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from stores import AppendOp, NewEvent, PreparedEvent, StoredEvent, prepare_events
from stores._fastinit import drafted


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


_VALUES = [
    NewEvent("k", {"a": [1, 2.5, None]}, run_id="r"),
    NewEvent("k"),
    PreparedEvent("k", '{"a":1}', "r"),
    AppendOp("s", (PreparedEvent("k", "{}"),), 3, "o", '{"a":1}', True),
    StoredEvent("s", 4, 1.5, "k", [1, "x"], None),
]


@pytest.mark.parametrize("value", _VALUES, ids=lambda v: type(v).__name__)
def test_a_value_is_copied_and_pickled_as_itself(value: Any) -> None:
    """``copy``, ``deepcopy`` and every pickle protocol give back an equal value of the
    same class (they rebuild it through ``__new__`` with ``__getnewargs__``)."""
    copies = [copy.copy(value), copy.deepcopy(value)]
    copies += [
        pickle.loads(pickle.dumps(value, protocol))
        for protocol in range(pickle.HIGHEST_PROTOCOL + 1)
    ]
    for made in copies:
        assert type(made) is type(value)
        assert made == value
        assert attrs.astuple(made, recurse=False) == attrs.astuple(value, recurse=False)


@pytest.mark.parametrize("cls", [NewEvent, PreparedEvent, AppendOp, StoredEvent])
def test_a_value_class_cannot_be_subclassed(cls: type) -> None:
    """A subclass's instances could not be made from the draft: ``TypeError`` at its
    definition, naming the class."""
    with pytest.raises(TypeError, match=f"{cls.__name__} is a final value class"):
        type("Sub", (cls,), {"__slots__": ()})


@final
@drafted
@attrs.frozen(weakref_slot=False)
class _Mixed:
    a: int = attrs.field(default=0, kw_only=True)  # keyword-only, declared first
    b: str
    c: tuple[int, ...] = ()


def test_a_drafted_class_takes_attrs_signature_whatever_the_field_order() -> None:
    """Keyword-only fields declared before positional ones stay keyword-only, as in
    attrs' ``__init__``; the defaults apply."""
    reference = _generated(_Mixed)
    for made, expected in [
        (_Mixed("x"), reference("x")),
        (_Mixed("x", (1,), a=2), reference("x", (1,), a=2)),
        (_Mixed(b="x", c=(3,)), reference(b="x", c=(3,))),
    ]:
        assert attrs.astuple(made, recurse=False) == attrs.astuple(expected, recurse=False)
    with pytest.raises(TypeError):
        _Mixed("x", (1,), 2)  # type: ignore[call-arg]  # a is keyword-only


@attrs.frozen(weakref_slot=False)
class _Validated:
    n: int = attrs.field(validator=attrs.validators.instance_of(int))


@attrs.frozen(weakref_slot=False)
class _PostInit:
    n: int

    def __attrs_post_init__(self) -> None: ...


@attrs.frozen(weakref_slot=False)
class _Factory:
    n: list[int] = attrs.field(factory=list)


@attrs.frozen(init=False, weakref_slot=False)
class _OwnInit:
    n: int

    def __init__(self, n: int) -> None: ...


@attrs.frozen
class _WithWeakref:  # attrs' default weakref slot: a layout the draft does not share
    n: int


@attrs.frozen(slots=False)
class _NotSlotted:
    n: int


@pytest.mark.parametrize(
    "cls", [_Validated, _PostInit, _Factory, _OwnInit, _WithWeakref, _NotSlotted, int]
)
def test_a_class_that_cannot_be_made_from_a_draft_is_refused(cls: type) -> None:
    """Validators, a hook, a factory, an ``__init__`` of its own, a weakref slot, no
    slots, not attrs: ``TypeError`` at once, and the class is left as it was."""
    init = cls.__dict__.get("__init__")
    with pytest.raises(TypeError):
        drafted(cls)
    assert cls.__dict__.get("__init__") is init


def test_the_inline_builders_make_what_the_classes_make() -> None:
    """``prepare_events`` and ``stored_events`` build from the drafts inline: every field
    set, equal to the class's own values (a field added to a class and not to its inline
    builder fails here)."""
    from stores._records import stored_events

    rows = [(1, 1.5, "k", '{"a":1}', None), (2, 2.5, "m", "[1]", "r")]
    made = stored_events("s", rows, decode_data=True)
    expected = [StoredEvent("s", 1, 1.5, "k", {"a": 1}), StoredEvent("s", 2, 2.5, "m", [1], "r")]
    assert [attrs.astuple(e, recurse=False) for e in made] == [
        attrs.astuple(e, recurse=False) for e in expected
    ]
    assert made == expected
    [prepared] = prepare_events([NewEvent("k", {"a": 1}, run_id="r")])
    assert type(prepared) is PreparedEvent
    assert attrs.astuple(prepared, recurse=False) == ("k", '{"a":1}', "r")
