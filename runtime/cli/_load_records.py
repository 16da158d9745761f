"""Reading a dump (see :mod:`runtime.cli._dump`) for ``tidelog import``
(:mod:`runtime.cli._load`): its header, checked before anything is written, then its
lines, each record parsed and checked -- :class:`DumpError` for a dump this version does
not read, or a damaged or cut one.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import IO

import attrs

from runtime import JSON, TidelogError
from stores import NewEvent, encode_json, validate_session_id

from ._dump import DUMP_FORMAT, DUMP_VERSION
from ._errors import CliError

__all__ = ["DumpError", "SessionRecord", "parse_event", "parse_record", "read_dump"]


class DumpError(CliError):
    """The dump is not a tidelog dump this version reads, or is damaged or cut."""


#: The longest header line read (a real one is ~100 bytes): a binary file without line
#: breaks is refused after this much, not read whole into memory.
HEADER_BYTES = 64 * 1024
#: How compressed files start, to say what to do with one given as a dump.
_COMPRESSED = {
    b"\x1f\x8b": ("gzip", "gunzip -c"),
    b"\x28\xb5\x2f\xfd": ("zstd", "zstd -dc"),
    b"BZh": ("bzip2", "bzip2 -dc"),
    b"\xfd7zXZ\x00": ("xz", "xz -dc"),
    b"PK\x03\x04": ("zip", "unzip -p"),
}


def read_dump(
    source: IO[bytes], advance: Callable[[int], None] | None = None
) -> Iterator[tuple[int, str]]:
    """The dump's ``(number, line)`` pairs after its header, which is checked first
    (:class:`DumpError` for an empty, foreign, binary, compressed or newer dump)."""
    advance = advance or (lambda _: None)
    first = source.readline(HEADER_BYTES)
    if not first:
        raise DumpError("tidelog: the dump is empty")
    advance(len(first))
    for magic, (name, command) in _COMPRESSED.items():
        if first.startswith(magic):
            raise DumpError(
                f"tidelog: dump line 1: a {name}-compressed file, not a dump: decompress it "
                f"first ({command} DUMP | tidelog import DB -)"
            )
    if not first.endswith(b"\n") and len(first) == HEADER_BYTES:
        raise DumpError("tidelog: not a tidelog dump (line 1 is not a dump header)")
    _check_header(1, parse_record(1, _text(1, first)))
    return _lines(source, advance)


def _text(number: int, line: bytes) -> str:
    """A dump line as text: a dump is UTF-8 (ASCII as export writes it)."""
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError as exc:
        what = "a binary file, not a dump" if number == 1 else "a damaged dump"
        raise DumpError(
            f"tidelog: dump line {number}: not UTF-8 text (byte {exc.start + 1} of the line: "
            f"{what})"
        ) from None


def _lines(source: IO[bytes], advance: Callable[[int], None]) -> Iterator[tuple[int, str]]:
    for number, line in enumerate(source, start=2):
        advance(len(line))
        yield number, _text(number, line)


# -- parsing the records ------------------------------------------------------------------


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def parse_record(number: int, line: str) -> dict[str, JSON]:
    try:
        value = json.loads(line, parse_constant=_no_constant)  # no NaN or Infinity
    except ValueError as exc:
        raise DumpError(f"tidelog: dump line {number}: not JSON ({exc})") from None
    except RecursionError:
        raise DumpError(
            f"tidelog: dump line {number}: JSON nested too deeply to read (a damaged dump: "
            "tidelog never writes such a line)"
        ) from None
    if not isinstance(value, dict):
        raise DumpError(f"tidelog: dump line {number}: not a JSON object")
    return value


def _field(record: dict[str, JSON], name: str, kind: type | tuple[type, ...], number: int) -> JSON:
    value = record.get(name)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise DumpError(f"tidelog: dump line {number}: {name!r} is missing or malformed")
    return value


def _time(record: dict[str, JSON], name: str, number: int) -> float:
    value = _field(record, name, (int, float), number)
    assert isinstance(value, int | float)
    return float(value)


def _check_header(number: int, record: dict[str, JSON]) -> None:
    if record.get("format") != DUMP_FORMAT:
        raise DumpError(
            f"tidelog: not a tidelog dump (line {number} has no format {DUMP_FORMAT!r})"
        )
    dump_version = record.get("version")
    if type(dump_version) is not int or dump_version < 1:
        raise DumpError(f"tidelog: dump line {number}: no valid format version")
    if dump_version > DUMP_VERSION:
        raise DumpError(
            f"tidelog: the dump's format version {dump_version} is newer than this tidelog "
            f"reads ({DUMP_VERSION}); upgrade tidelog"
        )


@attrs.frozen
class SessionRecord:
    """A session record of the dump, checked."""

    session_id: str
    head: int
    created_at: float
    updated_at: float
    header_json: str
    header: dict[str, JSON]
    parent: tuple[str, int] | None
    line: int  # the dump line of the session record

    @classmethod
    def parse(cls, record: dict[str, JSON], number: int) -> SessionRecord:
        try:
            session_id = validate_session_id(record.get("id"))
            header = _field(record, "header", dict, number)
            header_json = encode_json(header)
            parent_record = record.get("parent")
            parent = None
            if parent_record is not None:
                if not isinstance(parent_record, dict):
                    raise DumpError(f"tidelog: dump line {number}: 'parent' is malformed")
                parent_id = validate_session_id(parent_record.get("id"))
                parent_seq = _field(parent_record, "seq", int, number)
                assert isinstance(parent_seq, int)
                parent = (parent_id, parent_seq)
                if parent_id == session_id:
                    raise DumpError(
                        f"tidelog: dump line {number}: session {session_id!r} names itself "
                        "as its parent (a fork's parent is another, older session)"
                    )
        except TidelogError as exc:
            raise DumpError(f"tidelog: dump line {number}: {exc}") from None
        head = _field(record, "head", int, number)
        assert isinstance(head, int) and isinstance(header, dict)
        if head < 0:
            raise DumpError(f"tidelog: dump line {number}: 'head' is negative")
        created, updated = _time(record, "created_at", number), _time(record, "updated_at", number)
        return cls(session_id, head, created, updated, header_json, header, parent, number)


def parse_event(record: dict[str, JSON], number: int, expected_seq: int) -> tuple[NewEvent, float]:
    if record.get("type") != "event":
        raise DumpError(f"tidelog: dump line {number}: expected an event (seq {expected_seq})")
    if record.get("seq") != expected_seq:
        raise DumpError(f"tidelog: dump line {number}: expected seq {expected_seq}")
    kind, run_id = record.get("kind"), record.get("run_id")
    if not isinstance(kind, str) or not (run_id is None or isinstance(run_id, str)):
        raise DumpError(f"tidelog: dump line {number}: 'kind' or 'run_id' is malformed")
    return NewEvent(kind, record.get("data"), run_id=run_id), _time(record, "ts", number)
