"""The persisted index of a session file: ``index/<stem>.idx``, a cache beside the file.

A :class:`~stores.jsonl._index.FileIndex` built by scanning a long file costs a read of
the whole file. Its writer keeps what it knows in a sidecar, so that another process (or
a later handle) opening the file loads the index and scans only what was appended since:
reading the last 50 events of a 1M-event session reads the sidecar, those lines and the
unsaved tail (at most :data:`STEP` bytes of the file), never the file.

**The file.** A head -- magic, byte order, the session file's inode and the CRC-32 of its
header record, the offset its events start at -- then **chunks**, appended: each covers
the batches between two offsets of the session file (its seq -> offset entries, batch
ends, run spans and last time) and ends with a CRC-32 of itself. Loading takes the
chunks in order while each is whole, checksummed and continues the previous one.

**Who writes it.** Only the holder of the session's lock (a writer), after a batch
committed -- never for a batch that may still be undone --, after it scanned the file
when taking the lock, and when it releases the lease or closes its last handle (what is
left); each save appends one chunk for what is new since the last one
(its size follows the data: saving costs O(new events)), or rewrites the sidecar whole
(temporary file and rename) when the one there is not the one this writer last saw. It
is never fsynced: it is a cache.

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
from typing import TYPE_CHECKING

from ._files import IO
from ._format2 import PREFIX
from ._zstd import ZSTD, ZstdError, frame_size

if TYPE_CHECKING:
    from ._index import FileIndex

__all__ = ["STEP", "load", "persist"]

#: A writer saves once this many bytes of the file are not in the sidecar.
STEP = 1 << 16
_MAGIC = b"TLIX1" + (b"L" if sys.byteorder == "little" else b"B")
_HEAD = struct.Struct("<QIQQ")  # inode, header CRC, data start, base seq
_CHUNK = struct.Struct("<QQQQdII")  # start, end, head before, head, last ts, n events, n ends
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
        _CHUNK.pack(index.saved_end, index.end, index.saved_head, index.head, last_ts, n, ends)
        + index.offsets[len(index.offsets) - n :].tobytes()
        + index.batch_ends[index.saved_ends :].tobytes()
        + json.dumps(runs, separators=(",", ":")).encode()
    )
    return _LEN.pack(len(body)) + body + _LEN.pack(zlib.crc32(body))


def persist(index: FileIndex, *, force: bool = False) -> None:
    """Save what ``index`` (a writer's, its lock held, its batches committed) knows that the
    sidecar does not, if that is at least :data:`STEP` bytes of the file (or ``force``).
    Failures are ignored: the sidecar is a cache."""
    path = index.sidecar
    if path is None or index.damage is not None or index.codec.format < 2:
        return
    if index.end - index.saved_end < (1 if force else STEP):
        return
    with contextlib.suppress(OSError):
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


def load(index: FileIndex, size: int) -> None:
    """Fill ``index`` (fresh: nothing indexed yet) from its sidecar, if there is one that
    holds together and matches the file (``size`` bytes); see the module doc."""
    path = index.sidecar
    if path is None or index.codec.format < 2:
        return
    try:
        with open(os.open(path, os.O_RDONLY | os.O_NOFOLLOW), "rb") as f:
            data = f.read()
            info = os.fstat(f.fileno())
    except OSError:
        return
    head = _head(index)
    if not data.startswith(head):
        return
    offsets, ends = array("q"), array("q")
    runs: dict[str, tuple[int, int]] = {}
    end, last, last_ts, pos = index.data_start, index.header.base_seq, None, len(head)
    view = memoryview(data)
    while pos + 8 + _CHUNK.size <= len(data):
        (n,) = _LEN.unpack_from(data, pos)
        body = view[pos + 4 : pos + 4 + n]
        if n < _CHUNK.size or pos + 8 + n > len(data):
            break  # cut short (or zeros a crash left)
        if _LEN.unpack_from(data, pos + 4 + n)[0] != zlib.crc32(body):
            break
        start, stop, before, after, ts, count, n_ends = _CHUNK.unpack_from(body)
        cut = _CHUNK.size + 8 * count
        if (
            (start, before) != (end, last)
            or after - before != count
            or not end < stop <= size
            or cut + 8 * n_ends > n
            or not 0 < n_ends <= count
        ):
            break
        try:
            found = json.loads(bytes(body[cut + 8 * n_ends :]))
            spans = {str(r): (int(first), int(final)) for r, (first, final) in found.items()}
        except (ValueError, TypeError, AttributeError):
            break
        offsets.frombytes(body[_CHUNK.size : cut])
        ends.frombytes(body[cut : cut + 8 * n_ends])
        if ends[-1] != after:
            break  # (the sidecar is then ignored: the last line check fails)
        for run_id, (first, final) in spans.items():
            known = runs.get(run_id)
            runs[run_id] = (first if known is None else known[0], final)
        end, last, last_ts = stop, after, (None if math.isnan(ts) else ts)
        pos += 8 + n
    proved = -1 if last == index.header.base_seq else _last_line(index, offsets, end, last)
    if proved < 0:
        return
    index.offsets, index.batch_ends, index.runs = offsets, ends, runs
    index.end = index.scanned_size = end
    index.head, index.last_ts = last, last_ts
    index.synced = max(index.synced, proved)
    index.saved()
    index.sidecar_seen = (info.st_ino, pos)
    if pos != len(data):  # something after the last good chunk: the next save rewrites
        index.saved_end, index.sidecar_seen = index.data_start, None


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
