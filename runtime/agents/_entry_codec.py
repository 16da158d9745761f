"""Transcript entries as tidelog events and as self-describing JSON, both ways.

The event data of each entry kind is listed in ``_transcript``'s docstring.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from stores import JSON, InvalidArgumentError, NewEvent, StoredEvent

from ._entries import (
    CONVERSATION_KINDS,
    AssistantMessage,
    Entry,
    SidecarEntry,
    ToolCall,
    ToolResult,
    UserMessage,
    check_entry,
    json_copy,
)
from ._parts import Part, parts_from_json, parts_to_json

__all__ = [
    "entry_from_event",
    "entry_from_json",
    "entry_from_stored",
    "entry_to_event",
    "entry_to_json",
]


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
            data["usage"] = json_copy(entry.usage, entry.KIND, "assistant.usage")
        return data
    if isinstance(entry, ToolCall):
        arguments = json_copy(entry.arguments, entry.KIND, "tool_call.arguments")
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
    copied: JSON = json_copy(entry.data, entry.kind, f"sidecar entry {entry.kind!r}: data")
    return copied


def entry_to_event(entry: Entry, *, run_id: str | None = None) -> NewEvent:
    """The event that records ``entry``: its kind, its data (see the module docstring), ``run_id``.

    ``entry_from_event(event.kind, event.data) == entry`` for every entry. The data is a
    fresh copy. ``run_id`` is passed through unchecked (the append validates it).

    Raises:
        InvalidArgumentError: ``entry`` is not a transcript entry.
    """
    entry = check_entry(entry)
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
    entry = check_entry(entry)
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
