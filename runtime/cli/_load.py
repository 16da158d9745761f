"""``tidelog import``: load a dump (see :mod:`runtime.cli._dump`) into a database.

Streaming, through the Store contract (so any backend can be the target): records are
read a line at a time and written as :class:`~stores.RestoreOp` pieces -- events keep
their commit times, sessions their creation time, header and lineage.

Idempotent and resumable, session by session:

* missing -> created (``created``);
* present with the same header, times and lineage and a prefix of the dump's events
  (an import that stopped or crashed part-way) -> checked event by event, then
  completed (``resumed``), or left alone if complete (``unchanged``);
* anything else -- other content, more events, a live writer holding it -> left
  untouched and reported (``conflict``; exit status 1).

Each piece is one atomic write that names the head it expects, so an import never
interleaves with another writer. A session is imported whole or not at all: when the
import stops inside one -- Ctrl-C, a damaged or cut dump, an event the store refuses, a
failing store -- the sessions before it stay imported whole, and that one is put back as
it was before this run (removed if this run created it, cut back to its old head if it
was being resumed), provided no one else wrote it meanwhile.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import IO, Literal

import attrs

from runtime import JSON, InvalidEventError, SessionInfo, Store, StoredEvent, TidelogError
from stores import (
    LeaseInfo,
    NewEvent,
    RestoreOp,
    encode_json,
    holder_is_dead,
    prepare_events,
    validate_session_id,
)

from ._dump import DUMP_FORMAT, DUMP_VERSION
from ._errors import EXIT_FOUND, CliError
from ._opening import StopFlag, open_writer, shown, stoppable
from ._output import Listing, progress

__all__ = ["ImportResult", "cmd_import", "import_dump", "read_dump"]

#: Events per RestoreOp piece, and events per transaction (several pieces, any sessions).
PIECE_EVENTS, BATCH_EVENTS = 1000, 8000
#: Bytes of event data per piece (well under the store's batch limit of 64 MiB).
PIECE_BYTES = 8 * 1024 * 1024

Status = Literal["created", "resumed", "unchanged", "conflict"]


@attrs.frozen
class ImportResult:
    """What importing one session did: ``events`` written by this run; ``message``
    says why a conflict was not imported."""

    session_id: str
    status: Status
    events: int = 0
    message: str | None = None


class DumpError(CliError):
    """The dump is not a tidelog dump this version reads, or is damaged or cut."""


def cmd_import(args: argparse.Namespace) -> int:
    """``tidelog import``."""
    source: IO[bytes]
    if args.dump == "-":
        source, size = sys.stdin.buffer, None
    else:
        try:
            source = open(args.dump, "rb")  # noqa: SIM115 (closed below)
        except OSError as exc:
            raise CliError(f"tidelog: cannot read the dump {args.dump}: {exc.strerror}") from None
        size = os.fstat(source.fileno()).st_size
    listing = Listing(args.format, sys.stdout, key="sessions")
    results: list[ImportResult] = []

    def report(result: ImportResult) -> None:
        results.append(result)
        if args.format != "text":
            listing.add(attrs.asdict(result))
        elif result.status == "conflict":
            print(f"conflict: {result.session_id}: {result.message}")

    try:
        with stoppable() as stop, progress("import", size, unit="bytes") as advance:
            lines = read_dump(source, advance)  # the header is checked before DB is opened
            store = open_writer(args.db, create=True)
            try:
                import_dump(store, lines, stop, report)
                store.sync()
            finally:
                store.close()
    finally:
        if source is not sys.stdin.buffer:
            source.close()
    totals: dict[str, int] = {s: sum(1 for r in results if r.status == s) for s in _STATUSES}
    events = sum(r.events for r in results)
    listing.finish({**totals, "events": events})
    if args.format == "text":
        print(
            f"imported {len(results)} sessions into {shown(args.db)}: {totals['created']} created, "
            f"{totals['resumed']} resumed, {totals['unchanged']} unchanged, "
            f"{totals['conflict']} conflicts; {events} events written"
        )
    return EXIT_FOUND if totals["conflict"] else 0


_STATUSES: tuple[Status, ...] = ("created", "resumed", "unchanged", "conflict")


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
    _check_header(1, _record(1, _text(1, first)))
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


def _record(number: int, line: str) -> dict[str, JSON]:
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
class _Session:
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
    def parse(cls, record: dict[str, JSON], number: int) -> _Session:
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


def _event(record: dict[str, JSON], number: int, expected_seq: int) -> tuple[NewEvent, float]:
    if record.get("type") != "event":
        raise DumpError(f"tidelog: dump line {number}: expected an event (seq {expected_seq})")
    if record.get("seq") != expected_seq:
        raise DumpError(f"tidelog: dump line {number}: expected seq {expected_seq}")
    kind, run_id = record.get("kind"), record.get("run_id")
    if not isinstance(kind, str) or not (run_id is None or isinstance(run_id, str)):
        raise DumpError(f"tidelog: dump line {number}: 'kind' or 'run_id' is malformed")
    return NewEvent(kind, record.get("data"), run_id=run_id), _time(record, "ts", number)


# -- importing ----------------------------------------------------------------------------


def _live(leases: list[LeaseInfo], now: float) -> set[str]:
    return {i.session_id for i in leases if i.expires > now and not holder_is_dead(i.holder)}


def _same(stored: StoredEvent, event: NewEvent, ts: float) -> bool:
    return (stored.kind, stored.run_id, stored.ts) == (event.kind, event.run_id, ts) and (
        encode_json(stored.data) == encode_json(event.data)
    )


class _Importer:
    """Reads records, checks sessions against the store, and writes pieces in batches."""

    def __init__(self, store: Store, stop: StopFlag, report: Callable[[ImportResult], None]):
        self.store = store
        self.stop = stop
        self.report = report
        self.live = _live(store.list_leases(), time.time())
        self.pending: list[RestoreOp] = []
        self.pending_events = 0
        self.finished: list[ImportResult] = []  # results waiting for their batch to commit
        self.failed: dict[str, str] = {}  # sessions whose piece failed -> why
        self.created_here: dict[str, int] = {}  # sessions this run created -> head written
        # sessions this run extends (resumed) -> their info before, the head written
        self.resumed_here: dict[str, tuple[SessionInfo, int]] = {}
        self.parents: dict[str, str] = {}  # the forks this run creates -> their parents
        self.current: str | None = None  # the session being read
        self.done = 0

    def flush(self, *, check_stop: bool = True) -> None:
        """Commit the pending pieces (one transaction); report the sessions they finish."""
        if self.pending:
            results = self.store.write_batch(self.pending)
            for op, result in zip(self.pending, results, strict=True):
                if isinstance(result, TidelogError):
                    self.failed[op.session_id] = f"changed while it was imported ({result})"
                elif op.session_id in self.created_here:
                    self.created_here[op.session_id] = int(result)
                elif op.session_id in self.resumed_here:
                    before = self.resumed_here[op.session_id][0]
                    self.resumed_here[op.session_id] = (before, int(result))
            self.pending, self.pending_events = [], 0
        for finished in self.finished:
            why = self.failed.pop(finished.session_id, None)
            if why is not None:
                finished = ImportResult(finished.session_id, "conflict", 0, why)
            self.created_here.pop(finished.session_id, None)
            self.resumed_here.pop(finished.session_id, None)
            self.report(finished)
            self.done += 1
        self.finished = []
        if check_stop:
            self.stop.check(f"{self.done} sessions imported; run the same import again to go on")

    def add(self, op: RestoreOp) -> None:
        self.pending.append(op)
        self.pending_events += len(op.events)
        if self.pending_events >= BATCH_EVENTS:
            self.flush()

    def abandon(self) -> None:
        """After a stop, a damaged dump or a failure: put the sessions this run wrote but
        did not finish back as they were (if no one else wrote them meanwhile): remove
        those it created, cut those it resumed back to their old head -- so nothing is
        left half-imported. Best effort: a store that keeps failing leaves them as they
        are (part-imported, which the next import completes)."""
        unfinished: list[tuple[str, int, SessionInfo | None]] = [
            (sid, head, None) for sid, head in self.created_here.items()
        ]
        unfinished += [(sid, head, old) for sid, (old, head) in self.resumed_here.items()]
        for session_id, head, old in unfinished:
            with contextlib.suppress(TidelogError):
                info = self.store.stat(session_id)
                now_live = _live(self.store.list_leases(prefix=session_id), time.time())
                if info is None or info.head != head or session_id in now_live:
                    continue
                if old is None:
                    self.store.delete(session_id)
                elif head != old.head:
                    self.store.truncate(session_id, old.head)
                    # The cut stamps the session's update time: put the recorded one back.
                    header = encode_json(old.header)
                    at = (old.created_at, old.updated_at, old.parent)
                    self.store.write_batch([RestoreOp(session_id, (), (), old.head, header, *at)])


def import_dump(
    store: Store,
    lines: Iterator[tuple[int, str]],
    stop: StopFlag,
    report: Callable[[ImportResult], None],
) -> None:
    """Import the dump's ``(number, line)`` pairs after its header (already checked) into
    ``store``, calling ``report`` for each session once its outcome is committed.

    Raises :class:`DumpError` for a damaged, foreign, newer or cut dump, or an event the
    store refuses (the sessions before it are imported whole, nothing of the one it is
    in), and :class:`~runtime.cli._errors.Interrupted` when ``stop`` was requested."""
    importer = _Importer(store, stop, report)
    try:
        _run(importer, lines)
    except BaseException as exc:
        try:
            if isinstance(exc, DumpError):
                # The sessions before the damage are whole: write them; not the one it cut.
                current = importer.current
                importer.pending = [op for op in importer.pending if op.session_id != current]
                importer.flush(check_stop=False)
        finally:
            importer.abandon()
        raise


def _run(importer: _Importer, lines: Iterator[tuple[int, str]]) -> None:
    for number, line in lines:
        record = _record(number, line)
        kind = record.get("type")
        if kind == "end-of-dump":
            importer.flush()
            if next(lines, None) is not None:
                raise DumpError(f"tidelog: dump line {number + 1}: records after the end")
            return
        if kind != "session":
            raise DumpError(f"tidelog: dump line {number}: expected a session record")
        _import_session(importer, _Session.parse(record, number), lines)
    importer.flush()
    raise DumpError("tidelog: the dump is cut short (no end-of-dump record)")


def _import_session(
    importer: _Importer, session: _Session, lines: Iterator[tuple[int, str]]
) -> None:
    store, sid = importer.store, session.session_id
    importer.current = sid
    existing = store.stat(sid)
    problem = None
    if sid in importer.live:
        problem = "a live writer holds it"
    elif existing is not None:
        mine = (session.header_json, session.created_at, session.parent)
        if (encode_json(existing.header), existing.created_at, existing.parent) != mine:
            problem = "a session with this id and another header, creation time or lineage exists"
        elif existing.head > session.head:
            problem = f"it has {existing.head} events, the dump {session.head}"
    if existing is None and problem is None:
        _refuse_loop(importer, session)
    verify = 0 if existing is None else existing.head
    if existing is not None and problem is None:
        importer.resumed_here[sid] = (existing, existing.head)
    stored: list[StoredEvent] = []  # the page of stored events being compared
    shared = _shareable(importer, session, existing, problem)
    lent: list[StoredEvent] = []  # the page of the parent's events being compared
    piece: list[NewEvent] = []
    stamps: list[float] = []
    numbers: list[int] = []  # the dump lines of the piece's events
    size = written = 0
    for seq in range(1, session.head + 1):
        number, line = next(lines, (0, ""))
        if not line:
            raise DumpError(f"tidelog: the dump is cut inside session {sid!r}")
        event, ts = _event(_record(number, line), number, seq)
        if problem is not None:
            continue
        if seq <= verify:
            if not stored or stored[-1].seq < seq:
                stored = store.read(sid, since_seq=seq - 1, until_seq=verify, limit=PIECE_EVENTS)
            if not stored or not _same(stored[seq - stored[0].seq], event, ts):
                problem = f"its event {seq} differs from the dump's"
            continue
        if seq <= shared:
            assert session.parent is not None
            if not lent or lent[-1].seq < seq:
                lent = store.read(
                    session.parent[0], since_seq=seq - 1, until_seq=shared, limit=PIECE_EVENTS
                )
            at = seq - lent[0].seq if lent else -1
            if 0 <= at < len(lent) and _same(lent[at], event, ts):
                continue  # the parent holds it: the fork will share it
            # The parent's prefix is not the recorded one: a copy of its own after all.
            written += _copy_prefix(importer, session, seq - 1)
            shared = 0
        piece.append(event)
        stamps.append(ts)
        numbers.append(number)
        size += len(line)
        if len(piece) >= PIECE_EVENTS or size >= PIECE_BYTES:
            after = seq - len(piece)
            creates = existing is None
            written += _write(importer, session, piece, stamps, after, creates, shared, numbers)
            piece, stamps, numbers, size = [], [], [], 0
    number, line = next(lines, (0, ""))
    end = _record(number, line) if line else {}
    if end.get("type") != "end" or end.get("id") != sid or end.get("events") != session.head:
        raise DumpError(f"tidelog: the dump is cut or damaged after session {sid!r}")
    if problem is None and existing is not None and existing.head == session.head:
        if existing.updated_at != session.updated_at:
            problem = "its events match but it was updated at another time"
        else:
            importer.finished.append(ImportResult(sid, "unchanged"))
            importer.current = None
            return
    if problem is not None:
        importer.finished.append(ImportResult(sid, "conflict", 0, problem))
        importer.current = None
        return
    if piece or existing is None:
        after = session.head - len(piece)
        creates = existing is None
        written += _write(importer, session, piece, stamps, after, creates, shared, numbers)
    status: Status = "created" if existing is None else "resumed"
    importer.finished.append(ImportResult(sid, status, written))
    importer.current = None


def _refuse_loop(importer: _Importer, session: _Session) -> None:
    """Refuse a new fork whose lineage -- its parent, the parent's parent... in this dump
    or in the target -- leads back to itself (or into a loop): such lineage cannot have
    been recorded, and retention could never remove it."""
    if session.parent is None:
        return
    chain = [session.session_id]
    at: str | None = session.parent[0]
    while at is not None:
        if at in chain:
            loop = " -> ".join([*chain[chain.index(at) :], at])
            raise DumpError(
                f"tidelog: dump line {session.line}: session {session.session_id!r} cannot "
                f"be a fork of {session.parent[0]!r}: the lineage would loop ({loop}); a "
                "fork's parent is another, older session"
            )
        chain.append(at)
        if at in importer.parents:
            at = importer.parents[at]
        else:
            info = importer.store.stat(at)
            at = None if info is None or info.parent is None else info.parent[0]
    importer.parents[session.session_id] = session.parent[0]


def _shareable(
    importer: _Importer, session: _Session, existing: SessionInfo | None, problem: str | None
) -> int:
    """How many of a new fork's first events it can share with its parent in the
    target (the fork point), provided they are the recorded ones -- compared as they are
    read -- or 0: not a fork, or the parent is missing there or shorter."""
    if existing is not None or problem is not None or session.parent is None:
        return 0
    parent_id, at = session.parent
    if at == 0:
        return 0
    if any(op.session_id == parent_id for op in importer.pending):
        importer.flush()  # the parent is being imported: it must stand before it is read
    parent = importer.store.stat(parent_id)
    return at if parent is not None and parent.head >= at else 0


def _copy_prefix(importer: _Importer, session: _Session, upto: int) -> int:
    """Queue the fork's first ``upto`` events as its own, read from its parent in the
    target (where they were found equal to the dump's); how many."""
    assert session.parent is not None
    copied = 0
    while copied < upto:
        page = importer.store.read(
            session.parent[0], since_seq=copied, until_seq=upto, limit=PIECE_EVENTS
        )
        if not page:
            raise DumpError(f"tidelog: the parent of {session.session_id!r} changed meanwhile")
        events = [NewEvent(e.kind, e.data, run_id=e.run_id) for e in page]
        copied += _write(importer, session, events, [e.ts for e in page], copied, True, 0, None)
    return copied


def _write(
    importer: _Importer,
    session: _Session,
    events: list[NewEvent],
    stamps: list[float],
    after: int,
    creates: bool,
    shared: int,
    numbers: list[int] | None,
) -> int:
    """Queue one piece of ``session``: ``events`` after seq ``after`` (``creates``: the
    session did not exist before this run; ``shared``: its fork point, when it is
    created sharing its parent's prefix, else 0; ``numbers``: the events' dump lines).
    An event the store refuses is a :class:`DumpError` naming its line."""
    share = creates and shared > 0 and after == shared
    try:
        prepared = prepare_events(events)
    except InvalidEventError as exc:
        index = exc.index if exc.index is not None else 0
        where = f"dump line {numbers[index]}" if numbers else "the dump"
        raise DumpError(
            f"tidelog: {where}: event {after + index + 1} of session {session.session_id!r} "
            f"is refused: {exc.reason}"
        ) from None
    op = RestoreOp(
        session.session_id,
        tuple(prepared),
        tuple(stamps),
        after,
        session.header_json,
        session.created_at,
        session.updated_at,
        session.parent,
        share_prefix=share,
    )
    if creates and (after == 0 or share):
        importer.created_here[session.session_id] = after
    importer.add(op)
    return len(events)
