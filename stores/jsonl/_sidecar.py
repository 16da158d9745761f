"""The persisted index of a session file: ``index/<stem>.idx``, a cache beside the file.

A :class:`~stores.jsonl._index.FileIndex` built by scanning a long file costs a read of
the whole file. Its writer keeps what it knows in a sidecar, so that another process (or
a later handle) opening the file loads the index and scans only what was appended since:
reading the last 50 events of a 1M-event session reads the sidecar, those lines and the
unsaved tail (at most :data:`STEP` bytes of the file), never the file.

**The file.** A head -- magic (``TLIX2``: a ``TLIX1`` sidecar of an earlier version is
ignored, the file scanned and the sidecar rewritten), byte order, the session file's inode
and the CRC-32 of its header record, the offset its events start at -- then **chunks**,
appended: each covers the batches between two offsets of the session file (its seq ->
offset entries, batch ends, run spans and last time; none in a chunk that only records a
new synced point), records the highest seq its writer knew synced when it wrote it (an
fsync that had returned, a published file, or what lines read prove), and ends with a
CRC-32 of itself. Loading takes the chunks in order while each is whole, checksummed and
continues the previous one.

**Only what is proven synced is trusted.** The sidecar is never fsynced and neither are
``synchronous="normal"`` batches before a barrier, so a power cut can keep the sidecar's
pages and the last page of unsynced batches while losing an earlier page of them: an
index of those batches would make a read raise :class:`~stores._errors.StoreCorruptError`
where a scan sees a torn tail (``docs/jsonl.md``). A chunk written after an fsync is
evidence of it whatever else the cut lost. So :func:`load` fills the index from every chunk,
the caller scans the rest of the file (whose lines prove more), and if nothing proves the
last indexed batch synced (the highest seq recorded by a chunk or proven by a line read),
the index is cut back to the chunks that end at or before the proven seq and the file is
scanned from there (:meth:`Loaded.apply`), with the torn-tail rule. A writer leaving (a
lease released, its last handle closed) first fsyncs the file if more than :data:`STEP`
bytes of it are not known synced, so a new handle then scans at most that much.

**Who writes it.** Only the holder of the session's lock (a writer), after a batch
committed -- never for a batch that may still be undone --, after it scanned the file
when taking the lock, and when it releases the lease or closes its last handle (what is
left); each save appends one chunk for what is new since the last one
(its size follows the data: saving costs O(new events)), or rewrites the sidecar whole
(temporary file and rename) when the one there is not the one this writer last saw. A
flush barrier appends a chunk with its synced point (:func:`note_synced`). It is never
fsynced: it is a cache.

**A stale sidecar never serves wrong data.** It is used only if its inode and header
CRC match the file's (a rewrite or a new session has another inode or header), chunks
reaching past the end of the file are dropped (the file lost a tail the sidecar saw: a
power loss, a rolled-back group), and the last line it indexes is read and checked: a
whole, checksummed commit line holding the last seq it claims, ending where it claims.
If any of that fails the sidecar is ignored and the file scanned (and the next save
rewrites it). Every line a read returns is checked against its own CRC and seq anyway
(format 2), so even a sidecar that passed these checks and is wrong cannot make a read
return wrong data: it would raise :class:`~stores._errors.StoreCorruptError`. Only
format 2 files have sidecars. Reads of a fork's prefix through ``bases/`` links and
:meth:`~stores.JsonlStore.check_integrity` (which reads every record) scan their files.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import struct
import sys
import uuid
import zlib
from array import array
from typing import TYPE_CHECKING, Any

import attrs

from ._files import IO
from ._format2 import PREFIX
from ._zstd import ZSTD, ZstdError, frame_size

if TYPE_CHECKING:
    from ._index import FileIndex

__all__ = ["STEP", "Loaded", "load", "note_synced", "persist"]

#: A writer saves once this many bytes of the file are not in the sidecar.
STEP = 1 << 16
_MAGIC = b"TLIX2" + (b"L" if sys.byteorder == "little" else b"B")
_HEAD = struct.Struct("<QIQQ")  # inode, header CRC, data start, base seq
#: start, end, head before, head, last ts, n events, n ends, the writer's synced seq
_CHUNK = struct.Struct("<QQQQdIIQ")
_LEN = struct.Struct("<I")


def _head(index: FileIndex) -> bytes:
    body = _MAGIC + _HEAD.pack(index.ino, index.header_crc, index.data_start, index.header.base_seq)
    return body + _LEN.pack(zlib.crc32(body))


def _chunk(index: FileIndex) -> bytes:
    n = index.head - index.saved_head
    ends = len(index.batch_ends) - index.saved_ends
    runs: dict[str, tuple[int, int]] = {}
    for run_id, first, last in index.fresh_runs:
        known = runs.get(run_id)
        runs[run_id] = (first if known is None else known[0], last)
    last_ts = math.nan if index.last_ts is None else index.last_ts
    body = (
        _CHUNK.pack(
            index.saved_end, index.end, index.saved_head, index.head, last_ts, n, ends, index.synced
        )
        + index.offsets[len(index.offsets) - n :].tobytes()
        + index.batch_ends[index.saved_ends :].tobytes()
        + json.dumps(runs, separators=(",", ":")).encode()
    )
    return _LEN.pack(len(body)) + body + _LEN.pack(zlib.crc32(body))


def persist(index: FileIndex, *, force: bool = False) -> None:
    """Save what ``index`` (a writer's, its lock held, its batches committed) knows that the
    sidecar does not, if that is at least :data:`STEP` bytes of the file (or ``force``:
    anything, and a synced point the sidecar does not have yet; a writer leaving first
    fsyncs the file if more than :data:`STEP` bytes of it are not known synced, so that a
    new handle need not scan them). Failures are ignored: the sidecar is a cache."""
    if not force and index.end - index.saved_end < STEP:
        return  # the usual call, after each batch: too little new to save
    path = index.sidecar
    if path is None or index.damage is not None or index.codec.format < 2:
        return
    with contextlib.suppress(OSError):
        if (
            force
            and index.synced < index.head
            and index.end - index.offset_of(index.synced + 1) > STEP
        ):
            IO.fsync(index.fd)
            index.durable()
        if index.end - index.saved_end < (1 if force else STEP) and not (
            force and index.synced > index.saved_synced
        ):
            return
        try:
            info = os.stat(path)
            seen = (info.st_ino, info.st_size)
        except FileNotFoundError:
            seen = None
        if seen is None or seen != index.sidecar_seen or index.saved_end == index.data_start:
            _rewrite(index, path)
        else:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW)
            try:
                data = _chunk(index)
                os.write(fd, data)
                index.sidecar_seen = (seen[0], seen[1] + len(data))
            finally:
                os.close(fd)
        index.saved()


def note_synced(index: FileIndex) -> None:
    """After a barrier fsynced ``index``'s file (its batches committed): if more than
    :data:`STEP` bytes of it were not proven synced by the sidecar, append a chunk with
    what is new and the synced point, if the sidecar is still the one ``index`` last saw.
    The session's lock need not be held (a barrier holds none): an append never rewrites,
    a chunk says only what is true of the file, and one racing another writer's chunk
    fails the loader's continuity check (dropped, as a torn chunk is). Failures are
    ignored: the sidecar is a cache."""
    path, seen = index.sidecar, index.sidecar_seen
    if path is None or seen is None or index.damage is not None or index.codec.format < 2:
        return
    if index.synced <= index.saved_synced or index.saved_end == index.data_start:
        return
    if index.end - index.offset_of(index.saved_synced + 1) <= STEP:
        return  # a new handle scans that little anyway: no chunk per barrier
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW)
        try:
            info = os.fstat(fd)
            if (info.st_ino, info.st_size) != seen:
                return
            data = _chunk(index)
            os.write(fd, data)
            index.sidecar_seen = (seen[0], seen[1] + len(data))
        finally:
            os.close(fd)
        index.saved()


def _rewrite(index: FileIndex, path: str) -> None:
    """Write the sidecar afresh (one chunk with everything), published by a rename."""
    index.saved_end, index.saved_head, index.saved_ends = index.data_start, index.header.base_seq, 0
    index.fresh_runs = [(r, first, last) for r, (first, last) in index.runs.items()]
    data = _head(index) + _chunk(index)
    tmp = os.path.join(os.path.dirname(path), f".{uuid.uuid4().hex}.tmp")
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        with open(os.open(tmp, flags, 0o644), "wb") as f:
            f.write(data)
        IO.rename(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            IO.unlink(tmp)
    info = os.stat(path)
    index.sidecar_seen = (info.st_ino, info.st_size)


@attrs.frozen
class Loaded:
    """The chunks of a sidecar that hold together (see :func:`load`)."""

    #: ``(body, fields, offset past it)`` of each chunk, in order.
    chunks: list[tuple[memoryview, tuple[Any, ...], int]]
    #: Where the chunks start in the sidecar, its size and inode.
    start: int
    size: int
    ino: int
    #: The highest synced seq a chunk records.
    synced: int

    @property
    def head(self) -> int:
        """The last seq the chunks index (``-1``: none)."""
        return int(self.chunks[-1][1][3]) if self.chunks else -1

    def apply(self, index: FileIndex, upto: int) -> bool:
        """Fill ``index`` (reset first) with the chunks that end at or before seq ``upto``;
        False (``index`` left reset) if they do not match the file."""
        index.reset()
        offsets, ends = array("q"), array("q")
        runs: dict[str, tuple[int, int]] = {}
        end, last, last_ts, used = index.data_start, index.header.base_seq, None, self.start
        for body, fields, stop_pos in self.chunks:
            _, stop, _, after, ts, count, n_ends, _ = fields
            if after > upto:
                break
            cut = _CHUNK.size + 8 * count
            try:
                found = json.loads(bytes(body[cut + 8 * n_ends :]))
                spans = {str(r): (int(first), int(final)) for r, (first, final) in found.items()}
            except (ValueError, TypeError, AttributeError):
                return False
            offsets.frombytes(body[_CHUNK.size : cut])
            ends.frombytes(body[cut : cut + 8 * n_ends])
            if n_ends and ends[-1] != after:
                return False
            for run_id, (first, final) in spans.items():
                known = runs.get(run_id)
                runs[run_id] = (first if known is None else known[0], final)
            if count:
                end, last, last_ts = stop, after, (None if math.isnan(ts) else ts)
            used = stop_pos
        if last == index.header.base_seq:
            return False
        proved = _last_line(index, offsets, end, last)
        if proved < 0:
            return False
        index.offsets, index.batch_ends, index.runs = offsets, ends, runs
        index.end = index.scanned_size = end
        index.head, index.last_ts = last, last_ts
        index.synced = max(index.synced, proved, min(self.synced, last))
        index.saved()
        index.saved_synced = self.synced
        index.sidecar_seen = (self.ino, used)
        if used != self.size:  # chunks not used (unproven, or damaged): the next save rewrites
            index.saved_end, index.sidecar_seen = index.data_start, None
        return True


def load(index: FileIndex, size: int) -> Loaded | None:
    """Fill ``index`` (fresh: nothing indexed yet) from its sidecar, if there is one that
    holds together and matches the file (``size`` bytes); see the module doc. Returns the
    chunks, to be cut back (:meth:`Loaded.apply`) to what the file proves synced once
    the caller scanned the rest of the file."""
    path = index.sidecar
    if path is None or index.codec.format < 2:
        return None
    try:
        with open(os.open(path, os.O_RDONLY | os.O_NOFOLLOW), "rb") as f:
            data = f.read()
            info = os.fstat(f.fileno())
    except OSError:
        return None
    head = _head(index)
    if not data.startswith(head):
        return None
    chunks: list[tuple[memoryview, tuple[Any, ...], int]] = []
    end, last, pos, synced = index.data_start, index.header.base_seq, len(head), 0
    view = memoryview(data)
    while pos + 8 + _CHUNK.size <= len(data):
        (n,) = _LEN.unpack_from(data, pos)
        body = view[pos + 4 : pos + 4 + n]
        if n < _CHUNK.size or pos + 8 + n > len(data):
            break  # cut short (or zeros a crash left)
        if _LEN.unpack_from(data, pos + 4 + n)[0] != zlib.crc32(body):
            break
        fields = _CHUNK.unpack_from(body)
        start, stop, before, after, _, count, n_ends, known = fields
        if (
            (start, before) != (end, last)
            or after - before != count
            or not end <= stop <= size
            or (stop == end) != (count == 0)
            or (n_ends == 0) != (count == 0)
            or _CHUNK.size + 8 * (count + n_ends) > n
            or n_ends > count
            or known > after
        ):
            break
        chunks.append((body, fields, pos + 8 + n))
        end, last, synced = stop, after, max(synced, known)
        pos += 8 + n
    loaded = Loaded(chunks, len(head), len(data), info.st_ino, synced)
    if not loaded.apply(index, last):
        return None
    return loaded


def _last_line(index: FileIndex, offsets: array[int], end: int, head: int) -> int:
    """If the file holds, right before ``end``, the whole commit line of seq ``head``: the
    seq that line proves durable (:meth:`~stores.jsonl._format.Codec.proves`), else -1."""
    from ._index import read_exact

    start = offsets[-1]
    data = read_exact(index.fd, end - start, start, index.path)
    if len(data) != end - start:
        return -1
    if index.codec.framed:
        if frame_size(data, 0) != len(data):
            return -1
        try:
            data = ZSTD.expand(data)
        except ZstdError:  # not the frame it claims
            return -1
    if not data.endswith(b"\n"):
        return -1
    line = data[data.rfind(b"\n", 0, len(data) - 1) + 1 : -1]
    match = PREFIX.match(line)
    if match is None or int(match.group(1)) != head:
        return -1
    return index.codec.proves(line)
