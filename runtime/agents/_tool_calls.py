"""Settling a model turn's tool calls: handoffs, unknown tools, bad arguments, approvals,
and the tool bodies, run concurrently once each call's ``tool_started`` record is durable.

Part of the run loop (:mod:`runtime.agents._loop`): each function takes the :class:`Run`
in progress. A resumed run settles the calls its checkpoint left without a result: never
started -> it runs; started and the tool is idempotent -> it runs again; started and not
idempotent -> a ``TOOL_OUTCOME_UNKNOWN`` error result tells the model to verify first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs
import trio

from ._approvals import approval_step
from ._errors import first_cause
from ._events import Handoff, ToolStarted
from ._sidecars import CallSink
from ._tools import FunctionTool, ToolArgumentsError
from ._transcript import SidecarEntry, ToolCall, ToolResult

if TYPE_CHECKING:
    from ._loop import Run

__all__ = [
    "TOOL_OUTCOME_UNKNOWN",
    "abort_undispatched",
    "may_have_run",
    "settle",
    "unknown_outcome_text",
]

TOOL_OUTCOME_UNKNOWN = "TOOL_OUTCOME_UNKNOWN"
#: Sidecar kind recorded (checkpointed and flushed) before a tool body may start.
_STARTED = "tool_started"
#: Sidecar kind recorded when a run is interrupted after a call's ``tool_started`` record
#: but before its body was dispatched: the call never ran, so a resume runs it.
_ABORTED = "tool_aborted"


def unknown_outcome_text(call: ToolCall) -> str:
    """The result text of a call whose outcome is unknown after a crash."""
    return (
        f"{TOOL_OUTCOME_UNKNOWN}: the tool {call.name!r} (call {call.call_id}) started before "
        "the host crashed and did not record a result. It may or may not have taken effect. "
        "Verify the outcome before retrying; do not assume it failed."
    )


def _marked(run: Run, call: ToolCall, kind: str) -> bool:
    """Is there a ``kind`` sidecar for ``call`` after it (the last such call id)?"""
    positions = [i for i, e in enumerate(run.entries) if e is call]
    index = positions[-1] if positions else 0
    return any(
        isinstance(e, SidecarEntry)
        and e.kind == kind
        and isinstance(e.data, dict)
        and e.data.get("call_id") == call.call_id
        for e in run.entries[index + 1 :]
    )


def may_have_run(run: Run, call: ToolCall) -> bool:
    """Could ``call``'s body have started before the run stopped? Yes if its
    ``tool_started`` record was written and the run did not record that it was
    interrupted before dispatching the body (``tool_aborted``)."""
    return _marked(run, call, _STARTED) and not _marked(run, call, _ABORTED)


def abort_undispatched(run: Run) -> None:
    """The run is being interrupted: record the calls whose ``tool_started`` record
    was written but whose body never started, so a resume runs them."""
    for call_id in sorted(run.announced - run.dispatched):
        run.entries.append(SidecarEntry(_ABORTED, {"call_id": call_id}))
    run.announced.clear()


async def settle(run: Run, calls: Sequence[ToolCall], *, resuming: bool) -> list[ToolCall]:
    """Give every call a result: handoffs first, then tools, concurrently. Returns the
    calls that await a person's decision (the others are settled)."""
    to_run: list[tuple[ToolCall, FunctionTool, dict[str, Any], str]] = []
    waiting: list[ToolCall] = []
    for call in calls:
        target = run.agent.handoff(call.name)
        if target is not None:
            previous = run.agent.name
            run.agent = target
            await run.record(
                ToolResult(call.call_id, f'{{"assistant": "{target.name}"}}'), "handoff"
            )
            await run.emit(Handoff(previous, target.name))
            continue
        tool = run.agent.tool(call.name)
        if tool is None:
            names = ", ".join(str(t["name"]) for t in run.agent.tool_schemas()) or "none"
            text = f"unknown tool {call.name!r}; the tools you can call are: {names}"
            await run.record(ToolResult(call.call_id, text, is_error=True), "error")
            continue
        try:
            kwargs = tool.validate(call.arguments)  # once: the body gets these
        except ToolArgumentsError as exc:  # the body never runs: the model is told why
            await run.record(ToolResult(call.call_id, str(exc), is_error=True), "invalid")
            continue
        if tool.needs_approval is not False:
            verdict = await _approval(run, call, tool)
            if verdict == "wait":
                waiting.append(call)
            if verdict != "run":
                continue
        if resuming and may_have_run(run, call):
            if not tool.idempotent:
                text = unknown_outcome_text(call)
                await run.record(ToolResult(call.call_id, text, is_error=True), "unknown")
                continue
            to_run.append((call, tool, kwargs, "re-ran"))
        else:
            to_run.append((call, tool, kwargs, "ran"))
    if not to_run:
        return waiting
    for call, _, _, _ in to_run:
        run.entries.append(SidecarEntry(_STARTED, {"call_id": call.call_id, "name": call.name}))
        run.announced.add(call.call_id)
    await run.save()
    await run.barrier()  # a body runs only after its call record is durable
    try:
        async with trio.open_nursery() as nursery:
            for call, tool, kwargs, how in to_run:
                nursery.start_soon(_run_tool, run, call, tool, kwargs, how)
    except BaseExceptionGroup as group:
        raise first_cause(group) from None
    run.announced.clear()
    run.dispatched.clear()
    return waiting


async def _approval(run: Run, call: ToolCall, tool: FunctionTool) -> str:
    """Settle the approval of a call whose tool needs one: ``"run"``, ``"wait"`` (its
    request is recorded) or ``"done"`` (denied or rejected: its result recorded)."""
    step, result = await approval_step(run.entries, run.run_id, run.ctx, call, tool)
    if result is None:
        return step
    await run.record(result, step)
    return "done"


async def _run_tool(
    run: Run, call: ToolCall, tool: FunctionTool, kwargs: dict[str, Any], how: str
) -> None:
    """Run one tool body on its validated arguments; a failing tool becomes an error
    result."""
    await run.emit(ToolStarted(call))
    await run.hooks.on_tool_start(run.ctx, call)
    run.dispatched.add(call.call_id)  # from here on its body may have run
    try:
        ctx = attrs.evolve(run.ctx, call_id=call.call_id, sink=CallSink(run, call.call_id))
        output = await tool.call(ctx, kwargs)
        if isinstance(output, str):
            result = ToolResult(call.call_id, output)
        else:
            result = ToolResult(call.call_id, output[0], parts=output[1])
    except trio.TooSlowError:
        text = f"TimeoutError: the tool {tool.name!r} did not finish within {tool.timeout}s"
        result = ToolResult(call.call_id, text, is_error=True)
    except ToolArgumentsError as exc:
        result = ToolResult(call.call_id, str(exc), is_error=True)
    except Exception as exc:  # a failing tool is a result, not a crashed run
        result = ToolResult(call.call_id, f"{type(exc).__name__}: {exc}", is_error=True)
    await run.record(result, how)
