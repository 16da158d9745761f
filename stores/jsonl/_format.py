"""The JSONL session file format: file names, the header record, codecs, scanning.

A session file is UTF-8 JSON Lines. Its first line is the **header record**::

    {"tidelog":"session","format":4,"id":...,"incarnation":N,"epoch":E,"cuts":[[e,seq],...],
     "created_at":T,"updated_at":T,"header":{...},"parent":[id,seq]|null,
     "base_seq":B,"bases":[[link,lo,hi],...]}

Then one line per event, ``seq`` ``B+1, B+2, ...`` (a fork reads seqs ``1..B`` from the
``bases``: hard links to the files that hold them, each read for seqs ``lo < seq <= hi``).
The events of one committed op (a **batch**) are consecutive lines; the last one carries
the batch's commit mark. How the lines are written is the format generation's business:

* **format 4** (written by this version, :mod:`stores.jsonl._format2`): format 3 lines
  whose commit line may also say how far the file was known durable when it was written
  (``"s":d``: all but the ``d`` events before the batch; absent, all of them), so damage
  past that point is a torn tail even with whole batches after it;
* **format 3** (:mod:`stores.jsonl._format2`; migrated to format 4 by the first writer,
  keeping its encoding): format 2 lines that also name their file (``"f":K``, covered by
  the checksum), so a line copied from another session's file is damage wherever it is;
* **format 2** (:mod:`stores.jsonl._format2`; migrated to format 4 by the first writer,
  keeping its encoding): every line ends with
  its own checksum, ``"crc":X``, the CRC-32 of the line's bytes before ``,"crc":``; the last
  line of a batch carries ``"end":n`` (``n`` events) just before it. Any record can be
  checked on its own, so a read served from an index checks exactly the lines it returns;
* **format 1** (:mod:`stores.jsonl._format1`): one CRC-32 per batch, ``"end":[n,crc]`` on
  its last line; read as it is, migrated to format 4 by the first writer;
* **compressed** (format 4, 3 or 2 lines, :mod:`stores.jsonl._zstd`): the file is a series of zstd
  frames, the header record in the first, then one checksummed frame per batch.

**The committed region** is the header plus every whole batch, in order, seqs contiguous,
every checksum matching. What follows it is either

* a **torn tail** -- unfinished or unsynced batches (a crash, a concurrent write in
  progress, a power cut that kept only some pages of unsynced writes): no later commit
  line (whole, checksum matching; for a compressed file, in a whole frame) that *proves*
  the damaged batch durable follows the first bad byte. A commit line proves the seqs
  its writer knew were durable when it wrote it (:meth:`Codec.proves`): in format 4 all
  but the ``"s"`` events before its batch, in formats 2 and 3 every event before its
  batch, in format 1 (no such knowledge) everything. A torn tail is never served, and the
  next writer truncates it (durably) before writing -- later whole batches in it too:
  what is dropped was never made durable, so never acknowledged, and the events kept
  are a prefix; or
* **corruption** -- a damaged or missing record *followed* by a commit line that proves
  it durable: a batch that was committed and synced cannot be read. Reading past it
  raises :class:`~stores._errors.StoreCorruptError` naming the file and the byte offset.

(Damage to batches no later line proves durable -- the last batch of a file, or in format
4 every batch since the last flush barrier its later lines know of -- cannot be told
from a torn write: it is taken as torn, like a WAL frame whose checksum fails.)
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from .._codec import decode_bytes
from .._errors import StoreCorruptError, UnsupportedFormatError
from .._records import JSON, PreparedEvent, decode_json_object

__all__ = [
    "FORMAT",
    "JSON_STRINGS",
    "Codec",
    "Header",
    "Row",
    "Scan",
    "corrupt",
    "decode_header",
    "decode_lines",
    "encode_header",
    "file_stem",
    "json_str",
    "stem_id",
    "stop_unless_committed",
]

#: The format generation this code writes (the header's ``"format"``); see
#: :mod:`stores.jsonl._format1` and :mod:`stores.jsonl._format2` for older ones.
FORMAT = 4
#: What marks a tidelog session file (the header's ``"tidelog"``).
MAGIC = "session"

_SAFE = frozenset(b"abcdefghijklmnopqrstuvwxyz0123456789-_")
#: Escaped names longer than this are cut and end with ``~`` and a hash of the id.
_MAX_STEM = 120


@functools.lru_cache(maxsize=16384)
def file_stem(session_id: str) -> str:
    """The file name stem of a session id: reversible, lower case, ASCII, never ``.``/``..``.

    Every UTF-8 byte outside ``[a-z0-9_-]`` becomes ``%XX`` (upper-case hex), so no two ids
    map to names that differ only in case (a case-insensitive file system keeps them
    apart), no name holds a path separator or a dot, and Unicode normalisation of file
    names (macOS) cannot merge two ids. An escaped stem longer than 120 characters is cut
    to 80 and ends with ``~`` and 32 hex digits of the id's SHA-256: the id is then read
    back from the file's header (:func:`stem_id` returns None)."""
    raw = session_id.encode("utf-8")
    stem = "".join(chr(b) if b in _SAFE else f"%{b:02X}" for b in raw)
    if len(stem) > _MAX_STEM:
        stem = f"{stem[:80]}~{hashlib.sha256(raw).hexdigest()[:32]}"
    return stem


def stem_id(stem: str) -> str | None:
    """The session id a stem names (``None`` for a hashed stem, or one that is not ours)."""
    if "~" in stem:
        return None
    try:
        raw = bytearray()
        i = 0
        while i < len(stem):
            char = stem[i]
            if char == "%":
                hex_ = stem[i + 1 : i + 3]
                if len(hex_) != 2 or hex_.upper() != hex_:
                    return None
                raw.append(int(hex_, 16))
                i += 3
            elif ord(char) in _SAFE:
                raw.append(ord(char))
                i += 1
            else:
                return None
        session_id = raw.decode("utf-8")
    except ValueError:
        return None
    return session_id if file_stem(session_id) == stem else None


# -- the header record -----------------------------------------------------------------------


@attrs.frozen
class Header:
    """A session file's header record."""

    id: str
    incarnation: int
    epoch: int
    cuts: tuple[tuple[int, int], ...]
    created_at: float
    updated_at: float
    header_json: str
    parent: tuple[str, int] | None
    base_seq: int
    bases: tuple[tuple[str, int, int], ...]
    format: int = FORMAT

    @property
    def header(self) -> dict[str, JSON]:
        """The session's header object (a new dict every call)."""
        return decode_json_object(self.header_json)


_ENC = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def encode_header(h: Header) -> bytes:
    """The header record's line (with its newline)."""
    head = {
        "tidelog": MAGIC,
        "format": h.format,
        "id": h.id,
        "incarnation": h.incarnation,
        "epoch": h.epoch,
        "cuts": [list(c) for c in h.cuts],
        "created_at": h.created_at,
        "updated_at": h.updated_at,
    }
    text = _ENC.encode(head)[:-1]
    parent = "null" if h.parent is None else _ENC.encode(list(h.parent))
    bases = _ENC.encode([list(b) for b in h.bases])
    text += f',"header":{h.header_json},"parent":{parent},"base_seq":{h.base_seq},"bases":{bases}}}'
    return (text + "\n").encode("utf-8")


def decode_header(line: bytes, path: str) -> Header:
    """Parse a header line. Raises :class:`UnsupportedFormatError` for a line that is not a
    tidelog session header (a foreign file) or a newer format, and
    :class:`StoreCorruptError` for a tidelog header that does not hold together."""
    try:
        value = decode_bytes(line)
    except (ValueError, RecursionError):
        value = None
    if not isinstance(value, dict) or value.get("tidelog") != MAGIC:
        if is_ours(line):
            raise StoreCorruptError(f"{path}: byte 0: damaged or cut header record")
        raise UnsupportedFormatError(f"{path}: not a tidelog session file (no header record)")
    version = value.get("format")
    if type(version) is not int or version < 1:
        raise StoreCorruptError(f"{path}: byte 0: damaged header record (format {version!r})")
    if version > FORMAT:
        raise UnsupportedFormatError(
            f"{path}: session file format {version!r}; this tidelog reads formats 1..{FORMAT}"
        )
    try:
        parent = value["parent"]
        header = value["header"]
        if not isinstance(header, dict):
            raise TypeError("header is not an object")
        result = Header(
            id=_str(value["id"]),
            incarnation=_int(value["incarnation"]),
            epoch=_int(value["epoch"]),
            cuts=tuple((_int(e), _int(s)) for e, s in value["cuts"]),
            created_at=float(value["created_at"]),
            updated_at=float(value["updated_at"]),
            header_json=_ENC.encode(header),
            parent=None if parent is None else (_str(parent[0]), _int(parent[1])),
            base_seq=_int(value["base_seq"]),
            bases=tuple((_str(n), _int(lo), _int(hi)) for n, lo, hi in value["bases"]),
            format=version,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise StoreCorruptError(f"{path}: byte 0: damaged header record ({exc})") from exc
    return result


#: How every header record starts (the encoder writes these keys first).
_HEAD_START = b'{"tidelog":"session","format":'
#: Parts of every header record: a line holding two of them is a damaged header.
_HEAD_PARTS = (
    b'"tidelog":"session"', b'"format":', b'"incarnation":', b'"epoch":', b'"cuts":',
    b'"created_at":', b'"base_seq":', b'"bases":',
)  # fmt: skip


def is_ours(line: bytes) -> bool:
    """Does ``line`` (a header line that does not hold together, or the start of one) look
    like a tidelog header record: empty (tidelog publishes whole files only), cut inside
    the start every header has, or holding two of its parts (one damaged byte can spoil
    only one)? Such a file is a damaged tidelog file, not a foreign one."""
    n = min(len(line), len(_HEAD_START))
    if line[:n] == _HEAD_START[:n]:
        return True
    return sum(part in line for part in _HEAD_PARTS) >= 2


def _int(value: Any) -> int:
    if type(value) is not int or value < 0:
        raise TypeError(f"expected an int >= 0, got {value!r}")
    return value


def _str(value: Any) -> str:
    if type(value) is not str:
        raise TypeError(f"expected a str, got {value!r}")
    return value


# -- scanning ----------------------------------------------------------------------------------


@attrs.define
class Scan:
    """What :meth:`Codec.scan` found in a region of a file."""

    #: Offset just past the last whole batch found (the new committed end).
    end: int
    #: Last seq of the last whole batch found.
    head: int
    #: Offset of each event found, in seq order: its line's (plain files), or its batch's
    #: frame's (compressed files).
    offsets: list[int]
    #: Last seq of each batch found.
    batch_ends: list[int]
    #: run_id -> (first, last) seq found.
    runs: dict[str, tuple[int, int]]
    #: Timestamp text of the last batch found (None: none found).
    last_ts: float | None
    #: ``(offset, reason)`` of corruption (a later commit mark exists), else None.
    damage: tuple[int, str] | None = None
    #: The highest seq a whole batch found proves durable (:meth:`Codec.proves`).
    synced: int = 0

    def add_batch(
        self,
        offsets: list[int],
        runs: list[tuple[str, int]],
        head: int,
        last_ts: float | None,
        end: int,
    ) -> None:
        """Record a whole batch found by a scan: its events' ``offsets``, the
        ``(run_id, seq)`` pairs it holds, its last seq, timestamp and end offset."""
        self.offsets.extend(offsets)
        self.batch_ends.append(head)
        for run_id, seq in runs:
            known = self.runs.get(run_id)
            self.runs[run_id] = (seq if known is None else known[0], seq)
        self.last_ts = last_ts
        self.head = head
        self.end = end


def stop_unless_committed(
    result: Scan,
    data: bytes,
    base: int,
    bad: int,
    why: str,
    path: str,
    is_commit: Callable[[bytes], bool],
    proves: Callable[[bytes], int] | None = None,
) -> Scan:
    """End a line scan at byte ``bad`` of ``data`` (``base`` is its offset in the file),
    where a batch is not whole: a torn tail -- unless a later whole line is a commit line
    (``is_commit``) that proves the damaged batch durable, which makes it damage inside
    the committed region (``result.damage``).

    ``proves`` (the highest seq a commit line's writer knew was durable,
    :meth:`Codec.proves`; without it every commit line proves everything before it)
    tells the lines written without an fsync since the damaged batch apart: a batch
    written without an fsync may reach the disk with its last page but not an earlier
    one (its own commit line surviving), and with ``synchronous="normal"`` so may every
    later batch up to the next barrier; only a commit line written after the damaged
    batch was synced proves that committed, durable data is damaged."""
    own = result.head + 1
    pos = data.find(b"\n", bad)
    while pos >= 0:
        nxt = data.find(b"\n", pos + 1)
        if nxt < 0:
            break
        line = data[pos + 1 : nxt]
        if is_commit(line) and (proves is None or proves(line) >= own):
            result.damage = (
                base + bad,
                f"{path}: byte {base + bad}: {why} inside the committed region",
            )
            return result
        pos = nxt
    return result


def corrupt(damage: tuple[int, str]) -> StoreCorruptError:
    """The error for a :attr:`Scan.damage`."""
    return StoreCorruptError(damage[1])


#: A decoded event: ``(seq, ts, kind, data, run_id)``.
Row = tuple[int, float, str, Any, "str | None"]


def decode_lines(
    data: bytes,
    session_id: str,
    first_seq: int,
    path: str,
    offset: int,
    check: Callable[[bytes], int] | None = None,
) -> list[Row]:
    """Decode the event lines in ``data`` (whole lines from byte ``offset`` of ``path``,
    seqs from ``first_seq``) into rows. ``check``, if given, returns a negative number for
    a line whose checksum does not match.

    Raises :class:`~stores._errors.StoreCorruptError` naming the file and the byte offset
    of the first damaged line."""
    rows = []
    loads = decode_bytes
    seq = first_seq
    pos = 0
    for line in data.split(b"\n")[:-1]:
        try:
            if check is not None and (status := check(line)) < 0:
                raise ValueError(
                    "a record of another session's file" if status == -2 else "checksum mismatch"
                )
            record = loads(line)
            if record["seq"] != seq:
                raise ValueError(f"expected seq {seq}, found {record['seq']}")
            rows.append(
                (seq, float(record["ts"]), record["kind"], record["data"], record.get("run_id"))
            )
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            raise StoreCorruptError(
                f"{path}: byte {offset + pos}: session {session_id!r}: damaged event record ({exc})"
            ) from exc
        seq += 1
        pos += len(line) + 1
    return rows


class Codec:
    """How one kind of session file writes and reads its batches: plain lines of a format
    generation, or zstd frames. Codecs are stateless singletons."""

    #: The header's format generation.
    format: int
    #: True if a batch is a zstd frame (the index then maps a seq to its frame).
    framed = False

    def bind(self, h: Header) -> Codec:  # noqa: ARG002
        """The codec for the file whose header is ``h`` (format 3 and 4 lines name their file)."""
        return self

    def is_commit(self, line: bytes) -> bool:
        """Is ``line`` (an event line without its newline, decompressed) a whole, checked
        line of this file closing a batch?"""
        raise NotImplementedError

    def proves(self, line: bytes) -> int:
        """The highest seq that the commit line ``line`` (without its newline) proves
        durable -- what its writer knew was synced of the file when it wrote it -- or -1
        if ``line`` is not a whole, checked commit line of this file."""
        raise NotImplementedError

    def header(self, h: Header) -> bytes:
        """The encoded header record."""
        raise NotImplementedError

    def batch(
        self,
        events: Sequence[PreparedEvent],
        first_seq: int,
        ts: float,
        stamps: Sequence[float] | None = None,
        lag: int = 0,
    ) -> tuple[bytes, list[int]]:
        """One batch's bytes and each event's offset within them (its line's, or 0 for a
        frame). Every event gets the commit time ``ts``, or its own from ``stamps``.
        ``lag``: how many of the events before the batch are not known durable (format 4
        records it in the commit line; see :meth:`proves`)."""
        raise NotImplementedError

    def scan(self, data: bytes, base: int, head: int, path: str) -> Scan:
        """Index the whole batches in ``data`` (file bytes from offset ``base``, where a
        batch starts, the next seq being ``head + 1``), stopping at the first one that is
        not whole; a :attr:`Scan.damage` if what follows is corruption, not a torn tail."""
        raise NotImplementedError

    def lines(self, data: bytes, offset: int, path: str) -> bytes:  # noqa: ARG002
        """The event lines that the whole batches ``data`` (read at ``offset``) hold."""
        return data

    def decode(
        self, data: bytes, session_id: str, first_seq: int, path: str, offset: int
    ) -> list[Row]:
        """Decode and check whole event lines expected to hold ``first_seq, ...``; raises
        :class:`StoreCorruptError` naming the offset of a line that is damaged."""
        raise NotImplementedError

    def raw(self, data: bytes, path: str, offset: int) -> list[tuple[str, str, str | None]]:
        """``(kind, data_json, run_id)`` of whole event lines, the data as stored."""
        raise NotImplementedError


def json_str(text: str) -> str:
    """``text`` as a JSON string (memoised: kinds and run ids repeat)."""
    encoded = JSON_STRINGS.get(text)
    if encoded is None:
        encoded = _ENC.encode(text)
        if len(JSON_STRINGS) > 8192:
            JSON_STRINGS.clear()
        JSON_STRINGS[text] = encoded
    return encoded


#: :func:`json_str`'s memo, ``text`` -> its JSON string (a hot path may look there first).
JSON_STRINGS: dict[str, str] = {}
