"""Time travel of a session: restore its files and/or cut its conversation back to a seq,
and the anchors to restore to (lite-agent's ``restore``; lite-agent being a TypeScript
agent kernel with an event-log Checkpointer).

Seqs are those of the conversation's session on its runtime (a :class:`RuntimeHistory`).
File snapshots come from the conversation's events after the seq and, with a
``checkpointer``, from the checkpoints of this conversation's runs that never completed
(a host that died mid-tool): those are later than anything in the conversation.
"""

from __future__ import annotations

import base64
import binascii
import os
import tempfile

import attrs
import trio

from runtime import JSON, InvalidArgumentError, StoredEvent

from ._checkpoints import Checkpointer
from ._history import SEGMENT_KIND
from ._history_runtime import RuntimeHistory
from ._sidecars import snapshot_data
from ._transcript import UserMessage, entry_from_stored

__all__ = ["Anchor", "RestoreReport", "checkpoint_anchors", "restore_session"]


@attrs.frozen
class Anchor:
    """A point to restore to: ``seq``, just before the plain user prompt ``text`` (of
    run ``run_id``)."""

    seq: int
    text: str
    run_id: str | None


@attrs.frozen
class RestoreReport:
    """What :func:`restore_session` did: files written back, files deleted (they did not
    exist at the seq), paths skipped (their snapshot was truncated), and how many
    conversation entries were removed."""

    to_seq: int
    restored: tuple[str, ...] = ()
    deleted: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()
    removed_entries: int = 0


def _segments(events: list[StoredEvent]) -> list[list[StoredEvent]]:
    """The events of each committed segment (a run's events up to its marker, the marker
    last), in order: events of a run without a marker are not in the conversation."""
    open_runs: dict[str, list[StoredEvent]] = {}
    out: list[list[StoredEvent]] = []
    for event in events:
        if event.run_id is None:
            continue
        stored = open_runs.setdefault(event.run_id, [])
        stored.append(event)
        if event.kind == SEGMENT_KIND:
            out.append(open_runs.pop(event.run_id))
    return out


def _check_history(history: object) -> RuntimeHistory:
    if not isinstance(history, RuntimeHistory):
        raise InvalidArgumentError(
            "restoring needs a RuntimeHistory (seqs are those of its runtime session), "
            f"not {type(history).__name__}"
        )
    return history


async def checkpoint_anchors(history: RuntimeHistory, session_id: str) -> list[Anchor]:
    """One anchor per plain user prompt of the stored conversation, in order: its seq is
    the one just before the prompt, so restoring to it undoes the prompt and all after."""
    history = _check_history(history)
    events = [e async for e in history.runtime.iter_events(session_id)]
    anchors: list[Anchor] = []
    for segment in _segments(events):
        for event in segment:
            entry = entry_from_stored(event) if event.kind == "user" else None
            if isinstance(entry, UserMessage):
                anchors.append(Anchor(event.seq - 1, entry.text, event.run_id))
    return anchors


def _write_back(path: str, content: bytes | None) -> str:
    """Put ``path`` back atomically (temp file in its directory + rename), or delete it
    when ``content`` is None; return what was done."""
    if content is None:
        if os.path.lexists(path):
            os.remove(path)
        return "deleted"
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=".tidelog-restore-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(content)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)
    except BaseException:
        if os.path.exists(temp):
            os.remove(temp)
        raise
    return "restored"


async def restore_session(
    history: RuntimeHistory,
    session_id: str,
    to_seq: int,
    *,
    files: bool = True,
    conversation: bool = True,
    checkpointer: Checkpointer | None = None,
) -> RestoreReport:
    """Restore the session to how it was at ``to_seq`` (an :class:`Anchor`'s seq, or any
    seq of the conversation's session).

    ``files``: for each path, the *earliest* ``file_snapshot`` after ``to_seq`` is written
    back atomically, or the file deleted if it did not exist then; a path whose earliest
    snapshot is truncated (over the quota) is skipped, never restored from a later one.
    With ``checkpointer``, the snapshots of this conversation's runs that did not
    complete count too (after all of the conversation's). ``conversation``: cut the
    conversation back to the entries at or before ``to_seq`` (:meth:`RuntimeHistory.rewind`:
    one atomic rewrite; a run cut in the middle keeps its part before the seq, minus
    tool calls left without a result). Either half alone, or both (files first).

    Raises, changing nothing: :class:`InvalidArgumentError` (not a RuntimeHistory, a bad
    or out-of-range seq, neither half asked, a damaged snapshot). A file that cannot be
    written raises its ``OSError``: paths before it are restored, the conversation is not
    cut yet; restoring again is safe (it writes the same content).
    """
    history = _check_history(history)
    if not (files or conversation):
        raise InvalidArgumentError("restore_session: ask for files, conversation, or both")
    if type(to_seq) is not int or to_seq < 0:
        raise InvalidArgumentError(f"to_seq must be an int >= 0, not {to_seq!r}")
    events = [e async for e in history.runtime.iter_events(session_id)]
    head = events[-1].seq if events else 0
    if to_seq > head:
        raise InvalidArgumentError(f"to_seq {to_seq} is past the session's head {head}")
    parsed = _segments(events)
    plan: dict[str, bytes | None] = {}
    skipped: list[str] = []
    if files:
        later: list[JSON] = [e.data for p in parsed for e in p if e.seq > to_seq]
        if checkpointer is not None:
            later.extend(await _unfinished_snapshots(history, session_id, checkpointer))
        seen: set[str] = set()
        for data in later:
            snap = snapshot_data(data)
            if snap is None or snap["path"] in seen:
                continue
            path = snap["path"]
            assert isinstance(path, str)
            seen.add(path)
            if snap.get("truncated"):
                skipped.append(path)
            else:
                plan[path] = _content(snap)
    keep = sum(1 for p in parsed for e in p[:-1] if e.seq <= to_seq)
    restored: list[str] = []
    deleted: list[str] = []
    for path, content in plan.items():
        done = await trio.to_thread.run_sync(_write_back, path, content)
        (restored if done == "restored" else deleted).append(path)
    removed = await history.rewind(session_id, keep) if conversation else 0
    return RestoreReport(to_seq, tuple(restored), tuple(deleted), tuple(skipped), removed)


def _content(snap: dict[str, JSON]) -> bytes | None:
    if not snap.get("existed"):
        return None
    text = snap.get("content")
    if not isinstance(text, str):
        raise InvalidArgumentError(f"file_snapshot of {snap['path']!r} has no content")
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error:
        raise InvalidArgumentError(
            f"file_snapshot of {snap['path']!r} has damaged content"
        ) from None


async def _unfinished_snapshots(
    history: RuntimeHistory, session_id: str, checkpointer: Checkpointer
) -> list[JSON]:
    """Snapshot data from the checkpoints of this conversation's runs that did not
    complete (oldest run first)."""
    runs = [
        info
        for info in await checkpointer.list()
        if info.head.session_id == session_id and info.head.status != "completed"
    ]
    runs.sort(key=lambda info: info.head.updated_at)
    out: list[JSON] = []
    for info in runs:
        if await history.has_run(session_id, info.run_id):
            continue
        snapshot = await checkpointer.load(info.run_id)
        if snapshot is not None:
            out.extend(d for e in snapshot.entries if (d := snapshot_data(e)) is not None)
    return out
