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

The entries and their field checks live in ``_entries``, their event and JSON forms in
``_entry_codec``, the queries (sidecars, pending tool calls) in ``_entry_queries``; this
module gathers them.
"""

from __future__ import annotations

from ._entries import (
    CONVERSATION_KINDS,
    SIDECAR_KINDS,
    AssistantMessage,
    Entry,
    SidecarEntry,
    ToolCall,
    ToolResult,
    UserMessage,
)
from ._entry_codec import (
    entry_from_event,
    entry_from_json,
    entry_from_stored,
    entry_to_event,
    entry_to_json,
)
from ._entry_queries import drop_dangling_tool_calls, is_sidecar, pending_tool_calls

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
