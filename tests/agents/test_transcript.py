"""Transcript entries: event and JSON round trips, validation, dangling tool calls."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.agents import (
    AssistantMessage,
    Entry,
    SidecarEntry,
    ToolCall,
    ToolResult,
    UserMessage,
    drop_dangling_tool_calls,
    entry_from_json,
    entry_to_json,
    pending_tool_calls,
)
from runtime.agents._transcript import (
    CONVERSATION_KINDS,
    SIDECAR_KINDS,
    entry_from_event,
    entry_from_stored,
    entry_to_event,
    is_sidecar,
)
from stores._errors import InvalidArgumentError, InvalidEventError
from stores._records import JSON, NewEvent, StoredEvent, prepare_events

UNICODE = "héllo 世界 🌊 \u200b ñ"

EXAMPLES: list[Entry] = [
    UserMessage("hi"),
    UserMessage(""),
    UserMessage(UNICODE),
    AssistantMessage("hello"),
    AssistantMessage(""),
    AssistantMessage(UNICODE, agent="триаж"),
    ToolCall("c1", "search", {}),
    ToolCall("呼叫-1", "读取", {"path": "/tmp/ü", "n": [1, 2.5, None, True, {"x": "y"}]}),
    ToolResult("c1", "ok"),
    ToolResult("c1", "", is_error=True),
    ToolResult("c2", UNICODE, is_error=False),
    SidecarEntry("tool_started", {"call_id": "c1"}),
    SidecarEntry("summary", {"text": UNICODE}),
    SidecarEntry("file_snapshot", None),
    SidecarEntry("artifact_verified", [1, "two", {"3": [4.0]}]),
    SidecarEntry("some_future_kind", {"anything": [{"goes": True}]}),
    SidecarEntry("未知种类", "just a string"),
    SidecarEntry("x.y/z", 0),
]


def build(cls: Any, *args: Any, **kwargs: Any) -> Callable[[], object]:
    """A thunk constructing ``cls`` with arguments that bypass static typing."""
    return lambda: cls(*args, **kwargs)


def _untyped(value: Any) -> Any:
    return value


def call(call_id: str, name: str = "tool") -> ToolCall:
    return ToolCall(call_id, name, {})


def result(call_id: str) -> ToolResult:
    return ToolResult(call_id, f"out-{call_id}")


# --- round trips -----------------------------------------------------------------------


@pytest.mark.parametrize("entry", EXAMPLES, ids=repr)
def test_event_round_trip_is_exact(entry: Entry) -> None:
    """entry_from_event(entry_to_event(e)) == e for every entry type, unicode included."""
    event = entry_to_event(entry)
    assert event.kind == entry.kind
    assert event.run_id is None
    back = entry_from_event(event.kind, event.data)
    assert back == entry
    assert type(back) is type(entry)


@pytest.mark.parametrize("entry", EXAMPLES, ids=repr)
def test_json_round_trip_is_exact(entry: Entry) -> None:
    """entry_from_json(entry_to_json(e)) == e and the object names its kind."""
    obj = entry_to_json(entry)
    assert obj["kind"] == entry.kind
    back = entry_from_json(obj)
    assert back == entry
    assert type(back) is type(entry)


@pytest.mark.parametrize("entry", EXAMPLES, ids=repr)
def test_events_are_appendable(entry: Entry) -> None:
    """Every constructible entry yields an event the store's validation accepts."""
    (prepared,) = prepare_events([entry_to_event(entry, run_id="r1")])
    assert prepared.kind == entry.kind
    assert prepared.run_id == "r1"


@pytest.mark.parametrize("entry", EXAMPLES, ids=repr)
def test_stored_event_round_trip(entry: Entry) -> None:
    """entry_from_stored decodes a StoredEvent's kind and data, ignoring seq/ts/run_id."""
    event = entry_to_event(entry, run_id="run")
    stored = StoredEvent("s", 7, 1.5, event.kind, event.data, event.run_id)
    assert entry_from_stored(stored) == entry


def test_event_data_layout() -> None:
    """The event data of each conversation kind has exactly the documented keys."""
    assert entry_to_event(UserMessage("a")) == NewEvent("user", {"text": "a"})
    assert entry_to_event(AssistantMessage("a")) == NewEvent("assistant", {"text": "a"})
    assert entry_to_event(AssistantMessage("a", "bot"), run_id="r") == NewEvent(
        "assistant", {"text": "a", "agent": "bot"}, run_id="r"
    )
    assert entry_to_event(ToolCall("c", "f", {"a": 1})) == NewEvent(
        "tool_call", {"call_id": "c", "name": "f", "arguments": {"a": 1}}
    )
    assert entry_to_event(ToolResult("c", "o")) == NewEvent(
        "tool_result", {"call_id": "c", "output": "o", "is_error": False}
    )
    assert entry_to_event(SidecarEntry("summary", [1])) == NewEvent("summary", [1])


def test_json_form_layout() -> None:
    """The JSON form is {"kind": ..., **event data}, and {"kind", "data"} for sidecars."""
    assert entry_to_json(ToolResult("c", "o", True)) == {
        "kind": "tool_result",
        "call_id": "c",
        "output": "o",
        "is_error": True,
    }
    assert entry_to_json(SidecarEntry("mystery", {"kind": "inner"})) == {
        "kind": "mystery",
        "data": {"kind": "inner"},
    }


def test_optional_fields_may_be_absent_when_decoding() -> None:
    """assistant.agent may be absent or null and tool_result.is_error absent (false)."""
    assert entry_from_event("assistant", {"text": "t"}) == AssistantMessage("t")
    assert entry_from_event("assistant", {"text": "t", "agent": None}) == AssistantMessage("t")
    assert entry_from_event("tool_result", {"call_id": "c", "output": "o"}) == ToolResult(
        "c", "o", False
    )


def test_unknown_kinds_are_kept_verbatim() -> None:
    """An unknown kind decodes to a SidecarEntry holding the exact data, not dropped."""
    data: JSON = {"nested": [1, 2.0, "three", None, False], "ünï": {"a": []}}
    entry = entry_from_event("brand_new_kind", data)
    assert entry == SidecarEntry("brand_new_kind", data)
    assert isinstance(entry, SidecarEntry)
    assert not entry.known
    event = entry_to_event(entry)
    assert event.kind == "brand_new_kind"
    assert event.data == data
    assert repr(event.data) == repr(data)


def test_known_sidecar_kinds_decode_to_sidecar_entries() -> None:
    """Every kind in SIDECAR_KINDS decodes to a SidecarEntry marked known."""
    for kind in sorted(SIDECAR_KINDS):
        entry = entry_from_event(kind, {"k": kind})
        assert isinstance(entry, SidecarEntry)
        assert entry.known
        assert is_sidecar(entry)
    assert SIDECAR_KINDS.isdisjoint(CONVERSATION_KINDS)


def test_is_sidecar_only_for_sidecar_entries() -> None:
    """is_sidecar is true for SidecarEntry (known or unknown) and false for the rest."""
    assert [is_sidecar(e) for e in EXAMPLES] == [isinstance(e, SidecarEntry) for e in EXAMPLES]
    assert is_sidecar(SidecarEntry("unheard_of", None))


def test_kind_attribute_matches_class_kind() -> None:
    """Conversation entries expose .kind equal to their class-level KIND."""
    assert UserMessage.KIND == "user"
    assert AssistantMessage.KIND == "assistant"
    assert ToolCall.KIND == "tool_call"
    assert ToolResult.KIND == "tool_result"
    for entry in (UserMessage("x"), AssistantMessage("x"), call("c"), result("c")):
        assert entry.kind == type(entry).KIND


def test_json_payloads_are_copied_in_and_out() -> None:
    """Mutating the dict given to or returned for an entry never changes the entry."""
    arguments: dict[str, JSON] = {"a": [1]}
    entry = ToolCall("c", "f", arguments)
    arguments["b"] = 2
    inner = arguments["a"]
    assert isinstance(inner, list)
    inner.append(3)
    assert entry.arguments == {"a": [1]}
    event = entry_to_event(entry)
    assert isinstance(event.data, dict)
    event.data["arguments"] = None
    assert entry_to_json(entry)["arguments"] == {"a": [1]}
    data: dict[str, JSON] = {"x": 1}
    sidecar = SidecarEntry("summary", data)
    data["x"] = 2
    assert sidecar.data == {"x": 1}


def test_entries_are_frozen() -> None:
    """Entries cannot be reassigned after construction."""
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        UserMessage("a").text = "b"  # type: ignore[misc]  # the frozen field under test


def test_evolve_revalidates() -> None:
    """attrs.evolve goes through validation, so it cannot build a bad entry either."""
    with pytest.raises(InvalidArgumentError, match=r"tool_result\.is_error"):
        attrs.evolve(result("c"), is_error=_untyped("yes"))


# --- validation ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "pattern"),
    [
        (build(UserMessage, None), r"user\.text must be a str, not NoneType"),
        (build(UserMessage, b"x"), r"user\.text must be a str, not bytes"),
        (build(UserMessage, "\ud800"), r"user\.text contains lone surrogates"),
        (build(AssistantMessage, 3), r"assistant\.text must be a str, not int"),
        (build(AssistantMessage, "t", 1), r"assistant\.agent must be a non-empty str"),
        (build(AssistantMessage, "t", ""), r"assistant\.agent must be a non-empty str"),
        (build(ToolCall, 1, "f", {}), r"tool_call\.call_id must be a non-empty str, not int"),
        (build(ToolCall, "", "f", {}), r"tool_call\.call_id must be a non-empty str"),
        (build(ToolCall, "c", None, {}), r"tool_call\.name must be a non-empty str"),
        (build(ToolCall, "c", "", {}), r"tool_call\.name must be a non-empty str"),
        (build(ToolCall, "c", "f", []), r"tool_call\.arguments must be a dict, not list"),
        (build(ToolCall, "c", "f", None), r"tool_call\.arguments must be a dict"),
        (build(ToolResult, None, "o"), r"tool_result\.call_id must be a non-empty str"),
        (build(ToolResult, "", "o"), r"tool_result\.call_id must be a non-empty str"),
        (build(ToolResult, "c", 5), r"tool_result\.output must be a str, not int"),
        (build(ToolResult, "c", "o", 1), r"tool_result\.is_error must be a bool, not int"),
        (build(ToolResult, "c", "o", None), r"tool_result\.is_error must be a bool"),
        (build(SidecarEntry, 3, None), r"sidecar entry kind must be a non-empty str"),
        (build(SidecarEntry, "", None), r"sidecar entry kind must be a non-empty str"),
        (build(SidecarEntry, "a\nb", None), r"control characters"),
        (build(SidecarEntry, "k" * 257, None), r"longer than 256"),
        (build(SidecarEntry, "user", {"text": "t"}), r"'user' is a conversation kind"),
        (build(SidecarEntry, "tool_call", None), r"'tool_call' is a conversation kind"),
    ],
)
def test_construction_rejects_bad_fields(make: Callable[[], object], pattern: str) -> None:
    """A wrong field type or value raises InvalidArgumentError naming kind and field."""
    with pytest.raises(InvalidArgumentError, match=pattern):
        make()


@pytest.mark.parametrize(
    ("make", "pattern"),
    [
        (build(ToolCall, "c", "f", {"x": (1, 2)}), r"tool_call\.arguments must be exactly JSON"),
        (build(ToolCall, "c", "f", {1: "x"}), r"tool_call\.arguments must be exactly JSON"),
        (build(ToolCall, "c", "f", {"x": {1, 2}}), r"tool_call\.arguments must be exactly JSON"),
        (
            build(ToolCall, "c", "f", {"x": float("nan")}),
            r"tool_call\.arguments must be exactly JSON",
        ),
        (build(SidecarEntry, "summary", b"x"), r"sidecar entry 'summary': data must be"),
        (build(SidecarEntry, "odd", [float("inf")]), r"sidecar entry 'odd': data must be"),
        (build(SidecarEntry, "odd", "\udfff"), r"sidecar entry 'odd': data must be"),
    ],
)
def test_construction_rejects_non_json_payloads(make: Callable[[], object], pattern: str) -> None:
    """A payload that is not exactly JSON raises InvalidEventError naming the field."""
    with pytest.raises(InvalidEventError, match=pattern):
        make()


@pytest.mark.parametrize(
    ("kind", "data", "pattern"),
    [
        ("user", "hi", r"user event data must be a JSON object, not str"),
        ("user", None, r"user event data must be a JSON object, not NoneType"),
        ("user", {}, r"user event data is missing 'text'"),
        ("user", {"text": "t", "extra": 1}, r"user event data has unexpected key\(s\) 'extra'"),
        ("user", {"text": 1}, r"user\.text must be a str"),
        ("assistant", [], r"assistant event data must be a JSON object"),
        ("assistant", {"agent": "a"}, r"assistant event data is missing 'text'"),
        ("assistant", {"text": "t", "agent": 2}, r"assistant\.agent must be a non-empty str"),
        ("tool_call", {"call_id": "c"}, r"tool_call event data is missing 'name', 'arguments'"),
        (
            "tool_call",
            {"call_id": "c", "name": "f", "arguments": "{}"},
            r"tool_call\.arguments must be a dict, not str",
        ),
        (
            "tool_call",
            {"call_id": 7, "name": "f", "arguments": {}},
            r"tool_call\.call_id must be a non-empty str",
        ),
        ("tool_result", {"output": "o"}, r"tool_result event data is missing 'call_id'"),
        (
            "tool_result",
            {"call_id": "c", "output": "o", "is_error": "false"},
            r"tool_result\.is_error must be a bool, not str",
        ),
        (
            "tool_result",
            {"call_id": "c", "output": None},
            r"tool_result\.output must be a str, not NoneType",
        ),
    ],
)
def test_decoding_rejects_wrong_shapes(kind: str, data: JSON, pattern: str) -> None:
    """A conversation kind whose data has the wrong shape raises InvalidArgumentError."""
    with pytest.raises(InvalidArgumentError, match=pattern):
        entry_from_event(kind, data)


def test_decoding_rejects_bad_kinds() -> None:
    """entry_from_event refuses a non-str or empty kind."""
    with pytest.raises(InvalidArgumentError, match="event kind must be a str"):
        entry_from_event(None, {})  # type: ignore[arg-type]  # bad input under test
    with pytest.raises(InvalidArgumentError, match="kind must be a non-empty str"):
        entry_from_event("", {})


@pytest.mark.parametrize(
    ("obj", "pattern"),
    [
        ([], r"an entry must be a JSON object, not list"),
        ({"text": "t"}, r"needs a 'kind' key"),
        ({"kind": 1, "text": "t"}, r"'kind' must be a str, not int"),
        ({"kind": "user"}, r"user entry object is missing 'text'"),
        ({"kind": "user", "text": "t", "data": 1}, r"unexpected key\(s\) 'data'"),
        ({"kind": "summary"}, r"'summary' entry object is missing 'data'"),
        ({"kind": "summary", "data": 1, "x": 2}, r"unexpected key\(s\) 'x'"),
    ],
)
def test_json_form_rejects_wrong_shapes(obj: JSON, pattern: str) -> None:
    """entry_from_json refuses objects without a str kind or with the wrong keys."""
    with pytest.raises(InvalidArgumentError, match=pattern):
        entry_from_json(obj)


def test_functions_reject_non_entries() -> None:
    """Conversion and query functions raise InvalidArgumentError for non-entries."""
    bogus: Any = {"kind": "user", "text": "t"}
    for function in (entry_to_event, entry_to_json, is_sidecar):
        with pytest.raises(InvalidArgumentError, match="must be a transcript entry"):
            function(bogus)
    with pytest.raises(InvalidArgumentError, match=r"entries\[1\] must be a transcript entry"):
        pending_tool_calls([call("a"), bogus])
    with pytest.raises(InvalidArgumentError, match="expected a StoredEvent"):
        entry_from_stored(NewEvent("user", {"text": "t"}))  # type: ignore[arg-type]  # bad input under test


# --- pending and dangling tool calls ---------------------------------------------------


def test_no_calls_no_pending() -> None:
    """A transcript without tool calls has nothing pending and is returned unchanged."""
    entries: list[Entry] = [UserMessage("q"), AssistantMessage("a"), result("orphan")]
    assert pending_tool_calls(entries) == []
    assert drop_dangling_tool_calls(entries) == entries
    assert pending_tool_calls([]) == []
    assert drop_dangling_tool_calls([]) == []


def test_interleaved_calls_pair_by_id() -> None:
    """Results pair with calls by call_id, whatever order the results come in."""
    entries: list[Entry] = [
        UserMessage("q"),
        call("a"),
        call("b"),
        call("c"),
        result("c"),
        result("a"),
        AssistantMessage("partial"),
    ]
    assert pending_tool_calls(entries) == [call("b")]
    assert drop_dangling_tool_calls(entries) == [
        UserMessage("q"),
        call("a"),
        call("c"),
        result("c"),
        result("a"),
        AssistantMessage("partial"),
    ]


def test_duplicate_ids_pair_by_occurrence() -> None:
    """With duplicate ids the n-th result pairs with the n-th call; extra calls dangle."""
    first = ToolCall("x", "f", {"n": 1})
    second = ToolCall("x", "f", {"n": 2})
    third = ToolCall("x", "f", {"n": 3})
    entries: list[Entry] = [first, result("x"), second, third, result("x")]
    assert pending_tool_calls(entries) == [third]
    assert drop_dangling_tool_calls(entries) == [first, result("x"), second, result("x")]


def test_identical_calls_drop_by_position() -> None:
    """Of two equal calls where only the first has a result, the second is dropped."""
    a1 = call("same")
    a2 = call("same")
    entries: list[Entry] = [a1, result("same"), UserMessage("between"), a2]
    kept = drop_dangling_tool_calls(entries)
    assert kept == [a1, result("same"), UserMessage("between")]
    assert kept[0] is a1
    assert pending_tool_calls(entries) == [a2]
    assert pending_tool_calls(entries)[0] is a2


def test_results_before_calls_are_ignored() -> None:
    """A result with no earlier call is ignored; it does not satisfy a later call."""
    entries: list[Entry] = [result("a"), call("a")]
    assert pending_tool_calls(entries) == [call("a")]
    assert drop_dangling_tool_calls(entries) == [result("a")]
    entries = [result("a"), call("a"), result("a")]
    assert pending_tool_calls(entries) == []
    assert drop_dangling_tool_calls(entries) == entries


def test_surplus_result_does_not_pair_with_later_call() -> None:
    """A second result for one call is ignored and does not pair with a later call."""
    entries: list[Entry] = [call("a"), result("a"), result("a"), call("a")]
    assert pending_tool_calls(entries) == [entries[3]]
    assert drop_dangling_tool_calls(entries) == entries[:3]


def test_sidecars_in_between_are_kept() -> None:
    """Sidecar and message entries between calls and results are kept, in order."""
    entries: list[Entry] = [
        call("a"),
        SidecarEntry("tool_started", {"call_id": "a"}),
        call("b"),
        SidecarEntry("permission_decision", {"allow": True}),
        SidecarEntry("mystery", None),
        result("a"),
        SidecarEntry("tool_started", {"call_id": "b"}),
    ]
    assert pending_tool_calls(entries) == [call("b")]
    assert drop_dangling_tool_calls(entries) == [e for i, e in enumerate(entries) if i != 2]


def test_accepts_any_iterable() -> None:
    """pending_tool_calls and drop_dangling_tool_calls accept a one-shot iterator."""
    entries: list[Entry] = [call("a"), call("b"), result("b")]
    assert pending_tool_calls(iter(entries)) == [call("a")]
    assert drop_dangling_tool_calls(iter(entries)) == [call("b"), result("b")]


# --- properties ------------------------------------------------------------------------

_IDS = st.sampled_from(["a", "b", "c"])
_EVENTS = st.lists(
    st.one_of(
        st.builds(ToolCall, _IDS, st.sampled_from(["f", "g"]), st.just({})),
        st.builds(ToolResult, _IDS, st.sampled_from(["", "out"])),
        st.just(UserMessage("u")),
        st.builds(SidecarEntry, st.sampled_from(["tool_started", "unknown"]), _IDS),
    ),
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(_EVENTS)
def test_drop_dangling_properties(entries: list[Entry]) -> None:
    """Dropping leaves nothing pending, is idempotent and removes exactly the pending calls."""
    kept = drop_dangling_tool_calls(entries)
    assert pending_tool_calls(kept) == []
    assert drop_dangling_tool_calls(kept) == kept
    # Only ToolCall entries are removed, and the survivors keep their order (identity).
    position = 0
    removed: list[Entry] = []
    for entry in entries:
        if position < len(kept) and kept[position] is entry:
            position += 1
        else:
            removed.append(entry)
    assert position == len(kept)
    assert all(isinstance(entry, ToolCall) for entry in removed)
    pending = pending_tool_calls(entries)
    assert len(removed) == len(pending)
    assert all(r is p for r, p in zip(removed, pending, strict=True))


@settings(max_examples=300, deadline=None)
@given(_EVENTS)
def test_pending_matches_occurrence_counting(entries: list[Entry]) -> None:
    """Pending calls equal a per-id model: a result closes the oldest open call of its id."""
    open_calls: dict[str, list[int]] = {}
    for index, entry in enumerate(entries):
        if isinstance(entry, ToolCall):
            open_calls.setdefault(entry.call_id, []).append(index)
        elif isinstance(entry, ToolResult) and open_calls.get(entry.call_id):
            open_calls[entry.call_id].pop(0)
    expected = [entries[i] for i in sorted(i for ids in open_calls.values() for i in ids)]
    assert pending_tool_calls(entries) == expected


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(codec="utf-8")),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(st.characters(codec="utf-8")), children, max_size=4)
    ),
    max_leaves=12,
)
_TEXT = st.text(st.characters(codec="utf-8"))
_NAME = _TEXT.filter(bool)
_KIND = st.text(st.characters(codec="utf-8"), min_size=1, max_size=20).filter(
    lambda kind: kind not in CONVERSATION_KINDS and not re.search("[\x00-\x1f\x7f-\x9f]", kind)
)
_ENTRIES = st.one_of(
    st.builds(UserMessage, _TEXT),
    st.builds(AssistantMessage, _TEXT, st.none() | _NAME),
    st.builds(ToolCall, _NAME, _NAME, st.dictionaries(_TEXT, _JSON, max_size=4)),
    st.builds(ToolResult, _NAME, _TEXT, st.booleans()),
    st.builds(SidecarEntry, _KIND, _JSON),
)


@settings(max_examples=300, deadline=None)
@given(_ENTRIES)
def test_round_trip_property(entry: Entry) -> None:
    """Any valid entry round-trips exactly through its event and its JSON form."""
    event = entry_to_event(entry)
    prepare_events([event])
    assert entry_from_event(event.kind, event.data) == entry
    assert entry_from_json(entry_to_json(entry)) == entry
