"""Transcript entries: the five entry classes, their kinds, and the field checks they run.

Each entry validates its fields at construction (``_transcript``, which gathers the
transcript's names, says which event each entry maps to); :func:`check_entry` and
:func:`json_copy` are shared with ``_entry_codec`` and ``_entry_queries``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, ClassVar, Literal, TypeAlias

import attrs

from stores import (
    JSON,
    MAX_ID_LENGTH,
    InvalidArgumentError,
    InvalidEventError,
    decode_json,
    encode_json,
)

from ._parts import Part, TextPart, check_parts, check_size

__all__ = [
    "CONVERSATION_KINDS",
    "SIDECAR_KINDS",
    "AssistantMessage",
    "Entry",
    "SidecarEntry",
    "ToolCall",
    "ToolResult",
    "UserMessage",
    "check_entry",
    "json_copy",
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


def json_copy(value: object, kind: str, what: str) -> Any:
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
            object.__setattr__(self, "usage", json_copy(self.usage, self.KIND, "assistant.usage"))

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
            self, "arguments", json_copy(self.arguments, self.KIND, "tool_call.arguments")
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
            self, "data", json_copy(self.data, self.kind, f"sidecar entry {self.kind!r}: data")
        )

    @property
    def known(self) -> bool:
        """Whether :attr:`kind` is one of :data:`SIDECAR_KINDS` (else it is unknown)."""
        return self.kind in SIDECAR_KINDS


#: One transcript entry.
Entry: TypeAlias = UserMessage | AssistantMessage | ToolCall | ToolResult | SidecarEntry

_ENTRY_TYPES = (UserMessage, AssistantMessage, ToolCall, ToolResult, SidecarEntry)


def check_entry(entry: object, what: str = "entry") -> Entry:
    if not isinstance(entry, _ENTRY_TYPES):
        raise InvalidArgumentError(
            f"{what} must be a transcript entry (UserMessage, AssistantMessage, ToolCall, "
            f"ToolResult or SidecarEntry), not {type(entry).__name__}"
        )
    return entry
