"""The agent layer's projections: the conversation a model sees, and a turn outline."""

from __future__ import annotations

from runtime import JSON, Projection, StoredEvent

__all__ = ["ConversationProjection", "TurnsProjection", "agent_projections"]


def _int(value: JSON) -> int:
    return value if isinstance(value, int) else 0


class ConversationProjection(Projection):
    """``conversation``: the messages a model would see, folded as lite-agent does
    (lite-agent: the event-log checkpointer design, with a SQLite backend and a
    conformance suite, that this project started from).

    ``user`` and ``assistant`` events push a message (with its ``parts`` as stored, when it
    has images or files; a tool result likewise) (an assistant's ``tool_call`` events
    attach to it); consecutive ``tool_result`` events coalesce into one ``tool`` message;
    sidecar kinds (``tool_started``, ``file_snapshot``, ``permission_decision``,
    ``context_view``, unknown kinds...) are ignored and do not split a group of results; a
    ``summary`` event replaces everything before it with one summary message.

    ``context_view`` records what a context strategy showed the model at some point; it is
    an observation, not an edit, so the fold ignores it (lite-agent lists it as a session event
    kind without folding semantics).
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
            message: dict[str, JSON] = {"role": "user", "content": data.get("text")}
            if "parts" in data:
                message["parts"] = data["parts"]
            state.append(message)
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
            result: dict[str, JSON] = {
                "id": data.get("call_id"),
                "output": data.get("output"),
                "is_error": bool(data.get("is_error", False)),
            }
            if "parts" in data:
                result["parts"] = data["parts"]
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


def agent_projections() -> tuple[Projection, ...]:
    """New instances of the agent layer's projections, to register on a runtime:
    ``for p in agent_projections(): rt.register_projection(p)``."""
    return (ConversationProjection(), TurnsProjection())
