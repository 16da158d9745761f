"""The run controls of the inspector's write API: approve or reject a call that awaits
approval, ask a run to stop -- through :func:`runtime.agents.approve`,
:func:`~runtime.agents.reject` and :func:`~runtime.agents.request_stop` only, each outcome
answered as the HTTP API documents (``docs/inspector.md``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import trio

from runtime import (
    JSON,
    CommitPendingError,
    InvalidArgumentError,
    Runtime,
    StoreError,
    UnwrittenError,
)
from runtime.agents import (
    AlreadyDecidedError,
    ApprovalNotPendingError,
    Decision,
    RunNotFoundError,
    ToolCall,
    approve,
    checkpoints,
    reject,
    request_stop,
)

from . import _params as params
from ._errors import ApiError

__all__ = ["DECIDE_WAIT", "decide", "stop"]

T = TypeVar("T")

#: Seconds a decision waits for the run's claim (held by the run's host while it runs, or
#: by another decider) before it is answered 409 "busy" (nothing written).
DECIDE_WAIT = 5.0
#: Who decided or stopped, when the request does not say.
DEFAULT_BY = "inspector"
DEFAULT_REASON = "stopped from the inspector"
_FIELDS = ("run_id", "call_id", "by", "message", "reason")


def _field_of(exc: Exception) -> str | None:
    """The body field an argument error of the agent layer names (its message starts so)."""
    text = str(exc)
    return next((name for name in _FIELDS if text.startswith(name)), None)


async def _written(call: Callable[[], Awaitable[T]]) -> T:
    """``call()``, its write errors as answers that say whether it was recorded (the
    write contract): ``CommitPendingError`` -- recorded, its commit retried: do not send it
    again -- or a store failure -- nothing recorded: send it again."""
    try:
        return await call()
    except CommitPendingError as exc:
        raise ApiError(
            503, f"recorded, but its commit is retried: {exc}", None, {"recorded": True}
        ) from None
    except (UnwrittenError, StoreError) as exc:
        raise ApiError(
            503, f"nothing was recorded ({exc}); try again", None, {"recorded": False}
        ) from None
    except RunNotFoundError as exc:
        raise ApiError(404, f"no run {exc.run_id!r} is stored", "run_id") from None


async def _not_pending(rt: Runtime, exc: ApprovalNotPendingError) -> ApiError:
    """404 for a call the run does not have, else 409 (it needs no approval, or it has a
    result already), naming ``call_id``."""
    snapshot = await checkpoints(rt).load(exc.run_id)
    entries = () if snapshot is None else snapshot.entries
    known = any(isinstance(e, ToolCall) and e.call_id == exc.call_id for e in entries)
    return ApiError(409 if known else 404, str(exc), "call_id")


async def decide(rt: Runtime, raw: bytes, *, approved: bool) -> Decision:
    """``POST /api/approve`` / ``/api/reject`` with ``{"run_id", "call_id", "by"?,
    "message"?}``: the decision recorded (once), or an :class:`ApiError`."""
    body = params.json_body(raw)
    run_id = params.body_text(body, "run_id", required=True)
    call_id = params.body_text(body, "call_id", required=True)
    by = params.body_text(body, "by") or DEFAULT_BY
    message = params.body_text(body, "message")
    assert run_id is not None and call_id is not None
    act = approve if approved else reject
    decision: Decision | None = None
    # Cancelling approve / reject is all or nothing: on the timeout nothing was written.
    with trio.move_on_after(DECIDE_WAIT):
        try:
            decision = await _written(
                lambda: act(checkpoints(rt), run_id, call_id, by=by, message=message)
            )
        except AlreadyDecidedError as exc:
            extra: dict[str, JSON] = {"decision": exc.decision.to_json()}
            raise ApiError(409, str(exc), "call_id", extra) from None
        except ApprovalNotPendingError as exc:
            raise await _not_pending(rt, exc) from None
        except InvalidArgumentError as exc:
            raise ApiError(400, str(exc), _field_of(exc)) from None
    if decision is None:
        raise ApiError(
            409,
            f"run {run_id!r} is held by a runner (its host, or another decider) for more "
            f"than {DECIDE_WAIT:g} s; nothing was written: try again",
            "run_id",
        )
    return decision


async def stop(rt: Runtime, raw: bytes) -> tuple[int, dict[str, JSON]]:
    """``POST /api/stop`` with ``{"run_id", "by"?, "reason"?}``: 202 when a stop request was
    written for a live run, 200 (nothing written) when the run is not running or no host
    runs it; the body says which, and the run's status."""
    body = params.json_body(raw)
    run_id = params.body_text(body, "run_id", required=True)
    by = params.body_text(body, "by") or DEFAULT_BY
    reason = params.body_text(body, "reason") or DEFAULT_REASON
    assert run_id is not None
    try:
        outcome = await _written(lambda: request_stop(rt, run_id, by=by, reason=reason))
    except InvalidArgumentError as exc:
        raise ApiError(400, str(exc), _field_of(exc)) from None
    answer: dict[str, JSON] = {
        "run_id": outcome.run_id,
        "requested": outcome.requested,
        "status": outcome.status,
    }
    return (202 if outcome.requested else 200), answer
