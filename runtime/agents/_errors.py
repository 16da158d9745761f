"""The agent layer's errors: runs, agents, fork points and model providers (all
:class:`~stores.TidelogError`)."""

from __future__ import annotations

import trio

from stores import InvalidArgumentError, TidelogError

__all__ = [
    "AgentNotFoundError",
    "ForkPointError",
    "MaxTurnsExceededError",
    "ModelConnectionError",
    "ModelError",
    "ModelRateLimitError",
    "ModelRequestError",
    "ModelResponseError",
    "ModelServerError",
    "ModelTimeoutError",
    "RunExistsError",
    "RunNotFoundError",
    "error_leaves",
    "first_cause",
    "is_interruption",
    "unwrap_group",
]


def error_leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside ``exc`` (nested exception groups flattened, in order);
    ``[exc]`` for a plain exception."""
    if not isinstance(exc, BaseExceptionGroup):
        return [exc]
    return [leaf for member in exc.exceptions for leaf in error_leaves(member)]


def unwrap_group(exc: BaseException) -> BaseException:
    """The one exception that ``exc`` holds when it is a (nested) exception group of one,
    else ``exc`` itself: a group of several errors stays a group, since hiding any of
    them would lose information. Nurseries group what their tasks raise; the agent layer
    and the command line report the plain error with this."""
    leaves = error_leaves(exc)
    return leaves[0] if len(leaves) == 1 else exc


def first_cause(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """What stopped a run's concurrent tools, as the plain error the run's callers
    expect: the group's only error, a cancellation if any (so the run is
    "interrupted"), or else the group itself (several independent failures: none is
    hidden)."""
    leaves = error_leaves(group)
    if len(leaves) == 1:
        return leaves[0]
    cancelled = [e for e in leaves if isinstance(e, trio.Cancelled)]
    return cancelled[0] if cancelled else group


def is_interruption(exc: BaseException) -> bool:
    """Cancellation, Ctrl-C or exit (possibly grouped): the run is interrupted."""
    if isinstance(exc, BaseExceptionGroup):
        return all(is_interruption(e) for e in exc.exceptions)
    return isinstance(exc, trio.Cancelled | KeyboardInterrupt | SystemExit)


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


class ModelError(TidelogError):
    """A model provider's request failed for good (after the retries its
    :class:`~runtime.agents.RetryPolicy` allows, if the failure is retryable). The run
    fails: its checkpoint records this error's type and message, and re-issuing the run
    resumes it (the turn is asked again). Raised ``from`` the SDK's own exception.

    Fields: ``provider`` (``"openai"``, ``"anthropic"``), ``status`` (the HTTP status, or
    ``None`` without one), ``attempts`` (requests made), ``retryable`` (whether this kind
    of failure is retried: false means a retry could not help, e.g. a bad request or an
    invalid key). Subclasses say what failed."""

    def __init__(
        self,
        provider: str,
        message: str,
        *,
        status: int | None = None,
        attempts: int = 1,
        retryable: bool = False,
    ) -> None:
        self.provider = provider
        self.status = status
        self.attempts = attempts
        self.retryable = retryable
        self.message = message
        where = f"{provider}" + (f" HTTP {status}" if status is not None else "")
        tries = f" (after {attempts} attempts)" if attempts > 1 else ""
        super().__init__(f"{where}: {message}{tries}")


class ModelTimeoutError(ModelError):
    """The provider did not answer (or stopped streaming) within the timeout."""


class ModelConnectionError(ModelError):
    """The connection to the provider failed or broke (also mid-stream)."""


class ModelRateLimitError(ModelError):
    """HTTP 429: too many requests or tokens. Its ``Retry-After`` was honoured while the
    retry budget allowed."""


class ModelServerError(ModelError):
    """HTTP 5xx (or 408/409), or an error event in the middle of a stream."""


class ModelRequestError(ModelError):
    """HTTP 4xx other than 408, 409 and 429: the request itself is refused (bad request,
    authentication, permission, not found); or, without a status, the adapter cannot
    send it (a message part the API does not take). Not retried: fix the request or
    the key."""


class ModelResponseError(ModelError):
    """The provider's answer could not be read: a malformed body or an unexpected shape.
    Not retried within the turn; re-issuing the run asks again."""
