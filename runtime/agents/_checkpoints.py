"""Run checkpoints, the contract: RunHead, RunSnapshot, the Checkpointer protocol, the
``if_run_exists`` policies.

A checkpoint records "how far this run got": the run's own transcript entries (added in
batches, never rewritten) and a small mutable head (agent, usage, turns, status, the
conversation it belongs to, ...). The run_id is a global key, unlike a conversation's
session id. Every ``append`` adds entries and replaces the head in one commit.

A run is *claimed* while it runs (:meth:`Checkpointer.claim`): a second runner -- another
task, process or host -- re-issuing a run that is live elsewhere gets
:class:`~stores.SessionOwnedError` before it does anything.

The backends: :class:`~runtime.agents.RuntimeCheckpointer` (``_checkpoints_runtime``)
keeps each run as a tidelog session, :class:`~runtime.agents.MemoryCheckpointer`
(``_checkpoints_memory``) is the in-memory twin for tests.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Literal, Protocol, TypeAlias, runtime_checkable

import attrs

from runtime import INTERNAL_PREFIX, JSON, InvalidArgumentError, NewEvent
from stores import MAX_ID_LENGTH, decode_json, encode_json

from ._errors import RunExistsError, RunNotFoundError
from ._home import SessionHome
from ._transcript import Entry, entry_from_json, entry_to_event, entry_to_json

__all__ = [
    "CONTROL_SESSION_PREFIX",
    "HEAD_KIND",
    "IF_RUN_EXISTS",
    "RUN_SESSION_PREFIX",
    "CheckpointOptions",
    "Checkpointer",
    "IfRunExists",
    "RunHead",
    "RunInfo",
    "RunSnapshot",
    "RunStatus",
    "begin_run",
    "check_run_id",
    "checkpoint_events",
    "control_session_id",
]

RunStatus: TypeAlias = Literal["running", "awaiting_approval", "interrupted", "completed", "failed"]
_STATUSES = ("running", "awaiting_approval", "interrupted", "completed", "failed")
IfRunExists: TypeAlias = Literal["resume", "restart", "fail", "resume_only"]
#: The ``if_run_exists`` policies.
IF_RUN_EXISTS = ("resume", "restart", "fail", "resume_only")

#: Event kind of a checkpoint head inside a run session (reserved ``tidelog.`` prefix).
HEAD_KIND = "tidelog.head"
#: Session-id prefix of the sessions that hold checkpoints (in the reserved namespace).
RUN_SESSION_PREFIX = INTERNAL_PREFIX + "run/"
#: Session-id prefix of the runs' control sessions (stop requests; ``_stopping.py``).
CONTROL_SESSION_PREFIX = INTERNAL_PREFIX + "ctl/"
_MAX_RUN_ID = MAX_ID_LENGTH - len(RUN_SESSION_PREFIX)


def check_run_id(run_id: object) -> str:
    """A run id is a non-empty ``str`` of at most 252 printable characters.

    Raises :class:`~stores.InvalidArgumentError` otherwise."""
    if not isinstance(run_id, str) or not run_id:
        raise InvalidArgumentError(f"run_id must be a non-empty str, not {run_id!r}")
    if len(run_id) > _MAX_RUN_ID:
        raise InvalidArgumentError(f"run_id is longer than {_MAX_RUN_ID} characters")
    if not run_id.isprintable():
        raise InvalidArgumentError(f"run_id contains control characters: {run_id!r}")
    return run_id


def control_session_id(run_id: str) -> str:
    """The internal session that carries ``run_id``'s control records."""
    return CONTROL_SESSION_PREFIX + check_run_id(run_id)


def _json_field(value: object, what: str) -> JSON:
    """Validate that ``value`` is exactly JSON; return a private copy."""
    try:
        return decode_json(encode_json(value))
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(f"{what}: {exc}") from None


@attrs.frozen
class RunHead:
    """The mutable part of a checkpoint, replaced at every save.

    Fields (defaults are what an older snapshot without the field loads as):
    ``agent`` (name of the active agent), ``usage`` (JSON object of token counts, ``{}``),
    ``turns`` (model turns so far, 0), ``status`` (``"running"``), ``output`` (the final
    output once completed, ``None``), ``error`` (``{"type", "message"}`` once failed,
    ``None``), ``context_state`` (opaque state of the context strategy, ``None``),
    ``updated_at`` (seconds since the epoch, 0.0), ``session_id`` (the conversation the run
    belongs to, ``None`` for a run without one: rewinding a conversation deletes only the
    checkpoints of its own runs, never those of a parent it was forked from).
    """

    agent: str
    usage: dict[str, JSON] = attrs.field(factory=dict)
    turns: int = 0
    status: RunStatus = "running"
    output: JSON = None
    error: dict[str, JSON] | None = None
    context_state: JSON = None
    updated_at: float = 0.0
    session_id: str | None = None

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.agent, str) or not self.agent:
            raise InvalidArgumentError(f"RunHead.agent must be a non-empty str: {self.agent!r}")
        if not isinstance(self.usage, dict):
            raise InvalidArgumentError("RunHead.usage must be a dict")
        if type(self.turns) is not int or self.turns < 0:
            raise InvalidArgumentError(f"RunHead.turns must be an int >= 0: {self.turns!r}")
        if self.status not in _STATUSES:
            raise InvalidArgumentError(f"RunHead.status must be one of {_STATUSES}")
        if self.error is not None and (
            not isinstance(self.error, dict) or not {"type", "message"} <= self.error.keys()
        ):
            raise InvalidArgumentError("RunHead.error must be None or {'type', 'message', ...}")
        if not isinstance(self.updated_at, int | float) or not math.isfinite(self.updated_at):
            raise InvalidArgumentError("RunHead.updated_at must be a finite number")
        if self.session_id is not None and not isinstance(self.session_id, str):
            raise InvalidArgumentError("RunHead.session_id must be a str or None")
        for name in ("usage", "output", "error", "context_state"):
            object.__setattr__(self, name, _json_field(getattr(self, name), f"RunHead.{name}"))

    def to_json(self) -> dict[str, JSON]:
        """The head as a JSON object (the stored form)."""
        return {
            "v": 1,
            "agent": self.agent,
            "usage": _json_field(self.usage, "usage"),
            "turns": self.turns,
            "status": self.status,
            "output": _json_field(self.output, "output"),
            "error": _json_field(self.error, "error"),
            "context_state": _json_field(self.context_state, "context_state"),
            "updated_at": self.updated_at,
            "session_id": self.session_id,
        }

    @classmethod
    def from_json(cls, obj: JSON) -> RunHead:
        """Load a stored head; optional fields missing (older versions) take their
        defaults, unknown fields (newer versions) are ignored."""
        if not isinstance(obj, dict) or not isinstance(obj.get("agent"), str):
            raise InvalidArgumentError(f"not a stored RunHead: {obj!r}")
        fields: dict[str, Any] = {"agent": obj["agent"]}
        for name in ("usage", "turns", "status", "output", "error", "context_state", "session_id"):
            if name in obj:
                fields[name] = obj[name]
        if "updated_at" in obj:
            updated_at = obj["updated_at"]
            if not isinstance(updated_at, int | float) or isinstance(updated_at, bool):
                raise InvalidArgumentError(f"not a stored RunHead: updated_at {updated_at!r}")
            fields["updated_at"] = float(updated_at)
        return cls(**fields)


@attrs.frozen
class RunSnapshot:
    """A run's checkpoint: its own transcript entries and its head."""

    run_id: str
    entries: tuple[Entry, ...]
    head: RunHead

    def to_json(self) -> dict[str, JSON]:
        """A self-describing JSON form (for export, or resume_from across processes)."""
        return {
            "run_id": self.run_id,
            "entries": [entry_to_json(e) for e in self.entries],
            "head": self.head.to_json(),
        }

    @classmethod
    def from_json(cls, obj: JSON) -> RunSnapshot:
        """Inverse of :meth:`to_json`."""
        if not isinstance(obj, dict) or not isinstance(obj.get("entries"), list):
            raise InvalidArgumentError("not a stored RunSnapshot")
        entries = obj["entries"]
        assert isinstance(entries, list)
        return cls(
            check_run_id(obj.get("run_id")),
            tuple(entry_from_json(e) for e in entries),
            RunHead.from_json(obj.get("head")),
        )


@attrs.frozen
class RunInfo:
    """One stored run, as listed by :meth:`Checkpointer.list`."""

    run_id: str
    head: RunHead


@runtime_checkable
class Checkpointer(Protocol):
    """Where runs keep their checkpoints. All methods are async checkpoints."""

    async def append(self, run_id: str, entries: Sequence[Entry], head: RunHead) -> None:
        """Add ``entries`` (one batch, never rewritten) and replace the head, together.
        Safe to resend after :class:`~stores.CommitPendingError`: the same save sent again
        is stored once."""
        ...

    async def load(self, run_id: str) -> RunSnapshot | None:
        """The run's snapshot, or ``None`` if nothing is stored."""
        ...

    async def delete(self, run_id: str) -> None:
        """Forget the run. Idempotent. Allowed under the caller's own claim (the
        ``restart`` policy does that): the claim goes on holding the emptied run."""
        ...

    async def list(self, *, status: RunStatus | None = None) -> list[RunInfo]:
        """Stored runs (optionally with one status), most recently saved first."""
        ...

    def claim(self, run_id: str, *, wait: bool = False) -> AbstractAsyncContextManager[None]:
        """Hold the run for the ``async with`` block: nobody else (another task, process
        or host, as far as the backend reaches) can claim it meanwhile. ``wait``: wait for
        the current holder to let go instead of raising.

        Raises :class:`~stores.SessionOwnedError` if it is held elsewhere."""
        ...

    def home(self, run_id: str) -> SessionHome | None:
        """The runtime session that holds the run's checkpoint, or ``None`` when the
        checkpointer keeps it elsewhere. The run loop flushes it in the same barrier as the
        conversation, and a completion whose history lives on the same runtime commits the
        checkpoint and the segment in one transaction. Not a checkpoint (no I/O)."""
        ...


def checkpoint_events(run_id: str, entries: Sequence[Entry], head: RunHead) -> list[NewEvent]:
    """The events of one save (the entries, then the head), with every argument checked
    except the encoding of the data, which the append that stores them does once.

    Raises :class:`~stores.InvalidArgumentError` for a bad run id, entry or head."""
    check_run_id(run_id)
    if not isinstance(head, RunHead):
        raise InvalidArgumentError(f"head must be a RunHead, not {type(head).__name__}")
    if isinstance(entries, str | bytes) or not isinstance(entries, Sequence):
        raise InvalidArgumentError("entries must be a sequence of transcript entries")
    events = [entry_to_event(e) for e in entries]
    events.append(NewEvent(HEAD_KIND, head.to_json()))
    return events


@attrs.frozen
class CheckpointOptions:
    """How a run uses checkpoints (after lovia's ``CheckpointOptions``; lovia is the Python
    agent framework whose Session/Checkpoint/Runner design this layer follows).

    ``if_run_exists`` decides what happens when ``run_id`` already has a checkpoint:

    ============== ============================================ =====================
    policy          a checkpoint is stored                        nothing is stored
    ============== ============================================ =====================
    ``resume``      resume it (a completed run is replayed)       start a new run
    ``restart``     delete it, then start a new run               start a new run
    ``fail``        raise :class:`~stores.RunExistsError`         start a new run
    ``resume_only`` resume it (a completed run is replayed)       raise ``RunNotFoundError``
    ============== ============================================ =====================

    ``delete_on_success`` deletes the checkpoint once the run completed (its entries are
    in the conversation history by then), also when a completed run is replayed.
    ``resume_from`` resumes from a snapshot you hold instead of the stored one; its run_id
    must equal ``run_id``, or ``run_id`` may be left out: it is then the snapshot's.
    ``wait_for_owner``: when another runner holds the run (a live
    run in another task, process or host), wait for it to let go instead of raising
    :class:`~stores.SessionOwnedError`. ``wait_for_decisions``: when the run stops
    awaiting approval, let go of it, follow its checkpoint (the runtime's tail) until
    every pending call is decided -- by any process -- and continue it, instead of
    returning; cancel the call to stop waiting (the run stays awaiting approval).

    Raises :class:`~stores.InvalidArgumentError` for any invalid field.
    """

    checkpointer: Checkpointer
    run_id: str = ""
    if_run_exists: IfRunExists = attrs.field(default="resume", kw_only=True)
    delete_on_success: bool = attrs.field(default=False, kw_only=True)
    resume_from: RunSnapshot | None = attrs.field(default=None, kw_only=True)
    wait_for_owner: bool = attrs.field(default=False, kw_only=True)
    wait_for_decisions: bool = attrs.field(default=False, kw_only=True)

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.checkpointer, Checkpointer):
            raise InvalidArgumentError(
                f"checkpointer must implement Checkpointer, not {type(self.checkpointer).__name__}"
            )
        if self.resume_from is not None and not isinstance(self.resume_from, RunSnapshot):
            raise InvalidArgumentError("resume_from must be a RunSnapshot or None")
        if self.run_id in ("", None):
            if self.resume_from is None:
                raise InvalidArgumentError("CheckpointOptions needs a run_id (or resume_from)")
            object.__setattr__(self, "run_id", self.resume_from.run_id)
        check_run_id(self.run_id)
        if self.if_run_exists not in IF_RUN_EXISTS:
            raise InvalidArgumentError(
                f"if_run_exists must be one of {IF_RUN_EXISTS}, not {self.if_run_exists!r}"
            )
        if not isinstance(self.delete_on_success, bool):
            raise InvalidArgumentError("delete_on_success must be a bool")
        if not isinstance(self.wait_for_owner, bool):
            raise InvalidArgumentError("wait_for_owner must be a bool")
        if not isinstance(self.wait_for_decisions, bool):
            raise InvalidArgumentError("wait_for_decisions must be a bool")
        if self.wait_for_decisions and self.checkpointer.home(self.run_id) is None:
            raise InvalidArgumentError(
                "wait_for_decisions needs a checkpointer on a runtime (it follows the run's "
                "session for the decisions)"
            )
        if self.resume_from is not None and self.resume_from.run_id != self.run_id:
            raise InvalidArgumentError(
                f"resume_from is run {self.resume_from.run_id!r}, not {self.run_id!r}"
            )


async def begin_run(options: CheckpointOptions) -> RunSnapshot | None:
    """Apply ``options.if_run_exists``: the snapshot to resume (or replay, if its status is
    completed), or ``None`` to start a new run.

    Call it while holding the run's claim (:meth:`Checkpointer.claim`), so that what it
    loads cannot change under the run.

    Raises: :class:`RunExistsError` (``fail`` and a checkpoint exists),
    :class:`RunNotFoundError` (``resume_only`` and none exists).
    """
    existing = options.resume_from
    if existing is None:
        existing = await options.checkpointer.load(options.run_id)
    policy = options.if_run_exists
    if existing is None:
        if policy == "resume_only":
            raise RunNotFoundError(options.run_id)
        return None
    if policy == "fail":
        raise RunExistsError(options.run_id, existing.head.status)
    if policy == "restart":
        await options.checkpointer.delete(options.run_id)
        return None
    return existing
