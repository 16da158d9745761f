"""Format 1 session files: reading them, and migrating them (and format 2, 3 files) to format 4.

Format 1 (tidelog's first JSONL generation) writes event lines without a checksum of
their own; the last line of a batch carries ``"end":[n,crc]``: ``n`` events, ``crc`` the
CRC-32 of the batch's bytes from the start of its first line up to (not including)
``,"end":``. A format 1 file is read as it is (its batches are checked when they are
indexed); any reader, a read-only one included, can serve it.

**Migration.** The first writer that takes a session's lock and finds a format 1 file
(or format 2 or 3 file) publishes a format 4 successor (:func:`migrate`) before it writes
anything:

1. The source file is hard-linked to ``migrated/<stem>.<inode>.v<format>.jsonl``, and that
   directory fsynced: the source stays reachable, byte for byte as it was (it is never
   written again: every later change goes to the successor).
2. The successor -- the same header (format 4), the same batches with the same seqs,
   times, kinds, run ids and data text, each line with its own checksum, in the store's
   encoding (plain, or zstd frames with ``compress=True``) -- is written to ``tmp/``,
   fsynced, and renamed over the session's name; the sessions directory is fsynced.

A crash before the rename leaves the source in place (and maybe its link in
``migrated/``, which the next migration reuses); after it, the successor. The source's
torn tail, if any, is not carried over (it was never served). A source that is damaged
inside its committed region is not migrated: the write fails with the
:class:`~stores._errors.StoreCorruptError` a read would raise, and nothing changes. Forks
keep reading their prefix from the hard links to the format 1 files they were made from.
The originals in ``migrated/`` are not read by tidelog: delete them once no older tidelog
needs them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import zlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs

from .._codec import decode_bytes
from .._errors import StoreCorruptError, StoreIOError
from .._records import PreparedEvent
from ._files import IO, fsync_dir, publish
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
from ._group import step

if TYPE_CHECKING:
    from ._index import FileIndex

__all__ = ["FORMAT1", "MIGRATION_STEPS", "V1", "migrate", "successor"]

#: The steps of a migration reported to :data:`stores.jsonl._group.STEP` (crash tests).
MIGRATION_STEPS = ["migration: source kept", "migration: successor published"]

_JSTR = rb'"(?:[^"\\]|\\.)*"'
_PREFIX = re.compile(
    rb'\{"seq":(\d+),"ts":[-0-9.eE+]+,"kind":'
    + _JSTR
    + rb'(?:,"run_id":('
    + _JSTR
    + rb'))?,"data":'
)
_END = re.compile(rb',"end":\[(\d+),(\d+)\]\}\Z')
_TS = re.compile(rb'"ts":([-0-9.eE+]+),')
_RAW = re.compile(
    rb'\{"seq":\d+,"ts":[^,]+,"kind":("(?:[^"\\]|\\.)*")(?:,"run_id":("(?:[^"\\]|\\.)*"))?,"data":'
)
_TAIL = re.compile(rb'(?:,"end":\[\d+,\d+\])?\}\Z')


class V1(Codec):
    """Format 1 in plain lines (see the module doc). Its writer is kept to make format 1
    files for tests; the store never writes one."""

    format = 1

    def header(self, h: Header) -> bytes:
        return encode_header(attrs.evolve(h, format=1))

    def batch(
        self,
        events: Sequence[PreparedEvent],
        first_seq: int,
        ts: float,
        stamps: Sequence[float] | None = None,
        lag: int = 0,  # noqa: ARG002 (format 1 has no such record; never written now)
    ) -> tuple[bytes, list[int]]:
        stamp = repr(ts)
        lines: list[str] = []
        for i, ev in enumerate(events):
            run = "" if ev.run_id is None else f',"run_id":{json_str(ev.run_id)}'
            when = stamp if stamps is None else repr(float(stamps[i]))
            lines.append(
                f'{{"seq":{first_seq + i},"ts":{when},"kind":{json_str(ev.kind)}{run},'
                f'"data":{ev.data_json}'
            )
        body = "}\n".join(lines).encode("utf-8")
        mark = f',"end":[{len(events)},{zlib.crc32(body)}]}}\n'.encode()
        offsets = [0]
        pos = body.find(b"\n")
        while pos >= 0:
            offsets.append(pos + 1)
            pos = body.find(b"\n", pos + 1)
        return body + mark, offsets

    def scan(self, data: bytes, base: int, head: int, path: str) -> Scan:
        result = Scan(base, head, [], [], {}, None)
        pos = 0
        size = len(data)
        expected = head + 1
        batch_start = 0
        pending: list[int] = []
        pending_runs: list[tuple[str, int]] = []
        while pos < size:
            nl = data.find(b"\n", pos)
            if nl < 0:
                break  # a partial line: torn
            line = data[pos:nl]
            match = _PREFIX.match(line)
            if match is None or int(match.group(1)) != expected:
                why = "not an event record" if match is None else f"expected seq {expected}"
                return stop_unless_committed(result, data, base, pos, why, path, _commit_line_v1)
            pending.append(base + pos)
            run = match.group(2)
            if run is not None:
                pending_runs.append((decode_bytes(run), expected))
            end = _END.search(line) if line.endswith(b"]}") else None
            if end is not None:
                count, crc = int(end.group(1)), int(end.group(2))
                body_end = pos + end.start()
                if count != len(pending) or zlib.crc32(data[batch_start:body_end]) != crc:
                    return stop_unless_committed(
                        result, data, base, pos, "checksum mismatch", path, _commit_line_v1
                    )
                ts = _TS.search(line)
                last_ts = float(ts.group(1)) if ts else None
                result.add_batch(pending, pending_runs, expected, last_ts, base + nl + 1)
                pending, pending_runs = [], []
                batch_start = nl + 1
            expected += 1
            pos = nl + 1
        return result

    def decode(
        self, data: bytes, session_id: str, first_seq: int, path: str, offset: int
    ) -> list[Row]:
        return decode_lines(data, session_id, first_seq, path, offset)

    def raw(self, data: bytes, path: str, offset: int) -> list[tuple[str, str, str | None]]:
        rows = []
        for line in data.split(b"\n")[:-1]:
            match = _RAW.match(line)
            tail = _TAIL.search(line)
            if match is None or tail is None:
                raise StoreCorruptError(f"{path}: byte {offset}: damaged event record")
            run = match.group(2)
            rows.append(
                (
                    json.loads(match.group(1)),
                    line[match.end() : tail.start()].decode("utf-8"),
                    None if run is None else json.loads(run),
                )
            )
            offset += len(line) + 1
        return rows


#: The codec of format 1 files.
FORMAT1 = V1()


def _commit_line_v1(line: bytes) -> bool:
    """True for a whole format 1 commit line (the last record of a batch)."""
    if not (line.endswith(b"]}") and _END.search(line) and _PREFIX.match(line)):
        return False
    try:
        json.loads(line)
    except ValueError:
        return False
    return True


def successor(header: Header, batches: list[list[Row]], raw: list[str], codec: Codec) -> bytes:
    """The format 4 file holding ``batches`` (decoded rows, each batch as committed) with
    the data text ``raw`` (one per event, as stored)."""
    header = attrs.evolve(header, format=codec.format)
    codec = codec.bind(header)
    out = [codec.header(header)]
    k = 0
    for rows in batches:
        events = []
        for _, _, kind, _, run_id in rows:
            events.append(PreparedEvent(kind, raw[k], run_id))
            k += 1
        stamps = [ts for _, ts, _, _, _ in rows]
        out.append(codec.batch(events, rows[0][0], stamps[-1], stamps)[0])
    return b"".join(out)


def migrate(
    index: FileIndex, session_dir: str, tmp_dir: str, migrated_dir: str, stem: str, codec: Codec
) -> None:
    """Publish a format 4 successor of the format 1, 2 or 3 file ``index`` indexes (the caller
    holds the session's lock); see the module doc. The source is left byte-identical."""
    index.check()
    path = os.path.join(session_dir, f"{stem}.jsonl")
    ends = list(index.batch_ends)
    batches: list[list[Row]] = []
    raw: list[str] = []
    lo = index.header.base_seq
    for hi in ends:
        batches.append(index.read_rows(index.header.id, lo, hi))
        raw.extend(data for _, data, _ in index.raw_rows(lo, hi))
        lo = hi
    data = successor(index.header, batches, raw, codec)
    keep = os.path.join(migrated_dir, f"{stem}.{index.ino}.v{index.header.format}.jsonl")
    try:
        try:
            IO.link(path, keep)
        except FileExistsError:
            if os.lstat(keep).st_ino != index.ino:  # (a planted symlink is not it)
                raise StoreIOError(f"{keep}: exists and is not {path}'s source") from None
        fsync_dir(migrated_dir)
        step("migration: source kept")
        if os.stat(path).st_ino != index.ino:
            raise StoreIOError(f"{path}: replaced while migrating it")
        publish(tmp_dir, path, data, replace=True)
        step("migration: successor published")
        fsync_dir(session_dir)
    except OSError as exc:
        with contextlib.suppress(OSError):
            if os.stat(path).st_ino == index.ino:  # not published: nothing to keep
                IO.unlink(keep)
        raise StoreIOError(
            f"{path}: cannot migrate format {index.header.format} to {codec.format} ({exc})"
        ) from exc
