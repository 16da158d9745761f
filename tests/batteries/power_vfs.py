"""An apsw VFS that records what a power cut could keep of SQLite's files (the power
battery).

:func:`recording_default_vfs` registers :class:`PowerVFS` as SQLite's *default* VFS for
the block (``stores.SqliteStore`` cannot be given a VFS name; see ``battery_vfs.py``).
The shim inherits everything from the default ``unix`` VFS and passes every call through;
it notes, per file name (the database, its ``-wal``, its ``-journal``), each ``xSync``
(the bytes the file held then are durable; the sync itself is not passed on, as the
simulation decides what survives) and each ``xDelete``, and counts ``xWrite``,
``xTruncate``, ``xSync`` and ``xDelete`` calls as the points a cut can be taken at.

At a cut (:meth:`PowerVFS.cut`) it writes the files as a disk could have left them:

* everything synced is there; of what changed since a file's last sync, any subset of
  512-byte pieces (a torn write inside a 4,096-byte sector, which ``unix``'s documented
  sector size and ``SQLITE_IOCAP_POWERSAFE_OVERWRITE`` allow: no byte outside a write
  changes, a write itself may be torn) or of 4,096-byte pages, at the file's synced or
  current size;
* a ``-wal`` or ``-journal`` created since is there only once synced: ``unix`` fsyncs the
  directory inside the first ``xSync`` of a new journal or WAL (its ``UNIXFILE_DIRSYNC``),
  which a Python VFS cannot observe, so the first ``xSync`` counts as the directory sync;
  before it the name may be missing;
* a deleted file stays deleted if ``xDelete`` asked for the directory sync, else it may
  still be there with its synced bytes;
* the ``-shm`` is never written: it is shared memory, rebuilt from the ``-wal`` when the
  database is next opened after a power loss.
"""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import apsw
import attrs
from power_disk import Mode, mix_pages

__all__ = ["PowerVFS", "recording_default_vfs"]

NAME = "tidelog-power"


@attrs.define
class _Name:
    """What the disk holds for one file name."""

    #: The bytes of the last sync (None: the name is not durable).
    durable: bytes | None = None
    #: Deleted without a directory sync: the name may still be there (``durable``).
    maybe_gone: bool = False
    #: Created since its name was last durable, not synced yet.
    fresh: bool = False


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


class PowerVFS(apsw.VFS):
    """The shim (see the module doc)."""

    def __init__(self, directory: str) -> None:
        self.base_name = apsw.vfs_names()[0]  # the current default (normally "unix")
        self.directory = os.path.realpath(directory)
        self.lock = threading.RLock()
        self.names: dict[str, _Name] = {}
        for name in os.listdir(self.directory):  # what is there now counts as durable
            if not name.endswith("-shm"):
                self.names[name] = _Name(_read(os.path.join(self.directory, name)))
        self.calls = 0
        self.syncs = 0
        self.on_call: Callable[[int], None] | None = None
        super().__init__(NAME, base=self.base_name, makedefault=True)

    def _rel(self, filename: str) -> str | None:
        full = os.path.realpath(filename)
        if os.path.dirname(full) != self.directory or full.endswith("-shm"):
            return None
        return os.path.basename(full)

    def point(self) -> None:
        self.calls += 1
        if self.on_call is not None:
            self.on_call(self.calls)

    def xOpen(self, name: apsw.URIFilename | str | None, flags: list[int]) -> apsw.VFSFile:
        filename = name.filename() if isinstance(name, apsw.URIFilename) else (name or "")
        rel = self._rel(filename) if filename else None
        with self.lock:
            if rel is not None and not os.path.exists(filename):
                entry = self.names.setdefault(rel, _Name())
                entry.fresh = True
        return PowerFile(self, rel, name, flags)

    def xDelete(self, filename: str, syncdir: bool) -> None:
        with self.lock:
            self.point()
            super().xDelete(filename, syncdir)
            rel = self._rel(filename)
            if rel is None:
                return
            entry = self.names.setdefault(rel, _Name())
            if syncdir:
                self.names[rel] = _Name()
            elif entry.durable is not None:
                entry.maybe_gone = True
            entry.fresh = False

    def synced(self, rel: str) -> None:
        self.syncs += 1
        entry = self.names.setdefault(rel, _Name())
        entry.durable = _read(os.path.join(self.directory, rel)) or b""
        entry.maybe_gone = entry.fresh = False

    def cut(self, dest: str, rng: random.Random, mode: Mode) -> None:
        """Write to ``dest`` (a new directory) the files as a power cut now could leave
        them; call under :attr:`lock`."""
        os.makedirs(dest)
        unit = rng.choice((512, 4096))
        for rel, entry in sorted(self.names.items()):
            current = _read(os.path.join(self.directory, rel))
            if current is None or entry.fresh:
                # deleted, or created and never synced: the old name, or nothing
                old = entry.durable
                if current is not None and (
                    mode == "all" or (mode == "some" and rng.random() < 0.5)
                ):
                    data: bytes | None = mix_pages(b"", current, rng, mode, unit)
                elif entry.maybe_gone or entry.fresh:
                    keep_old = mode == "none" or (mode == "some" and rng.random() < 0.5)
                    data = old if keep_old else None
                else:
                    data = old if current is not None else None
            else:
                data = mix_pages(entry.durable or b"", current, rng, mode, unit)
            if data is not None:
                with open(os.path.join(dest, rel), "wb") as f:
                    f.write(data)


class PowerFile(apsw.VFSFile):
    """A file of the base VFS whose syncs and changes the shim records."""

    def __init__(
        self,
        vfs: PowerVFS,
        rel: str | None,
        name: apsw.URIFilename | str | None,
        flags: list[int],
    ) -> None:
        self._vfs = vfs
        self._rel = rel
        super().__init__(vfs.base_name, name, flags)

    def xWrite(self, data: bytes, offset: int) -> None:
        with self._vfs.lock:
            if self._rel is not None:
                self._vfs.point()
            super().xWrite(data, offset)

    def xTruncate(self, newsize: int) -> None:
        with self._vfs.lock:
            if self._rel is not None:
                self._vfs.point()
            super().xTruncate(newsize)

    def xSync(self, flags: int) -> None:
        with self._vfs.lock:
            if self._rel is None:
                super().xSync(flags)
                return
            self._vfs.point()
            # not passed on: the simulation, not the device, decides what a sync kept
            self._vfs.synced(self._rel)


@contextmanager
def recording_default_vfs(directory: str) -> Iterator[PowerVFS]:
    """Make a :class:`PowerVFS` recording the SQLite files in ``directory`` SQLite's
    default VFS for the block. Close every connection opened through it before the block
    ends."""
    vfs = PowerVFS(directory)
    try:
        assert apsw.vfs_names()[0] == NAME
        yield vfs
    finally:
        vfs.on_call = None
        vfs.unregister()
        assert NAME not in apsw.vfs_names()
