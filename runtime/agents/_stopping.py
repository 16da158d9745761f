"""Stopping a run from elsewhere: a stop request is a record in the run's control session
(``tidelog/ctl/<run_id>``), which the run's host follows with the runtime's tail.

:func:`request_stop` (any process or host sharing the store) answers a run that is not
running -- finished, awaiting approval, interrupted, or with no host holding it -- with its
state and writes nothing; for a live run it appends one ``tidelog.stop`` record. The host
notices it as the tail delivers the commit, cancels a model request in flight (nothing of
a turn is checkpointed before its whole answer is in), never a started tool body, and
stops at the next safe point: the run is checkpointed ``interrupted`` with the reason, its
completed turns kept, and ``Runner.run`` returns a result with status ``interrupted``.
Re-issuing the run resumes it.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import attrs
import trio

from runtime import (
    JSON,
    InvalidArgumentError,
    NewEvent,
    Runtime,
    SessionOwnedError,
    TidelogError,
)

from ._checkpoints import RunStatus, check_run_id, control_session_id
from ._errors import RunNotFoundError
from ._registry import checkpoints

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "STOP_KIND",
    "StopCursor",
    "StopOutcome",
    "StopRequested",
    "control_session_id",
    "request_stop",
    "settle_cursor",
    "stop_cursor",
    "watch_stops",
]

logger = logging.getLogger("tidelog")

#: Event kind of a stop request in a run's control session.
STOP_KIND = "tidelog.stop"


class StopRequested(BaseException):
    """Raised inside the run loop at the safe point after a stop request; the loop
    records the run as interrupted and ``Runner.run`` returns."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@attrs.frozen(kw_only=True)
class StopOutcome:
    """What :func:`request_stop` did: ``requested`` (a stop record was written for a live
    run) or not, and the run's ``status`` as stored when it answered."""

    run_id: str
    requested: bool
    status: RunStatus


async def request_stop(runtime: Runtime, run_id: str, *, by: str, reason: str) -> StopOutcome:
    """Ask the live run ``run_id`` (checkpointed on ``runtime``'s store) to stop at its
    next safe point. A run that is not running, or that no host holds, is answered with
    its state and nothing is written.

    Raises: :class:`~stores.InvalidArgumentError` (malformed arguments),
    :class:`RunNotFoundError`, and the write errors of ``SessionWriter.append``
    (``CommitPendingError``: the request is recorded, its commit retried)."""
    check_run_id(run_id)
    for value, what in ((by, "by"), (reason, "reason")):
        if not isinstance(value, str) or not value:
            raise InvalidArgumentError(f"{what} must be a non-empty str, not {value!r}")
    checkpointer = checkpoints(runtime)
    snapshot = await checkpointer.load(run_id)
    if snapshot is None:
        raise RunNotFoundError(run_id)
    status = snapshot.head.status
    if status != "running":
        return StopOutcome(run_id=run_id, requested=False, status=status)
    try:  # is it held? (a host runs it while it holds the run's claim)
        async with checkpointer.claim(run_id):
            pass
    except SessionOwnedError:
        pass
    else:
        return StopOutcome(run_id=run_id, requested=False, status=status)
    data: dict[str, JSON] = {"by": by, "reason": reason, "at": time.time()}
    async with runtime.open_session(
        control_session_id(run_id),
        header={"tidelog": "control", "run_id": run_id, "session_id": snapshot.head.session_id},
        shared=True,
        internal=True,
    ) as writer:
        await writer.append([NewEvent(STOP_KIND, data)])
    return StopOutcome(run_id=run_id, requested=True, status=status)


@attrs.frozen
class StopCursor:
    """The run's control session as a host found it before claiming the run: its
    ``head`` and ``created_at`` (``None``: there was none)."""

    head: int
    created_at: float | None


async def stop_cursor(runtime: Runtime, run_id: str) -> StopCursor:
    """Where a host starting ``run_id`` follows its control session from (requests
    written before it started are for an earlier host); read before the claim, so that
    no request written once the claim is held can be missed."""
    info = await runtime.stat(control_session_id(run_id))
    return StopCursor(0, None) if info is None else StopCursor(info.head, info.created_at)


async def settle_cursor(runtime: Runtime, run_id: str, before: StopCursor) -> int:
    """Once the host holds the claim: the seq to follow the control session from.
    ``before.head``, unless the session was deleted since (its run's checkpoint was
    deleted meanwhile; a delete takes the claim first, so none comes once the host holds
    it): then from its start, as every record in a session made anew was written after
    the host began."""
    info = await runtime.stat(control_session_id(run_id))
    if info is None or info.created_at != before.created_at or info.head < before.head:
        return 0
    return before.head


async def watch_stops(
    runtime: Runtime, run_id: str, since: int, on_stop: Callable[[str], None]
) -> None:
    """Follow the run's control session from ``since``; call ``on_stop(reason)`` at the
    first stop request. Never raises (a failing tail is logged: the run goes on)."""
    try:
        async for event in runtime.tail(control_session_id(run_id), since_seq=since):
            if event.kind == STOP_KIND:
                data = event.data if isinstance(event.data, dict) else {}
                reason = data.get("reason")
                by = data.get("by")
                on_stop(f"{reason} (asked by {by})" if by else str(reason))
                return
    except TidelogError as exc:
        logger.warning("run %s: stop requests cannot be followed: %r", run_id, exc)
    await trio.lowlevel.checkpoint()
