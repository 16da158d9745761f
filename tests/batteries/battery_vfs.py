"""An apsw VFS shim that fails I/O calls on demand (the I/O-fault battery).

:func:`faulty_default_vfs` registers :class:`FaultyVFS` as SQLite's *default* VFS for the
duration of a ``with`` block -- ``stores.SqliteStore`` cannot be given a VFS name, so every
connection opened inside the block (the store's, its clones', the runtime's) goes through
the shim -- and unregisters it afterwards, restoring the previous default.

The shim inherits everything from the previous default VFS (``unix``) and only overrides
``xWrite``, ``xSync`` and ``xRead`` of the files it opens: while a :class:`Fault` is armed
for that call and that file, the call raises ``apsw.IOError`` (EIO) or ``apsw.FullError``
(ENOSPC, disk full) instead of reaching the disk.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

import apsw
import attrs

__all__ = ["Fault", "FaultyVFS", "faulty_default_vfs"]

Call = Literal["write", "sync", "read"]
Kind = Literal["eio", "enospc"]
Target = Literal["any", "db", "wal"]


@attrs.define
class Fault:
    """Fail ``call`` on files of ``target`` with ``kind``; ``times`` calls (None: until
    disarmed)."""

    call: Call
    kind: Kind
    target: Target = "any"
    times: int | None = None

    def error(self) -> apsw.Error:
        if self.kind == "enospc":
            return apsw.FullError(f"[Errno {errno.ENOSPC}] {os.strerror(errno.ENOSPC)} (injected)")
        return apsw.IOError(f"[Errno {errno.EIO}] {os.strerror(errno.EIO)} (injected)")


def _kind_of(filename: str) -> str:
    if filename.endswith("-wal"):
        return "wal"
    if filename.endswith("-journal"):
        return "journal"
    if filename.endswith("-shm"):
        return "shm"
    return "db"


class FaultyVFS(apsw.VFS):
    """The shim. Arm a fault with :meth:`arm`, clear it with :meth:`disarm`."""

    def __init__(self, name: str = "tidelog-faulty") -> None:
        self.base_name = apsw.vfs_names()[0]  # the current default (normally "unix")
        self._lock = threading.Lock()
        self._fault: Fault | None = None
        #: Calls failed so far, per call type.
        self.injected: dict[str, int] = {"write": 0, "sync": 0, "read": 0}
        #: Calls seen so far (passed through or failed), per call type.
        self.calls: dict[str, int] = {"write": 0, "sync": 0, "read": 0}
        super().__init__(name, base=self.base_name, makedefault=True)

    def arm(self, fault: Fault) -> None:
        with self._lock:
            self._fault = fault

    def disarm(self) -> None:
        with self._lock:
            self._fault = None

    @property
    def armed(self) -> bool:
        return self._fault is not None

    def check(self, call: Call, file_kind: str) -> None:
        """Raise the armed fault's error if it covers this call."""
        with self._lock:
            self.calls[call] += 1
            fault = self._fault
            if fault is None or fault.call != call:
                return
            if fault.target != "any" and fault.target != file_kind:
                return
            if fault.times is not None:
                if fault.times <= 0:
                    return
                fault.times -= 1
            self.injected[call] += 1
        raise fault.error()

    def xOpen(self, name: apsw.URIFilename | str | None, flags: list[int]) -> apsw.VFSFile:
        return FaultyFile(self, name, flags)


class FaultyFile(apsw.VFSFile):
    """A file of the base VFS whose write/sync/read consult the shim's armed fault."""

    def __init__(
        self, vfs: FaultyVFS, name: apsw.URIFilename | str | None, flags: list[int]
    ) -> None:
        self._vfs = vfs
        filename = name.filename() if isinstance(name, apsw.URIFilename) else (name or "")
        self._file_kind = _kind_of(filename)
        super().__init__(vfs.base_name, name, flags)

    def xWrite(self, data: bytes, offset: int) -> None:
        self._vfs.check("write", self._file_kind)
        super().xWrite(data, offset)

    def xSync(self, flags: int) -> None:
        self._vfs.check("sync", self._file_kind)
        super().xSync(flags)

    def xRead(self, amount: int, offset: int) -> bytes:
        self._vfs.check("read", self._file_kind)
        return super().xRead(amount, offset)


@contextmanager
def faulty_default_vfs() -> Iterator[FaultyVFS]:
    """Make a :class:`FaultyVFS` SQLite's default VFS for the block.

    Close every connection opened through it before the block ends."""
    vfs = FaultyVFS()
    try:
        assert apsw.vfs_names()[0] == "tidelog-faulty"
        yield vfs
    finally:
        vfs.disarm()
        vfs.unregister()
        assert "tidelog-faulty" not in apsw.vfs_names()
