"""The write rules every backend applies the same way, written once.

A backend (memory, SQLite, PostgreSQL...) provides storage: how to open a transaction,
how to make one op atomic inside it, what its driver's errors mean. The rules of the
:class:`~stores._contract.Store` contract that do not depend on storage live here:

* :func:`check_ops` -- what ``write_batch`` accepts, checked before anything is written;
* :func:`run_batch` -- the order and failure rules of a batch, given the backend's
  transaction and its "apply one op in isolation";
* :func:`session_ids_of`, :func:`check_replace`, :func:`resent_tail` -- the per-op rules
  (which sessions an op touches, a replace's preconditions, a resent append's landed
  prefix);
* :class:`BatchingStore` -- ``append`` and ``sync`` built on ``write_batch``.

The argument checks of the other methods (``check_read_args``, ``check_fork``,
``check_pin_arg``...) are in :mod:`stores._checks`.
Synchronous, and free of any backend: nothing here imports a driver.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import TypeVar

from ._contract import (
    AppendOp,
    BatchResult,
    DeleteOp,
    GroupOp,
    ReplaceOp,
    RestoreOp,
    TruncateOp,
    WriteOp,
)
from ._errors import ConflictError, InvalidArgumentError, InvalidEventError, TidelogError
from ._records import (
    _KNOWN_IDS,
    NewEvent,
    PreparedEvent,
    check_flag,
    check_seq,
    decode_json_object,
    prepare_events,
    validate_header,
    validate_session_id,
)

__all__ = [
    "BatchingStore",
    "StoredTail",
    "check_ops",
    "check_replace",
    "resent_tail",
    "run_batch",
    "session_ids_of",
]

H = TypeVar("H")

#: ``(kind, data_json, run_id)`` of the events stored with ``lo < seq <= hi``, in order:
#: what :func:`resent_tail` compares a resent op's events with.
StoredTail = Callable[[int, int], Sequence[tuple[str, str, str | None]]]


# -- what write_batch accepts -----------------------------------------------------------


def check_ops(ops: object, sync: object = False) -> bool:
    """Check the arguments of ``write_batch``: a sequence of well-formed write ops, and
    the ``sync`` flag. Returns True if ``ops`` is not empty and every op is an
    :class:`AppendOp` of at least one event: the batch the stores' append paths take
    (told here, where every op is looked at anyway, so that no store looks again).

    Raises :class:`~stores._errors.InvalidArgumentError` (or its subclasses
    :class:`~stores._errors.InvalidSessionIdError`, :class:`~stores._errors.InvalidEventError`)
    before anything is written."""
    if type(ops) is not list and (not isinstance(ops, Sequence) or isinstance(ops, str | bytes)):
        raise InvalidArgumentError(f"ops must be a sequence, not {type(ops).__name__}")
    if sync is not False:
        check_flag(sync, "sync")
    known, prepared = _KNOWN_IDS, PreparedEvent
    appends = len(ops) > 0
    for op in ops:
        # The usual op, checked inline (this runs for every op of every batch): an append
        # to a known id, no resend, no expected head or one within 64 bits.
        if type(op) is AppendOp:
            head = op.expected_head
            events = op.events
            if (
                op.session_id in known
                and (head is None or (type(head) is int and 0 <= head <= 0x7FFF_FFFF_FFFF_FFFF))
                and op.retry is False
                and type(events) is tuple
            ):
                if len(events) == 1:  # one awaited append
                    if type(events[0]) is prepared:
                        continue
                elif all(type(event) is prepared for event in events):
                    appends = appends and len(events) > 0
                    continue
        _check_member(op, in_group=False)
        appends = appends and type(op) is AppendOp and len(op.events) > 0
    return appends


def _check_member(op: object, *, in_group: bool) -> None:
    allowed: tuple[type, ...] = (AppendOp, TruncateOp, DeleteOp, ReplaceOp)
    if not in_group:
        allowed += (GroupOp, RestoreOp)
    if not isinstance(
        op, AppendOp | TruncateOp | DeleteOp | ReplaceOp | GroupOp | RestoreOp
    ) or not isinstance(op, allowed):
        raise InvalidArgumentError(
            f"write_batch takes {', '.join(t.__name__ for t in allowed)}, not {type(op).__name__}"
        )
    if isinstance(op, GroupOp):
        if not isinstance(op.ops, tuple) or not op.ops:
            raise InvalidArgumentError("GroupOp.ops must be a non-empty tuple of ops")
        for member in op.ops:
            _check_member(member, in_group=True)
        return
    validate_session_id(op.session_id)
    if isinstance(op, RestoreOp):
        _check_restore(op)
        check_seq(op.expected_head, "expected_head")
    if isinstance(op, AppendOp | ReplaceOp | RestoreOp):
        if op.expected_head is not None:
            check_seq(op.expected_head, "expected_head")
        if not isinstance(op.events, tuple | list):
            raise InvalidArgumentError(
                f"{type(op).__name__}.events must be a tuple, not {type(op.events).__name__}"
            )
        if not all(type(event) is PreparedEvent for event in op.events):
            for index, event in enumerate(op.events):
                if not isinstance(event, PreparedEvent):
                    raise InvalidEventError(index, None, "op events must be PreparedEvent")
    if isinstance(op, AppendOp | ReplaceOp) and type(op.retry) is not bool:
        raise InvalidArgumentError(f"{type(op).__name__}.retry must be a bool, not {op.retry!r}")
    if isinstance(op, TruncateOp):
        check_seq(op.to_seq, "to_seq")
    if isinstance(op, ReplaceOp):
        check_seq(op.from_seq, "from_seq")


def _check_restore(op: RestoreOp) -> None:
    """What a :class:`RestoreOp` adds to an append's checks: one finite float commit time
    per event, finite session times, a JSON object header in canonical text (as
    :func:`~stores._records.encode_json` writes it), a well-formed parent."""
    name = "RestoreOp"
    if not isinstance(op.stamps, tuple) or len(op.stamps) != len(op.events):
        raise InvalidArgumentError(f"{name}.stamps must be a tuple of one time per event")
    for value, what in [(t, "stamps") for t in op.stamps] + [
        (op.created_at, "created_at"),
        (op.updated_at, "updated_at"),
    ]:
        if type(value) is not float or not math.isfinite(value):
            raise InvalidArgumentError(f"{name}.{what} must hold finite floats, not {value!r}")
    if type(op.header_json) is not str:
        raise InvalidArgumentError(f"{name}.header_json must be a str")
    try:
        canonical = validate_header(decode_json_object(op.header_json))
    except (ValueError, RecursionError) as exc:  # InvalidArgumentError is a ValueError
        raise InvalidArgumentError(f"{name}.header_json is not a JSON object: {exc}") from None
    if canonical != op.header_json:
        raise InvalidArgumentError(f"{name}.header_json must be canonical (encode_json's)")
    if op.parent is not None:
        if type(op.parent) is not tuple or len(op.parent) != 2:
            raise InvalidArgumentError(f"{name}.parent must be None or (session_id, seq)")
        validate_session_id(op.parent[0])
        check_seq(op.parent[1], f"{name}.parent seq")
    if type(op.share_prefix) is not bool:
        raise InvalidArgumentError(f"{name}.share_prefix must be a bool")
    if op.share_prefix and op.parent is None:
        raise InvalidArgumentError(f"{name}.share_prefix needs a parent to share with")


# -- per-op rules -------------------------------------------------------------------------


def session_ids_of(op: WriteOp) -> tuple[str, ...]:
    """The sessions an op touches: its own, or a group's members' (first mention first)."""
    if isinstance(op, GroupOp):
        return tuple(dict.fromkeys(member.session_id for member in op.ops))
    return (op.session_id,)


def check_replace(op: ReplaceOp, head: int, stored: StoredTail) -> bool:
    """The preconditions of a :class:`ReplaceOp` against the session's current ``head``:
    ``expected_head`` (:class:`ConflictError`) and ``from_seq`` not past the head
    (:class:`InvalidArgumentError`). Returns True when the op is a resend
    (``retry=True``) that already landed -- the tail after ``from_seq`` is exactly its
    events: then write nothing and report ``head``. ``stored`` is as for
    :func:`resent_tail` (called only for such a resend)."""
    if op.expected_head is not None and op.expected_head != head:
        if (
            op.retry
            and head == op.from_seq + len(op.events)
            and (
                not op.events
                or [tuple(row) for row in stored(op.from_seq, head)]
                == [(event.kind, event.data_json, event.run_id) for event in op.events]
            )
        ):
            return True
        raise ConflictError(op.session_id, op.expected_head, head)
    if op.from_seq > head:
        raise InvalidArgumentError(
            f"session {op.session_id!r}: from_seq {op.from_seq} is past the head {head}"
        )
    return False


def resent_tail(op: AppendOp, head: int, stored: StoredTail) -> tuple[PreparedEvent, ...]:
    """The events of ``op`` still to write, for an append whose ``expected_head`` is set and
    is not the session's ``head`` (call it only then; the match is the usual case).

    A resend (``retry=True``) whose first events already stand, exactly (kind, data,
    run_id), right after ``expected_head`` -- an earlier attempt landed although it reported
    an error -- writes only the rest. Anything else is a :class:`ConflictError`.
    ``stored(lo, hi)`` reads what stands in ``(lo, hi]``; it is called only for a resend
    that could have landed (so only for a session that exists)."""
    expected = op.expected_head
    assert expected is not None
    landed = head - expected
    if op.retry and 0 < landed <= len(op.events):
        mine = [(event.kind, event.data_json, event.run_id) for event in op.events[:landed]]
        if [tuple(row) for row in stored(expected, head)] == mine:
            return op.events[landed:]
    raise ConflictError(op.session_id, expected, head)


# -- a batch ------------------------------------------------------------------------------


def run_batch(
    ops: Sequence[WriteOp],
    transaction: AbstractContextManager[H],
    apply_isolated: Callable[[H, WriteOp, float], int],
    *,
    permanent: Callable[[H, WriteOp, Exception], TidelogError | None] | None = None,
) -> list[BatchResult]:
    """Apply checked ops (:func:`check_ops`) in order in one transaction: the rules of
    :meth:`Store.write_batch <stores._contract.Store.write_batch>`, for any backend.

    The backend provides:

    * ``transaction`` -- entered once around the whole batch; yields the handle given to
      the other callbacks (a connection, the locked state...). It commits when the block
      ends normally and rolls back everything when an exception leaves it.
    * ``apply_isolated(handle, op, now)`` -- apply one op atomically *inside* that
      transaction (a savepoint, or checks before any change) and return its result. On
      any exception it must leave no trace of the op and re-raise.
    * ``permanent(handle, op, exc)`` (optional) -- for an exception that is not a
      :class:`TidelogError`: the per-op error (an :class:`InvalidArgumentError` subclass)
      if retrying can never make this op succeed (a value over the backend's limits),
      else ``None``.

    The rules: one timestamp ``now`` for the whole batch, taken inside the transaction.
    A :class:`TidelogError` from an op, or a permanent failure, is that op's result and
    the other ops go on; any other exception fails the transaction as a whole (nothing of
    the batch is written) and propagates. Once an op for a session failed, that session's
    later ops in the batch are not applied and report the same error object, so one
    session's writes never apply out of order.
    """
    results: list[BatchResult] = []
    failed: dict[str, TidelogError] = {}
    with transaction as handle:
        now = time.time()
        for op in ops:
            if failed:  # (the sessions an op touches are looked up only then)
                earlier = next((failed[i] for i in session_ids_of(op) if i in failed), None)
                if earlier is not None:
                    results.append(earlier)
                    continue
            try:
                results.append(apply_isolated(handle, op, now))
            except TidelogError as exc:
                error: TidelogError = exc
            except Exception as exc:
                found = None if permanent is None else permanent(handle, op, exc)
                if found is None:
                    raise
                error = found
            else:
                continue
            for session_id in session_ids_of(op):
                failed[session_id] = error
            results.append(error)
    return results


class BatchingStore:
    """Mixin for a backend whose writes of events all go through ``write_batch``: it
    provides :meth:`append` and :meth:`sync` exactly as the contract words them, so a
    backend only writes ``write_batch`` (and the rest of the contract)."""

    def write_batch(self, ops: Sequence[WriteOp], *, sync: bool = False) -> list[BatchResult]:
        """See :meth:`Store.write_batch <stores._contract.Store.write_batch>`."""
        raise NotImplementedError

    def append(
        self, session_id: str, events: Sequence[NewEvent], *, expected_head: int | None = None
    ) -> int:
        """See :meth:`Store.append <stores._contract.Store.append>`: one op of one batch."""
        validate_session_id(session_id)
        check_seq(expected_head, "expected_head", allow_none=True)
        prepared = tuple(prepare_events(events))
        [result] = self.write_batch([AppendOp(session_id, prepared, expected_head)])
        if isinstance(result, TidelogError):
            raise result
        return result

    def sync(self) -> None:
        """See :meth:`Store.sync <stores._contract.Store.sync>`: an empty batch with
        ``sync=True``."""
        self.write_batch([], sync=True)
