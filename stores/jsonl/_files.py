"""The file-system side of the JSONL store: the I/O seam, publishing, and the kernel locks.

**Locks.** Every session has a lock file ``locks/<stem>.lock``. Whoever writes a session
holds an exclusive ``flock`` on it (the lock is the fence: no write without it). A
process holds it for as long as one of its handles holds the session's *lease*, or for
the duration of one write. A process that dies loses its locks with it, so a crashed
writer's sessions can be taken over at once. Locks are per process: the handles of one
process share one :class:`Shared` registry per store directory, which keeps the lock
files open, the lease owner tokens (:class:`SessionLock`) and a mutex that serialises
their writes.

Lock files are never deleted (a process waiting on a deleted lock file would lock a file
nobody else sees); they are empty unless a lease is held, when they name the holder.

**The I/O seam.** Every write, fsync and truncate of the store, and every rename, link
and unlink of its files, goes through :data:`IO`, which tests replace to inject failures
or record what a power cut could keep.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import attrs

from .._errors import SessionOwnedError, StoreBusyError, StoreIOError
from .._leases import holder_is_dead

__all__ = [
    "IO",
    "SessionLock",
    "Shared",
    "fsync_dir",
    "publish",
    "shared_for",
    "why",
    "write_all",
]


@attrs.define
class _IO:
    """The system calls that change files (a seam for fault-injection tests)."""

    write: Callable[[int, bytes], int] = os.write
    fsync: Callable[[int], None] = os.fsync
    truncate: Callable[[int, int], None] = os.ftruncate
    #: The calls that change names (``rename`` replaces an existing target, as
    #: ``os.replace`` does), so a test can record what a directory fsync made durable.
    rename: Callable[[str, str], None] = os.rename
    link: Callable[[str, str], None] = os.link
    unlink: Callable[[str], None] = os.unlink


#: The seam: tests replace its attributes to fail writes, fsyncs or truncates, or to
#: record renames, links and unlinks.
IO = _IO()


def why(exc: OSError) -> str:
    """What an ``OSError`` from opening one of the store's files means (``O_NOFOLLOW``:
    the store's files are opened without following a symbolic link at their name)."""
    if exc.errno == errno.ELOOP:
        return (
            "a symbolic link where tidelog keeps a file: refused, tidelog never writes "
            "through one; remove the link"
        )
    return str(exc)


def write_all(fd: int, data: bytes, written: int | None = None) -> None:
    """Write all of ``data`` (a short write continues where it stopped); ``written``: how
    much of it one write already took (the caller's first call)."""
    if written is None:
        written = IO.write(fd, data)
    if written == len(data):  # the usual case: one call
        return
    view = memoryview(data)[written:]
    while view:
        written = IO.write(fd, view)  # type: ignore[arg-type]
        view = view[written:]


def fsync_dir(path: str) -> None:
    """fsync a directory (makes created, renamed and removed names in it durable)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        IO.fsync(fd)
    finally:
        os.close(fd)


def publish(tmp_dir: str, final: str, data: bytes, *, replace: bool) -> None:
    """Publish ``data`` at ``final``: write a temporary file, fsync it, then link it to
    ``final`` (``replace=False``: fails with ``FileExistsError`` if ``final`` exists -- two
    creators racing for one name: exactly one wins) or rename it over ``final``. The caller
    fsyncs the directory when it needs the name durable."""
    tmp = os.path.join(tmp_dir, f"{uuid.uuid4().hex}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        try:
            write_all(fd, data)
            IO.fsync(fd)
        finally:
            os.close(fd)
        if replace:
            IO.rename(tmp, final)
        else:
            IO.link(tmp, final)
    finally:
        with contextlib.suppress(FileNotFoundError):
            IO.unlink(tmp)


# -- locks and leases ------------------------------------------------------------------------


@attrs.define
class SessionLock:
    """This process's hold on one session's lock file."""

    fd: int
    #: The session's id (what a lease lists: a long id's lock file has a hashed name).
    session_id: str = ""
    #: The lease: its owner token, holder and expiry (owner None: no lease, a write only).
    owner: str | None = None
    holder: str = ""
    expires: float = 0.0


@attrs.define(eq=False)
class Shared:
    """What the handles of one process share for one store directory."""

    root: str
    key: tuple[int, int]
    mutex: threading.RLock = attrs.Factory(threading.RLock)
    locks: dict[str, SessionLock] = attrs.Factory(dict)
    #: Writer-side file indexes (``stem -> FileIndex``), valid while the lock is held.
    writers: dict[str, Any] = attrs.Factory(dict)
    #: Files (path -> fd or -1) and directories written since the last fsync barrier.
    unsynced: dict[str, int] = attrs.Factory(dict)
    dirty_dirs: set[str] = attrs.Factory(set)
    #: Stems of groups this process let go of with their undo unfinished (intent kept):
    #: their next writer index rolls such a group back first, lock just taken or not.
    unfinished: set[str] = attrs.Factory(set)
    handles: int = 0

    def lock_path(self, stem: str) -> str:
        return os.path.join(self.root, "locks", f"{stem}.lock")

    def lock(self, session_id: str, stem: str, busy_ms: int) -> tuple[SessionLock, bool]:
        """Hold ``stem``'s lock (caller holds :attr:`mutex`); returns it and whether it was
        taken now (the caller then refreshes what it knows of the session, and releases
        it with :meth:`unlock` unless a lease keeps it).

        Raises :class:`SessionOwnedError` if another process holds the session's lease,
        :class:`StoreBusyError` if another process's write held it for ``busy_ms``."""
        held = self.locks.get(stem)
        if held is not None:
            return held, False
        path = self.lock_path(stem)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as exc:
            raise StoreIOError(f"{path}: cannot open the lock file ({why(exc)})") from exc
        deadline = time.monotonic() + busy_ms / 1000.0
        delay = 0.0005
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    holder = _read_holder(fd)
                    if holder and not holder_is_dead(holder):
                        raise SessionOwnedError(session_id, holder) from None
                    if time.monotonic() > deadline:
                        raise StoreBusyError(
                            f"session {session_id!r}: another process kept writing it for "
                            f"{busy_ms} ms"
                        ) from None
                    time.sleep(delay)
                    delay = min(delay * 2, 0.01)
                except OSError as exc:
                    raise StoreIOError(f"{path}: cannot lock ({exc})") from exc
        except BaseException:
            os.close(fd)
            raise
        held = SessionLock(fd, session_id)
        self.locks[stem] = held
        return held, True

    def unlock(self, stem: str) -> None:
        """Release ``stem``'s lock (the caller holds :attr:`mutex`): closing the lock file
        releases the kernel lock."""
        held = self.locks.pop(stem, None)
        if held is None:
            return
        if held.owner is not None or held.holder:  # a lease (or one just dropped) named it
            with contextlib.suppress(OSError):
                os.ftruncate(held.fd, 0)
        os.close(held.fd)

    def set_lease(self, stem: str, owner: str, holder: str, expires: float) -> None:
        """Record the lease in the held lock (and its holder in the lock file; for a
        hashed stem, the session's id on a second line, for :func:`read_lock`)."""
        held = self.locks[stem]
        if held.holder != holder or held.owner is None:
            text = holder if "~" not in stem else f"{holder}\n{json.dumps(held.session_id)}"
            data = text.encode("utf-8")
            with contextlib.suppress(OSError):
                os.ftruncate(held.fd, 0)
                os.pwrite(held.fd, data, 0)
        held.owner, held.holder, held.expires = owner, holder, expires


def _read_lock(fd: int) -> tuple[str, str | None]:
    try:
        text = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip()
    except OSError:
        return "", None
    holder, _, rest = text.partition("\n")
    try:
        session_id = json.loads(rest) if rest else None
    except ValueError:
        session_id = None
    return holder.strip(), session_id if isinstance(session_id, str) else None


def _read_holder(fd: int) -> str:
    return _read_lock(fd)[0]


def read_lock(path: str) -> tuple[str, str | None]:
    """The holder a lock file names ("" when none, or when it cannot be read) and the
    session id it names (a lock file with a hashed name), else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return "", None
    try:
        return _read_lock(fd)
    finally:
        os.close(fd)


def read_holder(path: str) -> str:
    """The holder a lock file names ("" when none, or when it cannot be read)."""
    return read_lock(path)[0]


_REGISTRY: dict[tuple[int, int], Shared] = {}
_REGISTRY_LOCK = threading.Lock()


def shared_for(root: str) -> Shared:
    """The registry of this process for the store directory ``root`` (counted: release
    it with :func:`release_shared`)."""
    try:
        info = os.stat(root)
    except OSError as exc:
        raise StoreIOError(f"{root}: cannot stat the store directory ({exc})") from exc
    key = (info.st_dev, info.st_ino)
    with _REGISTRY_LOCK:
        shared = _REGISTRY.get(key)
        if shared is None:
            shared = _REGISTRY[key] = Shared(root, key)
        shared.handles += 1
        return shared


def release_shared(
    shared: Shared,
    close_index: Callable[[object], None],
    save_index: Callable[[object], None] | None = None,
) -> None:
    """Drop one handle's count; the last one releases every lock and file of the process,
    first handing ``save_index`` each writer index whose lock it still holds."""
    with _REGISTRY_LOCK:
        shared.handles -= 1
        if shared.handles > 0:
            return
        _REGISTRY.pop(shared.key, None)
    with shared.mutex:
        if save_index is not None:
            for stem, index in shared.writers.items():
                if stem in shared.locks and index is not None:
                    save_index(index)
        for stem in list(shared.locks):
            shared.unlock(stem)
        for index in shared.writers.values():
            close_index(index)
        shared.writers.clear()
