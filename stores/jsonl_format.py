"""The JSONL session file format: file names, the header record, batch records, scanning.

A session file is UTF-8 JSON Lines. Its first line is the **header record**::

    {"tidelog":"session","format":1,"id":...,"incarnation":N,"epoch":E,"cuts":[[e,seq],...],
     "created_at":T,"updated_at":T,"header":{...},"parent":[id,seq]|null,
     "base_seq":B,"bases":[[link,lo,hi],...]}

Then one line per event, ``seq`` ``B+1, B+2, ...`` (a fork reads seqs ``1..B`` from the
``bases``: hard links to the files that hold them, each read for seqs ``lo < seq <= hi``)::

    {"seq":7,"ts":1712.25,"kind":"message","run_id":"r1","data":{...}}

``run_id`` is omitted when there is none. The events of one committed op (a **batch**) are
consecutive lines; the last one ends with the batch's commit mark ``"end":[n,crc]``: ``n``
events, ``crc`` the CRC-32 of the batch's bytes from the start of its first line up to
(not including) ``,"end":``.

**The committed region** is the header plus every whole batch, in order, seqs contiguous,
each closed by a commit mark whose CRC matches. What follows it is either

* a **torn tail** -- an unfinished batch (a crash or a concurrent write in progress): no
  newline-terminated line with a commit mark follows the first bad byte. It is never
  served, and the next writer truncates it (durably) before writing; or
* **corruption** -- a damaged or missing record *followed* by a later complete commit
  mark: a batch that was committed cannot be read. Reading past it raises
  :class:`~stores.errors.StoreCorruptError` naming the file and the byte offset.

(The last batch of a file cannot be told from a torn write if it is damaged: it is taken
as torn, like a WAL frame whose checksum fails.)
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import zlib
from collections.abc import Sequence
from typing import Any

import attrs

from .errors import StoreCorruptError, UnsupportedFormatError
from .records import JSON, PreparedEvent, decode_json_object

__all__ = [
    "FORMAT",
    "Header",
    "Scan",
    "decode_header",
    "encode_batch",
    "encode_header",
    "file_stem",
    "scan",
    "stem_id",
]

#: The format generation this code writes (the header's ``"format"``); see
#: :mod:`stores.jsonl_migrate` for older ones.
FORMAT = 1
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
        value = json.loads(line)
    except (ValueError, RecursionError):
        value = None
    if not isinstance(value, dict) or value.get("tidelog") != MAGIC:
        raise UnsupportedFormatError(f"{path}: not a tidelog session file (no header record)")
    version = value.get("format")
    if type(version) is not int or version > FORMAT or version < 1:
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


def _int(value: Any) -> int:
    if type(value) is not int or value < 0:
        raise TypeError(f"expected an int >= 0, got {value!r}")
    return value


def _str(value: Any) -> str:
    if type(value) is not str:
        raise TypeError(f"expected a str, got {value!r}")
    return value


# -- batch records -----------------------------------------------------------------------------

_STRINGS: dict[str, str] = {}


def _json_str(text: str) -> str:
    encoded = _STRINGS.get(text)
    if encoded is None:
        encoded = _ENC.encode(text)
        if len(_STRINGS) > 8192:
            _STRINGS.clear()
        _STRINGS[text] = encoded
    return encoded


def encode_batch(
    events: Sequence[PreparedEvent],
    first_seq: int,
    ts: float,
    stamps: Sequence[float] | None = None,
) -> tuple[bytes, list[int]]:
    """The lines of one batch and the byte offset of each line within them. Every event
    gets the commit time ``ts``, or its own from ``stamps`` (a restore)."""
    stamp = repr(ts)
    lines: list[str] = []
    for i, ev in enumerate(events):
        run = "" if ev.run_id is None else f',"run_id":{_json_str(ev.run_id)}'
        when = stamp if stamps is None else repr(float(stamps[i]))
        lines.append(
            f'{{"seq":{first_seq + i},"ts":{when},"kind":{_json_str(ev.kind)}{run},'
            f'"data":{ev.data_json}'
        )
    body = "}\n".join(lines).encode("utf-8")
    mark = f',"end":[{len(events)},{zlib.crc32(body)}]}}\n'.encode()
    offsets = [0]
    if len(lines) > 1:
        pos = body.find(b"\n")
        while pos >= 0:
            offsets.append(pos + 1)
            pos = body.find(b"\n", pos + 1)
    return body + mark, offsets


# -- scanning ----------------------------------------------------------------------------------

_JSTR = rb'"(?:[^"\\]|\\.)*"'
_PREFIX = re.compile(
    rb'\{"seq":(\d+),"ts":[-0-9.eE+]+,"kind":'
    + _JSTR
    + rb'(?:,"run_id":('
    + _JSTR
    + rb"))?,\"data\":"
)
_END = re.compile(rb',"end":\[(\d+),(\d+)\]\}\Z')


@attrs.define
class Scan:
    """What :func:`scan` found in a region of a file."""

    #: Offset just past the last whole batch found (the new committed end).
    end: int
    #: Last seq of the last whole batch found.
    head: int
    #: Offsets of each event line found, in seq order.
    offsets: list[int]
    #: Last seq of each batch found.
    batch_ends: list[int]
    #: run_id -> (first, last) seq found.
    runs: dict[str, tuple[int, int]]
    #: Timestamp text of the last batch found (None: none found).
    last_ts: float | None
    #: ``(offset, reason)`` of corruption (a later commit mark exists), else None.
    damage: tuple[int, str] | None = None


_TS = re.compile(rb'"ts":([-0-9.eE+]+),')


def scan(data: bytes, base: int, head: int, path: str) -> Scan:
    """Index the whole batches in ``data`` (file bytes from offset ``base``, where a batch
    starts, the next seq being ``head + 1``), stopping at the first one that is not whole.

    Returns the batches found and, if the rest is corruption rather than a torn tail, the
    damage's offset and reason (see the module doc)."""
    result = Scan(base, head, [], [], {}, None)
    pos = 0
    size = len(data)
    expected = head + 1
    batch_start = 0
    pending: list[int] = []
    pending_runs: list[tuple[str, int]] = []
    prefix_match = _PREFIX.match
    while pos < size:
        nl = data.find(b"\n", pos)
        if nl < 0:
            break  # a partial line: torn
        line = data[pos:nl]
        match = prefix_match(line)
        if match is None or int(match.group(1)) != expected:
            why = "not an event record" if match is None else f"expected seq {expected}"
            return _stop(result, data, base, pos, why, path)
        pending.append(base + pos)
        run = match.group(2)
        if run is not None:
            pending_runs.append((json.loads(run), expected))
        end = _END.search(line) if line.endswith(b"]}") else None
        if end is not None:
            count, crc = int(end.group(1)), int(end.group(2))
            body_end = pos + end.start()
            if count != len(pending) or zlib.crc32(data[batch_start:body_end]) != crc:
                return _stop(result, data, base, pos, "checksum mismatch", path)
            result.offsets.extend(pending)
            result.batch_ends.append(expected)
            for run_id, seq in pending_runs:
                known = result.runs.get(run_id)
                result.runs[run_id] = (seq if known is None else known[0], seq)
            ts = _TS.search(line)
            result.last_ts = float(ts.group(1)) if ts else None
            result.head = expected
            result.end = base + nl + 1
            pending, pending_runs = [], []
            batch_start = nl + 1
        expected += 1
        pos = nl + 1
    return result


def _stop(result: Scan, data: bytes, base: int, bad: int, why: str, path: str) -> Scan:
    """Stop at a batch that is not whole: corruption if a complete commit mark follows."""
    pos = data.find(b"\n", bad)
    while pos >= 0:
        nxt = data.find(b"\n", pos + 1)
        if nxt < 0:
            break
        line = data[pos + 1 : nxt]
        if line.endswith(b"]}") and _END.search(line) and _PREFIX.match(line):
            try:
                json.loads(line)
            except ValueError:
                pass
            else:
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


def decode_lines(
    data: bytes, session_id: str, first_seq: int, path: str, offset: int
) -> list[tuple[int, float, str, Any, str | None]]:
    """Decode event lines ``data`` (whole lines) expected to hold ``first_seq, ...``: rows
    ``(seq, ts, kind, data, run_id)``. Raises :class:`StoreCorruptError` naming the offset
    of a line that does not parse or holds another seq."""
    rows = []
    loads = json.loads
    seq = first_seq
    pos = 0
    for line in data.split(b"\n")[:-1]:
        try:
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
