"""Transcript entries of an agent conversation, and their mapping to tidelog events.

A conversation is a list of :data:`Entry` values. Each entry is an immutable
``attrs.frozen`` record that maps 1:1 to one tidelog event (a ``kind`` tag plus JSON
``data``):

* :class:`UserMessage` -- kind ``user``, data ``{"text": str}`` plus ``"parts": [...]``
  when it has parts (images, files, more text: see ``_parts``);
* :class:`AssistantMessage` -- kind ``assistant``, data ``{"text": str}`` plus
  ``"agent": str`` when the agent is set;
* :class:`ToolCall` -- kind ``tool_call``, data
  ``{"call_id": str, "name": str, "arguments": {...}}``;
* :class:`ToolResult` -- kind ``tool_result``, data
  ``{"call_id": str, "output": str, "is_error": bool}`` plus ``"parts"`` as a user
  message's;
* :class:`SidecarEntry` -- any other kind, the data verbatim.

Sidecar entries carry bookkeeping that folding a conversation ignores (tool_started,
file_snapshot, permission_decision, summary, context_view, artifact_verified,
tool_aborted) and *any kind
this code does not know*: such events are kept, never dropped, and round-trip exactly.

Validation happens at construction, so a bad entry can never be built: every entry that
exists can be appended to a session. Wrong field types raise
:class:`~stores._errors.InvalidArgumentError` naming the entry kind and the field; JSON
payloads that are not exactly JSON raise :class:`~stores._errors.InvalidEventError` (a
subclass). JSON payloads (``ToolCall.arguments``, ``SidecarEntry.data``) are copied on the
way in and on the way out, so an entry never shares mutable state with its caller; do not
mutate them in place.
"""

from __future__ import annotations

import re
from collections import defaultdict, deque
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar, Literal, TypeAlias

import attrs

from stores import (
    JSON,
    MAX_ID_LENGTH,
    InvalidArgumentError,
    InvalidEventError,
    NewEvent,
    StoredEvent,
    decode_json,
    encode_json,
)

from ._parts import Part, TextPart, check_parts, check_size, parts_from_json, parts_to_json

__all__ = [
    "CONVERSATION_KINDS",
    "SIDECAR_KINDS",
    "AssistantMessage",
    "Entry",
    "SidecarEntry",
    "ToolCall",
    "ToolResult",
    "UserMessage",
    "drop_dangling_tool_calls",
    "entry_from_event",
    "entry_from_json",
    "entry_from_stored",
    "entry_to_event",
    "entry_to_json",
    "is_sidecar",
    "pending_tool_calls",
]

#: The kinds of the sidecar events tidelog knows: bookkeeping that folding ignores.
#: Decoded as :class:`SidecarEntry` (as is every kind not in :data:`CONVERSATION_KINDS`).
SIDECAR_KINDS: frozenset[str] = frozenset(
    {
        "tool_started",
        "file_snapshot",
        "permission_decision",
        "summary",
        "context_view",
        "artifact_verified",
        "tool_aborted",
        "approval_requested",
        "approval_decision",
    }
)

#: The kinds of the conversation entries proper (messages, tool calls and results); a
#: :class:`SidecarEntry` may not use these.
CONVERSATION_KINDS: frozenset[str] = frozenset({"user", "assistant", "tool_call", "tool_result"})

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


# --- field validation -------------------------------------------------------------------


def _owner_kind(inst: object) -> str:
    kind = getattr(inst, "KIND", None)
    return kind if isinstance(kind, str) else type(inst).__name__


def _fail(inst: object, attribute: attrs.Attribute[Any], problem: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"{_owner_kind(inst)}.{attribute.name} {problem}")


def _encodable(inst: object, attribute: attrs.Attribute[Any], value: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise _fail(inst, attribute, "contains lone surrogates") from None


def _check_str(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """A ``str`` (possibly empty) that can be stored (no lone surrogates)."""
    if not isinstance(value, str):
        raise _fail(inst, attribute, f"must be a str, not {type(value).__name__}")
    _encodable(inst, attribute, value)


def _check_nonempty_str(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str):
        raise _fail(inst, attribute, f"must be a non-empty str, not {type(value).__name__}")
    if not value:
        raise _fail(inst, attribute, "must be a non-empty str, not ''")
    _encodable(inst, attribute, value)


def _check_optional_name(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None:
        _check_nonempty_str(inst, attribute, value)


def _check_bool(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, bool):
        raise _fail(inst, attribute, f"must be a bool, not {type(value).__name__}")


def _check_dict(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, dict):
        raise _fail(inst, attribute, f"must be a dict, not {type(value).__name__}")


def _check_optional_dict(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None:
        _check_dict(inst, attribute, value)


# The signature attrs calls validators with (inst and attribute unused here).
def _check_sidecar_kind(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:  # noqa: ARG001
    """Same rules as an event kind, and not one of the conversation kinds."""
    if not isinstance(value, str):
        raise InvalidArgumentError(
            f"sidecar entry kind must be a non-empty str, not {type(value).__name__}"
        )
    if not value:
        raise InvalidArgumentError("sidecar entry kind must be a non-empty str, not ''")
    if value in CONVERSATION_KINDS:
        raise InvalidArgumentError(
            f"sidecar entry kind {value!r} is a conversation kind; "
            "use the matching entry class (or entry_from_event)"
        )
    if len(value) > MAX_ID_LENGTH:
        raise InvalidArgumentError(f"sidecar entry kind is longer than {MAX_ID_LENGTH} characters")
    if _CONTROL.search(value):
        raise InvalidArgumentError(f"sidecar entry kind {value!r} contains control characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgumentError("sidecar entry kind contains lone surrogates") from None


def _json_copy(value: object, kind: str, what: str) -> Any:
    """Return a fresh deep copy of ``value`` after checking that it is exactly JSON."""
    try:
        text = encode_json(value)
    except InvalidEventError as exc:
        raise InvalidEventError(None, kind, f"{what} must be exactly JSON ({exc.reason})") from None
    return decode_json(text)


# --- entries -----------------------------------------------------------------------------


def _user_parts(value: Iterable[Part]) -> tuple[Part, ...]:
    return check_parts(value, "user")


def _result_parts(value: Iterable[Part]) -> tuple[Part, ...]:
    return check_parts(value, "tool_result")


def _content(text: str, parts: tuple[Part, ...]) -> tuple[Part, ...]:
    return ((TextPart(text),) if text else ()) + parts


@attrs.frozen
class UserMessage:
    """A message from the user (event kind ``user``, data ``{"text": ...}``).

    ``text`` is any ``str`` (empty allowed) without lone surrogates. ``parts`` (a
    sequence of :class:`TextPart`, :class:`ImagePart`, :class:`FilePart`, stored as a
    tuple) come after the text; with parts the data also holds ``"parts"``, and an entry
    too large for one event raises :class:`MessageTooLargeError` here.
    """

    KIND: ClassVar[Literal["user"]] = "user"

    text: str = attrs.field(default="", validator=_check_str)
    parts: tuple[Part, ...] = attrs.field(default=(), converter=_user_parts)

    def __attrs_post_init__(self) -> None:
        if self.parts:
            check_size(self.KIND, {"text": self.text}, self.parts)

    @property
    def kind(self) -> str:
        """The event kind, :attr:`KIND`."""
        return self.KIND

    @property
    def content(self) -> tuple[Part, ...]:
        """The whole message in order: the text (as a :class:`TextPart`, unless empty),
        then :attr:`parts`."""
        return _content(self.text, self.parts)


@attrs.frozen
class AssistantMessage:
    """A message from the model (event kind ``assistant``).

    ``text`` may be empty (a turn that only calls tools). ``agent`` names the agent that
    spoke, ``None`` when unknown or irrelevant; when set it is a non-empty ``str``.
    ``usage`` is the model turn's token usage (a JSON object such as
    ``{"input_tokens": 10, "output_tokens": 5}``) or ``None``. The event data is
    ``{"text": ...}`` plus ``"agent"`` and ``"usage"`` only when they are set.
    """

    KIND: ClassVar[Literal["assistant"]] = "assistant"

    text: str = attrs.field(validator=_check_str)
    agent: str | None = attrs.field(default=None, validator=_check_optional_name)
    usage: dict[str, JSON] | None = attrs.field(default=None, validator=_check_optional_dict)

    def __attrs_post_init__(self) -> None:
        if self.usage is not None:
            object.__setattr__(self, "usage", _json_copy(self.usage, self.KIND, "assistant.usage"))

    @property
    def kind(self) -> str:
        """The event kind, :attr:`KIND`."""
        return self.KIND


@attrs.frozen
class ToolCall:
    """The model asked for a tool to run (event kind ``tool_call``).

    ``call_id`` pairs the call with its :class:`ToolResult` (non-empty ``str``); ``name``
    is the tool's name (non-empty ``str``); ``arguments`` is a JSON object, copied at
    construction.
    """

    KIND: ClassVar[Literal["tool_call"]] = "tool_call"

    call_id: str = attrs.field(validator=_check_nonempty_str)
    name: str = attrs.field(validator=_check_nonempty_str)
    arguments: dict[str, JSON] = attrs.field(validator=_check_dict)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(
            self, "arguments", _json_copy(self.arguments, self.KIND, "tool_call.arguments")
        )

    @property
    def kind(self) -> str:
        """The event kind, :attr:`KIND`."""
        return self.KIND


@attrs.frozen
class ToolResult:
    """The outcome of the tool call with the same ``call_id`` (event kind ``tool_result``).

    ``call_id`` is a non-empty ``str``; ``output`` any ``str`` (empty allowed); ``is_error``
    a ``bool`` (not an int) telling the model the tool failed; ``parts`` what the result
    carries after its text (images, files, more text), as a :class:`UserMessage`'s.
    """

    KIND: ClassVar[Literal["tool_result"]] = "tool_result"

    call_id: str = attrs.field(validator=_check_nonempty_str)
    output: str = attrs.field(validator=_check_str)
    is_error: bool = attrs.field(default=False, validator=_check_bool)
    parts: tuple[Part, ...] = attrs.field(default=(), converter=_result_parts)

    def __attrs_post_init__(self) -> None:
        if self.parts:
            data = {"call_id": self.call_id, "output": self.output, "is_error": self.is_error}
            check_size(self.KIND, data, self.parts)

    @property
    def kind(self) -> str:
        """The event kind, :attr:`KIND`."""
        return self.KIND

    @property
    def content(self) -> tuple[Part, ...]:
        """The whole result in order: the output (unless empty), then :attr:`parts`."""
        return _content(self.output, self.parts)


@attrs.frozen
class SidecarEntry:
    """Any other event: a known sidecar kind (:data:`SIDECAR_KINDS`) or an unknown kind.

    Folding a conversation ignores these, but they are kept in order and round-trip
    exactly, so events written by a newer tidelog survive an older reader. ``kind`` follows
    the event-kind rules (non-empty ``str`` of at most 256 characters, no control
    characters) and may not be one of :data:`CONVERSATION_KINDS`; ``data`` is any JSON
    value, copied at construction.
    """

    kind: str = attrs.field(validator=_check_sidecar_kind)
    data: JSON = None

    def __attrs_post_init__(self) -> None:
        object.__setattr__(
            self, "data", _json_copy(self.data, self.kind, f"sidecar entry {self.kind!r}: data")
        )

    @property
    def known(self) -> bool:
        """Whether :attr:`kind` is one of :data:`SIDECAR_KINDS` (else it is unknown)."""
        return self.kind in SIDECAR_KINDS


#: One transcript entry.
Entry: TypeAlias = UserMessage | AssistantMessage | ToolCall | ToolResult | SidecarEntry

_ENTRY_TYPES = (UserMessage, AssistantMessage, ToolCall, ToolResult, SidecarEntry)


def _check_entry(entry: object, what: str = "entry") -> Entry:
    if not isinstance(entry, _ENTRY_TYPES):
        raise InvalidArgumentError(
            f"{what} must be a transcript entry (UserMessage, AssistantMessage, ToolCall, "
            f"ToolResult or SidecarEntry), not {type(entry).__name__}"
        )
    return entry


# --- events and JSON form ----------------------------------------------------------------


def _entry_data(entry: Entry) -> JSON:
    if isinstance(entry, UserMessage):
        if entry.parts:
            return {"text": entry.text, "parts": parts_to_json(entry.parts)}
        return {"text": entry.text}
    if isinstance(entry, AssistantMessage):
        data: dict[str, JSON] = {"text": entry.text}
        if entry.agent is not None:
            data["agent"] = entry.agent
        if entry.usage is not None:
            data["usage"] = _json_copy(entry.usage, entry.KIND, "assistant.usage")
        return data
    if isinstance(entry, ToolCall):
        arguments = _json_copy(entry.arguments, entry.KIND, "tool_call.arguments")
        return {"call_id": entry.call_id, "name": entry.name, "arguments": arguments}
    if isinstance(entry, ToolResult):
        result: dict[str, JSON] = {
            "call_id": entry.call_id,
            "output": entry.output,
            "is_error": entry.is_error,
        }
        if entry.parts:
            result["parts"] = parts_to_json(entry.parts)
        return result
    copied: JSON = _json_copy(entry.data, entry.kind, f"sidecar entry {entry.kind!r}: data")
    return copied


def entry_to_event(entry: Entry, *, run_id: str | None = None) -> NewEvent:
    """The event that records ``entry``: its kind, its data (see the module docstring), ``run_id``.

    ``entry_from_event(event.kind, event.data) == entry`` for every entry. The data is a
    fresh copy. ``run_id`` is passed through unchecked (the append validates it).

    Raises:
        InvalidArgumentError: ``entry`` is not a transcript entry.
    """
    entry = _check_entry(entry)
    return NewEvent(entry.kind, _entry_data(entry), run_id=run_id)


def _fields(
    what: str, data: object, required: tuple[str, ...], optional: tuple[str, ...]
) -> dict[str, Any]:
    """Check that ``data`` is an object with the ``required`` keys and no unknown ones."""
    if not isinstance(data, dict):
        raise InvalidArgumentError(f"{what} must be a JSON object, not {type(data).__name__}")
    missing = [key for key in required if key not in data]
    if missing:
        raise InvalidArgumentError(f"{what} is missing {', '.join(repr(key) for key in missing)}")
    extra = sorted(str(key) for key in data if key not in required and key not in optional)
    if extra:
        raise InvalidArgumentError(
            f"{what} has unexpected key(s) {', '.join(repr(key) for key in extra)}"
        )
    return data


def _stored_parts(fields: dict[str, Any], what: str) -> Sequence[Part]:
    return parts_from_json(fields["parts"], f"{what}.parts") if "parts" in fields else ()


def _decode(kind: str, data: object, what: str) -> Entry:
    if kind == UserMessage.KIND:
        f = _fields(what, data, ("text",), ("parts",))
        return UserMessage(f["text"], _stored_parts(f, what))
    if kind == AssistantMessage.KIND:
        f = _fields(what, data, ("text",), ("agent", "usage"))
        return AssistantMessage(f["text"], f.get("agent"), f.get("usage"))
    if kind == ToolCall.KIND:
        f = _fields(what, data, ("call_id", "name", "arguments"), ())
        return ToolCall(f["call_id"], f["name"], f["arguments"])
    if kind == ToolResult.KIND:
        f = _fields(what, data, ("call_id", "output"), ("is_error", "parts"))
        parts = _stored_parts(f, what)
        return ToolResult(f["call_id"], f["output"], f.get("is_error", False), parts)
    raise AssertionError(kind)  # pragma: no cover


def entry_from_event(kind: str, data: JSON) -> Entry:
    """Decode one event (``kind`` and ``data``) into its entry.

    The conversation kinds are decoded strictly: ``data`` must be an object with exactly
    the documented keys (``assistant``'s ``agent`` may be absent or null, ``tool_result``'s
    ``is_error`` may be absent, meaning false; ``parts`` of ``user`` and ``tool_result``
    may be absent, meaning none) and the right field types. Every other kind
    becomes a :class:`SidecarEntry` holding ``data`` verbatim (copied).

    Raises:
        InvalidArgumentError: ``kind`` is not a valid kind, or a conversation kind's data
            has the wrong shape or field types (the message names the kind and field).
        InvalidEventError: a payload is not exactly JSON.
    """
    if not isinstance(kind, str):
        raise InvalidArgumentError(f"event kind must be a str, not {type(kind).__name__}")
    if kind in CONVERSATION_KINDS:
        return _decode(kind, data, f"{kind} event data")
    return SidecarEntry(kind, data)


def entry_from_stored(event: StoredEvent) -> Entry:
    """Decode a stored event into its entry, like :func:`entry_from_event`.

    Only ``kind`` and ``data`` matter; ``seq``, ``ts`` and ``run_id`` are not part of an
    entry.

    Raises: as :func:`entry_from_event`; :class:`InvalidArgumentError` if ``event`` is not
    a :class:`~stores._records.StoredEvent`.
    """
    if not isinstance(event, StoredEvent):
        raise InvalidArgumentError(f"expected a StoredEvent, not {type(event).__name__}")
    return entry_from_event(event.kind, event.data)


def entry_to_json(entry: Entry) -> dict[str, JSON]:
    """A self-describing JSON object for ``entry``: ``{"kind": ..., **fields}``.

    For the conversation kinds the fields are the event data's keys (``{"kind": "user",
    "text": "hi"}``); a sidecar entry is ``{"kind": kind, "data": data}``. Used inside
    checkpoint snapshots; :func:`entry_from_json` inverts it exactly. A fresh copy.

    Raises:
        InvalidArgumentError: ``entry`` is not a transcript entry.
    """
    entry = _check_entry(entry)
    if isinstance(entry, SidecarEntry):
        return {"kind": entry.kind, "data": _entry_data(entry)}
    data = _entry_data(entry)
    assert isinstance(data, dict)
    return {"kind": entry.kind, **data}


def entry_from_json(obj: JSON) -> Entry:
    """Rebuild an entry from :func:`entry_to_json`'s form.

    ``obj`` must be an object with a ``str`` ``"kind"``; a conversation kind's other keys
    are decoded as in :func:`entry_from_event`; any other kind needs exactly a ``"data"``
    key besides ``"kind"``.

    Raises:
        InvalidArgumentError: wrong shape or field types (message names kind and field).
        InvalidEventError: a payload is not exactly JSON.
    """
    if not isinstance(obj, dict):
        raise InvalidArgumentError(f"an entry must be a JSON object, not {type(obj).__name__}")
    if "kind" not in obj:
        raise InvalidArgumentError("an entry object needs a 'kind' key")
    kind = obj["kind"]
    if not isinstance(kind, str):
        raise InvalidArgumentError(f"an entry's 'kind' must be a str, not {type(kind).__name__}")
    rest = {key: value for key, value in obj.items() if key != "kind"}
    if kind in CONVERSATION_KINDS:
        return _decode(kind, rest, f"{kind} entry object")
    f = _fields(f"{kind!r} entry object", rest, ("data",), ())
    return SidecarEntry(kind, f["data"])


# --- queries -----------------------------------------------------------------------------


def is_sidecar(entry: Entry) -> bool:
    """Whether ``entry`` is a :class:`SidecarEntry` (known or unknown kind).

    Sidecar entries are not part of the conversation proper: folding ignores them.

    Raises:
        InvalidArgumentError: ``entry`` is not a transcript entry.
    """
    return isinstance(_check_entry(entry), SidecarEntry)


def _pending_positions(entries: list[Entry]) -> list[int]:
    """Positions of the calls without a result, in order of occurrence."""
    open_calls: defaultdict[str, deque[int]] = defaultdict(deque)
    for position, entry in enumerate(entries):
        _check_entry(entry, f"entries[{position}]")
        if isinstance(entry, ToolCall):
            open_calls[entry.call_id].append(position)
        elif isinstance(entry, ToolResult):
            waiting = open_calls.get(entry.call_id)
            if waiting:
                waiting.popleft()
    return sorted(position for waiting in open_calls.values() for position in waiting)


def pending_tool_calls(entries: Iterable[Entry]) -> list[ToolCall]:
    """The tool calls in ``entries`` that have no result, in order of occurrence.

    Pairing is by ``call_id`` and by occurrence: each :class:`ToolResult` pairs with the
    earliest *earlier* :class:`ToolCall` with the same id that is not paired yet, so with
    duplicate ids the n-th result pairs with the n-th call. A result with no such call (it
    comes first, or its id is unknown) is ignored. Other entries do not matter.

    Raises:
        InvalidArgumentError: an element is not a transcript entry.
    """
    items = list(entries)
    pending: list[ToolCall] = []
    for position in _pending_positions(items):
        call = items[position]
        assert isinstance(call, ToolCall)
        pending.append(call)
    return pending


def drop_dangling_tool_calls(entries: Iterable[Entry]) -> list[Entry]:
    """``entries`` without the calls :func:`pending_tool_calls` reports; all else unchanged.

    Removal is by position, not by value: of two equal calls where only the first has a
    result, the second is dropped. The order of the remaining entries is kept; nothing
    but :class:`ToolCall` entries is ever removed, and the result has no pending calls
    (so the function is idempotent). Use it before writing an interrupted run's partial
    transcript to a session, so every call in history has its result.

    Raises:
        InvalidArgumentError: an element is not a transcript entry.
    """
    items = list(entries)
    dropped = set(_pending_positions(items))
    return [entry for position, entry in enumerate(items) if position not in dropped]
