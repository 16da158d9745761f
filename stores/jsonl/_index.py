"""An index of one JSONL session file: its header, committed region and seq -> offset map.

A :class:`FileIndex` is loaded from the file's sidecar (:mod:`stores.jsonl._sidecar`, the
index its writer saved) or built by scanning the file, then kept up to date by reading
only what was appended since (:meth:`FileIndex.refresh`), so a read of the last 50
events of a long session reads those 50 lines and nothing else. Readers keep one per
session per handle and never lock anything: the committed region only grows by whole
batches; a file that is rewritten is replaced by a new one (a new inode), which the
index notices and reloads.
"""

from __future__ import annotations

import bisect
import os
import zlib
from array import array

from .._errors import StoreCorruptError, StoreIOError, UnsupportedFormatError
from ._files import why
from ._format import Codec, Header, Row, corrupt, decode_header
from ._format1 import FORMAT1
from ._format2 import PLAIN, PLAIN3, PLAIN4
from ._sidecar import load
from ._zstd import MAGIC, ZSTD, ZSTD3, ZSTD4

__all__ = ["FileIndex", "read_exact"]

_FIRST_READ = 65536


def read_exact(fd: int, size: int, offset: int, path: str) -> bytes:
    """``size`` bytes at ``offset`` (fewer only at the end of the file)."""
    chunks = []
    while size > 0:
        try:
            chunk = os.pread(fd, size, offset)
        except OSError as exc:
            raise StoreIOError(f"{path}: cannot read ({exc})") from exc
        if not chunk:
            break
        chunks.append(chunk)
        size -= len(chunk)
        offset += len(chunk)
    return b"".join(chunks)


class FileIndex:
    """The index of one session file (see the module doc). Not thread-safe: each handle
    keeps its own, used under that handle's lock."""

    def __init__(
        self, path: str, fd: int, ino: int, header: Header, data_start: int, codec: Codec
    ) -> None:
        self.path = path
        #: How the file's batches are encoded (its format, plain or compressed).
        self.codec = codec
        self.fd = fd
        self.ino = ino
        self.header = header
        self.data_start = data_start
        #: End of the committed region; the size of the file when it was last scanned.
        self.end = data_start
        self.scanned_size = data_start
        self.head = header.base_seq
        #: Offset of each own event: ``offsets[seq - base_seq - 1]``; its line's, or in a
        #: compressed file its batch's frame's.
        self.offsets = array("q")
        #: Last seq of each batch, ascending.
        self.batch_ends = array("q")
        self.runs: dict[str, tuple[int, int]] = {}
        self.last_ts: float | None = None
        self.damage: tuple[int, str] | None = None
        #: The highest seq known durable in this file (what its lines prove, or what this
        #: process synced): a writer records how far behind it is in each commit line.
        self.synced = header.base_seq
        #: The sidecar (None: not kept), what of it this index last saw (its inode and
        #: size), and how far it goes: see :mod:`stores.jsonl._sidecar`.
        self.sidecar: str | None = None
        self.sidecar_seen: tuple[int, int] | None = None
        self.header_crc = 0
        self.saved_end = data_start
        self.saved_head = header.base_seq
        self.saved_ends = 0
        #: The synced seq the sidecar records (see :mod:`stores.jsonl._sidecar`).
        self.saved_synced = header.base_seq
        #: ``(run_id, first, last)`` spans indexed since the last save.
        self.fresh_runs: list[tuple[str, int, int]] = []

    # -- opening ------------------------------------------------------------------------

    @classmethod
    def open(
        cls, path: str, *, write: bool = False, sidecar: str | None = None, limit: int = -1
    ) -> FileIndex | None:
        """Open and index the file at ``path`` (loading what ``sidecar`` holds of its
        index; only its first ``limit`` bytes if ``limit >= 0``); ``None`` if it does not
        exist."""
        try:
            fd = os.open(
                path, ((os.O_RDWR | os.O_APPEND) if write else os.O_RDONLY) | os.O_NOFOLLOW
            )
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreIOError(f"{path}: cannot open ({why(exc)})") from exc
        try:
            index = cls.from_fd(path, fd, sidecar, limit)
        except BaseException:
            os.close(fd)
            raise
        return index

    @classmethod
    def from_fd(cls, path: str, fd: int, sidecar: str | None = None, limit: int = -1) -> FileIndex:
        """Index an open file (the index owns ``fd`` from now on), its first ``limit``
        bytes if ``limit >= 0``."""
        try:
            info = os.fstat(fd)
        except OSError as exc:
            raise StoreIOError(f"{path}: cannot stat ({exc})") from exc
        size = info.st_size if limit < 0 else min(info.st_size, limit)
        first = read_exact(fd, _FIRST_READ, 0, path)
        if first.startswith(MAGIC):
            found = ZSTD.read_header(first, path)
            while found is None and len(first) < info.st_size:
                first += read_exact(fd, max(len(first), _FIRST_READ), len(first), path)
                found = ZSTD.read_header(first, path)
            if found is None:
                raise StoreCorruptError(f"{path}: byte {len(first)}: the header frame is cut short")
            line, start = found
            header = decode_header(line, path)
            if header.format < ZSTD.format:  # tidelog never wrote one
                raise UnsupportedFormatError(
                    f"{path}: a compressed session file of format {header.format}"
                )
            codec: Codec = {2: ZSTD, 3: ZSTD3}.get(header.format, ZSTD4).bind(header)
        else:
            newline = first.find(b"\n")
            while newline < 0 and len(first) < info.st_size:
                first += read_exact(fd, max(len(first), _FIRST_READ), len(first), path)
                newline = first.find(b"\n")
            if newline < 0:
                decode_header(first, path)  # foreign (raises), or a header cut short:
                raise StoreCorruptError(
                    f"{path}: byte {len(first)}: the header record is cut short"
                )
            line, start = first[:newline], newline + 1
            header = decode_header(line, path)
            codec = {1: FORMAT1, 2: PLAIN, 3: PLAIN3}.get(header.format, PLAIN4).bind(header)
        index = cls(path, fd, info.st_ino, header, start, codec)
        index.header_crc = zlib.crc32(line)
        index.sidecar = sidecar
        loaded = load(index, size)
        index.refresh(size)
        if loaded is not None and index.synced < loaded.head:
            # Batches the sidecar indexes but nothing proves synced: a power cut may have
            # lost pages under them (with their last page kept), which only a scan can
            # tell from a torn tail. Keep the proven chunks; scan from there.
            synced = index.synced
            if not loaded.apply(index, synced):
                index.reset()
            index.synced = max(index.synced, synced)
            index.refresh(size)
        return index

    def close(self) -> None:
        """Close the file."""
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)

    # -- keeping up -----------------------------------------------------------------------

    def refresh(self, size: int) -> None:
        """Index whatever whole batches the file (now ``size`` bytes) gained."""
        if size == self.scanned_size:
            return
        if size < self.end:
            self.reset()  # rolled back below what was indexed (a failed commit): rescan
        data = read_exact(self.fd, size - self.end, self.end, self.path)
        found = self.codec.scan(data, self.end, self.head, self.path)
        self.offsets.extend(found.offsets)
        self.batch_ends.extend(found.batch_ends)
        for run_id, (first, last) in found.runs.items():
            known = self.runs.get(run_id)
            self.runs[run_id] = (first if known is None else known[0], last)
            self.fresh_runs.append((run_id, first, last))
        if found.last_ts is not None:
            self.last_ts = found.last_ts
        self.end, self.head, self.damage = found.end, found.head, found.damage
        self.synced = max(self.synced, found.synced)
        # A torn tail is scanned again next time (its writer may finish or repair it).
        self.scanned_size = self.end

    def reset(self) -> None:
        """Forget what is indexed (the file is indexed again from its start)."""
        self.end = self.scanned_size = self.data_start
        self.head = self.header.base_seq
        self.offsets = array("q")
        self.batch_ends = array("q")
        self.runs = {}
        self.last_ts = None
        self.damage = None
        self.synced = self.head
        self.saved_end, self.saved_head, self.saved_ends = self.data_start, self.head, 0
        self.saved_synced = self.head
        self.fresh_runs = []

    def durable(self) -> None:
        """Everything indexed was just made durable (the file fsynced, or published after
        its fsync)."""
        self.synced = self.head

    def saved(self) -> None:
        """What is indexed is in the sidecar now."""
        self.saved_end, self.saved_head, self.saved_ends = self.end, self.head, len(self.batch_ends)
        self.saved_synced = self.synced
        self.fresh_runs = []

    def appended(
        self,
        start: int,
        size: int,
        line_offsets: list[int],
        first: int,
        runs: list[tuple[str, int]],
        ts: float,
    ) -> None:
        """Record a batch this process just wrote at ``start`` (``size`` bytes)."""
        if len(line_offsets) == 1:
            self.offsets.append(start)
        else:
            self.offsets.extend([start + o for o in line_offsets])
        self.head = first + len(line_offsets) - 1
        self.batch_ends.append(self.head)
        for run_id, seq in runs:
            known = self.runs.get(run_id)
            self.runs[run_id] = (seq if known is None else known[0], seq)
            self.fresh_runs.append((run_id, seq, seq))
        self.last_ts = ts
        self.end = self.scanned_size = start + size

    def appended_one(self, start: int, size: int, ts: float) -> None:
        """:meth:`appended` of a batch of one event with no run id."""
        self.offsets.append(start)
        self.head = head = self.head + 1
        self.batch_ends.append(head)
        self.last_ts = ts
        self.end = self.scanned_size = start + size

    def check(self) -> None:
        """Raise :class:`StoreCorruptError` if the file is damaged inside its committed
        region (so its head is unknown)."""
        if self.damage is not None:
            raise corrupt(self.damage)

    # -- facts ------------------------------------------------------------------------------

    @property
    def updated_at(self) -> float:
        """The time of the last change: the last batch's or the file's publication."""
        if self.last_ts is None or self.last_ts < self.header.updated_at:
            return self.header.updated_at
        return self.last_ts

    def offset_of(self, seq: int) -> int:
        """Offset of own event ``seq``'s line; the committed end for ``head + 1``."""
        if seq > self.head:
            return self.end
        return self.offsets[seq - self.header.base_seq - 1]

    def batch_start_seq(self, seq: int) -> int:
        """The first seq of the batch holding own event ``seq``."""
        i = bisect.bisect_left(self.batch_ends, seq)
        return (self.batch_ends[i - 1] if i else self.header.base_seq) + 1

    def _span(self, lo: int, hi: int) -> tuple[bytes, int]:
        """The event lines of own events ``lo < seq <= hi`` and the file offset they (or
        their first frame) start at."""
        start = self.offset_of(lo + 1)
        if self.codec.framed:  # whole frames, from lo + 1's to hi's
            i = bisect.bisect_left(self.batch_ends, hi)
            stop = self.offset_of(self.batch_ends[i] + 1)
        else:
            stop = self.offset_of(hi + 1)
        data = read_exact(self.fd, stop - start, start, self.path)
        if len(data) != stop - start:
            raise StoreCorruptError(
                f"{self.path}: byte {start + len(data)}: the file is shorter than its index"
            )
        if not self.codec.framed:
            return data, start
        text = self.codec.lines(data, start, self.path)
        skip = lo + 1 - self.batch_start_seq(lo + 1)
        lines = text.split(b"\n")[skip : skip + hi - lo]
        return b"\n".join(lines) + b"\n", start

    def read_rows(self, session_id: str, lo: int, hi: int) -> list[Row]:
        """Own events ``lo < seq <= hi`` (within the committed region), decoded and
        checked: ``(seq, ts, kind, data, run_id)`` rows."""
        if hi <= lo:
            return []
        data, start = self._span(lo, hi)
        return self.codec.decode(data, session_id, lo + 1, self.path, start)

    def raw_rows(self, lo: int, hi: int) -> list[tuple[str, str, str | None]]:
        """Own events ``lo < seq <= hi`` as ``(kind, data_json, run_id)``, the data as the
        exact stored text (what a resent op is compared with)."""
        if hi <= lo:
            return []
        data, start = self._span(lo, hi)
        return self.codec.raw(data, self.path, start)
