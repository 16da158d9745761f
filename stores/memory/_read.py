"""MemoryStore's reads (see :class:`~stores._contract.Store`): a part of
:class:`~stores.MemoryStore` (a mixin). Each runs under the shared state's lock (the
store's ``_locked``); :func:`check_pin` is the pin check of a pinned read, of
``refresh_pin`` and of a projection checkpoint's load."""

from __future__ import annotations

from contextlib import AbstractContextManager

from .._checks import check_list_args, check_pin_arg, check_read_args, check_text
from .._contract import ListOrder, Pin
from .._errors import SnapshotExpiredError
from .._records import SessionInfo, StoredEvent, events_from_rows, validate_session_id
from ._state import Session, State

__all__ = ["MemoryReads", "check_pin"]


class MemoryReads:
    """The read methods of :class:`~stores.MemoryStore` (a mixin)."""

    def _locked(self, write: str = "") -> AbstractContextManager[State]:
        raise NotImplementedError  # pragma: no cover  (MemoryStore's)

    def read(
        self,
        session_id: str,
        *,
        since_seq: int = 0,
        until_seq: int | None = None,
        limit: int | None = None,
        pin: Pin | None = None,
        from_end: bool = False,
    ) -> list[StoredEvent]:
        """See :meth:`Store.read`."""
        validate_session_id(session_id)
        until = check_read_args(since_seq, until_seq, limit, pin, from_end)
        with self._locked() as state:
            session = state.sessions.get(session_id)
            if pin is not None:
                check_pin(session_id, session, pin)
            if session is None:
                return []
            stop = len(session.rows) if until is None else min(until, len(session.rows))
            start = since_seq
            if limit is not None and from_end:
                start = max(start, stop - limit)
            elif limit is not None:
                stop = min(stop, since_seq + limit)
            rows = session.rows[start:stop] if start < stop else []
        return events_from_rows(session_id, rows)

    def head(self, session_id: str) -> int:
        """See :meth:`Store.head`."""
        validate_session_id(session_id)
        with self._locked() as state:
            session = state.sessions.get(session_id)
            return 0 if session is None else len(session.rows)

    def stat(self, session_id: str) -> SessionInfo | None:
        """See :meth:`Store.stat`."""
        validate_session_id(session_id)
        with self._locked() as state:
            session = state.sessions.get(session_id)
            return None if session is None else session.info(session_id)

    def pin(self, session_id: str) -> Pin | None:
        """See :meth:`Store.pin`."""
        validate_session_id(session_id)
        with self._locked() as state:
            session = state.sessions.get(session_id)
            if session is None:
                return None
            return Pin(session_id, len(session.rows), session.incarnation, session.epoch)

    def find_run(self, session_id: str, run_id: str) -> tuple[int, int] | None:
        """See :meth:`Store.find_run`."""
        validate_session_id(session_id)
        check_text(run_id, "run_id")
        with self._locked() as state:
            session = state.sessions.get(session_id)
            if session is None:
                return None
            seqs = [row[0] for row in session.rows if row[4] == run_id]
        return (seqs[0], seqs[-1]) if seqs else None

    def refresh_pin(self, pin: Pin) -> Pin:
        """See :meth:`Store.refresh_pin`."""
        check_pin_arg(pin)
        with self._locked() as state:
            session = state.sessions.get(pin.session_id)
            check_pin(pin.session_id, session, pin)
            assert session is not None
            return Pin(pin.session_id, len(session.rows), session.incarnation, session.epoch)

    def list_sessions(
        self,
        *,
        limit: int | None = None,
        prefix: str | None = None,
        after: str | None = None,
        order: ListOrder = "id",
    ) -> list[SessionInfo]:
        """See :meth:`Store.list_sessions`."""
        check_list_args(limit, prefix, after, order)
        with self._locked() as state:
            ids = [
                sid
                for sid in state.sessions
                if (prefix is None or sid.startswith(prefix)) and (after is None or sid > after)
            ]
            if order == "id":
                ids.sort()
                picked = [(sid, state.sessions[sid]) for sid in ids[:limit]]
            else:
                found = sorted((-state.sessions[sid].updated_at, sid) for sid in ids)
                picked = [(sid, state.sessions[sid]) for _, sid in found[:limit]]
            return [session.info(sid) for sid, session in picked]


def check_pin(session_id: str, session: Session | None, pin: Pin) -> None:
    if pin.session_id != session_id:
        raise SnapshotExpiredError(session_id, pin.as_of_seq, "pin is for another session")
    if session is None or session.incarnation != pin.incarnation:
        raise SnapshotExpiredError(session_id, pin.as_of_seq, "the session was deleted")
    for epoch, to_seq in session.cuts:
        if epoch > pin.epoch and to_seq < pin.as_of_seq:
            raise SnapshotExpiredError(
                session_id, pin.as_of_seq, f"events after seq {to_seq} were truncated"
            )
