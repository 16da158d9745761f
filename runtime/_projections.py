"""Projections: named, versioned folds over a session's events, read at a snapshot.

A projection turns the log into a current value (usage totals, the conversation the model
sees, a turn outline) without being a second source of truth: ``Snapshot.values()`` folds
exactly the events up to the snapshot's ``as_of_seq``. States are JSON so they can be
checkpointed: a cold read starts from the newest valid checkpoint (same version, nothing
below its seq destroyed since) and folds only the events after it. A changed ``version``,
or a truncate/rewind below the checkpoint, refolds from scratch. Checkpoints are a cache:
writing one never fails a read.
"""

from __future__ import annotations

from typing import Any, ClassVar

from stores import JSON, StoredEvent

__all__ = [
    "BUILTIN_PROJECTIONS",
    "ConversationProjection",
    "Projection",
    "StatsProjection",
    "TurnsProjection",
]


def _int(value: JSON) -> int:
    return value if isinstance(value, int) else 0


class Projection:
    """Subclass and set :attr:`name` and :attr:`version`; implement :meth:`init` and
    :meth:`apply` (which may update ``state`` in place and return it); optionally
    :meth:`view`. States must be JSON values (they are checkpointed as JSON). Bump
    ``version`` whenever :meth:`apply` changes meaning: older checkpoints are then ignored.
    """

    name: ClassVar[str] = ""
    version: ClassVar[int] = 1

    def init(self) -> JSON:
        """The state of an empty session."""
        raise NotImplementedError

    def apply(self, state: JSON, event: StoredEvent) -> JSON:
        """Fold one event into ``state``; return the new state."""
        raise NotImplementedError

    def view(self, state: JSON) -> Any:
        """What readers get (default: the state itself)."""
        return state


class StatsProjection(Projection):
    """``stats``: event counts by kind, token usage totals from assistant events (their
    ``usage`` object), and the first and last commit time."""

    name = "stats"
    version = 1

    def init(self) -> JSON:
        return {
            "events": 0,
            "kinds": {},
            "usage": {"input_tokens": 0, "output_tokens": 0},
            "first_ts": None,
            "last_ts": None,
        }

    def apply(self, state: JSON, event: StoredEvent) -> JSON:
        assert isinstance(state, dict)
        kinds = state["kinds"]
        assert isinstance(kinds, dict)
        state["events"] = _int(state["events"]) + 1
        kinds[event.kind] = _int(kinds.get(event.kind, 0)) + 1
        if event.kind == "assistant" and isinstance(event.data, dict):
            usage = event.data.get("usage")
            totals = state["usage"]
            if isinstance(usage, dict) and isinstance(totals, dict):
                for key in ("input_tokens", "output_tokens"):
                    value = usage.get(key)
                    if isinstance(value, int):
                        totals[key] = _int(totals[key]) + value
        if state["first_ts"] is None:
            state["first_ts"] = event.ts
        state["last_ts"] = event.ts
        return state


class ConversationProjection(Projection):
    """``conversation``: the messages a model would see, folded as lite-agent does.

    ``user`` and ``assistant`` events push a message (an assistant's ``tool_call`` events
    attach to it); consecutive ``tool_result`` events coalesce into one ``tool`` message;
    sidecar kinds (``tool_started``, ``file_snapshot``, ``permission_decision``,
    ``context_view``, unknown kinds...) are ignored and do not split a group of results; a
    ``summary`` event replaces everything before it with one summary message.

    ``context_view`` records what a context strategy showed the model at some point; it is
    an observation, not an edit, so the fold ignores it (decision: seed 004 lists it as a
    session event kind without folding semantics).
    """

    name = "conversation"
    version = 1

    def init(self) -> JSON:
        return []

    def apply(self, state: JSON, event: StoredEvent) -> JSON:
        assert isinstance(state, list)
        data = event.data if isinstance(event.data, dict) else {}
        kind = event.kind
        if kind == "summary":
            text = data.get("text", event.data)
            return [{"role": "summary", "content": text}]
        if kind == "user":
            state.append({"role": "user", "content": data.get("text")})
        elif kind == "assistant":
            state.append({"role": "assistant", "content": data.get("text"), "tool_calls": []})
        elif kind == "tool_call":
            call: JSON = {
                "id": data.get("call_id"),
                "name": data.get("name"),
                "arguments": data.get("arguments"),
            }
            last = state[-1] if state else None
            if isinstance(last, dict) and last.get("role") == "assistant":
                calls = last["tool_calls"]
                assert isinstance(calls, list)
                calls.append(call)
            else:
                state.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind == "tool_result":
            result: JSON = {
                "id": data.get("call_id"),
                "output": data.get("output"),
                "is_error": bool(data.get("is_error", False)),
            }
            last = state[-1] if state else None
            if isinstance(last, dict) and last.get("role") == "tool":
                results = last["results"]
                assert isinstance(results, list)
                results.append(result)
            else:
                state.append({"role": "tool", "results": [result]})
        return state


class TurnsProjection(Projection):
    """``turns``: an outline, one row per user turn -- its seq, the start of its text, the
    tools called, how many failed, and the outcome (``answered``, ``pending``)."""

    name = "turns"
    version = 1

    def init(self) -> JSON:
        return []

    def apply(self, state: JSON, event: StoredEvent) -> JSON:
        assert isinstance(state, list)
        data = event.data if isinstance(event.data, dict) else {}
        if event.kind == "user":
            text = data.get("text")
            state.append(
                {
                    "seq": event.seq,
                    "text": text[:80] if isinstance(text, str) else None,
                    "tools": [],
                    "errors": 0,
                    "outcome": "pending",
                }
            )
            return state
        if not state:
            return state
        row = state[-1]
        assert isinstance(row, dict)
        if event.kind == "tool_call":
            tools = row["tools"]
            assert isinstance(tools, list)
            tools.append(data.get("name"))
            row["outcome"] = "pending"
        elif event.kind == "tool_result" and data.get("is_error"):
            row["errors"] = _int(row["errors"]) + 1
        elif event.kind == "assistant" and data.get("text"):
            row["outcome"] = "answered"
        return state


#: The projections every runtime has.
BUILTIN_PROJECTIONS: tuple[Projection, ...] = (
    StatsProjection(),
    ConversationProjection(),
    TurnsProjection(),
)
