"""Compressed session files: format 4 (3, 2) lines in zstd frames, one frame per batch.

``JsonlStore(root, compress=True)`` writes every session file it creates (and every
format 1 file it migrates) as a series of zstd frames: the first holds the header record,
then each batch is one frame holding that batch's format 4 lines (each with its own
CRC-32), written with its content size and zstd's content checksum (XXH64). The file is a
valid zstd stream: ``zstdcat sessions/<stem>.jsonl`` prints the plain format 4 file. A file
keeps the encoding it was created with: appends, truncates and rewrites of a plain file
stay plain, of a compressed one compressed, whatever ``compress`` says.

**The committed region** is the header frame and every whole frame after it, each
decompressing with a matching checksum to exactly one whole batch with the expected
seqs. A frame cut short or damaged is a torn tail (never served, truncated by the next
writer, with whatever follows) unless a whole frame follows whose commit line proves it
durable (:meth:`~stores.jsonl._format.Codec.proves`: a format 4 line says how far its
writer knew the file was synced, a format 2 or 3 line proves every batch before its own);
then it is corruption (:class:`~stores._errors.StoreCorruptError`, naming the file and the
frame's byte offset).

The index of a compressed file maps a seq to the offset of its batch's frame: a read
decompresses the frames that hold the events it returns, and nothing else.

Compression needs the ``zstandard`` package (``pip install 'tidelog[jsonl-zstd]'``):
without it ``compress=True`` raises :class:`~stores._errors.InvalidArgumentError` and a
compressed file is refused with :class:`~stores._errors.UnsupportedFormatError`, both
saying so.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from .._errors import InvalidArgumentError, StoreCorruptError, UnsupportedFormatError
from .._records import MAX_BATCH_BYTES, PreparedEvent
from ._format import Codec, Header, Row, Scan, decode_header, encode_header
from ._format2 import PLAIN, PLAIN3, PLAIN4, Plain

try:
    import zstandard
except ImportError:  # pragma: no cover - the jsonl-zstd extra is installed in the checks
    zstandard = None  # type: ignore[assignment]


class _NoZstdError(Exception):
    """Stands for ``zstandard.ZstdError`` when the package is missing (never raised)."""


ZstdError: type[Exception] = _NoZstdError if zstandard is None else zstandard.ZstdError

__all__ = [
    "MAGIC",
    "ZSTD",
    "ZSTD3",
    "ZSTD4",
    "Zstd",
    "ZstdError",
    "available",
    "frame_size",
    "require",
]

#: The first four bytes of a zstd frame.
MAGIC = b"\x28\xb5\x2f\xfd"
#: The compression level of the frames.
LEVEL = 3
#: The most a frame may hold: a whole batch (``MAX_BATCH_BYTES`` of data) and its lines.
MAX_CONTENT = 4 * MAX_BATCH_BYTES
#: What :func:`frame_size` returns for a frame that is cut short / damaged.
TORN, BAD = -1, -2
_HINT = "it needs the zstandard package: pip install 'tidelog[jsonl-zstd]'"


def available() -> bool:
    """Is the ``zstandard`` package importable?"""
    return zstandard is not None


def require(what: str) -> None:
    """Raise :class:`InvalidArgumentError` if ``zstandard`` is missing."""
    if zstandard is None:
        raise InvalidArgumentError(f"{what}: {_HINT}")


def frame_size(data: bytes, pos: int) -> int:
    """The size of the checksummed zstd frame at ``data[pos:]``; :data:`TORN` if it is cut
    short, :data:`BAD` if it is not one (parsed from the frame and block headers, without
    decompressing)."""
    size = len(data)
    if size - pos < 6:
        return TORN if MAGIC.startswith(data[pos : pos + 4]) else BAD
    if data[pos : pos + 4] != MAGIC:
        return BAD
    fhd = data[pos + 4]
    if fhd & 0x08 or not fhd & 0x04:  # a reserved bit, or no content checksum
        return BAD
    single = (fhd >> 5) & 1
    p = pos + 5 + (0 if single else 1) + (0, 1, 2, 4)[fhd & 3]
    p += ((1 if single else 0), 2, 4, 8)[fhd >> 6]
    while True:
        if p + 3 > size:
            return TORN
        block = data[p] | data[p + 1] << 8 | data[p + 2] << 16
        kind = (block >> 1) & 3
        if kind == 3:
            return BAD
        p += 3 + (1 if kind == 1 else block >> 3)
        if block & 1:
            break
    p += 4
    return TORN if p > size else p - pos


_LOCAL = threading.local()


class Zstd(Codec):
    """Format 2, 3 or 4 lines (``plain``'s) in zstd frames (see the module doc)."""

    framed = True

    def __init__(self, plain: Plain = PLAIN) -> None:
        self.plain = plain
        self.format = plain.format

    def bind(self, h: Header) -> Zstd:
        return self if self.format < 3 else Zstd(self.plain.bind(h))

    def is_commit(self, line: bytes) -> bool:
        return self.plain.is_commit(line)

    def proves(self, line: bytes) -> int:
        return self.plain.proves(line)

    def _ctx(self) -> tuple[Any, Any]:
        local = _LOCAL
        ctx: tuple[Any, Any] | None = getattr(local, "ctx", None)
        if ctx is None:
            if zstandard is None:
                raise UnsupportedFormatError(f"a zstd-compressed session file: {_HINT}")
            ctx = local.ctx = (
                zstandard.ZstdCompressor(level=LEVEL, write_checksum=True, write_content_size=True),
                zstandard.ZstdDecompressor(),
            )
        return ctx

    def compress(self, data: bytes) -> bytes:
        """One frame holding ``data``."""
        result: bytes = self._ctx()[0].compress(data)
        return result

    def expand(self, frame: bytes | memoryview) -> bytes:
        """The content of one whole frame (raises ``zstandard.ZstdError`` if damaged, or if
        its header claims more than a batch can hold: nothing is allocated for it)."""
        decompressor = self._ctx()[1]
        size = zstandard.frame_content_size(frame)
        if not 0 <= size <= MAX_CONTENT:
            raise zstandard.ZstdError(f"a frame claiming {size} bytes")
        result: bytes = decompressor.decompress(frame)
        return result

    def header(self, h: Header) -> bytes:
        return self.compress(encode_header(h))

    def batch(
        self,
        events: Sequence[PreparedEvent],
        first_seq: int,
        ts: float,
        stamps: Sequence[float] | None = None,
        lag: int = 0,
    ) -> tuple[bytes, list[int]]:
        data, _ = self.plain.batch(events, first_seq, ts, stamps, lag)
        return self.compress(data), [0] * len(events)

    def scan(self, data: bytes, base: int, head: int, path: str) -> Scan:
        result = Scan(base, head, [], [], {}, None)
        view = memoryview(data)
        pos = 0
        while pos < len(data):
            n = frame_size(data, pos)
            batch = self._whole(view[pos : pos + n], result.head, path) if n > 0 else None
            if batch is None:
                if n > 0 and self.format >= 3 and self._foreign(view[pos : pos + n]):
                    result.damage = (
                        base + pos,
                        f"{path}: byte {base + pos}: a zstd frame of another session's file",
                    )
                    return result
                why = "a damaged zstd frame" if n != TORN else "a zstd frame cut short"
                return self._stop(result, data, base, pos, why, path)
            result.offsets.extend([base + pos] * len(batch.offsets))
            result.batch_ends.extend(batch.batch_ends)
            for run_id, (first, last) in batch.runs.items():
                known = result.runs.get(run_id)
                result.runs[run_id] = (first if known is None else known[0], last)
            result.last_ts, result.head = batch.last_ts, batch.head
            result.synced = max(result.synced, batch.synced)
            pos += n
            result.end = base + pos
        return result

    def _whole(self, frame: memoryview, head: int, path: str) -> Scan | None:
        """The scan of ``frame`` if it decodes to exactly one whole batch after ``head``."""
        try:
            text = self.expand(frame)
        except ZstdError:
            return None
        found = self.plain.scan(text, 0, head, path)
        if found.damage or found.end != len(text) or len(found.batch_ends) != 1:
            return None
        return found

    def _foreign(self, frame: memoryview) -> bool:
        """Does ``frame`` (whole, not this file's batch) hold a line of another file?"""
        try:
            text = self.expand(frame)
        except ZstdError:
            return False
        return any(self.plain.check(line) == -2 for line in text.split(b"\n")[:-1])

    def _stop(self, result: Scan, data: bytes, base: int, bad: int, why: str, path: str) -> Scan:
        """Stop at a frame that is not whole: corruption if a whole frame follows it whose
        commit line proves the damaged batch durable (see the module doc)."""
        own = result.head + 1
        pos = data.find(MAGIC, bad + 1)
        while pos >= 0:
            n = frame_size(data, pos)
            if n > 0:
                try:
                    text = self.expand(memoryview(data)[pos : pos + n])
                except ZstdError:
                    text = b""
                lines = text.split(b"\n")
                if len(lines) > 1 and lines[-1] == b"" and self.plain.proves(lines[-2]) >= own:
                    result.damage = (
                        base + bad,
                        f"{path}: byte {base + bad}: {why} inside the committed region",
                    )
                    return result
            pos = data.find(MAGIC, pos + 1)
        return result

    def lines(self, data: bytes, offset: int, path: str) -> bytes:
        out = []
        view = memoryview(data)
        pos = 0
        while pos < len(data):
            n = frame_size(data, pos)
            try:
                if n <= 0:
                    raise ValueError("not a whole zstd frame")
                out.append(self.expand(view[pos : pos + n]))
            except (ValueError, ZstdError) as exc:
                raise StoreCorruptError(
                    f"{path}: byte {offset + pos}: damaged zstd frame ({exc})"
                ) from exc
            pos += n
        return b"".join(out)

    def decode(
        self, data: bytes, session_id: str, first_seq: int, path: str, offset: int
    ) -> list[Row]:
        try:
            return self.plain.decode(data, session_id, first_seq, path, 0)
        except StoreCorruptError as exc:
            raise StoreCorruptError(
                f"{path}: byte {offset}: session {session_id!r}: damaged event record in "
                f"the zstd frame there ({exc})"
            ) from exc

    def raw(self, data: bytes, path: str, offset: int) -> list[tuple[str, str, str | None]]:
        return self.plain.raw(data, f"{path} (zstd frame at byte {offset})", 0)

    def read_header(self, first: bytes, path: str) -> tuple[bytes, int] | None:
        """``(header line, frame size)`` of the header frame at the start of ``first``;
        None if ``first`` holds only part of it. A first frame that is not a checksummed
        frame holding one tidelog header record is not a tidelog file
        (:class:`UnsupportedFormatError`, as for a plain file without a header)."""
        n = frame_size(first, 0)
        if n == TORN:
            return None
        if n < 0:
            raise UnsupportedFormatError(
                f"{path}: not a tidelog session file (a zstd stream without a header record: "
                "not a checksummed zstd frame)"
            )
        try:
            text = self.expand(memoryview(first)[:n])
        except (ValueError, ZstdError) as exc:  # a checksummed frame that fails: damaged
            raise StoreCorruptError(f"{path}: byte 0: damaged header frame ({exc})") from exc
        line = text.split(b"\n", 1)[0]
        decode_header(line, path)  # a foreign record: UnsupportedFormatError
        if text != line + b"\n":
            raise StoreCorruptError(f"{path}: byte 0: the header frame is not one record")
        return line, n


#: The codec of compressed format 2 files.
ZSTD = Zstd()
#: The codec of compressed format 3 files (bound to a file by :meth:`Zstd.bind`).
ZSTD3 = Zstd(PLAIN3)
#: The codec of compressed format 4 files, the ones this version writes (bound likewise).
ZSTD4 = Zstd(PLAIN4)
