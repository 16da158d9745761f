"""A simulated disk under a JSONL store: what a power cut could leave (the power battery).

:func:`recording` installs a :class:`PowerDisk` on the store's I/O seam
(``stores.jsonl._files.IO``: fsync, rename, link, unlink, write) and on ``os.open`` for
files created under the store directory. It never changes what the store does, except
that fsyncs are recorded instead of reaching the device (the simulation, not the kernel,
decides what survives). At any seam call, :meth:`PowerDisk.cut` writes a copy of the store
directory as a disk could have left it had the power failed right then:

* **file contents** (per inode): everything fsynced is there; of what changed since the
  file's last fsync, any subset of whole 4,096-byte pages, in any order (ext4 and XFS
  write the pages of unsynced data back in no particular order), and the file's size is
  its size at the last fsync or its current one; a page never written back beyond the
  synced size reads as zeros;
* **names** (per directory): the creations, links, renames and unlinks form one ordered
  log, kept in order as journaling file systems (ext4, XFS) do; a cut keeps a prefix of it
  that holds at least every change to a directory made before that directory's last
  fsync. A rename is one entry (atomic). Files created with the builtin ``open`` (the
  index caches) and never renamed are kept or not at random. The JSONL sidecars
  (``index/<stem>.idx``: created with ``os.open`` and renamed, then appended to with
  ``os.write``, never fsynced) are cut like every file: any subset of their pages.

Each cut is ``"none"`` (only what was made durable), ``"all"`` (everything, as if the
kernel had written back its whole cache) or ``"some"`` (a random prefix of the name log
and a random subset of the unsynced pages).
"""

from __future__ import annotations

import contextlib
import os
import random
import stat
import threading
from collections.abc import Callable, Iterator
from typing import Any, Literal

from stores.jsonl import _files as jsonl_files

__all__ = ["PAGE", "Mode", "PowerDisk", "mix_pages", "recording"]

PAGE = 4096
Mode = Literal["none", "all", "some"]
#: One entry of the name log: (directory, name, key) added, or key None: removed.
Change = tuple[tuple[str, str, str | None], ...]


def mix_pages(
    durable: bytes, current: bytes, rng: random.Random, mode: Mode, unit: int = PAGE
) -> bytes:
    """What a file holds after a cut: its synced bytes plus a subset of the ``unit``-sized
    pages changed since (``mode``), at its synced or its current size."""
    if current == durable or mode == "none":
        return durable
    if mode == "all":
        return current
    size = rng.choice((len(durable), len(current)))
    out = bytearray(size)
    keep = rng.random()  # some cuts keep most pages, some few
    for at in range(0, size, unit):
        old = durable[at : at + unit]
        new = current[at : at + unit]
        if old == new:
            out[at : at + len(old)] = old
        elif rng.random() < keep:
            out[at : at + len(new)] = new[: size - at]
        else:
            out[at : at + len(old)] = old[: size - at]
    return bytes(out)


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


class PowerDisk:
    """The record of one store directory (see the module doc)."""

    def __init__(self, root: str) -> None:
        self.root = os.path.realpath(root)
        self.lock = threading.RLock()
        self._keys: dict[int, str] = {}
        self._next = 0
        #: The directories (relative) and the names in them when recording started.
        self.dirs: list[str] = []
        self.base: dict[tuple[str, str], str] = {}
        #: Synced content per key (an inode's life).
        self.durable: dict[str, bytes] = {}
        self.log: list[Change] = []
        #: The shortest prefix of :attr:`log` every cut keeps.
        self.must = 0
        self._last_change: dict[str, int] = {}
        #: Seam calls seen (the points a cut can be taken at).
        self.calls = 0
        self.fsyncs = 0
        #: Called (under the lock) before each seam call with the call number.
        self.on_call: Callable[[int], None] | None = None
        for here, subdirs, files in os.walk(self.root):
            rel = os.path.relpath(here, self.root)
            self.dirs.append(rel)
            for name in files:
                path = os.path.join(here, name)
                key = self._key(os.lstat(path).st_ino)
                self.base[(rel, name)] = key
                self.durable[key] = _read(path)
            subdirs.sort()

    # -- recording -------------------------------------------------------------------------

    def _key(self, ino: int) -> str:
        key = self._keys.get(ino)
        if key is None:
            key = self._keys[ino] = f"i{self._next}"
            self._next += 1
        return key

    def _where(self, path: str) -> tuple[str, str] | None:
        full = os.path.realpath(os.path.dirname(os.path.abspath(path)))
        if full != self.root and not full.startswith(self.root + os.sep):
            return None
        return os.path.relpath(full, self.root), os.path.basename(path)

    def _change(self, *entries: tuple[str, str, str | None]) -> None:
        self.log.append(tuple(entries))
        for d, _, _ in entries:
            self._last_change[d] = len(self.log)

    def _retire(self, path: str) -> None:
        """``path``'s inode is about to lose its last name: a new file may reuse the
        inode number, so it gets a new key."""
        with contextlib.suppress(FileNotFoundError):
            info = os.lstat(path)
            if info.st_nlink <= 1:
                self._keys.pop(info.st_ino, None)

    def _point(self) -> None:
        self.calls += 1
        if self.on_call is not None:
            self.on_call(self.calls)

    def fsync(self, fd: int) -> None:
        with self.lock:
            self._point()
            info = os.fstat(fd)
            self.fsyncs += 1
            if stat.S_ISDIR(info.st_mode):
                where = self._where(os.path.join(os.readlink(f"/proc/self/fd/{fd}"), "x"))
                if where is not None:
                    self.must = max(self.must, self._last_change.get(where[0], 0))
                return
            # through /proc: the descriptor may be write-only
            self.durable[self._key(info.st_ino)] = _read(f"/proc/self/fd/{fd}")

    def write(self, fd: int, data: bytes) -> int:
        with self.lock:
            self._point()
            return os.write(fd, data)

    def truncate(self, fd: int, size: int) -> None:
        with self.lock:
            self._point()
            os.ftruncate(fd, size)

    def rename(self, src: str, dst: str) -> None:
        with self.lock:
            self._point()
            s, d = self._where(src), self._where(dst)
            key = self._key(os.lstat(src).st_ino)
            self._retire(dst)
            os.rename(src, dst)
            if s is not None and d is not None:
                self._change((*s, None), (*d, key))

    def link(self, src: str, dst: str) -> None:
        with self.lock:
            self._point()
            d = self._where(dst)
            os.link(src, dst)
            if d is not None:
                self._change((*d, self._key(os.lstat(dst).st_ino)))

    def unlink(self, path: str) -> None:
        with self.lock:
            self._point()
            where = self._where(path)
            self._retire(path)
            os.unlink(path)
            if where is not None:
                self._change((*where, None))

    def opened(self, path: str, fd: int, created: bool) -> None:
        """``os.open`` returned ``fd`` for ``path`` (``created``: the name is new)."""
        if not created:
            return
        with self.lock:
            where = self._where(path)
            if where is not None:
                self._change((*where, self._key(os.fstat(fd).st_ino)))

    # -- cutting ---------------------------------------------------------------------------

    def _names(self, upto: int) -> dict[tuple[str, str], str]:
        names = dict(self.base)
        for change in self.log[:upto]:
            for d, n, key in change:
                if key is None:
                    names.pop((d, n), None)
                else:
                    names[(d, n)] = key
        return names

    def cut(
        self, dest: str, rng: random.Random, mode: Mode, names_mode: Mode | None = None
    ) -> dict[str, int]:
        """Write to ``dest`` (a new directory) what the disk holds if the power fails now
        (``names_mode``: another mode for the names than for the contents); call under
        :attr:`lock`. Returns each file's synced size (by relative path)."""
        upto = {"none": self.must, "all": len(self.log)}.get(names_mode or mode)
        if upto is None:
            upto = rng.randint(self.must, len(self.log))
        names = self._names(upto)
        every = self._names(len(self.log))
        current: dict[str, bytes] = {}
        for here, _, files in os.walk(self.root):
            rel = os.path.relpath(here, self.root)
            for name in files:
                path = os.path.join(here, name)
                with contextlib.suppress(FileNotFoundError):
                    key = self._key(os.lstat(path).st_ino)
                    current[key] = _read(path)
                    # made by the builtin open and never renamed: kept or not
                    unknown = (rel, name) not in every and (rel, name) not in names
                    if unknown and (mode == "all" or (mode == "some" and rng.random() < 0.5)):
                        names[(rel, name)] = key
        for rel in self.dirs:
            os.makedirs(os.path.join(dest, rel), exist_ok=True)
        placed: dict[str, str] = {}
        synced_sizes: dict[str, int] = {}
        for (rel, name), key in sorted(names.items()):
            target = os.path.join(dest, rel, name)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            synced_sizes[os.path.normpath(os.path.join(rel, name))] = len(
                self.durable.get(key, b"")
            )
            if key in placed:
                os.link(placed[key], target)
                continue
            synced = self.durable.get(key, b"")
            now = current.get(key, synced)  # a file with no name left: only its synced part
            with open(target, "wb") as f:
                f.write(mix_pages(synced, now, rng, mode))
            placed[key] = target
        return synced_sizes


@contextlib.contextmanager
def recording(root: str) -> Iterator[PowerDisk]:
    """Record the store directory ``root`` (see the module doc) for the block."""
    disk = PowerDisk(root)
    io = jsonl_files.IO
    saved = (io.write, io.fsync, io.truncate, io.rename, io.link, io.unlink)
    real_open = os.open

    def open_(path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        created = False
        if flags & os.O_CREAT and dir_fd is None:
            with disk.lock:
                created = not os.path.lexists(path)
                fd = real_open(path, flags, mode)
                disk.opened(os.fspath(path), fd, created)
                return fd
        return real_open(path, flags, mode, dir_fd=dir_fd)

    io.write, io.fsync, io.truncate = disk.write, disk.fsync, disk.truncate
    io.rename, io.link, io.unlink = disk.rename, disk.link, disk.unlink
    os.open = open_
    try:
        yield disk
    finally:
        os.open = real_open
        io.write, io.fsync, io.truncate, io.rename, io.link, io.unlink = saved
