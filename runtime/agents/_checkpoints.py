"""Run checkpoints: RunHead, RunSnapshot, the Checkpointer contract and its backends.

A checkpoint records "how far this run got": the run's own transcript entries (added in
batches, never rewritten) and a small mutable head (agent, usage, turns, status, the
conversation it belongs to, ...). The run_id is a global key, unlike a conversation's
session id. Every ``append`` adds entries and replaces the head in one commit.

A run is *claimed* while it runs (:meth:`Checkpointer.claim`): a second runner -- another
task, process or host -- re-issuing a run that is live elsewhere gets
:class:`~stores.SessionOwnedError` before it does anything.

:class:`RuntimeCheckpointer` keeps each run as a tidelog session in the runtime's reserved
namespace (``tidelog/run/<run_id>``), so checkpoints ride the same group commit, leases
and durability barriers as conversations -- the claim *is* the run session's lease, and a
run's completion can commit together with its history segment.
:class:`MemoryCheckpointer` is the in-memory twin for tests.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from typing import Any, Literal, Protocol, TypeAlias, runtime_checkable

import attrs
import trio

from runtime import (
    INTERNAL_PREFIX,
    JSON,
    InvalidArgumentError,
    NewEvent,
    Runtime,
    SessionOwnedError,
    SessionWriter,
    TidelogError,
)
from stores import prepare_events
from stores._records import MAX_ID_LENGTH, decode_json, encode_json

from ._errors import RunExistsError, RunNotFoundError
from ._transcript import Entry, entry_from_json, entry_from_stored, entry_to_event, entry_to_json

__all__ = [
    "IF_RUN_EXISTS",
    "CheckpointOptions",
    "Checkpointer",
    "IfRunExists",
    "MemoryCheckpointer",
    "RunHead",
    "RunInfo",
    "RunSnapshot",
    "RunStatus",
    "RuntimeCheckpointer",
    "begin_run",
    "check_run_id",
]

RunStatus: TypeAlias = Literal["running", "interrupted", "completed", "failed"]
_STATUSES = ("running", "interrupted", "completed", "failed")
IfRunExists: TypeAlias = Literal["resume", "restart", "fail", "resume_only"]
#: The ``if_run_exists`` policies.
IF_RUN_EXISTS = ("resume", "restart", "fail", "resume_only")

#: Event kind of a checkpoint head inside a run session (reserved ``tidelog.`` prefix).
HEAD_KIND = "tidelog.head"
#: Session-id prefix of the sessions that hold checkpoints (in the reserved namespace).
RUN_SESSION_PREFIX = INTERNAL_PREFIX + "run/"
#: How often a claim that waits for the run's owner tries again (seconds).
CLAIM_POLL = 0.1
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
        """Add ``entries`` (one batch, never rewritten) and replace the head, together."""
        ...

    async def load(self, run_id: str) -> RunSnapshot | None:
        """The run's snapshot, or ``None`` if nothing is stored."""
        ...

    async def delete(self, run_id: str) -> None:
        """Forget the run. Idempotent."""
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


def _check_append(run_id: str, entries: Sequence[Entry], head: RunHead) -> list[NewEvent]:
    check_run_id(run_id)
    if not isinstance(head, RunHead):
        raise InvalidArgumentError(f"head must be a RunHead, not {type(head).__name__}")
    if isinstance(entries, str | bytes) or not isinstance(entries, Sequence):
        raise InvalidArgumentError("entries must be a sequence of transcript entries")
    events = [entry_to_event(e) for e in entries]
    events.append(NewEvent(HEAD_KIND, head.to_json()))
    prepare_events(events)  # validate everything before anything is stored
    return events


class MemoryCheckpointer:
    """An in-memory :class:`Checkpointer` (gone with the process; claims reach the tasks
    of this process)."""

    def __init__(self) -> None:
        self._runs: dict[str, tuple[list[dict[str, JSON]], dict[str, JSON]]] = {}
        self._claimed: dict[str, trio.Event] = {}

    @asynccontextmanager
    async def claim(self, run_id: str, *, wait: bool = False) -> AsyncIterator[None]:
        """See :meth:`Checkpointer.claim`."""
        check_run_id(run_id)
        while run_id in self._claimed:
            if not wait:
                raise SessionOwnedError(run_id, "another task of this process runs it")
            await self._claimed[run_id].wait()
        await trio.lowlevel.checkpoint()
        released = self._claimed[run_id] = trio.Event()
        try:
            yield
        finally:
            del self._claimed[run_id]
            released.set()

    async def append(self, run_id: str, entries: Sequence[Entry], head: RunHead) -> None:
        """See :meth:`Checkpointer.append`."""
        _check_append(run_id, entries, head)
        await trio.lowlevel.checkpoint()
        stored, _ = self._runs.get(run_id, ([], {}))
        self._runs[run_id] = (stored + [entry_to_json(e) for e in entries], head.to_json())

    async def load(self, run_id: str) -> RunSnapshot | None:
        """See :meth:`Checkpointer.load`."""
        check_run_id(run_id)
        await trio.lowlevel.checkpoint()
        if run_id not in self._runs:
            return None
        entries, head = self._runs[run_id]
        return RunSnapshot(
            run_id, tuple(entry_from_json(e) for e in entries), RunHead.from_json(head)
        )

    async def delete(self, run_id: str) -> None:
        """See :meth:`Checkpointer.delete`."""
        check_run_id(run_id)
        await trio.lowlevel.checkpoint()
        self._runs.pop(run_id, None)

    async def list(self, *, status: RunStatus | None = None) -> list[RunInfo]:
        """See :meth:`Checkpointer.list`."""
        await trio.lowlevel.checkpoint()
        infos = [
            RunInfo(run_id, RunHead.from_json(head)) for run_id, (_, head) in self._runs.items()
        ]
        infos = [i for i in infos if status is None or i.head.status == status]
        infos.sort(key=lambda i: (-i.head.updated_at, i.run_id))
        return infos


class RuntimeCheckpointer:
    """A :class:`Checkpointer` on a tidelog runtime: run ``R`` is the internal session
    ``tidelog/run/R`` (get the runtime's one with :func:`runtime.agents.checkpoints`).

    Each append is one atomic append (entries, then the head event) through the session's
    writer; it returns once committed. ``Runtime.flush()`` makes checkpoints durable like
    everything else. A claim is an exclusive writer of the run session: its lease keeps
    every other runtime (any process, any host on the same database) out.
    """

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self._claims: dict[str, SessionWriter] = {}

    @staticmethod
    def session_id(run_id: str) -> str:
        """The tidelog session that holds ``run_id``'s checkpoint."""
        return RUN_SESSION_PREFIX + check_run_id(run_id)

    @staticmethod
    def _header(run_id: str) -> dict[str, JSON]:
        return {"tidelog": "checkpoint", "run_id": run_id}

    def claimed_writer(self, run_id: str) -> SessionWriter | None:
        """The writer of a run claimed by this checkpointer, if it is claimed here."""
        return self._claims.get(run_id)

    @asynccontextmanager
    async def claim(self, run_id: str, *, wait: bool = False) -> AsyncIterator[None]:
        """See :meth:`Checkpointer.claim`. Held by the run session's lease; while claimed,
        :meth:`append` writes through it. A claim that wrote nothing leaves no session
        behind."""
        sid = self.session_id(run_id)
        writer: SessionWriter | None = None
        try:
            async with AsyncExitStack() as stack:
                while True:
                    try:
                        writer = await stack.enter_async_context(
                            self.runtime.open_session(
                                sid, header=self._header(run_id), internal=True
                            )
                        )
                        break
                    except SessionOwnedError:
                        if not wait:
                            raise
                        await trio.sleep(CLAIM_POLL)
                self._claims[run_id] = writer
                try:
                    yield
                finally:
                    del self._claims[run_id]
        finally:
            if writer is not None and writer.committed_head == 0:
                # Nothing was saved: leave no empty run behind.
                # (It stays if it was claimed again meanwhile, or the store is failing.)
                with trio.CancelScope(shield=True), contextlib.suppress(TidelogError):
                    await self.runtime.delete(sid)

    async def append(self, run_id: str, entries: Sequence[Entry], head: RunHead) -> None:
        """See :meth:`Checkpointer.append`. Raises as ``SessionWriter.append`` (a
        :class:`~stores.CommitPendingError` means the entries *were* accepted)."""
        events = _check_append(run_id, entries, head)
        claimed = self._claims.get(run_id)
        if claimed is not None:
            await claimed.append(events)
            return
        async with self.runtime.open_session(
            self.session_id(run_id), header=self._header(run_id), shared=True, internal=True
        ) as writer:
            await writer.append(events)

    async def load(self, run_id: str) -> RunSnapshot | None:
        """See :meth:`Checkpointer.load`."""
        entries: list[Entry] = []
        head: RunHead | None = None
        async for event in self.runtime.iter_events(self.session_id(run_id)):
            if event.kind == HEAD_KIND:
                head = RunHead.from_json(event.data)
            else:
                entries.append(entry_from_stored(event))
        if head is None:
            return None
        return RunSnapshot(run_id, tuple(entries), head)

    async def delete(self, run_id: str) -> None:
        """See :meth:`Checkpointer.delete`. Raises :class:`~stores.SessionOwnedError`
        while the run is claimed (here or elsewhere)."""
        await self.runtime.delete(self.session_id(run_id))

    async def list(self, *, status: RunStatus | None = None) -> list[RunInfo]:
        """See :meth:`Checkpointer.list`."""
        infos: list[RunInfo] = []
        for info in await self.runtime.list_sessions(include_internal=True):
            if not info.id.startswith(RUN_SESSION_PREFIX) or info.head == 0:
                continue
            run_id = info.id[len(RUN_SESSION_PREFIX) :]
            last = await self.runtime.read(info.id, limit=1, from_end=True)
            if not last or last[-1].kind != HEAD_KIND:
                continue
            head = RunHead.from_json(last[-1].data)
            if status is None or head.status == status:
                infos.append(RunInfo(run_id, head))
        infos.sort(key=lambda i: (-i.head.updated_at, i.run_id))
        return infos


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
    must equal ``run_id``. ``wait_for_owner``: when another runner holds the run (a live
    run in another task, process or host), wait for it to let go instead of raising
    :class:`~stores.SessionOwnedError`.

    Raises :class:`~stores.InvalidArgumentError` for any invalid field.
    """

    checkpointer: Checkpointer
    run_id: str
    if_run_exists: IfRunExists = attrs.field(default="resume", kw_only=True)
    delete_on_success: bool = attrs.field(default=False, kw_only=True)
    resume_from: RunSnapshot | None = attrs.field(default=None, kw_only=True)
    wait_for_owner: bool = attrs.field(default=False, kw_only=True)

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.checkpointer, Checkpointer):
            raise InvalidArgumentError(
                f"checkpointer must implement Checkpointer, not {type(self.checkpointer).__name__}"
            )
        check_run_id(self.run_id)
        if self.if_run_exists not in IF_RUN_EXISTS:
            raise InvalidArgumentError(
                f"if_run_exists must be one of {IF_RUN_EXISTS}, not {self.if_run_exists!r}"
            )
        if not isinstance(self.delete_on_success, bool):
            raise InvalidArgumentError("delete_on_success must be a bool")
        if not isinstance(self.wait_for_owner, bool):
            raise InvalidArgumentError("wait_for_owner must be a bool")
        if self.resume_from is not None:
            if not isinstance(self.resume_from, RunSnapshot):
                raise InvalidArgumentError("resume_from must be a RunSnapshot or None")
            if self.resume_from.run_id != self.run_id:
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
