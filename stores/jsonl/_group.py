"""Group writes across session files: all or nothing after a crash, by an intent record.

A :class:`~stores._contract.GroupOp` changes several files. Its scheme (undo, with the
intent as the commit point):

1. Lock every member session (the batch does, as for any op).
2. Write ``intents/<id>.intent`` -- for each member session its file's state before the
   group: absent, or present with its inode's committed length -- then link every present
   file to ``intents/<id>.<stem>.bak`` (the old inode stays reachable whatever the group
   does to the name). Both are fsynced, with their directory, before anything else
   changes; the writer holds an exclusive ``flock`` on the intent while the group runs.
3. Apply the members (appends, rewrites, deletes, creations) as usual.
4. fsync every member file and the sessions directory.
5. **Commit point**: unlink the intent (its directory fsynced with ``synchronous="full"``,
   else at the next barrier). Then the backups are removed.

A failure in the process undoes the group in place (the batch's undo log) and removes
the intent; if undoing a member fails, the intent stays (its ``flock`` let go) and the
next write to a member, in this process or another, rolls the group back as after a
crash. After a crash, an intent whose ``flock`` is free names a group that did not
commit: :func:`recover` rolls every member back -- renames the backup over the name,
truncates it to its recorded length, or removes a file the group created -- fsyncs, and
removes the intent. Every writer runs it, under the member sessions' locks, before its
first write to a session an intent names (and a writable store runs it at open), so no
write ever lands on top of half a group. Recovery is idempotent: a crash during it is
recovered again.

Readers take no lock. A read-only handle applies the commit rule: a member of a group
whose intent is there is served as it was before the group (:func:`uncommitted`,
:func:`before_group`). A writable handle's reads may see one member's change before its
group committed; if the group is then rolled back, that reader saw events that are gone
(visibility across files is per file, not atomic).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import uuid
from collections.abc import Callable

from .._errors import SessionOwnedError, StoreBusyError, StoreIOError
from ._files import IO, Shared, fsync_dir, why
from ._format import file_stem

__all__ = [
    "STEP",
    "before_group",
    "begin_group",
    "pending",
    "recover",
    "recover_all",
    "step",
    "uncommitted",
]


def _no_step(name: str) -> None:
    """The default step hook: nothing."""


#: Called with the name of each step of a group write (a seam: the crash tests kill the
#: process at every step through it).
STEP: list[Callable[[str], None]] = [_no_step]


def step(name: str) -> None:
    """Report reaching step ``name`` to the :data:`STEP` hook."""
    STEP[0](name)


def begin_group(
    shared: Shared, intents_dir: str, sessions_dir: str, members: list[str]
) -> tuple[Callable[[bool], None], Callable[[], None], Callable[[bool], None]]:
    """Steps 2 of the scheme for the (locked) sessions ``members``; returns
    ``(undo, synced, commit)``: ``undo(keep)`` removes the intent (after the batch undid
    the members), or with ``keep`` (undoing a member failed) only lets go of it, for
    :func:`recover` to roll the members back; ``synced`` runs step 4, ``commit(full)``
    step 5."""
    group = uuid.uuid4().hex
    path = os.path.join(intents_dir, f"{group}.intent")
    entries: list[dict[str, object]] = []
    for session_id in dict.fromkeys(members):
        stem = file_stem(session_id)
        session = os.path.join(sessions_dir, f"{stem}.jsonl")
        try:
            info = os.stat(session)
        except FileNotFoundError:
            entries.append({"stem": stem, "exists": False})
            continue
        index = shared.writers.get(stem)
        end = info.st_size if index is None else index.end
        entries.append({"stem": stem, "exists": True, "ino": info.st_ino, "end": end})
    backups: list[str] = []
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, json.dumps({"group": group, "members": entries}).encode())
        for entry in entries:  # after the intent: a backup without one is left over
            if entry["exists"]:
                stem = str(entry["stem"])
                backup = os.path.join(intents_dir, f"{group}.{stem}.bak")
                IO.link(os.path.join(sessions_dir, f"{stem}.jsonl"), backup)
                backups.append(backup)
        IO.fsync(fd)
        fsync_dir(intents_dir)
    except BaseException:
        os.close(fd)
        _remove([path, *backups])
        raise
    step("intent written")
    files = [os.path.join(sessions_dir, f"{e['stem']}.jsonl") for e in entries]

    closed = [False]

    def close() -> None:
        if not closed[0]:
            closed[0] = True
            os.close(fd)

    def undo(keep: bool) -> None:
        close()
        if keep:  # a member's undo failed: recovery rolls the group back
            shared.unfinished.update(str(e["stem"]) for e in entries)
        else:
            _remove([path, *backups])

    def synced() -> None:
        for file in files:
            with contextlib.suppress(FileNotFoundError):
                _fsync_file(file)
        fsync_dir(sessions_dir)
        step("members synced")

    def commit(full: bool) -> None:
        IO.unlink(path)
        if full:
            fsync_dir(intents_dir)
        close()
        step("intent removed")
        _remove(backups)
        step("backups removed")

    return undo, synced, commit


def _fsync_file(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        IO.fsync(fd)
    finally:
        os.close(fd)


def _remove(paths: list[str]) -> None:
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            IO.unlink(path)


def pending(intents_dir: str, stem: str | None) -> list[str]:
    """The intent files (naming ``stem``, or all) of groups that have not committed."""
    try:
        names = [n for n in os.listdir(intents_dir) if n.endswith(".intent")]
    except FileNotFoundError:
        return []
    found = []
    for name in names:
        path = os.path.join(intents_dir, name)
        members = _members(path)
        if members is not None and (stem is None or any(m["stem"] == stem for m in members)):
            found.append(path)
    return found


def uncommitted(intents_dir: str, known: dict[str, list[dict[str, object]]]) -> dict[str, str]:
    """``stem -> group`` of every member of a group that has not reached its commit point
    (its intent is there, whole). ``known``: intents already read (``name -> members``),
    updated in place (an intent does not change once whole)."""
    try:
        names = [n for n in os.listdir(intents_dir) if n.endswith(".intent")]
    except FileNotFoundError:
        names = []
    for gone in [n for n in known if n not in names]:
        del known[gone]
    found: dict[str, str] = {}
    for name in names:
        members = known.get(name)
        if members is None:
            members = _members(os.path.join(intents_dir, name))
            if not members:
                continue  # gone, or not whole yet: no member changed
            known[name] = members
        for member in members:
            found[str(member["stem"])] = name[: -len(".intent")]
    return found


def before_group(
    intents_dir: str,
    sessions_dir: str,
    group: str,
    stem: str,
    known: dict[str, list[dict[str, object]]],
) -> tuple[str, int] | None:
    """Where a member of an uncommitted group is as it was before the group: ``(path,
    committed length)`` of its old inode (the group's backup link, or the file itself if
    it was not linked yet), or None if it did not exist."""
    for member in known.get(f"{group}.intent", ()):
        if member["stem"] != stem:
            continue
        if not member.get("exists"):
            return None
        end = int(member["end"])  # type: ignore[call-overload]
        backup = os.path.join(intents_dir, f"{group}.{stem}.bak")
        if os.path.lexists(backup):
            return backup, end
        return os.path.join(sessions_dir, f"{stem}.jsonl"), end
    return None


def _members(path: str) -> list[dict[str, object]] | None:
    try:
        with open(os.open(path, os.O_RDONLY | os.O_NOFOLLOW), "rb") as f:
            value = json.loads(f.read())
        return list(value["members"])
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError):
        return []  # written but not complete: its writer died before any member changed


def recover(
    shared: Shared, intents_dir: str, sessions_dir: str, path: str, busy_ms: int, keep: str | None
) -> bool:
    """Roll back the group of intent ``path`` if its writer is gone (see the module doc);
    False if it is still running. ``keep``: a stem whose lock the caller holds."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
    except FileNotFoundError:
        return True
    except OSError as exc:
        raise StoreIOError(
            f"{path}: cannot open an unfinished group's intent ({why(exc)})"
        ) from exc
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        members = _members(path) or []
        taken: list[str] = []
        try:
            for member in members:
                stem = str(member["stem"])
                if stem != keep and stem not in shared.locks:
                    shared.lock(stem, stem, busy_ms)
                    taken.append(stem)
            group = os.path.basename(path)[: -len(".intent")]
            for member in members:
                _roll_back(shared, intents_dir, sessions_dir, group, member)
            fsync_dir(sessions_dir)
            IO.unlink(path)
            fsync_dir(intents_dir)
        except (SessionOwnedError, StoreBusyError):
            return False
        finally:
            for stem in taken:
                shared.unlock(stem)
        return True
    except OSError as exc:
        raise StoreIOError(f"{path}: cannot roll back an unfinished group write ({exc})") from exc
    finally:
        os.close(fd)


def _roll_back(
    shared: Shared, intents_dir: str, sessions_dir: str, group: str, member: dict[str, object]
) -> None:
    stem = str(member["stem"])
    session = os.path.join(sessions_dir, f"{stem}.jsonl")
    index = shared.writers.pop(stem, None)
    if index is not None:
        index.close()
    if not member.get("exists"):
        with contextlib.suppress(FileNotFoundError):
            IO.unlink(session)
        return
    backup = os.path.join(intents_dir, f"{group}.{stem}.bak")
    with contextlib.suppress(FileNotFoundError):
        IO.rename(backup, session)
    with contextlib.suppress(FileNotFoundError):  # a rename onto the same inode keeps both
        IO.unlink(backup)
    end = int(member["end"])  # type: ignore[call-overload]
    fd = os.open(session, os.O_RDWR | os.O_NOFOLLOW)
    try:
        if os.fstat(fd).st_size > end:
            IO.truncate(fd, end)
        IO.fsync(fd)
    finally:
        os.close(fd)


def recover_all(shared: Shared, intents_dir: str, sessions_dir: str, busy_ms: int) -> None:
    """Recover every group whose writer died, and remove the backups a group that
    committed left behind (at the open of a writable store)."""
    for path in pending(intents_dir, None):
        recover(shared, intents_dir, sessions_dir, path, busy_ms, None)
    try:
        names = os.listdir(intents_dir)
    except FileNotFoundError:
        return
    groups = {n[: -len(".intent")] for n in names if n.endswith(".intent")}
    for name in names:
        if name.endswith(".bak") and name.split(".", 1)[0] not in groups:
            with contextlib.suppress(FileNotFoundError):
                IO.unlink(os.path.join(intents_dir, name))
