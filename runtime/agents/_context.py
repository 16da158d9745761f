"""Context views and pinned facts: what the model sees after compaction, and what no
compaction may lose.

A ``context_view`` event records a compacted view of the conversation: the messages (in
:class:`ConversationProjection`'s shape) standing for everything through ``through_seq``.
:class:`ContextProjection` (``context``) starts from the latest valid view and folds only
the raw events after its ``through_seq`` on top; :class:`ConversationProjection` ignores
views, so the log of raw events stays the authority. :class:`FactsProjection` (``facts``)
folds the pinned goals, constraints and verified artifacts from the raw events alone --
never from a view or a summary -- so a lossy summary cannot erase a pinned goal.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from runtime import JSON, InvalidArgumentError, Projection, StoredEvent
from stores import decode_json, encode_json

from ._projections import ConversationProjection
from ._transcript import SidecarEntry

__all__ = [
    "FACT_KIND",
    "ContextProjection",
    "FactsProjection",
    "context_view",
    "pinned_fact",
    "verified_artifact",
]

#: The event kind of a pinned goal or constraint.
FACT_KIND = "pinned_fact"
_FACT_TYPES = ("goal", "constraint")
_CONVERSATION = ConversationProjection()


def context_view(through_seq: int, messages: Sequence[Mapping[str, Any]]) -> SidecarEntry:
    """The ``context_view`` entry for ``messages`` standing for the log through
    ``through_seq``. Append it like any entry (it must land after ``through_seq``).

    Raises :class:`InvalidArgumentError` for a negative or non-int ``through_seq`` or
    messages that are not JSON objects with a ``role``."""
    if type(through_seq) is not int or through_seq < 0:
        raise InvalidArgumentError(f"through_seq must be an int >= 0, not {through_seq!r}")
    if isinstance(messages, str | bytes) or not isinstance(messages, Sequence):
        raise InvalidArgumentError("messages must be a sequence of message objects")
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
            raise InvalidArgumentError(f"messages[{index}] must be an object with a str 'role'")
    copied: JSON = [dict(m) for m in messages]  # SidecarEntry checks it is JSON
    return SidecarEntry("context_view", {"through_seq": through_seq, "messages": copied})


def pinned_fact(fact: str, text: str) -> SidecarEntry:
    """A ``pinned_fact`` entry: ``fact`` is ``"goal"`` or ``"constraint"``, ``text`` a
    non-empty str. Raises :class:`InvalidArgumentError` otherwise."""
    if fact not in _FACT_TYPES:
        raise InvalidArgumentError(f"fact must be 'goal' or 'constraint', not {fact!r}")
    if not isinstance(text, str) or not text:
        raise InvalidArgumentError("a pinned fact's text must be a non-empty str")
    return SidecarEntry(FACT_KIND, {"fact": fact, "text": text})


def verified_artifact(artifact: str, **detail: JSON) -> SidecarEntry:
    """An ``artifact_verified`` entry naming ``artifact`` (non-empty str), with any JSON
    ``detail`` (a hash, a test name). Raises :class:`InvalidArgumentError` otherwise."""
    if not isinstance(artifact, str) or not artifact:
        raise InvalidArgumentError("artifact must be a non-empty str")
    return SidecarEntry("artifact_verified", {"artifact": artifact, **detail})


def _valid_view(event: StoredEvent, current: int) -> list[JSON] | None:
    """The view's messages, or None if the event is not a usable view: ``through_seq`` an
    int below the event's own seq and not behind the current view's, messages a list of
    objects with a str ``role``."""
    data = event.data
    if not isinstance(data, dict):
        return None
    through, messages = data.get("through_seq"), data.get("messages")
    if type(through) is not int or not current <= through < event.seq:
        return None
    if not isinstance(messages, list):
        return None
    if not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages):
        return None
    return messages


class ContextProjection(Projection):
    """``context``: the messages the model sees -- the latest valid ``context_view``'s
    messages, then the raw events after its ``through_seq`` folded as
    :class:`ConversationProjection` does. Without a view it equals ``conversation``.

    A view is valid when its ``through_seq`` is below its own seq and not behind the
    previous valid view's (views only move forward); an invalid one is ignored. The
    state keeps the raw events after the current view, so it shrinks at every view.
    """

    name = "context"
    version = 1

    def init(self) -> JSON:
        return {"view": None, "through_seq": 0, "events": []}

    def apply(self, state: JSON, event: StoredEvent) -> JSON:
        assert isinstance(state, dict)
        events = state["events"]
        through = state["through_seq"]
        assert isinstance(events, list) and isinstance(through, int)
        if event.kind == "context_view":
            messages = _valid_view(event, through)
            if messages is not None:
                new = event.data["through_seq"]  # type: ignore[index, call-overload]
                assert isinstance(new, int)
                state["view"] = messages
                state["through_seq"] = new
                state["events"] = [e for e in events if isinstance(e, list) and e[0] > new]  # type: ignore[operator]
            return state
        if event.kind in ("user", "assistant", "tool_call", "tool_result", "summary"):
            events.append([event.seq, event.kind, event.data])
        return state

    def view(self, state: JSON) -> list[JSON]:
        assert isinstance(state, dict)
        view = state["view"]
        base: JSON = decode_json(encode_json(view)) if isinstance(view, list) else []
        events = state["events"]
        assert isinstance(events, list)
        for item in events:
            assert isinstance(item, list)
            seq, kind, data = item
            assert isinstance(seq, int) and isinstance(kind, str)
            base = _CONVERSATION.apply(base, StoredEvent("", seq, 0.0, kind, data))
        assert isinstance(base, list)
        return base


class FactsProjection(Projection):
    """``facts``: ``{"goals": [...], "constraints": [...], "artifacts": [...]}`` -- every
    ``pinned_fact`` and ``artifact_verified`` event, in log order, from the raw events
    only: ``context_view`` and ``summary`` events are ignored, so no compaction removes
    a fact. Artifacts are the events' data objects (``{"artifact": name, ...}``, plus
    ``seq``); a later verification of the same artifact replaces the earlier one."""

    name = "facts"
    version = 1

    def init(self) -> JSON:
        return {"goals": [], "constraints": [], "artifacts": []}

    def apply(self, state: JSON, event: StoredEvent) -> JSON:
        assert isinstance(state, dict)
        data = event.data
        if not isinstance(data, dict):
            return state
        if event.kind == FACT_KIND:
            fact, text = data.get("fact"), data.get("text")
            if fact in _FACT_TYPES and isinstance(text, str):
                bucket = state["goals" if fact == "goal" else "constraints"]
                assert isinstance(bucket, list)
                if text not in bucket:
                    bucket.append(text)
        elif event.kind == "artifact_verified":
            name = data.get("artifact")
            if isinstance(name, str):
                artifacts = state["artifacts"]
                assert isinstance(artifacts, list)
                kept = [
                    a for a in artifacts if not (isinstance(a, dict) and a.get("artifact") == name)
                ]
                kept.append({**data, "seq": event.seq})
                state["artifacts"] = kept
        return state
