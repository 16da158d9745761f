"""MemoryStore: a complete in-process backend (not a mock).

It keeps the same contract as :class:`~stores.SqliteStore` and passes the same
conformance suite; it simply does not survive the process. Data is held as encoded JSON
text, exactly as the durable backends store it, so callers never share mutable objects
with the store. The data shared by a store and its clones (:mod:`stores.memory._state`),
the reads (:mod:`stores.memory._read`) and the leases (:mod:`stores.memory._leases`) are
modules of their own, the reads and the leases mixins of :class:`MemoryStore`.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TypeVar

from .._batching import BatchingStore, check_ops, check_replace, resent_tail, run_batch
from .._batching import session_ids_of as _session_ids
from .._checks import (
    check_create_args,
    check_fork,
    check_fork_args,
    check_pin_arg,
    check_projection_args,
    fork_header,
)
from .._contract import (
    AppendOp,
    BatchResult,
    Capabilities,
    GroupOp,
    Pin,
    ReplaceOp,
    RestoreOp,
    Store,
    TruncateOp,
    WriteOp,
)
from .._errors import (
    ClosedError,
    ConflictError,
    OwnershipLostError,
    ReadOnlyError,
    SessionExistsError,
    SnapshotExpiredError,
    TidelogError,
)
from .._records import (
    JSON,
    SessionInfo,
    check_flag,
    check_seq,
    decode_json_object,
    encode_json,
    validate_session_id,
)
from ._leases import MemoryLeases
from ._read import MemoryReads, check_pin
from ._state import Row, Session, State

__all__ = ["MemoryStore"]

T = TypeVar("T")


class MemoryStore(MemoryReads, MemoryLeases, BatchingStore):
    """An in-memory :class:`~stores._contract.Store`: not durable, never blocks (the
    runtime calls it inline on the event loop).

    ``read_only=True`` makes a handle whose writes raise
    :class:`~stores._errors.ReadOnlyError`; useful as a clone (``clone(read_only=True)``),
    which reads the data other handles write."""

    capabilities = Capabilities(durable=False, blocking=False)

    def __init__(self, *, read_only: bool = False) -> None:
        self.read_only = check_flag(read_only, "read_only")
        self._state = State()
        self._closed = False
        self._seen_version = 0
        self._batch = _Batch(self)  # stateless: one per handle, entered for every batch

    # -- plumbing ----------------------------------------------------------------------

    @contextmanager
    def _locked(self, write: str = "") -> Iterator[State]:
        """The shared state, under its lock; ``write`` names a write call, refused (after
        the closed check) on a read-only handle."""
        with self._state.lock:
            self._check_usable(write)
            yield self._state

    def _check_usable(self, write: str) -> None:
        """Raise if this handle is closed, or read-only and ``write`` names a write call."""
        if self._closed:
            raise ClosedError("this MemoryStore was closed")
        if write and self.read_only:
            raise ReadOnlyError(write, "this MemoryStore handle is read-only")

    def _new_session(self, state: State, header_json: str, now: float) -> Session:
        state.incarnations += 1
        return Session(state.incarnations, now, now, header_json)

    def _commit(self, state: State) -> None:
        state.version += 1
        self._seen_version = state.version

    # -- writes ------------------------------------------------------------------------

    def create(
        self, session_id: str, header: dict[str, JSON] | None = None, *, exist_ok: bool = False
    ) -> SessionInfo:
        """See :meth:`Store.create`."""
        header_json = check_create_args(session_id, header, exist_ok)
        with self._locked("create") as state:
            existing = state.sessions.get(session_id)
            if existing is not None:
                if exist_ok:
                    return existing.info(session_id)
                raise SessionExistsError(session_id)
            session = self._new_session(state, header_json, time.time())
            state.sessions[session_id] = session
            self._commit(state)
            return session.info(session_id)

    def write_batch(self, ops: Sequence[WriteOp], *, sync: bool = False) -> list[BatchResult]:
        """See :meth:`Store.write_batch`. Memory is as durable as it gets at commit."""
        check_ops(ops, sync)
        if len(ops) == 1 and type(ops[0]) is AppendOp:
            # One append (an awaited append on a quiet runtime): run_batch's rules for a
            # batch of one op, without its bookkeeping of failed sessions, and _Batch's
            # enter and exit inline.
            state = self._state
            state.lock.acquire()
            try:
                if self._closed or self.read_only:
                    self._check_usable("write_batch")
                try:
                    result: BatchResult = self._apply(state, ops[0], time.time())
                except TidelogError as exc:
                    result = exc
                self._seen_version = state.version
            finally:
                state.lock.release()
            return [result]
        return run_batch(ops, self._batch, self._apply_op)

    def _apply_op(self, state: State, op: WriteOp, now: float) -> int:
        if isinstance(op, AppendOp):
            return self._apply(state, op, now)
        if isinstance(op, RestoreOp):
            return self._restore(state, op)
        if isinstance(op, GroupOp):
            saved = {i: copy.deepcopy(state.sessions.get(i)) for i in _session_ids(op)}
            leases = {i: copy.deepcopy(state.leases.get(i)) for i in _session_ids(op)}
            version = state.version
            try:
                for member in op.ops:
                    self._apply_op(state, member, now)
            except TidelogError:
                for session_id, session in saved.items():
                    _restore(state.sessions, session_id, session)
                    _restore(state.leases, session_id, leases[session_id])
                state.version = version + 1
                raise
            return len(op.ops)
        self._check_owner(state, op.session_id, op.owner)
        if isinstance(op, TruncateOp):
            return self._truncate(state, op.session_id, op.to_seq, now)
        if isinstance(op, ReplaceOp):
            return self._replace(state, op, now)
        return int(self._delete(state, op.session_id))

    def _restore(self, state: State, op: RestoreOp) -> int:
        session = state.sessions.get(op.session_id)
        shared = op.parent if session is None and op.share_prefix else None
        head = shared[1] if shared is not None else 0 if session is None else len(session.rows)
        if op.expected_head != head:
            raise ConflictError(op.session_id, op.expected_head, head)
        if session is None:
            rows: list[Row] = []
            if shared is not None:  # a fork's prefix: the parent's rows (immutable tuples)
                parent = state.sessions.get(shared[0])
                check_fork(
                    shared[0],
                    op.session_id,
                    shared[1],
                    target_exists=False,
                    source_head=None if parent is None else len(parent.rows),
                )
                assert parent is not None
                rows = parent.rows[: shared[1]]
            session = self._new_session(state, op.header_json, op.created_at)
            session.parent = op.parent
            session.rows = rows
            state.sessions[op.session_id] = session
        session.rows.extend(
            (head + i, ts, ev.kind, ev.data_json, ev.run_id)
            for i, (ev, ts) in enumerate(zip(op.events, op.stamps, strict=True), start=1)
        )
        session.updated_at = op.updated_at
        state.version += 1
        return len(session.rows)

    def _replace(self, state: State, op: ReplaceOp, now: float) -> int:
        session = state.sessions.get(op.session_id)
        head = 0 if session is None else len(session.rows)
        rows = [] if session is None else session.rows
        if check_replace(op, head, lambda lo, hi: [r[2:] for r in rows[lo:hi]]):
            return head  # a resend of a replace that landed
        if session is None:
            session = self._new_session(state, "{}", now)
            state.sessions[op.session_id] = session
        self._truncate(state, op.session_id, op.from_seq, now)
        session.rows.extend(
            (op.from_seq + i, now, ev.kind, ev.data_json, ev.run_id)
            for i, ev in enumerate(op.events, start=1)
        )
        session.updated_at = now
        state.version += 1
        return len(session.rows)

    @staticmethod
    def _check_owner(state: State, session_id: str, owner: str | None) -> None:
        if owner is not None:
            lease = state.leases.get(session_id)
            if lease is None or lease.owner != owner:
                raise OwnershipLostError(session_id)

    def _apply(self, state: State, op: AppendOp, now: float) -> int:
        session_id = op.session_id
        session = state.sessions.get(session_id)
        head = len(session.rows) if session is not None else 0
        owner = op.owner
        if owner is not None:  # as _check_owner, inline: every append comes here
            lease = state.leases.get(session_id)
            if lease is None or lease.owner != owner:
                raise OwnershipLostError(session_id)
        events = op.events
        if op.expected_head is not None and op.expected_head != head:
            rows = [] if session is None else session.rows
            events = resent_tail(op, head, lambda lo, hi: [r[2:] for r in rows[lo:hi]])
        if not events:
            return head
        if session is None:
            session = self._new_session(state, op.header_json, now)
            state.sessions[op.session_id] = session
        rows = session.rows
        if len(events) == 1:  # one awaited append
            ev = events[0]
            rows.append((head + 1, now, ev.kind, ev.data_json, ev.run_id))
        else:
            rows.extend(
                (head + i, now, ev.kind, ev.data_json, ev.run_id)
                for i, ev in enumerate(events, start=1)
            )
        session.updated_at = now
        state.version += 1
        return len(rows)

    def delete(self, session_id: str) -> bool:
        """See :meth:`Store.delete`."""
        validate_session_id(session_id)
        with self._locked("delete") as state:
            return self._delete(state, session_id)

    def _delete(self, state: State, session_id: str) -> bool:
        state.leases.pop(session_id, None)
        if state.sessions.pop(session_id, None) is None:
            return False
        self._commit(state)
        return True

    def fork(
        self,
        source_id: str,
        new_id: str,
        *,
        at_seq: int | None = None,
        header: dict[str, JSON] | None = None,
    ) -> SessionInfo:
        """See :meth:`Store.fork` (the rows are immutable tuples, shared not copied)."""
        extra = check_fork_args(source_id, new_id, header)
        with self._locked("fork") as state:
            source = state.sessions.get(source_id)
            at = check_fork(
                source_id,
                new_id,
                at_seq,
                target_exists=new_id in state.sessions,
                source_head=None if source is None else len(source.rows),
            )
            assert source is not None
            merged = fork_header(decode_json_object(source.header_json), extra, source_id, at)
            child = self._new_session(state, encode_json(merged), time.time())
            child.parent = (source_id, at)
            child.rows = source.rows[:at]
            state.sessions[new_id] = child
            self._commit(state)
            return child.info(new_id)

    def truncate(self, session_id: str, to_seq: int) -> int:
        """See :meth:`Store.truncate`."""
        validate_session_id(session_id)
        check_seq(to_seq, "to_seq")
        with self._locked("truncate") as state:
            return self._truncate(state, session_id, to_seq, time.time())

    def _truncate(self, state: State, session_id: str, to_seq: int, now: float) -> int:
        session = state.sessions.get(session_id)
        if session is None or to_seq >= len(session.rows):
            return 0
        removed = len(session.rows) - to_seq
        del session.rows[to_seq:]
        session.epoch += 1
        session.cuts.append((session.epoch, to_seq))
        session.updated_at = now
        self._commit(state)
        return removed

    # -- projection checkpoints --------------------------------------------------------

    def save_projection(self, pin: Pin, name: str, version: int, state_json: str) -> None:
        """See :meth:`Store.save_projection`."""
        check_pin_arg(pin)
        check_projection_args(name, version, state_json)
        with self._locked("save_projection") as state:
            session = state.sessions.get(pin.session_id)
            if session is not None and session.incarnation == pin.incarnation:
                session.projections[name] = (version, pin, state_json)

    def load_projection(self, session_id: str, name: str, version: int) -> tuple[int, str] | None:
        """See :meth:`Store.load_projection`."""
        validate_session_id(session_id)
        check_projection_args(name, version)
        with self._locked() as state:
            session = state.sessions.get(session_id)
            saved = None if session is None else session.projections.get(name)
            if saved is None or saved[0] != version:
                return None
            try:
                check_pin(session_id, session, saved[1])
            except SnapshotExpiredError:
                return None
            return saved[1].as_of_seq, saved[2]

    # -- handles -----------------------------------------------------------------------

    def data_version(self) -> int:
        """See :meth:`Store.data_version`: changes when another handle committed."""
        with self._locked() as state:
            if state.version != self._seen_version:
                self._seen_version = state.version
            return self._seen_version

    def clone(self, *, read_only: bool | None = None) -> MemoryStore:
        """See :meth:`Store.clone`: a handle sharing this store's data (read-only if this
        one is, or if ``read_only`` is True)."""
        if read_only is not None:
            check_flag(read_only, "read_only")
        with self._locked() as state:
            other = MemoryStore.__new__(MemoryStore)
            other.read_only = self.read_only or bool(read_only)
            other._state = state
            other._closed = False
            other._seen_version = state.version
            other._batch = _Batch(other)
            return other

    def close(self) -> None:
        """See :meth:`Store.close`."""
        with self._state.lock:
            self._closed = True


class _Batch:
    """A batch's "transaction": the lock (each op is atomic on its own, see
    :meth:`MemoryStore._apply_op`); afterwards the handle has seen its own commits. (A
    class rather than a generator context manager: it is entered for every batch.)"""

    __slots__ = ("store",)

    def __init__(self, store: MemoryStore) -> None:
        self.store = store

    def __enter__(self) -> State:
        store = self.store
        state = store._state
        state.lock.acquire()
        if store._closed or store.read_only:
            state.lock.release()
            store._check_usable("write_batch")
        return state

    def __exit__(self, kind: object, value: object, tb: object) -> None:
        store = self.store
        state = store._state
        if kind is None:
            store._seen_version = state.version
        state.lock.release()


def _restore(table: dict[str, T], key: str, value: T | None) -> None:
    if value is None:
        table.pop(key, None)
    else:
        table[key] = value


_: type[Store] = MemoryStore
