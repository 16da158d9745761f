"""Format 2 event records: one line per event, each with its own CRC-32.

An event line of format 2 is::

    {"seq":7,"ts":1712.25,"kind":"message","run_id":"r1","data":{...},"crc":X}

``run_id`` is omitted when there is none; the last line of a batch carries the batch's
commit mark ``"end":n`` (``n`` events) right before its checksum::

    {"seq":9,"ts":1712.25,"kind":"message","data":{...},"end":3,"crc":X}

``X`` is the CRC-32 of the line's bytes from its ``{`` up to (not including) ``,"crc":``,
commit mark included. A batch is whole when its ``n`` lines are there, each with a
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

from .._errors import StoreCorruptError
from .._records import PreparedEvent
from ._format import (
    Codec,
    Header,
    Row,
    Scan,
    decode_lines,
    encode_header,
    json_str,
    stop_unless_committed,
)

__all__ = ["PLAIN", "Plain", "commit_line"]

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


def commit_line(line: bytes) -> bool:
    """Is ``line`` (without its newline) a whole, checked line closing a batch?"""
    cut = checked(line)
    return cut > 0 and end_mark(line[:cut])[0] > 0 and PREFIX.match(line) is not None


def batch_first(line: bytes) -> int:
    """The first seq of the batch that the commit line ``line`` closes (0 if it is not
    one): its seq minus its count, plus one."""
    cut = checked(line)
    match = PREFIX.match(line) if cut > 0 else None
    count = end_mark(line[:cut])[0] if match is not None else 0
    return int(match.group(1)) - count + 1 if match is not None and count > 0 else 0


class Plain(Codec):
    """Format 2 in plain lines (see the module doc)."""

    format = 2

    def header(self, h: Header) -> bytes:
        return encode_header(h)

    def batch(
        self,
        events: Sequence[PreparedEvent],
        first_seq: int,
        ts: float,
        stamps: Sequence[float] | None = None,
    ) -> tuple[bytes, list[int]]:
        if len(events) == 1 and stamps is None:  # the usual batch: one awaited append
            ev = events[0]
            run = "" if ev.run_id is None else f',"run_id":{json_str(ev.run_id)}'
            line = (
                f'{{"seq":{first_seq},"ts":{ts!r},"kind":{json_str(ev.kind)}{run},'
                f'"data":{ev.data_json},"end":1'
            ).encode()
            return line + b',"crc":%d}\n' % zlib.crc32(line), [0]
        stamp = repr(ts)
        crc32 = zlib.crc32
        last = len(events) - 1
        out: list[bytes] = []
        offsets: list[int] = []
        pos = 0
        for i, ev in enumerate(events):
            run = "" if ev.run_id is None else f',"run_id":{json_str(ev.run_id)}'
            when = stamp if stamps is None else repr(float(stamps[i]))
            mark = f',"end":{last + 1}' if i == last else ""
            line = (
                f'{{"seq":{first_seq + i},"ts":{when},"kind":{json_str(ev.kind)}{run},'
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
            cut = checked(line)
            match = prefix_match(line) if cut > 0 else None
            if match is None or int(match.group(1)) != expected:
                why = (
                    "checksum mismatch"
                    if cut <= 0
                    else "not an event record"
                    if match is None
                    else f"expected seq {expected}"
                )
                return stop_unless_committed(
                    result, data, base, pos, why, path, commit_line, batch_first
                )
            pending.append(base + pos)
            run = match.group(4)
            if run is not None:
                pending_runs.append((json.loads(run), expected))
            count, _ = end_mark(line[:cut])
            if count:
                if count != len(pending):
                    return stop_unless_committed(
                        result,
                        data,
                        base,
                        pos,
                        "batch count mismatch",
                        path,
                        commit_line,
                        batch_first,
                    )
                result.add_batch(
                    pending, pending_runs, expected, float(match.group(2)), base + nl + 1
                )
                pending, pending_runs = [], []
            expected += 1
            pos = nl + 1
        return result

    def decode(
        self, data: bytes, session_id: str, first_seq: int, path: str, offset: int
    ) -> list[Row]:
        return decode_lines(data, session_id, first_seq, path, offset, checked)

    def raw(self, data: bytes, path: str, offset: int) -> list[tuple[str, str, str | None]]:
        rows = []
        for line in data.split(b"\n")[:-1]:
            cut = checked(line)
            match = PREFIX.match(line) if cut > 0 else None
            if match is None:
                raise StoreCorruptError(f"{path}: byte {offset}: damaged event record")
            _, stop = end_mark(line[:cut])
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
