"""The ops of ``JsonlStore.write_batch`` (append, truncate, replace, delete, group) and
fork, on top of the transaction of :mod:`stores.jsonl._write`.

Each op runs under a savepoint of the batch: a :class:`TidelogError` (conflict, lost
ownership...) undoes that op alone and is its result; an ``OSError`` fails the batch as a
whole (:class:`~stores.jsonl._write.BatchFailure`, the transaction undoes everything). The
usual op, an append at the head of a session this process holds, needs no savepoint: it
can fail alone only before it changed anything.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable

import attrs

from .._batching import StoredTail, check_replace, resent_tail
from .._checks import check_fork, fork_header
from .._contract import AppendOp, DeleteOp, GroupOp, ReplaceOp, RestoreOp, TruncateOp, WriteOp
from .._errors import ConflictError, OwnershipLostError, StoreCorruptError, TidelogError
from .._records import JSON, PreparedEvent, SessionInfo, decode_json_object, encode_json
from ._files import IO
from ._format import Header, file_stem
from ._group import begin_group, step
from ._index import FileIndex, read_exact
from ._write import BatchFailure, Layout, Txn, _io_error, cut_cuts, new_header

__all__ = ["apply_op", "fork_session", "stored_tail"]


def apply_op(txn: Txn, op: WriteOp, now: float) -> int:
    """Apply one op atomically inside ``txn`` (see the module doc); its result."""
    if type(op) is AppendOp:  # the usual op: an append to a session this process holds
        index = _held_writer(txn, op)
        if index is not None:
            # No savepoint: Txn.append changes nothing before it can no longer fail alone.
            try:
                return txn.append(index, op.events, now)
            except OSError as exc:
                raise BatchFailure(_io_error("write_batch", exc)) from exc
    mark = txn.savepoint()
    try:
        return _apply_other(txn.layout, txn, op, now)
    except TidelogError:
        txn.undo_to(mark)
        raise
    except OSError as exc:
        raise BatchFailure(_io_error("write_batch", exc)) from exc


def _held_writer(txn: Txn, op: AppendOp) -> FileIndex | None:
    """The writer index for ``op`` if it is the usual append: to a session whose lock this
    process holds (with ``op``'s lease, if it names one), at its head, not damaged."""
    shared = txn.shared
    stem = _stem(op.session_id)
    held = shared.locks.get(stem)
    if held is not None and (op.owner is None or held.owner == op.owner):
        index: FileIndex | None = shared.writers.get(stem)
        if (
            index is not None
            and index.damage is None
            and op.events
            and (op.expected_head is None or op.expected_head == index.head)
        ):
            return index
    return None


def _apply(layout: Layout, txn: Txn, op: WriteOp, now: float) -> int:
    """A group's member: the usual append, or any other op as :func:`_apply_other`."""
    if type(op) is AppendOp:
        index = _held_writer(txn, op)
        if index is not None:
            return txn.append(index, op.events, now)
    return _apply_other(layout, txn, op, now)


def _apply_other(layout: Layout, txn: Txn, op: WriteOp, now: float) -> int:
    """Any op but the usual append (:func:`_held_writer` said no, or it is no append)."""
    if isinstance(op, GroupOp):
        return _apply_group(layout, txn, op, now)
    if not isinstance(op, RestoreOp) and op.owner is not None:
        held = txn.shared.locks.get(_stem(op.session_id))
        if held is None or held.owner != op.owner:
            raise OwnershipLostError(op.session_id)
    stem, index = txn.session(op.session_id)
    if index is not None:
        index.check()
    head = 0 if index is None else index.head
    if isinstance(op, RestoreOp):
        if index is None and op.share_prefix and op.parent is not None:
            parent_id, at = op.parent
            if op.expected_head != at:
                raise ConflictError(op.session_id, op.expected_head, at)
            info = fork_session(layout, txn, parent_id, op.session_id, at, {}, now, recorded=op)
            return info.head
        return _restore(txn, op, stem, index, head, now)
    if isinstance(op, AppendOp):
        events = op.events
        if op.expected_head is not None and op.expected_head != head:
            events = resent_tail(op, head, stored_tail(layout, index))
        if not events:
            return head
        if index is None:
            txn.create(stem, new_header(op.session_id, op.header_json, now), events, now)
            return len(events)
        return txn.append(index, events, now)
    if isinstance(op, TruncateOp):
        if index is None or op.to_seq >= head:
            return 0
        rewrite(layout, txn, stem, index, op.to_seq, (), now)
        return head - op.to_seq
    if isinstance(op, ReplaceOp):
        if check_replace(op, head, stored_tail(layout, index)):
            return head
        if index is None:
            txn.create(stem, new_header(op.session_id, "{}", now), op.events, now)
        elif op.from_seq < head:
            rewrite(layout, txn, stem, index, op.from_seq, op.events, now)
        elif op.events:
            txn.append(index, op.events, now)
        return op.from_seq + len(op.events)
    assert isinstance(op, DeleteOp)
    held = txn.shared.locks.get(stem)
    if held is not None and held.owner is not None:
        held.owner = None  # deleting a session drops its lease
        txn.release_later(stem)
    if index is None:
        return 0
    txn.delete(stem, index)
    for name, _, _ in index.header.bases:
        txn.on_commit(_unlinker(layout.base(name)))
    txn.on_commit(_unlinker(os.path.join(layout.projections, f"{stem}.json")))
    txn.on_commit(_unlinker(layout.sidecar(stem)))
    return 1


def _restore(
    txn: Txn, op: RestoreOp, stem: str, index: FileIndex | None, head: int, now: float
) -> int:
    """A RestoreOp: the events with their recorded times, after ``expected_head``; a new
    session gets the recorded header, creation time, update time and parent (informational:
    its events are its own)."""
    if op.expected_head != head:
        raise ConflictError(op.session_id, op.expected_head, head)
    if index is None:
        header = attrs.evolve(
            new_header(op.session_id, op.header_json, op.created_at, parent=op.parent),
            updated_at=op.updated_at,
        )
        txn.create(stem, header, op.events, now, op.stamps)
        return len(op.events)
    if not op.events:
        return head
    return txn.append(index, op.events, now, op.stamps)


def _apply_group(layout: Layout, txn: Txn, op: GroupOp, now: float) -> int:
    """A group: every member locked, an intent written, the members applied and synced,
    the intent removed at the batch's commit (see :mod:`stores.jsonl._group`). A member
    that fails fails the group with its error, the first in order (as on every backend:
    a lease checked before an earlier member's expected head would report another)."""
    members = [member.session_id for member in op.ops]
    for session_id in dict.fromkeys(members):
        txn.session(session_id)
    undo, synced, commit = begin_group(txn.shared, layout.intents, layout.sessions, members)
    txn.undo_step(lambda: undo(txn.undo_failed))  # (run after the members' undo)
    for member in op.ops:
        _apply(layout, txn, member, now)
        step(f"member applied: {member.session_id}")
    synced()
    full = txn.full
    txn.commit_point(lambda: commit(full))
    txn.dirty_dir(layout.intents)
    return len(op.ops)


_stem = file_stem


def _unlinker(path: str) -> Callable[[], None]:
    def unlink() -> None:
        with contextlib.suppress(FileNotFoundError):
            IO.unlink(path)

    return unlink


def rewrite(
    layout: Layout,
    txn: Txn,
    stem: str,
    index: FileIndex,
    to_seq: int,
    events: tuple[PreparedEvent, ...],
    now: float,
) -> FileIndex:
    """Publish the session's file cut after ``to_seq`` (bases included), then ``events``."""
    old = index.header
    head = index.head
    epoch, cuts = old.epoch, old.cuts
    if to_seq < head:
        epoch += 1
        cuts = cut_cuts(cuts, epoch, to_seq)
    if to_seq <= old.base_seq:
        bases = tuple((n, lo, min(hi, to_seq)) for n, lo, hi in old.bases if lo < to_seq)
        base_seq, own = to_seq, b""
    else:
        bases, base_seq = old.bases, old.base_seq
        first = index.batch_start_seq(to_seq + 1) if to_seq < head else head + 1
        start = index.data_start
        own = _read(index, start, index.offset_of(first))
        if first <= to_seq:  # the cut splits a batch: its kept events become a batch
            rows = index.read_rows(old.id, first - 1, to_seq)
            raw = index.raw_rows(first - 1, to_seq)
            kept = tuple(PreparedEvent(k, d, r) for k, d, r in raw)
            stamps = [row[1] for row in rows]
            own += index.codec.batch(kept, first, stamps[-1], stamps)[0]
    header = attrs.evolve(
        old, epoch=epoch, cuts=cuts, updated_at=now, base_seq=base_seq, bases=bases
    )
    body = own + (index.codec.batch(events, to_seq + 1, now)[0] if events else b"")
    result = txn.rewrite(stem, index, header, body)
    kept_names = {n for n, _, _ in bases}
    for name, _, _ in old.bases:
        if name not in kept_names:
            txn.on_commit(_unlinker(layout.base(name)))
    return result


def _read(index: FileIndex, start: int, stop: int) -> bytes:
    data = read_exact(index.fd, stop - start, start, index.path)
    if len(data) != stop - start:
        raise StoreCorruptError(
            f"{index.path}: byte {start + len(data)}: the file is shorter than its index"
        )
    return data


def pieces(index: FileIndex) -> list[tuple[str | None, int, int]]:
    """The ``(base link or None for the file itself, lo, hi)`` ranges of a session's log."""
    result: list[tuple[str | None, int, int]] = [(n, lo, hi) for n, lo, hi in index.header.bases]
    result.append((None, index.header.base_seq, index.head))
    return [p for p in result if p[2] > p[1]]


def stored_tail(layout: Layout, index: FileIndex | None) -> StoredTail:
    """``(kind, data_json, run_id)`` of the session's events in ``(lo, hi]``, bases
    included (what a resent op is compared with)."""

    def read(lo: int, hi: int) -> list[tuple[str, str, str | None]]:
        assert index is not None  # asked only about events that stand
        rows: list[tuple[str, str, str | None]] = []
        for name, plo, phi in pieces(index):
            a, b = max(lo, plo), min(hi, phi)
            if b <= a:
                continue
            if name is None:
                rows.extend(index.raw_rows(a, b))
            else:
                base = FileIndex.open(layout.base(name))
                if base is None:
                    raise StoreCorruptError(f"{layout.base(name)}: a fork's base file is missing")
                try:
                    rows.extend(base.raw_rows(a, b))
                finally:
                    base.close()
        return rows

    return read


def fork_session(
    layout: Layout, txn: Txn, source_id: str, new_id: str, at_seq: object,
    extra: dict[str, JSON], now: float, *, recorded: RestoreOp | None = None,
) -> SessionInfo:  # fmt: skip
    """Create ``new_id`` as a fork of ``source_id``: hard links to the files that hold its
    prefix (no copy) and a header naming them (see :mod:`stores.jsonl._format`). With
    ``recorded`` (a RestoreOp with ``share_prefix``), the fork gets that op's header and
    times instead of ``extra`` and now, and its events after the fork point."""
    stem, target = txn.session(new_id)
    for _ in range(10):
        source = FileIndex.open(layout.session(_stem(source_id)))
        try:
            if source is not None:
                source.check()
            at = check_fork(
                source_id,
                new_id,
                at_seq,
                target_exists=target is not None,
                source_head=None if source is None else source.head,
            )
            assert source is not None
            links = _link_prefix(layout, txn, stem, source, at)
            if links is None:
                continue  # the source file was replaced meanwhile: look again
            if recorded is not None:
                header = attrs.evolve(
                    new_header(
                        new_id,
                        recorded.header_json,
                        recorded.created_at,
                        parent=(source_id, at),
                        base_seq=at,
                        bases=links,
                    ),
                    updated_at=recorded.updated_at,
                )
                txn.create(stem, header, recorded.events, now, recorded.stamps)
                head = at + len(recorded.events)
                merged = decode_json_object(recorded.header_json)
                return SessionInfo(
                    new_id, head, recorded.created_at, recorded.updated_at, merged, (source_id, at)
                )
            merged = fork_header(
                decode_json_object(source.header.header_json), extra, source_id, at
            )
            header = new_header(
                new_id, encode_json(merged), now, parent=(source_id, at), base_seq=at, bases=links
            )
            txn.create(stem, header, (), now)
            return SessionInfo(new_id, at, now, now, merged, (source_id, at))
        finally:
            if source is not None:
                source.close()
    raise BatchFailure(StoreCorruptError(f"session {source_id!r} kept changing while forking it"))


def _link_prefix(
    layout: Layout, txn: Txn, stem: str, source: FileIndex, at: int
) -> tuple[tuple[str, int, int], ...] | None:
    """Link every file holding the source's seqs ``1..at`` under a name owned by the new
    session; ``None`` if the source's own file is no longer the one indexed."""
    tag = os.urandom(6).hex()
    wanted: list[tuple[str, str, int, int]] = []
    for k, (name, lo, hi) in enumerate(pieces(source)):
        if lo >= at:
            continue
        target = f"{stem}.{tag}.{k}.jsonl"
        origin = layout.session(_stem(source.header.id)) if name is None else layout.base(name)
        wanted.append((origin, target, lo, min(hi, at)))
    links: list[tuple[str, int, int]] = []
    made: list[str] = []
    try:
        for origin, target, lo, hi in wanted:
            path = layout.base(target)
            IO.link(origin, path)
            made.append(path)
            if origin == source.path and os.stat(path).st_ino != source.ino:
                for each in made:
                    _unlinker(each)()
                return None
            links.append((target, lo, hi))
    except BaseException:
        for each in made:
            _unlinker(each)()
        raise
    for each in made:
        txn.undo_step(_unlinker(each))
        # The fork's header will name these seqs: they must be on disk before its name
        # can be (with synchronous="normal" the source's last batches may be unsynced,
        # and a power cut could keep the fork but lose the seqs it is built on).
        fd = os.open(each, os.O_RDONLY)
        try:
            IO.fsync(fd)
        finally:
            os.close(fd)
    txn.dirty_dir(layout.bases)
    return tuple(links)


def check_header_id(header: Header, session_id: str, path: str) -> None:
    """A file found under a session's name must be that session's."""
    if header.id != session_id:
        raise StoreCorruptError(f"{path}: byte 0: holds session {header.id!r}, not {session_id!r}")
