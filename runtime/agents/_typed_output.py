"""Typed output per run (lovia's ``Runner.run(..., output_type=...)``; lovia being the
Python agent framework whose Session/Checkpoint/Runner design this layer follows).

``output_type`` on the run call overrides the agent's (every agent of the run answers in
it). The validated value is stored as JSON in the completed checkpoint; a replay rebuilds
it with the output type it is given (pass it again, like ``context``): a pydantic model
comes back as that model, and a ``None`` value as ``None`` with ``status="completed"``
(a run that produced nothing is not ``"completed"``). A value that cannot be stored as
JSON (NaN, infinity...) fails the run with :class:`OutputNotStorableError`, its failed
head naming why, and re-issuing such a run refuses with the same error instead of
asking the model again or returning something else.
"""

from __future__ import annotations

from typing import Any

from stores import JSON, InvalidArgumentError, TidelogError, encode_json

from ._checkpoints import RunSnapshot
from ._output import OutputSchema

__all__ = ["OutputNotStorableError", "check_storable", "output_schema", "refuse_unstorable"]


class OutputNotStorableError(TidelogError):
    """The run's final output cannot be stored as JSON (raised when the run completes;
    the run is checkpointed as failed with this error). Re-issuing the run raises it
    again (it is never completed with a different value): fix the output type (or the
    model's answer) and start a new run."""

    def __init__(self, run_id: str, reason: str) -> None:
        self.run_id = run_id
        self.reason = reason
        super().__init__(f"run {run_id!r}: the final output cannot be stored: {reason}")


def output_schema(output_type: Any) -> OutputSchema | None:
    """The schema of a run-level ``output_type`` (``None``: use the agent's)."""
    if output_type is None:
        return None
    return OutputSchema.of(output_type)


def check_storable(run_id: str, output: JSON) -> None:
    """Raise :class:`OutputNotStorableError` unless ``output`` is exactly JSON."""
    try:
        encode_json(output)
    except InvalidArgumentError as exc:
        raise OutputNotStorableError(run_id, str(exc)) from None


def refuse_unstorable(snapshot: RunSnapshot) -> None:
    """Re-raise the error of a run that failed because its output could not be stored."""
    error = snapshot.head.error
    if snapshot.head.status != "failed" or not isinstance(error, dict):
        return
    if error.get("type") == OutputNotStorableError.__name__:
        message = error.get("message")
        prefix = f"run {snapshot.run_id!r}: the final output cannot be stored: "
        text = message if isinstance(message, str) else ""
        raise OutputNotStorableError(snapshot.run_id, text.removeprefix(prefix))
