"""Tool approvals: a person between the model's request and the effect, durable in the log.

A tool declares ``needs_approval``: ``True`` (always ask), or a policy that sees the run
context and the call and answers ``"allow"``, ``"deny"`` or ``"ask"``. Every answer of a
policy is recorded as a ``permission_decision`` sidecar beside the call (the audit record
the seed dsh, an agent shell, writes; lite-agent, a TypeScript agent kernel, keeps such
records from its permission middleware). When the answer is "ask", the run records an
``approval_requested`` sidecar (run, call, tool, arguments), checkpoints with status
``awaiting_approval`` and returns a :class:`~runtime.agents.RunResult` listing the pending
calls; calls of the same turn that need no approval still run.

A decision -- :func:`approve` or :func:`reject`, from any process or host that shares the
store -- is an ``approval_decision`` sidecar appended to the run's checkpoint while the
decider holds the run's claim (its lease): of two deciders racing, the second finds the
first's decision and gets :class:`AlreadyDecidedError` saying how it was decided. Re-issuing
the run (``if_run_exists="resume"``) runs the approved calls and gives each rejected one an
error result with the decider's message, which the model sees.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Sequence

import attrs

from runtime import JSON, InvalidArgumentError, TidelogError

from ._checkpoints import Checkpointer, check_run_id
from ._errors import RunNotFoundError
from ._tools import ApprovalPolicy, FunctionTool, RunContext, Verdict
from ._transcript import Entry, SidecarEntry, ToolCall, ToolResult, pending_tool_calls

__all__ = [
    "APPROVAL_DECISION",
    "APPROVAL_REQUESTED",
    "PERMISSION_DECISION",
    "AlreadyDecidedError",
    "ApprovalNotPendingError",
    "Decision",
    "approval_step",
    "approve",
    "awaiting_approval",
    "check_verdict",
    "find_decision",
    "policy_verdict",
    "reject",
    "rejected_text",
    "request_entry",
    "requested",
]

#: Sidecar kinds of the approval exchange (all in the run's checkpoint, then its segment).
APPROVAL_REQUESTED = "approval_requested"
APPROVAL_DECISION = "approval_decision"
#: The audit record of a policy's answer.
PERMISSION_DECISION = "permission_decision"

_VERDICTS = ("allow", "deny", "ask")


@attrs.frozen(kw_only=True)
class Decision:
    """A person's decision on one call: ``approved``, who decided (``by``), when (``at``,
    seconds since the epoch) and ``message`` (for a rejection: what the model is told)."""

    run_id: str
    call_id: str
    approved: bool
    by: str
    at: float
    message: str | None = None

    def to_json(self) -> dict[str, JSON]:
        return {
            "run_id": self.run_id,
            "call_id": self.call_id,
            "approved": self.approved,
            "by": self.by,
            "at": self.at,
            "message": self.message,
        }

    @classmethod
    def from_json(cls, data: JSON) -> Decision | None:
        """The decision a sidecar holds; ``None`` if it is not one."""
        if not isinstance(data, dict):
            return None
        run_id, call_id, approved = data.get("run_id"), data.get("call_id"), data.get("approved")
        by, at, message = data.get("by"), data.get("at"), data.get("message")
        if not (isinstance(run_id, str) and isinstance(call_id, str)):
            return None
        if not isinstance(approved, bool) or not isinstance(by, str):
            return None
        if not isinstance(at, int | float) or isinstance(at, bool):
            return None
        if message is not None and not isinstance(message, str):
            return None
        return cls(
            run_id=run_id,
            call_id=call_id,
            approved=approved,
            by=by,
            at=float(at),
            message=message,
        )


class AlreadyDecidedError(TidelogError):
    """:func:`approve` / :func:`reject` of a call that was decided before (by another
    decider, possibly racing this one). ``decision`` says how. Nothing was written."""

    def __init__(self, decision: Decision) -> None:
        self.decision = decision
        how = "approved" if decision.approved else "rejected"
        super().__init__(
            f"call {decision.call_id!r} of run {decision.run_id!r} was already {how} by "
            f"{decision.by!r}; nothing was written"
        )


class ApprovalNotPendingError(InvalidArgumentError):
    """:func:`approve` / :func:`reject` of a call that awaits no approval: the run has no
    such call, or the call needs no approval (it ran, or was answered). Nothing was
    written."""

    def __init__(self, run_id: str, call_id: str, why: str) -> None:
        self.run_id = run_id
        self.call_id = call_id
        super().__init__(f"run {run_id!r}: call {call_id!r} awaits no approval ({why})")


def _sidecars(entries: Sequence[Entry], kind: str, call_id: str) -> list[dict[str, JSON]]:
    return [
        e.data
        for e in entries
        if isinstance(e, SidecarEntry)
        and e.kind == kind
        and isinstance(e.data, dict)
        and e.data.get("call_id") == call_id
    ]


def requested(entries: Sequence[Entry], call_id: str) -> bool:
    """Was an approval requested for ``call_id``?"""
    return bool(_sidecars(entries, APPROVAL_REQUESTED, call_id))


def find_decision(entries: Sequence[Entry], call_id: str) -> Decision | None:
    """The (first, hence only valid) decision recorded for ``call_id``."""
    for data in _sidecars(entries, APPROVAL_DECISION, call_id):
        decision = Decision.from_json(data)
        if decision is not None:
            return decision
    return None


def policy_verdict(entries: Sequence[Entry], call_id: str) -> Verdict | None:
    """The verdict a policy gave ``call_id`` before (its audit record), if any."""
    for data in _sidecars(entries, PERMISSION_DECISION, call_id):
        verdict = data.get("verdict")
        if verdict in _VERDICTS:
            return verdict  # type: ignore[return-value]
    return None


def awaiting_approval(entries: Sequence[Entry]) -> list[ToolCall]:
    """The calls of a run (its checkpoint's entries) that await a decision: requested,
    not decided, without a result."""
    return [
        call
        for call in pending_tool_calls(entries)
        if requested(entries, call.call_id) and find_decision(entries, call.call_id) is None
    ]


def request_entry(run_id: str, call: ToolCall) -> SidecarEntry:
    """The ``approval_requested`` sidecar for ``call``."""
    data: dict[str, JSON] = {
        "run_id": run_id,
        "call_id": call.call_id,
        "tool": call.name,
        "arguments": call.arguments,
    }
    return SidecarEntry(APPROVAL_REQUESTED, data)


async def check_verdict(policy: ApprovalPolicy, ctx: RunContext, call: ToolCall) -> Verdict:
    """Ask ``policy`` about ``call``. Raises :class:`~stores.InvalidArgumentError` if it
    answers anything but a :data:`Verdict` (the run then fails)."""
    answer = policy(ctx, call)
    if inspect.isawaitable(answer):
        answer = await answer
    if answer not in _VERDICTS:
        raise InvalidArgumentError(
            f"the approval policy of tool {call.name!r} answered {answer!r}, not one of {_VERDICTS}"
        )
    return answer


async def approval_step(
    entries: list[Entry], run_id: str, ctx: RunContext, call: ToolCall, tool: FunctionTool
) -> tuple[str, ToolResult | None]:
    """Where the approval of ``call`` (its tool needs one) stands, as the run loop acts on
    it: ``("run", None)`` (allowed by the policy, or approved), ``("wait", None)`` (a
    decision is awaited: the request is appended to ``entries`` the first time), or
    ``("denied" | "rejected", result)`` (the error result the call gets). A policy's
    answer is appended to ``entries`` as its audit record, and reused after a crash."""
    decision = find_decision(entries, call.call_id)
    if decision is not None:
        if decision.approved:
            return "run", None
        return "rejected", ToolResult(call.call_id, rejected_text(decision), is_error=True)
    if requested(entries, call.call_id):
        return "wait", None
    policy = tool.needs_approval
    verdict = policy_verdict(entries, call.call_id)
    if verdict is None and policy is True:
        verdict = "ask"
    elif verdict is None and policy is not False and policy is not True:
        verdict = await check_verdict(policy, ctx, call)
        audit: dict[str, JSON] = {"call_id": call.call_id, "tool": call.name, "verdict": verdict}
        entries.append(SidecarEntry(PERMISSION_DECISION, audit))
    if verdict == "allow":
        return "run", None
    if verdict == "deny":
        text = f"DENIED: the approval policy of {call.name!r} refused this call; it did not run."
        return "denied", ToolResult(call.call_id, text, is_error=True)
    entries.append(request_entry(run_id, call))
    return "wait", None


def rejected_text(decision: Decision) -> str:
    """The tool result a rejected call gets (the model sees it)."""
    text = f"REJECTED: {decision.by} did not approve this call; it did not run."
    return text if not decision.message else f"{text} Their message: {decision.message}"


def _check_text(value: object, what: str, *, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value or not value.isprintable():
        raise InvalidArgumentError(f"{what} must be a non-empty printable str, not {value!r}")
    return value


async def _decide(
    checkpointer: Checkpointer,
    run_id: str,
    call_id: str,
    *,
    approved: bool,
    by: str,
    message: str | None,
) -> Decision:
    check_run_id(run_id)
    _check_text(call_id, "call_id")
    _check_text(by, "by")
    if message is not None and not isinstance(message, str):
        raise InvalidArgumentError(f"message must be a str or None, not {message!r}")
    # The claim is the run's lease: it keeps the run's host and every other decider out
    # while this one checks and writes, so a call is decided once.
    async with checkpointer.claim(run_id, wait=True):
        snapshot = await checkpointer.load(run_id)
        if snapshot is None:
            raise RunNotFoundError(run_id)
        entries = snapshot.entries
        earlier = find_decision(entries, call_id)
        if earlier is not None:
            raise AlreadyDecidedError(earlier)
        if not requested(entries, call_id):
            known = any(isinstance(e, ToolCall) and e.call_id == call_id for e in entries)
            why = "it needs no approval" if known else "the run has no such call"
            raise ApprovalNotPendingError(run_id, call_id, why)
        if all(c.call_id != call_id for c in pending_tool_calls(entries)):
            raise ApprovalNotPendingError(run_id, call_id, "it already has a result")
        decision = Decision(
            run_id=run_id,
            call_id=call_id,
            approved=approved,
            by=by,
            at=time.time(),
            message=message,
        )
        head = attrs.evolve(snapshot.head, updated_at=decision.at)
        entry = SidecarEntry(APPROVAL_DECISION, decision.to_json())
        await checkpointer.append(run_id, [entry], head)
    return decision


async def approve(
    checkpointer: Checkpointer, run_id: str, call_id: str, *, by: str, message: str | None = None
) -> Decision:
    """Approve call ``call_id`` of run ``run_id`` (awaiting approval): record the decision
    in the run's checkpoint, once. Re-issue the run to run the call.

    Waits while another runner holds the run (its host, or another decider); cancel it
    (e.g. ``trio.move_on_after``) to give up. Cancellation: all or nothing.

    Raises: :class:`~stores.InvalidArgumentError` (malformed ids), :class:`RunNotFoundError`,
    :class:`ApprovalNotPendingError`, :class:`AlreadyDecidedError` (nothing written), and
    the write errors of :meth:`Checkpointer.append` (``CommitPendingError``: recorded,
    its commit retried)."""
    return await _decide(checkpointer, run_id, call_id, approved=True, by=by, message=message)


async def reject(
    checkpointer: Checkpointer, run_id: str, call_id: str, *, by: str, message: str | None = None
) -> Decision:
    """Reject call ``call_id`` of run ``run_id``: as :func:`approve`, but the resumed run
    gives the call an error result (with ``message``) instead of running it."""
    return await _decide(checkpointer, run_id, call_id, approved=False, by=by, message=message)
