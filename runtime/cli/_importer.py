"""Importing a dump's sessions into a store, for ``tidelog import``
(:mod:`runtime.cli._load`, which says what an import does): session by session, checked
against what the store holds, written in :class:`~stores.RestoreOp` pieces, each session
whole or not at all.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Literal

import attrs

from runtime import InvalidEventError, SessionInfo, Store, StoredEvent, TidelogError
from stores import (
    LeaseInfo,
    NewEvent,
    RestoreOp,
    encode_json,
    holder_is_dead,
    prepare_events,
)

from ._load_records import DumpError, SessionRecord, parse_event, parse_record
from ._opening import StopFlag

__all__ = ["ImportResult", "Status", "import_dump"]

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
        record = parse_record(number, line)
        kind = record.get("type")
        if kind == "end-of-dump":
            importer.flush()
            if next(lines, None) is not None:
                raise DumpError(f"tidelog: dump line {number + 1}: records after the end")
            return
        if kind != "session":
            raise DumpError(f"tidelog: dump line {number}: expected a session record")
        _import_session(importer, SessionRecord.parse(record, number), lines)
    importer.flush()
    raise DumpError("tidelog: the dump is cut short (no end-of-dump record)")


def _import_session(
    importer: _Importer, session: SessionRecord, lines: Iterator[tuple[int, str]]
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
        event, ts = parse_event(parse_record(number, line), number, seq)
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
    end = parse_record(number, line) if line else {}
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


def _refuse_loop(importer: _Importer, session: SessionRecord) -> None:
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
    importer: _Importer, session: SessionRecord, existing: SessionInfo | None, problem: str | None
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


def _copy_prefix(importer: _Importer, session: SessionRecord, upto: int) -> int:
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
    session: SessionRecord,
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
