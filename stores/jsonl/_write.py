"""The write path of the JSONL store: one batch as an undoable transaction over files.

A batch (:class:`Txn`) takes each session's kernel lock as it first touches it (held
already if this process holds the lease), applies its ops in order and keeps an undo
log. An append is one ``write`` of whole lines at the end of the session's file; a
truncate, replace or delete **rewrites**: the new file is written, fsynced and renamed
over the old one (the old one kept as a backup link until the batch ends); creating a
session links a complete temporary file to its name, so two creators racing for a name
cannot both win. When the batch ends normally it commits: with ``synchronous="full"`` (or
a ``sync`` barrier) every file it wrote is fsynced, and the directories if names changed.
Any exception -- a failed write, a failed fsync -- undoes the whole batch: files are
truncated back to their length before it and renamed files restored, so a retry leaves no
seq gap. If an undo step itself fails, both errors are reported and the session's file
is repaired (truncated back) by its next writer.
"""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
import uuid
from collections.abc import Callable
from types import TracebackType

from .._errors import (
    StoreBusyError,
    StoreCorruptError,
    StoreIOError,
    TidelogError,
)
from .._records import PreparedEvent
from ._files import IO, Shared, fsync_dir, publish, write_all
from ._format import FORMAT, Codec, Header, file_stem
from ._index import FileIndex
from ._sidecar import STEP, note_synced, persist
from ._writers import trim_writers

__all__ = ["BatchFailure", "Layout", "Txn"]


#: Cut history kept in a header; older cuts fold into one (conservative for old pins).
MAX_CUTS = 256


class BatchFailure(Exception):
    """Fails a batch as a whole inside :func:`~stores._batching.run_batch` (which takes a
    :class:`TidelogError` for the op's own failure); the store raises ``.error``."""

    def __init__(self, error: TidelogError) -> None:
        super().__init__(str(error))
        self.error = error


class Layout:
    """The paths of a store directory."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.sessions = os.path.join(root, "sessions")
        self.tmp = os.path.join(root, "tmp")
        self.bases = os.path.join(root, "bases")
        self.projections = os.path.join(root, "projections")
        self.intents = os.path.join(root, "intents")
        self.changes = os.path.join(root, "changes")
        self.migrated = os.path.join(root, "migrated")
        self.index = os.path.join(root, "index")

    def session(self, stem: str) -> str:
        return os.path.join(self.sessions, f"{stem}.jsonl")

    def base(self, name: str) -> str:
        return os.path.join(self.bases, name)

    def sidecar(self, stem: str) -> str:
        """The persisted index of a session's file (:mod:`stores.jsonl._sidecar`)."""
        return os.path.join(self.index, f"{stem}.idx")


def new_header(
    session_id: str, header_json: str, now: float, *, parent: tuple[str, int] | None = None,
    base_seq: int = 0, bases: tuple[tuple[str, int, int], ...] = (),
) -> Header:  # fmt: skip
    """The header record of a new session (a fresh random incarnation)."""
    return Header(
        id=session_id,
        incarnation=secrets.randbits(62) + 1,
        epoch=0,
        cuts=(),
        created_at=now,
        updated_at=now,
        header_json=header_json,
        parent=parent,
        base_seq=base_seq,
        bases=bases,
    )


class Txn:
    """One batch's transaction (see the module doc). Use as a context manager; the
    caller holds ``shared.mutex``."""

    def __init__(
        self, shared: Shared, layout: Layout, busy_ms: int, *, full: bool, sync: bool,
        refresh: Callable[[str, str, bool], FileIndex | None], codec: Codec,
    ) -> None:  # fmt: skip
        self.shared = shared
        #: The encoding of the files this batch creates (a file keeps its own).
        self.codec = codec
        self.layout = layout
        self.busy_ms = busy_ms
        self.full = full
        self.sync = sync
        self._refresh = refresh
        self._undo: list[Callable[[], None]] = []
        self._done: list[Callable[[], None]] = []
        self._commits: list[Callable[[], None]] = []
        self._taken: list[str] = []
        self._written: dict[str, int] = {}
        #: The indexes of the files written: their sidecars are saved at the commit.
        self._indexes: dict[str, FileIndex] = {}
        self._dirs: set[str] = set()
        self.changed = False
        #: An undo step failed: the files may hold part of what was undone (a group's
        #: undo then leaves its intent, for recovery to finish the rollback).
        self.undo_failed = False

    # -- context ----------------------------------------------------------------------

    def __enter__(self) -> Txn:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if exc is None:
                try:
                    self._commit()
                except OSError as error:
                    failure = _io_error("commit", error)
                    self.rollback(failure)
                    raise BatchFailure(failure) from error
            else:
                self.rollback(exc.error if isinstance(exc, BatchFailure) else exc)
        finally:
            self._release()

    def _commit(self) -> None:
        shared = self.shared
        synced: list[FileIndex] = []
        if self.full or self.sync:
            targets = dict(self._written)
            dirs = set(self._dirs)
            if self.sync:
                targets.update(shared.unsynced)
                dirs |= shared.dirty_dirs
            for path, fd in targets.items():
                _fsync_path(path, fd)
            for path in sorted(dirs):
                fsync_dir(path)
            # What each fsynced file held is durable now: its next commit line says so.
            for index in (*self._indexes.values(), *shared.writers.values()):
                if index is not None and index.fd >= 0 and targets.get(index.path) == index.fd:
                    index.durable()
                    synced.append(index)
            if self.sync:
                shared.unsynced.clear()
                shared.dirty_dirs.clear()
        else:
            shared.unsynced.update(self._written)
            shared.dirty_dirs |= self._dirs
        for commit in self._commits:  # group commit points: a failure fails the batch
            commit()
        for index in synced:  # committed and synced: the sidecars may say so
            note_synced(index)
        for index in self._indexes.values():  # committed: the sidecars may say so
            # (persist's own first test, made here: after most batches there is too
            # little new to save, and this runs for every session of every batch)
            if index.fd >= 0 and index.end - index.saved_end >= STEP:
                persist(index)
        for step in self._done:
            with contextlib.suppress(OSError):
                step()

    def rollback(self, cause: BaseException) -> None:
        """Undo everything applied, newest first; if a step fails, note it on ``cause``
        (both errors are reported)."""
        undo, self._undo = self._undo, []
        for error in self._run_undo(undo):
            cause.add_note(f"and undoing the batch failed too ({error!r}): {_MAY_STAND}")
        self._done.clear()
        self._commits.clear()

    def _run_undo(self, steps: list[Callable[[], None]]) -> list[OSError]:
        """Run undo ``steps`` newest first, every one of them whatever fails (a group's
        step then keeps its intent: :attr:`undo_failed`); the failures. After one, what
        this process knew of the files may be wrong: every writer index is forgotten, and
        the next write reads the files again."""
        failures: list[OSError] = []
        for step in reversed(steps):
            try:
                step()
            except OSError as error:
                self.undo_failed = True
                failures.append(error)
        if failures:
            for index in self.shared.writers.values():
                if index is not None:
                    index.close()
            self.shared.writers.clear()
        return failures

    def release_later(self, stem: str) -> None:
        """Release ``stem``'s lock when the batch ends (its lease was dropped)."""
        self._taken.append(stem)

    def on_commit(self, step: Callable[[], None]) -> None:
        """Run ``step`` once the batch committed (failures ignored: clean-up only)."""
        self._done.append(step)

    def commit_point(self, step: Callable[[], None]) -> None:
        """Run ``step`` when the batch commits, after its fsyncs; if it fails the batch
        fails and is undone (a group's commit point, :mod:`stores.jsonl._group`)."""
        self._commits.append(step)

    def undo_step(self, step: Callable[[], None]) -> None:
        """Run ``step`` if the batch (or this op) is undone."""
        self._undo.append(step)

    def dirty_dir(self, path: str) -> None:
        """A name in directory ``path`` changed: fsync it at the barrier."""
        self._dirs.add(path)

    def savepoint(self) -> tuple[int, int, int]:
        """A mark to undo one op to (see :meth:`undo_to`)."""
        return len(self._undo), len(self._done), len(self._commits)

    def undo_to(self, mark: tuple[int, int, int]) -> None:
        """Undo what was applied since ``mark`` (one op that failed on its own). If an
        undo step fails, the others still run, and the batch fails as a whole (undone
        whole, as far as it can be) with a :class:`StoreIOError` saying part of it may
        stand. What earlier ops of the batch registered stays: a group that landed before
        this op keeps its commit point (dropping it would leave the group's intent
        behind, and the next writer would roll the acknowledged group back)."""
        undo_len, done_len, commits_len = mark
        steps = self._undo[undo_len:]
        del self._undo[undo_len:]
        del self._done[done_len:]
        del self._commits[commits_len:]
        failures = self._run_undo(steps)
        if failures:
            error = StoreIOError(f"undoing a failed op: I/O failure ({failures[0]}); {_MAY_STAND}")
            raise BatchFailure(error) from failures[0]

    def _release(self) -> None:
        for stem in self._taken:
            held = self.shared.locks.get(stem)
            if held is not None and held.owner is None:
                self.shared.unlock(stem)
        self._taken.clear()

    # -- sessions ----------------------------------------------------------------------

    def session(self, session_id: str) -> tuple[str, FileIndex | None]:
        """Lock ``session_id`` (if this process does not hold it yet) and return its stem and
        writer-side index (``None``: no such session). Raises :class:`SessionOwnedError`
        (the op's own failure) or fails the batch (:class:`BatchFailure`, busy)."""
        stem = file_stem(session_id)
        try:
            _, taken = self.shared.lock(session_id, stem, self.busy_ms)
            if taken:
                self._taken.append(stem)
            return stem, self._refresh(session_id, stem, taken)
        except (StoreBusyError, StoreIOError) as error:  # retrying may help: the batch fails
            raise BatchFailure(error) from error

    def append(
        self,
        index: FileIndex,
        events: tuple[PreparedEvent, ...],
        now: float,
        stamps: tuple[float, ...] | None = None,
    ) -> int:
        """Append one batch at the end of the session's file; the new head. ``stamps``:
        each event's own commit time (a restore) instead of ``now``. Changes nothing
        before the write has landed whole (a failed write is cut back before raising):
        after that it cannot fail, and the batch's undo log holds the step that takes it
        back."""
        if index.header.format != FORMAT:  # migrated first (JsonlStore._writer_index)
            raise StoreCorruptError(f"{index.path}: a format {index.header.format} file")
        head = index.head
        first = head + 1
        # The commit line records how many events before it are not known durable: a
        # power cut that damages those (never acknowledged) is a torn tail, not damage.
        data, offsets = index.codec.batch(events, first, now, stamps, head - index.synced)
        start = index.end
        # The usual op (one event, no run id, the batch's time) is taken back by a smaller
        # undo record; any other by the whole mark.
        one = len(events) == 1 and stamps is None and events[0].run_id is None
        undo: functools.partial[None]
        runs: list[tuple[str, int]] = []
        if one:
            undo = functools.partial(
                _unappend_one, index, start, index.scanned_size, head, index.last_ts
            )
        else:
            runs = [(ev.run_id, first + i) for i, ev in enumerate(events) if ev.run_id]
            mark: _AppendMark = (
                index,
                start,
                index.scanned_size,
                head,
                len(index.offsets),
                len(index.batch_ends),
                index.last_ts,
                len(index.fresh_runs),
                {run_id: index.runs.get(run_id) for run_id, _ in runs} if runs else None,
            )
            undo = functools.partial(_unappend, mark)
        fd = index.fd
        try:
            written = IO.write(fd, data)
            if written != len(data):  # a short write: the rest, then
                write_all(fd, data, written)
        except OSError:
            with contextlib.suppress(OSError):
                IO.truncate(fd, start)
            raise
        self._undo.append(undo)
        if one:
            index.appended_one(start, len(data), now)
        else:
            index.appended(start, len(data), offsets, first, runs, stamps[-1] if stamps else now)
        path = index.path
        self._written[path] = fd
        self._indexes[path] = index
        self.changed = True
        return index.head

    def create(
        self,
        stem: str,
        header: Header,
        events: tuple[PreparedEvent, ...],
        now: float,
        stamps: tuple[float, ...] | None = None,
    ) -> FileIndex:
        """Publish a new session file (header and first batch) without overwriting."""
        codec = self.codec.bind(header)
        data = codec.header(header)
        if events:
            data += codec.batch(events, header.base_seq + 1, now, stamps)[0]
        path = self.layout.session(stem)
        publish(self.layout.tmp, path, data, replace=False)
        # The index this creation opens, and the one before it (of no file: there was
        # none by that name, or publishing would have failed).
        opened: list[FileIndex | None] = [self.shared.writers.get(stem)]

        def undo() -> None:
            IO.unlink(path)
            # No file by that name again: the index of the one removed must not stay the
            # session's writer (a held lease skips the look at the file, and an append
            # would land in the removed file).
            current = self.shared.writers.get(stem)
            if any(current is index for index in opened):
                self.shared.writers[stem] = None
            for index in opened:
                if index is not None:
                    index.close()

        self._undo.append(undo)
        self._dirs.add(self.layout.sessions)
        self.changed = True
        index = self._open(stem, path)
        opened.append(index)
        return index

    def rewrite(self, stem: str, index: FileIndex, header: Header, body: bytes) -> FileIndex:
        """Publish a new version of a session file over the old one (write, fsync, rename;
        the directory is fsynced at commit), keeping the old one as a backup for undo."""
        path = self.layout.session(stem)
        backup = self._backup(path)
        publish(self.layout.tmp, path, index.codec.header(header) + body, replace=True)
        self._undo.append(lambda: self._restore(stem, index, backup, path))
        self._done.append(lambda: IO.unlink(backup))
        self._dirs.add(self.layout.sessions)
        self.changed = True
        return self._open(stem, path)

    def delete(self, stem: str, index: FileIndex) -> None:
        """Remove a session's file (restored if the batch is undone)."""
        path = self.layout.session(stem)
        backup = self._backup(path)
        IO.unlink(path)
        self.shared.writers.pop(stem, None)
        self._undo.append(lambda: self._restore(stem, index, backup, path))
        self._done.append(lambda: IO.unlink(backup))
        self._done.append(index.close)
        self._dirs.add(self.layout.sessions)
        self.changed = True

    def _backup(self, path: str) -> str:
        backup = os.path.join(self.layout.tmp, f"{uuid.uuid4().hex}.bak")
        IO.link(path, backup)
        return backup

    def _restore(self, stem: str, index: FileIndex, backup: str, path: str) -> None:
        current = self.shared.writers.get(stem)
        if current is not None and current is not index:
            current.close()
        IO.rename(backup, path)
        self.shared.writers[stem] = index

    def _open(self, stem: str, path: str) -> FileIndex:
        index = FileIndex.open(path, write=True, sidecar=self.layout.sidecar(stem))
        if index is None:
            raise StoreCorruptError(f"{path}: the file just published is gone")
        index.durable()  # publish fsynced it before giving it the name
        old = self.shared.writers.get(stem)
        self.shared.writers[stem] = index
        self._indexes[path] = index
        if old is not None and old is not index:
            self._done.append(old.close)
        self._done.append(lambda: trim_writers(self.shared, stem))
        return index


#: What :meth:`Txn.append` changed (:func:`_unappend` takes it back): the index, where
#: the batch started, and the index's ``scanned_size``, ``head``, number of offsets, of
#: batch ends, ``last_ts``, number of fresh runs, and the runs it touched as they were
#: before (``None``: none).
_AppendMark = tuple[FileIndex, int, int, int, int, int, "float | None", int, "_Runs"]
_Runs = dict[str, tuple[int, int] | None] | None


def _unappend(mark: _AppendMark) -> None:
    """Cut the file back to where an append started and forget the batch in the index."""
    index, start, scanned, head, n_offsets, n_ends, last_ts, n_runs, runs = mark
    IO.truncate(index.fd, start)
    index.end, index.scanned_size, index.head, index.last_ts = start, scanned, head, last_ts
    del index.offsets[n_offsets:]
    del index.batch_ends[n_ends:]
    del index.fresh_runs[n_runs:]
    for run_id, known in (runs or {}).items():
        if known is None:
            index.runs.pop(run_id, None)
        else:
            index.runs[run_id] = known


def _unappend_one(
    index: FileIndex, start: int, scanned: int, head: int, last_ts: float | None
) -> None:
    """Take back :meth:`Txn._append_one` (the newest batch of the index when it runs:
    undo steps run newest first): cut the file back, drop the batch's offset and end."""
    IO.truncate(index.fd, start)
    index.end, index.scanned_size, index.head, index.last_ts = start, scanned, head, last_ts
    index.offsets.pop()
    index.batch_ends.pop()


def _fsync_path(path: str, fd: int) -> None:
    """fsync the file at ``path``, written through ``fd`` since the last barrier. The fd
    may have been closed since (a writer leaving its session) and its number given to
    another file: it is trusted only while it still is the file at ``path``."""
    if fd >= 0:
        try:
            same = os.path.samestat(os.fstat(fd), os.lstat(path))
        except FileNotFoundError:
            return  # deleted or replaced since: nothing left to sync
        except OSError as exc:
            if exc.errno != 9:  # EBADF: closed since; fsync through the path
                raise
            same = False
        if same:
            IO.fsync(fd)
            return
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return  # deleted or replaced since: nothing left to sync
    try:
        IO.fsync(fd)
    finally:
        os.close(fd)


#: What an error says when undoing a batch failed.
_MAY_STAND = (
    "part of the batch may stand in the files; the next write reads them again, after "
    "rolling back any group of it (a resend with retry=True lands exactly once)"
)


def _io_error(what: str, error: OSError) -> StoreIOError:
    result = StoreIOError(f"{what}: I/O failure ({error}); nothing of the batch was written")
    result.__cause__ = error
    return result


def cut_cuts(
    cuts: tuple[tuple[int, int], ...], epoch: int, to_seq: int
) -> tuple[tuple[int, int], ...]:
    """The cut history after one more cut, folded to :data:`MAX_CUTS` entries (older cuts
    become one ``(epoch, 0)`` entry: pins from before it expire)."""
    result = (*cuts, (epoch, to_seq))
    if len(result) > MAX_CUTS:
        dropped = result[: len(result) - MAX_CUTS + 1]
        result = ((max(e for e, _ in dropped), 0), *result[len(dropped) :])
    return result
