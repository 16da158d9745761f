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
interleaves with another writer. Ctrl-C stops after the current write: a session this
run had created but not finished is removed, so nothing is left half-imported.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import Literal, TextIO

import attrs

from runtime import JSON, SessionInfo, Store, StoredEvent, TidelogError
from stores import LeaseInfo, NewEvent, RestoreOp, prepare_events
from stores._leases import holder_is_dead
from stores._records import encode_json, validate_session_id

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
    source: TextIO
    if args.dump == "-":
        source, size = sys.stdin, None
    else:
        try:
            source = open(args.dump, encoding="utf-8")  # noqa: SIM115 (closed below)
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
        if source is not sys.stdin:
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


def read_dump(
    source: TextIO, advance: Callable[[int], None] | None = None
) -> Iterator[tuple[int, str]]:
    """The dump's ``(number, line)`` pairs after its header, which is checked first
    (:class:`DumpError` for an empty, foreign or newer dump)."""
    lines = _lines(source, advance or (lambda _: None))
    first = next(lines, None)
    if first is None:
        raise DumpError("tidelog: the dump is empty")
    _check_header(first[0], _record(*first))
    return lines


def _lines(source: TextIO, advance: Callable[[int], None]) -> Iterator[tuple[int, str]]:
    for number, line in enumerate(source, start=1):
        advance(len(line))
        yield number, line


# -- parsing the records ------------------------------------------------------------------


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _record(number: int, line: str) -> dict[str, JSON]:
    try:
        value = json.loads(line, parse_constant=_no_constant)  # no NaN or Infinity
    except ValueError as exc:
        raise DumpError(f"tidelog: dump line {number}: not JSON ({exc})") from None
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
        except TidelogError as exc:
            raise DumpError(f"tidelog: dump line {number}: {exc}") from None
        head = _field(record, "head", int, number)
        assert isinstance(head, int) and isinstance(header, dict)
        if head < 0:
            raise DumpError(f"tidelog: dump line {number}: 'head' is negative")
        created, updated = _time(record, "created_at", number), _time(record, "updated_at", number)
        return cls(session_id, head, created, updated, header_json, header, parent)


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
        self.current: str | None = None  # the session being read
        self.done = 0

    def flush(self) -> None:
        """Commit the pending pieces (one transaction); report the sessions they finish."""
        if self.pending:
            results = self.store.write_batch(self.pending)
            for op, result in zip(self.pending, results, strict=True):
                if isinstance(result, TidelogError):
                    self.failed[op.session_id] = f"changed while it was imported ({result})"
                elif op.session_id in self.created_here:
                    self.created_here[op.session_id] = int(result)
            self.pending, self.pending_events = [], 0
        for finished in self.finished:
            why = self.failed.pop(finished.session_id, None)
            if why is not None:
                finished = ImportResult(finished.session_id, "conflict", 0, why)
            self.created_here.pop(finished.session_id, None)
            self.report(finished)
            self.done += 1
        self.finished = []
        self.stop.check(f"{self.done} sessions imported; run the same import again to go on")

    def add(self, op: RestoreOp) -> None:
        self.pending.append(op)
        self.pending_events += len(op.events)
        if self.pending_events >= BATCH_EVENTS:
            self.flush()

    def abandon(self) -> None:
        """After a stop or a damaged dump: remove the sessions this run created but did
        not finish (if no one else wrote them meanwhile), so nothing is left
        half-imported."""
        for session_id, head in self.created_here.items():
            info = self.store.stat(session_id)
            now_live = _live(self.store.list_leases(prefix=session_id), time.time())
            if info is not None and info.head == head and session_id not in now_live:
                self.store.delete(session_id)


def import_dump(
    store: Store,
    lines: Iterator[tuple[int, str]],
    stop: StopFlag,
    report: Callable[[ImportResult], None],
) -> None:
    """Import the dump's ``(number, line)`` pairs after its header (already checked) into
    ``store``, calling ``report`` for each session once its outcome is committed.

    Raises :class:`DumpError` for a damaged, foreign, newer or cut dump (sessions
    reported so far are imported whole), and
    :class:`~runtime.cli._errors.Interrupted` when ``stop`` was requested."""
    importer = _Importer(store, stop, report)
    try:
        _run(importer, lines)
    except DumpError:
        # The sessions before the damage are whole: write them; not the one it cut.
        importer.pending = [op for op in importer.pending if op.session_id != importer.current]
        importer.flush()
        importer.abandon()
        raise
    except BaseException:
        if stop.requested:
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
    verify = 0 if existing is None else existing.head
    stored: list[StoredEvent] = []  # the page of stored events being compared
    shared = _shareable(importer, session, existing, problem)
    lent: list[StoredEvent] = []  # the page of the parent's events being compared
    piece: list[NewEvent] = []
    stamps: list[float] = []
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
        size += len(line)
        if len(piece) >= PIECE_EVENTS or size >= PIECE_BYTES:
            after = seq - len(piece)
            written += _write(importer, session, piece, stamps, after, existing is None, shared)
            piece, stamps, size = [], [], 0
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
        written += _write(importer, session, piece, stamps, after, existing is None, shared)
    status: Status = "created" if existing is None else "resumed"
    importer.finished.append(ImportResult(sid, status, written))
    importer.current = None


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
        copied += _write(importer, session, events, [e.ts for e in page], copied, True, 0)
    return copied


def _write(
    importer: _Importer,
    session: _Session,
    events: list[NewEvent],
    stamps: list[float],
    after: int,
    creates: bool,
    shared: int,
) -> int:
    """Queue one piece of ``session``: ``events`` after seq ``after`` (``creates``: the
    session did not exist before this run; ``shared``: its fork point, when it is
    created sharing its parent's prefix, else 0)."""
    share = creates and shared > 0 and after == shared
    op = RestoreOp(
        session.session_id,
        tuple(prepare_events(events)),
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
