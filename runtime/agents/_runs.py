"""Seeing runs: each stored run's status, last update, pending approvals and unknown
outcomes, for hosts that build their own views (``tidelog runs`` prints the same)."""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from runtime import JSON

from ._approvals import awaiting_approval
from ._checkpoints import Checkpointer, RunSnapshot, RunStatus
from ._tool_calls import TOOL_OUTCOME_UNKNOWN
from ._transcript import Entry, SidecarEntry, ToolCall, ToolResult, pending_tool_calls

__all__ = ["RunOverview", "list_runs", "overview"]


@attrs.frozen(kw_only=True)
class RunOverview:
    """One stored run at a glance. ``pending_approvals``: calls awaiting a decision;
    ``unknown_outcomes``: calls whose body may have run without a recorded result (a
    host stopped meanwhile), or that got a ``TOOL_OUTCOME_UNKNOWN`` result."""

    run_id: str
    session_id: str | None
    status: RunStatus
    agent: str
    turns: int
    updated_at: float
    pending_approvals: tuple[ToolCall, ...]
    unknown_outcomes: tuple[ToolCall, ...]
    error: dict[str, JSON] | None

    def to_json(self) -> dict[str, JSON]:
        """The overview as a JSON object (``tidelog runs --json``)."""
        return {
            "run_id": self.run_id,
            "session_id": self.session_id,
            "status": self.status,
            "agent": self.agent,
            "turns": self.turns,
            "updated_at": self.updated_at,
            "pending_approvals": [_call_json(c) for c in self.pending_approvals],
            "unknown_outcomes": [_call_json(c) for c in self.unknown_outcomes],
            "error": self.error,
        }


def _call_json(call: ToolCall) -> dict[str, JSON]:
    return {"call_id": call.call_id, "name": call.name, "arguments": call.arguments}


def _marks(entries: Sequence[Entry], kind: str) -> set[str]:
    return {
        str(e.data.get("call_id"))
        for e in entries
        if isinstance(e, SidecarEntry) and e.kind == kind and isinstance(e.data, dict)
    }


def _unknown(entries: Sequence[Entry]) -> tuple[ToolCall, ...]:
    started, aborted = _marks(entries, "tool_started"), _marks(entries, "tool_aborted")
    calls = {e.call_id: e for e in entries if isinstance(e, ToolCall)}
    told = {
        e.call_id
        for e in entries
        if isinstance(e, ToolResult) and e.output.startswith(TOOL_OUTCOME_UNKNOWN)
    }
    found = [c for c in pending_tool_calls(entries) if c.call_id in started - aborted] + [
        calls[i] for i in sorted(told) if i in calls
    ]
    return tuple(found)


def overview(snapshot: RunSnapshot) -> RunOverview:
    """The overview of one run's checkpoint."""
    head = snapshot.head
    return RunOverview(
        run_id=snapshot.run_id,
        session_id=head.session_id,
        status=head.status,
        agent=head.agent,
        turns=head.turns,
        updated_at=head.updated_at,
        pending_approvals=tuple(awaiting_approval(snapshot.entries)),
        unknown_outcomes=_unknown(snapshot.entries),
        error=head.error,
    )


async def list_runs(
    checkpointer: Checkpointer, *, status: RunStatus | None = None
) -> list[RunOverview]:
    """Every stored run (optionally of one status), most recently saved first. Reads each
    run's checkpoint; a run deleted meanwhile is left out."""
    out: list[RunOverview] = []
    for info in await checkpointer.list(status=status):
        snapshot = await checkpointer.load(info.run_id)
        if snapshot is not None:
            out.append(overview(snapshot))
    return out
