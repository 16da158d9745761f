"""Retention: which stored sessions a policy no longer keeps, and deleting them safely.

:func:`checkpoint_sessions` lists the run checkpoints as stored (their internal
sessions, with the conversation each belongs to); :func:`prune` applies a policy --
conversations not updated for a while (with their checkpoints and archive), checkpoints
of completed runs, all but the last runs' checkpoints of each conversation, orphaned
checkpoints -- and never deletes a session that a live writer holds or that a remaining
fork still borrows events from. Written against the public runtime API only.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence

import attrs

from runtime import (
    INTERNAL_PREFIX,
    InvalidArgumentError,
    Runtime,
    SessionInfo,
    SessionOwnedError,
)

from ._checkpoints import CONTROL_SESSION_PREFIX, HEAD_KIND, RUN_SESSION_PREFIX, RunHead
from ._history_runtime import RuntimeHistory
from ._registry import checkpoints

__all__ = [
    "CheckpointSession",
    "PruneAction",
    "PruneReport",
    "checkpoint_sessions",
    "control_sessions",
    "conversation_sessions",
    "delete_owned",
    "prune",
]

_PAGE = 1000


@attrs.frozen
class CheckpointSession:
    """A run checkpoint as stored: the ``run_id``, its internal ``session`` and its saved
    ``head`` (``None``: no head was saved -- an empty or damaged checkpoint)."""

    run_id: str
    session: SessionInfo
    head: RunHead | None

    @property
    def conversation(self) -> str | None:
        """The conversation the run belongs to (``None`` if unknown)."""
        return None if self.head is None else self.head.session_id


async def _sessions(rt: Runtime, prefix: str | None) -> list[SessionInfo]:
    found: list[SessionInfo] = []
    cursor: str | None = None
    while True:
        page = await rt.list_sessions(
            limit=_PAGE, prefix=prefix, after=cursor, include_internal=True
        )
        found += page
        if len(page) < _PAGE:
            return found
        cursor = page[-1].id


async def checkpoint_sessions(rt: Runtime) -> list[CheckpointSession]:
    """Every stored run checkpoint (``tidelog/run/R`` sessions), by session id: one
    read of the last event of each."""
    found: list[CheckpointSession] = []
    for info in await _sessions(rt, RUN_SESSION_PREFIX):
        last = await rt.read(info.id, limit=1, from_end=True)
        head = None
        if last and last[0].kind == HEAD_KIND:
            try:
                head = RunHead.from_json(last[0].data)
            except InvalidArgumentError:
                head = None
        found.append(CheckpointSession(info.id[len(RUN_SESSION_PREFIX) :], info, head))
    return found


async def control_sessions(rt: Runtime) -> dict[str, SessionInfo]:
    """Every stored run control session (``tidelog/ctl/R``: stop requests), by run id."""
    return {
        info.id[len(CONTROL_SESSION_PREFIX) :]: info
        for info in await _sessions(rt, CONTROL_SESSION_PREFIX)
    }


async def conversation_sessions(rt: Runtime, session_id: str) -> list[str]:
    """The internal sessions that belong to conversation ``session_id`` (those that
    exist): each of its runs' checkpoint followed by the run's control session, the
    control sessions that name it whose run's checkpoint is gone, and its archive of
    trimmed tool outputs."""
    controls = await control_sessions(rt)
    owned: list[str] = []
    for run in await checkpoint_sessions(rt):
        if run.conversation == session_id:
            owned.append(run.session.id)
            control = controls.pop(run.run_id, None)
            if control is not None:
                owned.append(control.id)
    runs = {info.id for info in await _sessions(rt, RUN_SESSION_PREFIX)}
    for control in controls.values():
        if control.header.get("session_id") == session_id and _run_of(control.id) not in runs:
            owned.append(control.id)
    archive = RuntimeHistory.archive_session(session_id)
    if await rt.stat(archive) is not None:
        owned.append(archive)
    return owned


def _run_id(control: str) -> str:
    """The run whose control session is ``control``."""
    return control[len(CONTROL_SESSION_PREFIX) :]


def _run_of(control: str) -> str:
    """The checkpoint session of the run whose control session is ``control``."""
    return RUN_SESSION_PREFIX + _run_id(control)


async def delete_owned(rt: Runtime, session_id: str) -> bool:
    """Delete one session that :func:`conversation_sessions` or :func:`prune` names: a
    run's control session through ``RuntimeCheckpointer.delete_control`` (under the
    run's claim, only once the run has no checkpoint), any other with
    ``Runtime.delete``. ``False`` if nothing was deleted: it did not exist, or (a control
    session) its run has a saved checkpoint again.

    Raises :class:`SessionOwnedError` while a live writer holds the session (for a
    control session: while a host runs its run), and the errors of ``Runtime.delete``."""
    if session_id.startswith(CONTROL_SESSION_PREFIX):
        return await checkpoints(rt).delete_control(_run_id(session_id))
    return await rt.delete(session_id)


@attrs.frozen
class PruneAction:
    """One session the policy selected: why (``reason``), whether it was deleted
    (``deleted``; never in a dry run), and if not, why it was kept (``kept``:
    ``None`` when it simply was not deleted yet, in a dry run)."""

    session_id: str
    reason: str
    deleted: bool = False
    kept: str | None = None


@attrs.frozen
class PruneReport:
    """What :func:`prune` selected and did. ``interrupted``: it stopped early when asked
    (every deletion it made is whole)."""

    dry_run: bool
    actions: tuple[PruneAction, ...]
    interrupted: bool = False

    @property
    def deleted(self) -> list[str]:
        """The sessions deleted."""
        return [a.session_id for a in self.actions if a.deleted]

    @property
    def kept(self) -> list[PruneAction]:
        """The selected sessions kept for a reason (a live writer, a fork's base)."""
        return [a for a in self.actions if a.kept is not None]


def _check_policy(
    older_than: object, keep_last_runs: object, flags: Sequence[tuple[str, object]]
) -> None:
    if older_than is not None and (
        not isinstance(older_than, int | float) or isinstance(older_than, bool) or older_than < 0
    ):
        raise InvalidArgumentError(f"older_than must be seconds >= 0, not {older_than!r}")
    if keep_last_runs is not None and (type(keep_last_runs) is not int or keep_last_runs < 0):
        raise InvalidArgumentError(f"keep_last_runs must be an int >= 0, not {keep_last_runs!r}")
    for name, value in flags:
        if value is not True and value is not False:
            raise InvalidArgumentError(f"{name} must be True or False, not {value!r}")


async def prune(
    rt: Runtime,
    *,
    older_than: float | None = None,
    keep_last_runs: int | None = None,
    completed_checkpoints: bool = False,
    orphaned_checkpoints: bool = False,
    dry_run: bool = False,
    held: Collection[str] = (),
    now: float | None = None,
    stop: Callable[[], bool] | None = None,
    progress: Callable[[int], None] | None = None,
) -> PruneReport:
    """Delete what the policy no longer keeps; return what was selected and done.

    Selected: conversations (not internal) not updated for ``older_than`` seconds, with
    their run checkpoints and archive; with ``completed_checkpoints``, checkpoints of
    completed runs (their entries are in the history); with ``keep_last_runs=N``, all
    but the N most recently saved checkpoints of each conversation; with
    ``orphaned_checkpoints``, checkpoints whose conversation no longer exists, or that
    hold no saved head.

    Never deleted (reported in :attr:`PruneReport.kept`): a session a live writer holds
    -- named in ``held`` (e.g. the live leases of ``Store.list_leases``), or found so
    when its delete raises :class:`SessionOwnedError` -- and a session that a remaining
    fork still borrows events from (a fork selected too is deleted first). A
    conversation is deleted after its checkpoints and archive, each delete whole.

    ``dry_run``: select only, delete nothing. ``stop()`` is asked between deletions: if
    it returns True, pruning stops there (:attr:`PruneReport.interrupted`). ``progress(n)``
    counts deletions. ``now`` is the current time (default ``time.time()``).

    Raises :class:`InvalidArgumentError` for a bad policy; store errors."""
    _check_policy(
        older_than,
        keep_last_runs,
        [
            ("completed_checkpoints", completed_checkpoints),
            ("orphaned_checkpoints", orphaned_checkpoints),
            ("dry_run", dry_run),
        ],
    )
    now = time.time() if now is None else now
    everything = await _sessions(rt, None)
    existing = {info.id: info for info in everything}
    runs = await checkpoint_sessions(rt)
    selected: dict[str, str] = {}  # session id -> reason, in deletion order (see below)
    group_of: dict[str, str] = {}  # an old conversation's internal session -> conversation
    groups: dict[str, list[str]] = {}  # conversation -> its internal sessions
    for run in runs:
        if run.conversation is not None:
            groups.setdefault(run.conversation, []).append(run.session.id)
    if older_than is not None:
        cutoff = now - older_than
        old = [
            info
            for info in everything
            if not info.id.startswith(INTERNAL_PREFIX) and info.updated_at < cutoff
        ]
        old.sort(key=lambda info: (-info.created_at, info.id))  # forks before their parents
        for info in old:
            archive = RuntimeHistory.archive_session(info.id)
            for owned in [*groups.get(info.id, []), archive]:
                if owned in existing and owned not in selected:
                    selected[owned] = f"belongs to {info.id!r}, not updated since the cutoff"
                    group_of[owned] = info.id
            selected.setdefault(info.id, "not updated since the cutoff")
    for run in runs:
        sid, head = run.session.id, run.head
        orphan = head is None or (run.conversation is not None and run.conversation not in existing)
        if orphan and orphaned_checkpoints:
            what = "holds no saved head" if head is None else "its conversation is gone"
            selected.setdefault(sid, f"orphaned checkpoint ({what})")
        elif completed_checkpoints and head is not None and head.status == "completed":
            selected.setdefault(sid, "checkpoint of a completed run")
    if keep_last_runs is not None:
        by_conversation: dict[str, list[CheckpointSession]] = {}
        for run in runs:
            if run.head is not None and run.conversation is not None:
                by_conversation.setdefault(run.conversation, []).append(run)
        for conversation, items in by_conversation.items():
            items.sort(key=lambda r: (-(r.head.updated_at if r.head else 0.0), r.run_id))
            for run in items[keep_last_runs:]:
                selected.setdefault(
                    run.session.id, f"beyond the last {keep_last_runs} runs of {conversation!r}"
                )
    selected = _with_controls(selected, group_of, existing)
    return await _apply(rt, selected, group_of, existing, held, dry_run, stop, progress)


def _with_controls(
    selected: dict[str, str], group_of: dict[str, str], existing: dict[str, SessionInfo]
) -> dict[str, str]:
    """The selection with the runs' control sessions: first those whose run's checkpoint
    is gone (left by a delete that stopped midway), then each selected checkpoint
    followed by its run's control session."""
    out = {
        sid: f"control session of run {_run_id(sid)!r}, whose checkpoint is gone"
        for sid in existing
        if sid.startswith(CONTROL_SESSION_PREFIX) and _run_of(sid) not in existing
    }
    for session_id, reason in selected.items():
        out.setdefault(session_id, reason)
        if not session_id.startswith(RUN_SESSION_PREFIX):
            continue
        control = CONTROL_SESSION_PREFIX + session_id[len(RUN_SESSION_PREFIX) :]
        if control in existing and control not in out:
            out[control] = f"control session of a selected checkpoint ({reason})"
            if session_id in group_of:
                group_of[control] = group_of[session_id]
    return out


async def _apply(
    rt: Runtime,
    selected: dict[str, str],
    group_of: dict[str, str],
    existing: dict[str, SessionInfo],
    held: Collection[str],
    dry_run: bool,
    stop: Callable[[], bool] | None,
    progress: Callable[[int], None] | None,
) -> PruneReport:
    """Delete the selected sessions in order, keeping those held or still lent -- and
    the internal sessions of a conversation that is kept."""
    borrowers: dict[str, set[str]] = {}
    for info in existing.values():
        if info.parent is not None and info.parent[0] in existing:
            borrowers.setdefault(info.parent[0], set()).add(info.id)
    live = set(held)

    def keeps(session_id: str) -> str | None:
        if session_id in live:
            return "a live writer holds it"
        lenders = sorted(borrowers.get(session_id, ()))
        return f"fork {lenders[0]!r} borrows its events" if lenders else None

    actions: list[PruneAction] = []
    interrupted = False
    kept_runs: set[str] = set()  # checkpoints kept: their control sessions stay too
    for session_id, reason in selected.items():
        if stop is not None and stop():
            interrupted = True
            break
        kept = keeps(session_id)
        owner = group_of.get(session_id)
        if kept is None and owner is not None and keeps(owner) is not None:
            kept = f"its conversation {owner!r} is kept: {keeps(owner)}"
        control = session_id.startswith(CONTROL_SESSION_PREFIX)
        if kept is None and control and _run_of(session_id) in live | kept_runs:
            kept = f"its run's checkpoint {_run_of(session_id)!r} is kept"
        if kept is not None:
            if session_id.startswith(RUN_SESSION_PREFIX):
                kept_runs.add(session_id)
            actions.append(PruneAction(session_id, reason, kept=kept))
            continue
        if dry_run:
            actions.append(PruneAction(session_id, reason))
        else:
            try:
                deleted = await delete_owned(rt, session_id)
            except SessionOwnedError:
                live.add(session_id)
                if session_id.startswith(RUN_SESSION_PREFIX):
                    kept_runs.add(session_id)
                why = "a host runs its run" if control else "a live writer holds it"
                actions.append(PruneAction(session_id, reason, kept=why))
                continue
            if control and not deleted and await rt.stat(session_id) is not None:
                why = "its run has a saved checkpoint again"
                actions.append(PruneAction(session_id, reason, kept=why))
                continue
            actions.append(PruneAction(session_id, reason, deleted=True))
        info = existing[session_id]
        if info.parent is not None:  # no longer borrows from its parent
            borrowers.get(info.parent[0], set()).discard(session_id)
        if progress is not None:
            progress(1)
    return PruneReport(dry_run, tuple(actions), interrupted)
