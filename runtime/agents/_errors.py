"""The agent layer's errors: runs, agents and fork points (all :class:`~stores.TidelogError`)."""

from __future__ import annotations

from stores import InvalidArgumentError, TidelogError

__all__ = [
    "AgentNotFoundError",
    "ForkPointError",
    "MaxTurnsExceededError",
    "RunExistsError",
    "RunNotFoundError",
]


class ForkPointError(InvalidArgumentError):
    """A fork point falls inside a run whose tool calls have no results yet (the child
    would start with dangling calls). Fork at the run's end or start, or pass
    ``allow_open_run=True``. Nothing was created. ``pending`` names the open call ids."""

    def __init__(self, session_id: str, at_seq: int, pending: list[str]) -> None:
        self.session_id = session_id
        self.at_seq = at_seq
        self.pending = pending
        super().__init__(
            f"session {session_id!r}: seq {at_seq} is inside a run with unanswered tool calls "
            f"{pending}; fork elsewhere or pass allow_open_run=True"
        )


class RunExistsError(TidelogError):
    """A run was started with ``if_run_exists="fail"`` but a checkpoint for its run_id is
    stored (whatever its status). Nothing changed. Pick another run_id, or another policy.
    ``run_id`` and ``status`` name what was found."""

    def __init__(self, run_id: str, status: str) -> None:
        self.run_id = run_id
        self.status = status
        super().__init__(f"run {run_id!r} already has a checkpoint (status {status})")


class RunNotFoundError(TidelogError, KeyError):
    """``if_run_exists="resume_only"`` found no checkpoint for the run_id. Nothing changed.
    Also a :class:`KeyError`."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        super().__init__(run_id)

    def __str__(self) -> str:
        return f"no checkpoint is stored for run {self.run_id!r}"


class AgentNotFoundError(TidelogError):
    """Resuming an in-flight run whose recorded active agent is not reachable from the
    entry agent's handoff graph (renamed or removed). The run cannot continue safely; run
    the deployment that knows the agent, or restart the run. ``agent`` names it."""

    def __init__(self, run_id: str, agent: str) -> None:
        self.run_id = run_id
        self.agent = agent
        super().__init__(f"run {run_id!r}: agent {agent!r} is not in the handoff graph")


class MaxTurnsExceededError(TidelogError):
    """A run used ``max_turns`` model turns without finishing. Its checkpoint is saved
    as failed; raise ``max_turns`` or change the agent."""

    def __init__(self, run_id: str, max_turns: int) -> None:
        self.run_id = run_id
        self.max_turns = max_turns
        super().__init__(f"run {run_id!r} exceeded {max_turns} turns")

