"""Format 2, 3 and 4 event records: one line per event, each with its own CRC-32.

An event line of format 2 is::

    {"seq":7,"ts":1712.25,"kind":"message","run_id":"r1","data":{...},"crc":X}

``run_id`` is omitted when there is none; the last line of a batch carries the batch's
commit mark ``"end":n`` (``n`` events) right before its checksum::

    {"seq":9,"ts":1712.25,"kind":"message","data":{...},"end":3,"crc":X}

``X`` is the CRC-32 of the line's bytes from its ``{`` up to (not including) ``,"crc":``,
commit mark included.

**Format 3** lines are format 2 lines that also name their file: ``,"f":"K"`` right before
the checksum, ``K`` the 8 hex digits of the CRC-32 of the session's id and incarnation
(:func:`file_key`), covered by the checksum. A line copied from another session's file
(or an older incarnation of this one) checks, but names another file: it is
:class:`StoreCorruptError` wherever it is -- even as the last batch, where a bad line is
otherwise taken for a torn write -- since no torn or damaged write makes a whole
checksummed line of another file.

**Format 4** lines are format 3 lines whose commit line may also say how far the file was
known durable when it was written: ``,"s":d`` right after the commit mark (before the tag,
covered by the checksum), ``d`` > 0 the number of events before the batch its writer did
not know to be synced (absent: none). So a commit line closing seqs ``a..b`` *proves*
seqs up to ``a - 1 - d`` durable (:meth:`Plain.proves`); a format 2 or 3 commit line
proves everything before its batch (what a ``synchronous="full"`` writer, which fsyncs
every batch, knows). With ``synchronous="normal"`` the batches between two flush barriers
carry ``d`` > 0, so when a power cut loses a page of one of them and keeps a later one
whole, the damage is known to lie past what was synced: a torn tail, not corruption.

A batch is whole when its ``n`` lines are there, each with a
matching checksum and the expected seq. Because every record carries its own checksum, a
read served from an index (which never scanned the batch) still checks every line it
returns: a damaged record in the committed region is a :class:`StoreCorruptError` naming
the file and the record's byte offset, never wrong data.
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Sequence

from .._codec import decode_bytes
from .._errors import StoreCorruptError
from .._records import PreparedEvent
from ._format import (
    JSON_STRINGS,
    Codec,
    Header,
    Row,
    Scan,
    decode_lines,
    encode_header,
    json_str,
    stop_unless_committed,
)

__all__ = ["PLAIN", "PLAIN3", "PLAIN4", "Plain", "commit_line", "file_key"]

_JSTR = rb'"(?:[^"\\]|\\.)*"'
#: The start of an event line, up to its data: seq, ts, kind, run_id.
PREFIX = re.compile(
    rb'\{"seq":(\d+),"ts":([-0-9.eE+]+),"kind":('
    + _JSTR
    + rb')(?:,"run_id":('
    + _JSTR
    + rb'))?,"data":'
)
_CRC = b',"crc":'
_END = b',"end":'
_LAG = b',"s":'
_TAG = re.compile(rb',"f":"([0-9a-f]{8})"$')
#: What :meth:`Plain.check` returns for a whole, checksummed line of another file.
FOREIGN = -2


def file_key(h: Header) -> bytes:
    """The tag a format 3 or 4 file's lines carry: ``,"f":"K"`` (see the module doc)."""
    key = zlib.crc32(json_str(h.id).encode() + b"\x00%d" % h.incarnation)
    return b',"f":"%08x"' % key


def checked(line: bytes) -> int:
    """The length of ``line``'s checked part (before ``,"crc":``) if its checksum matches,
    else -1."""
    cut = line.rfind(_CRC)
    if cut <= 0 or not line.endswith(b"}"):
        return -1
    digits = line[cut + 7 : -1]
    if not digits.isdigit() or len(digits) > 10 or zlib.crc32(line[:cut]) != int(digits):
        return -1
    return cut


def end_mark(body: bytes) -> tuple[int, int]:
    """``(count, start)`` of the commit mark ending a checked line part, or ``(0, len)``.

    Data is a whole JSON value, so a part ending in ``,"end":<digits>`` ends with a mark
    (a string or object holding that text ends with ``"`` or ``}``)."""
    if not body[-1:].isdigit():
        return 0, len(body)
    cut = body.rfind(_END)
    if cut < 0:
        return 0, len(body)
    digits = body[cut + 7 :]
    if not digits.isdigit():
        return 0, len(body)
    return int(digits), cut


def lag_mark(body: bytes) -> tuple[int, int]:
    """``(lag, start)`` of a format 4 durability mark ``,"s":d`` ending a checked line part
    (right after its commit mark), or ``(0, len)``. Like the commit mark, no JSON value
    ends with that text, so a part ending in it ends with a mark."""
    if not body[-1:].isdigit():
        return 0, len(body)
    cut = body.rfind(_LAG)
    if cut < 0:
        return 0, len(body)
    digits = body[cut + 5 :]
    if not digits.isdigit() or not body[cut - 1 : cut].isdigit():
        return 0, len(body)
    return int(digits), cut


def commit_line(line: bytes) -> bool:
    """Is ``line`` (without its newline) a whole, checked line closing a batch?"""
    cut = checked(line)
    return cut > 0 and end_mark(line[:cut])[0] > 0 and PREFIX.match(line) is not None


#: The last commit time written and its text (see :func:`_stamp`).
_LAST_STAMP: list[tuple[float, str]] = [(0.0, "0.0")]


def _stamp(ts: float) -> str:
    """``repr(ts)``, the text of a commit time. The ops of one batch share one time (the
    very object ``run_batch`` took), and each op of W2's shape writes its own line: the
    last text is reused for that same object (a float's ``repr`` is CPython's dtoa, some
    6k instructions). Exact: only the same object is reused."""
    last = _LAST_STAMP[0]
    if last[0] is ts:
        return last[1]
    text = repr(ts)
    _LAST_STAMP[0] = (ts, text)
    return text


class Plain(Codec):
    """Format 2 (``tag`` empty), 3 or 4 (``tag``: the file's :func:`file_key`) in plain
    lines (see the module doc)."""

    def __init__(self, format: int = 2, tag: bytes = b"") -> None:
        self.format = format
        self.tag = tag
        self._text = tag.decode()
        #: Format 4: a commit line may carry how far the file was known durable.
        self._lagged = format >= 4

    def bind(self, h: Header) -> Plain:
        return self if self.format < 3 else Plain(self.format, file_key(h))

    def mark(self, body: bytes) -> tuple[int, int, int]:
        """``(count, lag, start)`` of the marks ending a checked line part (before its tag):
        the batch's event count (0: not a commit line), the events before the batch not
        known durable, and where the marks start (where the event's data ends)."""
        lag, stop = lag_mark(body) if self._lagged else (0, len(body))
        count, start = end_mark(body[:stop])
        if count == 0:
            return 0, 0, len(body)
        return count, lag, start

    def check(self, line: bytes) -> int:
        """The length of ``line``'s record part (before its tag and checksum) if it checks
        and is this file's, else -1 (:data:`FOREIGN`: it checks but is another file's)."""
        cut = checked(line)
        if cut <= 0 or not self.tag:
            return cut
        if line.endswith(self.tag, 0, cut):
            return cut - len(self.tag)
        return FOREIGN if _TAG.search(line, 0, cut) else -1

    def is_commit(self, line: bytes) -> bool:
        """Is ``line`` (without its newline) a whole, checked line of this file closing a
        batch?"""
        cut = self.check(line)
        return cut > 0 and self.mark(line[:cut])[0] > 0 and PREFIX.match(line) is not None

    def proves(self, line: bytes) -> int:
        """See :meth:`Codec.proves`: a commit line closing seqs ``a..b`` with lag ``d``
        proves seqs up to ``a - 1 - d`` (its seq minus its count minus its lag)."""
        cut = self.check(line)
        match = PREFIX.match(line) if cut > 0 else None
        if match is None:
            return -1
        count, lag, _ = self.mark(line[:cut])
        return int(match.group(1)) - count - lag if count > 0 else -1

    def header(self, h: Header) -> bytes:
        return encode_header(h)

    def batch(
        self,
        events: Sequence[PreparedEvent],
        first_seq: int,
        ts: float,
        stamps: Sequence[float] | None = None,
        lag: int = 0,
    ) -> tuple[bytes, list[int]]:
        durable = f',"s":{lag}' if lag > 0 and self._lagged else ""
        if len(events) == 1 and stamps is None:  # the usual batch: one awaited append
            ev = events[0]
            run = "" if ev.run_id is None else f',"run_id":{json_str(ev.run_id)}'
            cached = _LAST_STAMP[0]  # (_stamp's and json_str's memos, read here first)
            stamp = cached[1] if cached[0] is ts else _stamp(ts)
            kind_json = JSON_STRINGS.get(ev.kind) or json_str(ev.kind)
            line = (
                f'{{"seq":{first_seq},"ts":{stamp},"kind":{kind_json}{run},'
                f'"data":{ev.data_json},"end":1{durable}{self._text}'
            ).encode()
            return line + b',"crc":%d}\n' % zlib.crc32(line), [0]
        stamp = _stamp(ts)
        crc32 = zlib.crc32
        last = len(events) - 1
        out: list[bytes] = []
        offsets: list[int] = []
        pos = 0
        kind: str | None = None  # the last event's kind, and its JSON (kinds repeat)
        kind_json = ""
        for i, ev in enumerate(events):
            if ev.kind is not kind:
                kind = ev.kind
                kind_json = json_str(kind)
            run = "" if ev.run_id is None else f',"run_id":{json_str(ev.run_id)}'
            when = stamp if stamps is None else repr(float(stamps[i]))
            mark = f',"end":{last + 1}{durable}{self._text}' if i == last else self._text
            line = (
                f'{{"seq":{first_seq + i},"ts":{when},"kind":{kind_json}{run},'
                f'"data":{ev.data_json}{mark}'
            ).encode()
            line += b',"crc":%d}\n' % crc32(line)
            offsets.append(pos)
            pos += len(line)
            out.append(line)
        return b"".join(out), offsets

    def scan(self, data: bytes, base: int, head: int, path: str) -> Scan:
        result = Scan(base, head, [], [], {}, None)
        pos = 0
        size = len(data)
        expected = head + 1
        pending: list[int] = []
        pending_runs: list[tuple[str, int]] = []
        prefix_match = PREFIX.match
        while pos < size:
            nl = data.find(b"\n", pos)
            if nl < 0:
                break  # a partial line: torn
            line = data[pos:nl]
            cut = self.check(line)
            match = prefix_match(line) if cut > 0 else None
            if cut == FOREIGN:  # a whole line of another file: damage wherever it is
                result.damage = (
                    base + pos,
                    f"{path}: byte {base + pos}: a record of another session's file",
                )
                return result
            if match is None or int(match.group(1)) != expected:
                why = (
                    "checksum mismatch"
                    if cut <= 0
                    else "not an event record"
                    if match is None
                    else f"expected seq {expected}"
                )
                return stop_unless_committed(
                    result, data, base, pos, why, path, self.is_commit, self.proves
                )
            pending.append(base + pos)
            run = match.group(4)
            if run is not None:
                pending_runs.append((decode_bytes(run), expected))
            count, lag, _ = self.mark(line[:cut])
            if count:
                if count != len(pending):
                    return stop_unless_committed(
                        result,
                        data,
                        base,
                        pos,
                        "batch count mismatch",
                        path,
                        self.is_commit,
                        self.proves,
                    )
                result.add_batch(
                    pending, pending_runs, expected, float(match.group(2)), base + nl + 1
                )
                if expected - count - lag > result.synced:
                    result.synced = expected - count - lag
                pending, pending_runs = [], []
            expected += 1
            pos = nl + 1
        return result

    def decode(
        self, data: bytes, session_id: str, first_seq: int, path: str, offset: int
    ) -> list[Row]:
        return decode_lines(data, session_id, first_seq, path, offset, self.check)

    def raw(self, data: bytes, path: str, offset: int) -> list[tuple[str, str, str | None]]:
        rows = []
        for line in data.split(b"\n")[:-1]:
            cut = self.check(line)
            match = PREFIX.match(line) if cut > 0 else None
            if match is None:
                raise StoreCorruptError(f"{path}: byte {offset}: damaged event record")
            _, _, stop = self.mark(line[:cut])
            run = match.group(4)
            rows.append(
                (
                    json.loads(match.group(3)),
                    line[match.end() : stop].decode("utf-8"),
                    None if run is None else json.loads(run),
                )
            )
            offset += len(line) + 1
        return rows


#: The codec of plain format 2 files.
PLAIN = Plain()
#: The codec of plain format 3 files (bound to a file by :meth:`Plain.bind`).
PLAIN3 = Plain(3, b',"f":"00000000"')
#: The codec of plain format 4 files, the ones this version writes (bound likewise).
PLAIN4 = Plain(4, b',"f":"00000000"')
