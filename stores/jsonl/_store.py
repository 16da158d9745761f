"""JsonlStore: one human-readable JSON Lines file per session, in one directory.

People can read, grep, diff and ship the files; the format is in
:mod:`stores.jsonl._format`, the directory in :mod:`stores.jsonl._root`, the kernel locks
that fence writers in :mod:`stores.jsonl._files`, the write path in
:mod:`stores.jsonl._write` and :mod:`stores.jsonl._ops`, group writes in
:mod:`stores.jsonl._group`. Reads (:mod:`stores.jsonl._read`) never take a lock: they
serve whole, checked batches from a seq -> offset index per file.

**Durability.** ``synchronous="normal"`` (default): a commit is one ``write`` per
session file; it survives a process crash at once, and power loss after the next flush
barrier (``sync()`` / ``write_batch(sync=True)``), which fsyncs every file written since
the last one, and the directories whose names changed. ``"full"``: every commit fsyncs
the files it wrote. Rewrites (truncate, replace, delete) and new files are fsynced before
they are published, whatever the level.

**Leases** map onto the kernel lock of the session's lock file: ``acquire_lease`` takes
the lock (in this process: held by its registry, shared by all handles of the store),
and the lease owner token is kept with it; ``release_lease`` and closing the last handle
release it, and so does the death of the process -- a crashed holder's sessions are free
at once, whatever ``ttl`` said. Between processes the lock decides: a live process keeps
its leases even if it stops renewing them (the ``ttl`` takes over only between owners in
one process), and every write -- fenced or not -- needs the lock, so no process writes a
session another one holds (:class:`~stores._errors.SessionOwnedError` for that op).
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from .._batching import BatchingStore, check_ops, run_batch
from .._checks import (
    check_create_args,
    check_fork_args,
    check_lease_args,
    check_list_args,
    check_session_ids,
)
from .._contract import (
    BatchResult,
    Capabilities,
    DeleteOp,
    Store,
    Synchronous,
    TruncateOp,
    WriteOp,
)
from .._errors import (
    ClosedError,
    InvalidArgumentError,
    OwnershipLostError,
    ReadOnlyError,
    SessionExistsError,
    SessionOwnedError,
    StoreBusyError,
    StoreCorruptError,
    StoreIOError,
    TidelogError,
    UnsupportedFormatError,
)
from .._leases import holder_is_dead, lease_is_free
from .._records import JSON, LeaseInfo, SessionInfo, check_flag, validate_session_id
from ._files import IO, Shared, read_lock, release_shared, shared_for
from ._format import FORMAT, Codec, file_stem, stem_id
from ._format1 import migrate
from ._format2 import PLAIN4
from ._group import pending, recover, recover_all
from ._index import FileIndex
from ._ops import apply_op, check_header_id, fork_session
from ._read import Reader
from ._root import check_root, open_root
from ._sidecar import persist
from ._write import BatchFailure, Layout, Txn, new_header
from ._writers import trim_writers
from ._zstd import ZSTD4, require

__all__ = ["JsonlStore"]


class JsonlStore(Reader, BatchingStore):
    """A :class:`~stores._contract.Store` in a directory of JSON Lines files.

    Args:
        root: the store directory; created (with its marker) if missing or empty.
        compress: write the session files this handle creates (and the format 1 files
            it migrates) as zstd frames, one checksummed frame per batch
            (:mod:`stores.jsonl._zstd`); needs the ``zstandard`` package (the
            ``jsonl-zstd`` extra): without it, :class:`~stores._errors.InvalidArgumentError`
            says so. Existing files keep their encoding.
        synchronous: ``"normal"`` or ``"full"`` (see the module doc).
        busy_timeout_ms: how long a write waits for another process's write to the same
            session before raising :class:`~stores._errors.StoreBusyError`.
        read_only: only read: nothing is created or written, writes raise
            :class:`~stores._errors.ReadOnlyError`.

    Raises (at open): :class:`~stores._errors.InvalidArgumentError`,
    :class:`~stores._errors.UnsupportedFormatError` (a foreign directory or a newer
    format, left untouched), :class:`~stores._errors.StoreIOError`.
    """

    @property
    def capabilities(self) -> Capabilities:
        """See :attr:`Store.capabilities`: durable and blocking, no write-ahead log."""
        return Capabilities(
            durable=True, blocking=True, syncs_every_commit=self.synchronous == "full"
        )

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        compress: bool = False,
        synchronous: Synchronous = "normal",
        busy_timeout_ms: int = 5000,
        read_only: bool = False,
    ) -> None:
        self.root = check_root(root)
        check_flag(compress, "compress")
        if compress:
            require("compress=True")
        if synchronous not in ("normal", "full"):
            raise InvalidArgumentError(
                f"synchronous must be 'normal' or 'full', not {synchronous!r}"
            )
        if type(busy_timeout_ms) is not int or not 0 <= busy_timeout_ms <= 3_600_000:
            raise InvalidArgumentError(
                f"busy_timeout_ms must be an int in 0..3600000, not {busy_timeout_ms!r}"
            )
        self.read_only = check_flag(read_only, "read_only")
        self.compress = compress
        self.synchronous: Synchronous = synchronous
        self.busy_timeout_ms = busy_timeout_ms
        open_root(self.root, read_only=read_only)
        self._layout = Layout(self.root)
        Reader.__init__(self, self._layout, read_only=read_only)
        self._codec: Codec = ZSTD4 if compress else PLAIN4
        self._shared: Shared | None = shared_for(self.root)
        self._changes_fd = -1
        self._bumps = 0
        if not read_only:
            try:
                with self._shared.mutex:
                    recover_all(
                        self._shared, self._layout.intents, self._layout.sessions, busy_timeout_ms
                    )
            except BaseException:
                self.close()
                raise

    # -- plumbing ----------------------------------------------------------------------

    def _handle(self, what: str) -> Shared:
        shared = self._shared
        if shared is None:
            raise ClosedError(f"{what}: this JsonlStore was closed")
        return shared

    @contextmanager
    def _writing(self, what: str) -> Iterator[Shared]:
        """The process registry, its mutex held, for one write call."""
        shared = self._handle(what)
        if self.read_only:
            raise ReadOnlyError(what, f"this JsonlStore of {self.root!r} is read-only")
        with shared.mutex:
            if self._shared is None:
                raise ClosedError(f"{what}: this JsonlStore was closed")
            yield shared

    def _txn(self, shared: Shared, *, sync: bool = False) -> Txn:
        return Txn(
            shared,
            self._layout,
            self.busy_timeout_ms,
            full=self.synchronous == "full",
            sync=sync,
            refresh=self._writer_index,
            codec=self._codec,
        )

    def _writer_index(self, session_id: str, stem: str, taken: bool) -> FileIndex | None:
        """The writer-side index of a session whose lock this process holds; refreshed
        from the file when the lock was just taken (another process may have written) or
        the index is not kept, after rolling back any unfinished group of the session (one
        whose writer died, or whose undo this process could not finish), and a torn tail
        is then truncated away (durably) before anything is written."""
        shared = self._handle("write")
        writers: dict[str, FileIndex | None] = shared.writers
        if not taken and stem in writers:
            return writers[stem]
        # The lock was just taken (its last holder may have died inside a group write),
        # or this process let go of a group of the session with its undo unfinished:
        # roll any unfinished group back first.
        if taken or stem in shared.unfinished:
            layout = self._layout
            for intent in pending(layout.intents, stem):
                if not recover(
                    shared, layout.intents, layout.sessions, intent, self.busy_timeout_ms, stem
                ):
                    raise StoreBusyError(
                        f"session {session_id!r}: an unfinished group write could not be "
                        "rolled back yet (another of its sessions is busy)"
                    )
            shared.unfinished.discard(stem)
        index = writers.get(stem)
        path = self._layout.session(stem)
        try:
            info = os.stat(path)
        except FileNotFoundError:
            if index is not None:
                index.close()
            writers[stem] = None
            return None
        if index is None or index.ino != info.st_ino:
            if index is not None:
                index.close()
            index = FileIndex.open(path, write=True, sidecar=self._layout.sidecar(stem))
            if index is None:
                writers[stem] = None
                return None
        else:
            index.refresh(info.st_size)
        writers.pop(stem, None)  # the most recently taken last: trim_writers keeps it longest
        writers[stem] = index
        check_header_id(index.header, session_id, path)
        if index.header.format < FORMAT:  # publish a format 4 successor, then write that
            layout = self._layout
            del writers[stem]  # never cached: nothing may append to an older file
            # A format 1 file gets this handle's encoding; a format 2 one keeps its own.
            codec = (
                self._codec if index.header.format < 2 else ZSTD4 if index.codec.framed else PLAIN4
            )
            try:
                migrate(index, layout.sessions, layout.tmp, layout.migrated, stem, codec)
            finally:
                index.close()
            index = FileIndex.open(path, write=True, sidecar=self._layout.sidecar(stem))
            writers[stem] = index
            if index is None:
                raise StoreCorruptError(f"{path}: the file just migrated is gone")
            index.durable()  # published after its fsync
            info = os.stat(path)
        if index.damage is None and info.st_size > index.end:
            IO.truncate(index.fd, index.end)  # a torn tail: never served, removed durably
            IO.fsync(index.fd)
            index.durable()
        persist(index)  # what a scan found (if much) is kept for the next process
        trim_writers(shared, stem)
        return index

    def _bump(self) -> None:
        """Append a byte to the change log (what other handles' data_version watches)."""
        try:
            if self._changes_fd < 0:
                self._changes_fd = os.open(
                    self._layout.changes,
                    os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW,
                    0o644,
                )
            os.write(self._changes_fd, b"+")
            self._bumps += 1
            if self._bumps % 4096 == 0 and os.fstat(self._changes_fd).st_size > 1 << 20:
                os.ftruncate(self._changes_fd, 0)
        except OSError:
            pass  # change detection only: a missed bump delays a tail until the next one

    # -- writes ------------------------------------------------------------------------

    def write_batch(self, ops: Sequence[WriteOp], *, sync: bool = False) -> list[BatchResult]:
        """See :meth:`Store.write_batch`: the ops' files written in order, each op undone
        alone if it fails alone, the whole batch undone if the batch fails."""
        check_ops(ops, sync)
        with self._writing("write_batch") as shared:
            txn = self._txn(shared, sync=sync)
            try:
                return run_batch(ops, txn, apply_op)
            except BatchFailure as failure:
                raise failure.error from failure.__cause__
            except OSError as exc:
                raise StoreIOError(
                    f"write_batch: I/O failure ({exc}); nothing was written"
                ) from exc
            finally:
                if txn.changed:
                    self._bump()

    def create(
        self, session_id: str, header: dict[str, JSON] | None = None, *, exist_ok: bool = False
    ) -> SessionInfo:
        """See :meth:`Store.create`: a complete file linked to its name (no overwrite)."""
        header_json = check_create_args(session_id, header, exist_ok)
        with self._writing("create") as shared:
            txn = self._txn(shared)
            try:
                with txn:
                    stem, index = txn.session(session_id)
                    if index is not None:
                        if exist_ok:
                            return self._info(session_id, index)
                        raise SessionExistsError(session_id)
                    now = time.time()
                    made = new_header(session_id, header_json, now)
                    try:
                        txn.create(stem, made, (), now)
                    except FileExistsError:
                        raise SessionExistsError(session_id) from None
                    return SessionInfo(session_id, 0, now, now, made.header, None)
            except BatchFailure as failure:
                raise failure.error from failure.__cause__
            except OSError as exc:
                raise StoreIOError(f"create: I/O failure ({exc})") from exc
            finally:
                if txn.changed:
                    self._bump()

    def delete(self, session_id: str) -> bool:
        """See :meth:`Store.delete`."""
        validate_session_id(session_id)
        return bool(self._one(DeleteOp(session_id)))

    def truncate(self, session_id: str, to_seq: int) -> int:
        """See :meth:`Store.truncate`: the kept part is published as a new file."""
        validate_session_id(session_id)
        from .._records import check_seq

        check_seq(to_seq, "to_seq")
        return self._one(TruncateOp(session_id, to_seq))

    def _one(self, op: WriteOp) -> int:
        [result] = self.write_batch([op])
        if isinstance(result, TidelogError):
            raise result
        return result

    def fork(
        self,
        source_id: str,
        new_id: str,
        *,
        at_seq: int | None = None,
        header: dict[str, JSON] | None = None,
    ) -> SessionInfo:
        """See :meth:`Store.fork`: O(1), the child links the files of its prefix."""
        extra = check_fork_args(source_id, new_id, header)
        with self._writing("fork") as shared:
            txn = self._txn(shared)
            try:
                with txn:
                    return fork_session(
                        self._layout, txn, source_id, new_id, at_seq, extra, time.time()
                    )
            except BatchFailure as failure:
                raise failure.error from failure.__cause__
            except FileExistsError:
                raise SessionExistsError(new_id) from None
            except OSError as exc:
                raise StoreIOError(f"fork: I/O failure ({exc})") from exc
            finally:
                if txn.changed:
                    self._bump()

    # -- leases ------------------------------------------------------------------------

    def acquire_lease(self, session_id: str, owner: str, *, ttl: float, holder: str) -> None:
        """See :meth:`Store.acquire_lease` and the module doc: takes the session's lock."""
        validate_session_id(session_id)
        check_lease_args(owner, ttl=ttl, holder=holder)
        stem = file_stem(session_id)
        with self._writing("acquire_lease") as shared:
            now = time.time()
            held = shared.locks.get(stem)
            if (
                held is not None
                and held.owner is not None
                and not lease_is_free((held.owner, held.holder, held.expires), owner, now)
            ):
                raise SessionOwnedError(session_id, held.holder)
            if held is None:
                _, taken = shared.lock(session_id, stem, self.busy_timeout_ms)
                try:
                    self._writer_index(session_id, stem, taken)
                except OSError as exc:
                    shared.unlock(stem)
                    raise StoreIOError(f"acquire_lease: I/O failure ({exc})") from exc
                except BaseException:
                    shared.unlock(stem)
                    raise
            shared.set_lease(stem, owner, holder, now + float(ttl))

    def renew_lease(self, session_id: str, owner: str, *, ttl: float) -> None:
        """See :meth:`Store.renew_lease`."""
        validate_session_id(session_id)
        check_lease_args(owner, ttl=ttl)
        if self.renew_leases(owner, [session_id], ttl=ttl):
            raise OwnershipLostError(session_id)

    def renew_leases(self, owner: str, session_ids: Sequence[str], *, ttl: float) -> list[str]:
        """See :meth:`Store.renew_leases`."""
        ids = check_session_ids(session_ids)
        check_lease_args(owner, ttl=ttl)
        lost: list[str] = []
        with self._writing("renew_leases") as shared:
            expires = time.time() + float(ttl)
            for session_id in ids:
                held = shared.locks.get(file_stem(session_id))
                if held is None or held.owner != owner:
                    lost.append(session_id)
                else:
                    held.expires = expires
        return lost

    def release_lease(self, session_id: str, owner: str) -> None:
        """See :meth:`Store.release_lease`: the lock is released (after the session's
        sidecar got what it lacked)."""
        validate_session_id(session_id)
        check_lease_args(owner)
        stem = file_stem(session_id)
        with self._writing("release_lease") as shared:
            held = shared.locks.get(stem)
            if held is not None and held.owner == owner:
                index = shared.writers.pop(stem, None)
                _save_index(index)  # the last chance under the lock
                _close_index(index)  # freed with the lease (its sidecar has it all)
                shared.unlock(stem)

    def list_leases(self, *, prefix: str | None = None) -> list[LeaseInfo]:
        """See :meth:`Store.list_leases`. The leases of this process come with their owner
        token and expiry; another process's lease is its kernel lock on the session's lock
        file, which names its holder but keeps no token and does not expire while the
        holder lives: those are listed with an empty ``owner`` and an infinite
        ``expires``. A lock file naming a process of this host that has exited is not a
        lease."""
        check_list_args(None, prefix, None, "id")
        found: dict[str, LeaseInfo] = {}
        shared = self._handle("list_leases")
        with shared.mutex:
            for held in shared.locks.values():
                if held.owner is not None and held.session_id:
                    found[held.session_id] = LeaseInfo(
                        held.session_id, held.owner, held.holder, held.expires
                    )
            try:
                names = os.listdir(os.path.join(self.root, "locks"))
            except FileNotFoundError:
                names = []
            except OSError as exc:
                raise StoreIOError(f"list_leases: cannot list the lock files ({exc})") from exc
            for name in names:
                stem = name.removesuffix(".lock")
                if stem in shared.locks or not name.endswith(".lock"):
                    continue
                sid = stem_id(stem)
                if sid is not None and sid in found:
                    continue
                holder, named = read_lock(shared.lock_path(stem))
                if sid is None and "~" in stem:  # a long id: named in the lock file
                    sid = named if named is not None and file_stem(named) == stem else None
                    if sid is None:
                        sid = self._id_of(stem)
                if sid is not None and holder and not holder_is_dead(holder):
                    found[sid] = LeaseInfo(sid, "", holder, math.inf)
        return [
            info for sid, info in sorted(found.items()) if prefix is None or sid.startswith(prefix)
        ]

    def _id_of(self, stem: str) -> str | None:
        """The session id a hashed stem's file names in its header (None: no file)."""
        with self._reading("list_leases"):
            try:
                view = self._view("", stem)
            except (StoreCorruptError, UnsupportedFormatError):
                return None
            return None if view is None else view.header.id

    # -- handles -----------------------------------------------------------------------

    def clone(self, *, read_only: bool | None = None) -> JsonlStore:
        """Another handle on the same directory (sharing this process's locks)."""
        if read_only is not None:
            check_flag(read_only, "read_only")
        self._handle("clone")
        return JsonlStore(
            self.root,
            compress=self.compress,
            synchronous=self.synchronous,
            busy_timeout_ms=self.busy_timeout_ms,
            read_only=self.read_only or bool(read_only),
        )

    def close(self) -> None:
        """Close this handle (the last one of the process releases its locks)."""
        with self._reader_lock:
            shared, self._shared = self._shared, None
            self.close_views()
        if self._changes_fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._changes_fd)
            self._changes_fd = -1
        if shared is not None:
            release_shared(shared, _close_index, _save_index)


def _close_index(index: object) -> None:
    if isinstance(index, FileIndex):
        index.close()


def _save_index(index: object) -> None:
    """At the close of a process's last handle: the sidecar of a session it still holds
    gets what is left (its batches are committed: no batch runs now)."""
    if isinstance(index, FileIndex) and index.fd >= 0:
        persist(index, force=True)


_: type[Store] = JsonlStore
