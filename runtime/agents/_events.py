"""What a run reports: its result, the events of a streamed run, and the hooks."""

from __future__ import annotations

from typing import Any, Literal, TypeAlias

import attrs

from stores import JSON

from ._models import StreamRestarted, TextDelta, ToolCallDelta, Usage
from ._tools import RunContext
from ._transcript import Entry, ToolCall, ToolResult

__all__ = [
    "AwaitingApproval",
    "Handoff",
    "ModelTurn",
    "RunCompleted",
    "RunEvent",
    "RunFailed",
    "RunHooks",
    "RunResult",
    "RunStarted",
    "RunStopped",
    "ToolFinished",
    "ToolStarted",
]


@attrs.frozen
class RunResult:
    """What a run produced. ``output`` is the stored (JSON) form of the final answer: its
    text, or for an agent with an ``output_type`` the validated value as JSON;
    ``final_output`` is the typed value (the text, or e.g. an attrs instance), rebuilt
    from ``output`` on replay. ``finish_reason`` is the last model turn's (``"stop"`` when
    the model did not say), or ``None`` for a replay of a completed run (not persisted)."""

    run_id: str
    output: JSON
    entries: tuple[Entry, ...]
    usage: Usage
    agent: str
    finish_reason: str | None
    final_output: Any = None
    #: ``"completed"``; ``"awaiting_approval"``: the run stopped before the calls in
    #: :attr:`pending_approvals` (``output`` is then ``None``), decide them with
    #: ``approve`` / ``reject`` and re-issue the run to continue it; ``"interrupted"``:
    #: stopped on request (:attr:`stop_reason`), re-issue it to resume.
    status: Literal["completed", "awaiting_approval", "interrupted"] = "completed"
    pending_approvals: tuple[ToolCall, ...] = ()
    #: Why the run was stopped (``status == "interrupted"``, see ``request_stop``).
    stop_reason: str | None = None


@attrs.frozen
class RunStarted:
    run_id: str
    agent: str
    mode: Literal["new", "resumed"]


@attrs.frozen
class ModelTurn:
    agent: str
    entries: tuple[Entry, ...]


@attrs.frozen
class ToolStarted:
    call: ToolCall


@attrs.frozen
class ToolFinished:
    """A call's result. ``how``: ``"ran"``, ``"re-ran"`` (idempotent, after a crash),
    ``"unknown"`` (TOOL_OUTCOME_UNKNOWN), ``"handoff"``, ``"invalid"`` (the arguments did
    not fit the tool: the body never ran) or ``"error"`` (unknown tool)."""

    result: ToolResult
    how: str


@attrs.frozen
class Handoff:
    from_agent: str
    to_agent: str


@attrs.frozen
class RunCompleted:
    result: RunResult
    replayed: bool = False


@attrs.frozen
class RunStopped:
    """The run stopped on request (its last event; its checkpoint says
    ``interrupted``, with the reason)."""

    result: RunResult


@attrs.frozen
class AwaitingApproval:
    """The run stopped to wait for decisions on ``result.pending_approvals`` (its last
    event; its checkpoint says ``awaiting_approval``)."""

    result: RunResult


@attrs.frozen
class RunFailed:
    error: BaseException
    status: str


#: The events of :meth:`Runner.run_streamed`. ``TextDelta``, ``ToolCallDelta`` and
#: ``StreamRestarted`` come from the model while a turn streams (never checkpointed:
#: the turn's ``ModelTurn`` follows once it is).
RunEvent: TypeAlias = (
    RunStarted
    | TextDelta
    | ToolCallDelta
    | StreamRestarted
    | ModelTurn
    | ToolStarted
    | ToolFinished
    | Handoff
    | RunCompleted
    | AwaitingApproval
    | RunStopped
    | RunFailed
)


class RunHooks:
    """Callbacks of a run: subclass and override the ones you need (each default does
    nothing). Never called on replay. An exception from a hook fails the run."""

    async def on_run_start(self, ctx: RunContext) -> None:
        """The run started or resumed (before the first model turn)."""

    async def on_model_turn(self, ctx: RunContext, entries: tuple[Entry, ...]) -> None:
        """A model turn was checkpointed: its assistant message and tool calls."""

    async def on_tool_start(self, ctx: RunContext, call: ToolCall) -> None:
        """A tool body is about to run (its ``tool_started`` record is durable)."""

    async def on_tool_result(self, ctx: RunContext, result: ToolResult) -> None:
        """A tool result was checkpointed."""

    async def on_run_end(self, ctx: RunContext, result: RunResult) -> None:
        """The run completed and its result is saved."""


NO_HOOKS = RunHooks()
