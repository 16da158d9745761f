"""PostgresStore's reads (see :class:`~stores._contract.Store`): a part of
:class:`~stores.PostgresStore` (a mixin). Each is one statement, run by the store's
``_read`` (once more on a new connection if the server had dropped this one); the SQL of
a read along a fork's lineage is in :mod:`stores.postgres._lineage`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from .._checks import check_list_args, check_pin_arg, check_read_args, check_text, prefix_end
from .._contract import ListOrder, Pin
from .._records import (
    INFO_COLUMNS,
    MAX_SEQ,
    SessionInfo,
    StoredEvent,
    events_from_rows,
    session_info,
    validate_session_id,
)
from ._connection import row_of, rows_of
from ._lineage import check_cut, find_run, read_window

__all__ = ["PgReads", "id_range"]

T = TypeVar("T")


class PgReads:
    """The read methods of :class:`~stores.PostgresStore` (a mixin)."""

    def _read(self, what: str, query: Callable[..., T], *args: Any) -> T:
        raise NotImplementedError  # pragma: no cover  (PostgresStore's)

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
        """See :meth:`Store.read`: one statement (pin check included)."""
        validate_session_id(session_id)
        bound = check_read_args(since_seq, until_seq, limit, pin, from_end)
        until = MAX_SEQ if bound is None else bound
        rows = self._read("read", read_window, session_id, since_seq, until, limit, from_end, pin)
        return events_from_rows(session_id, rows)

    def head(self, session_id: str) -> int:
        """See :meth:`Store.head`."""
        validate_session_id(session_id)
        row = self._read("head", row_of, "SELECT head FROM sessions WHERE id = %s", session_id)
        return 0 if row is None else int(row[0])

    def stat(self, session_id: str) -> SessionInfo | None:
        """See :meth:`Store.stat`."""
        validate_session_id(session_id)
        sql = f"SELECT {INFO_COLUMNS} FROM sessions WHERE id = %s"
        row = self._read("stat", row_of, sql, session_id)
        return None if row is None else session_info(row)

    def pin(self, session_id: str) -> Pin | None:
        """See :meth:`Store.pin`."""
        validate_session_id(session_id)
        sql = "SELECT sid, head, epoch FROM sessions WHERE id = %s"
        row = self._read("pin", row_of, sql, session_id)
        return None if row is None else Pin(session_id, int(row[1]), int(row[0]), int(row[2]))

    def find_run(self, session_id: str, run_id: str) -> tuple[int, int] | None:
        """See :meth:`Store.find_run` (served by the ``events_by_run`` index)."""
        validate_session_id(session_id)
        check_text(run_id, "run_id")
        return self._read("find_run", find_run, session_id, run_id)

    def refresh_pin(self, pin: Pin) -> Pin:
        """See :meth:`Store.refresh_pin`: one statement (one snapshot)."""
        check_pin_arg(pin)
        row = self._read(
            "refresh_pin",
            row_of,
            "SELECT s.sid, s.head, s.epoch, (SELECT min(to_seq) FROM cuts AS c"
            " WHERE c.sid = s.sid AND c.epoch > %s) FROM sessions AS s WHERE s.id = %s",
            pin.epoch,
            pin.session_id,
        )
        sid, head, epoch, cut = (None, 0, 0, None) if row is None else row
        check_cut(pin.session_id, pin, sid, cut)
        return Pin(pin.session_id, int(head), pin.incarnation, int(epoch))

    def list_sessions(
        self,
        *,
        limit: int | None = None,
        prefix: str | None = None,
        after: str | None = None,
        order: ListOrder = "id",
    ) -> list[SessionInfo]:
        """See :meth:`Store.list_sessions`: ids are ``COLLATE "C"`` (byte order of UTF-8,
        which is code point order), so ``order="id"`` and a prefix are ranges of the ids'
        unique index."""
        check_list_args(limit, prefix, after, order)
        where, args = id_range("id", prefix, after)
        sql = f"SELECT {INFO_COLUMNS} FROM sessions{where}"
        sql += " ORDER BY id" if order == "id" else " ORDER BY updated_at DESC, id"
        rows = self._read("list_sessions", rows_of, sql + " LIMIT %s", *args, limit)
        return [session_info(row) for row in rows]


def id_range(column: str, prefix: str | None, after: str | None) -> tuple[str, list[str]]:
    """The ``WHERE`` clause (with its leading space, or empty) selecting the ids of
    ``column`` that start with ``prefix`` and sort after ``after``, and its arguments."""
    where: list[str] = []
    args: list[str] = []
    if prefix:
        where.append(f"{column} >= %s")
        args.append(prefix)
        end = prefix_end(prefix)
        if end is not None:
            where.append(f"{column} < %s")
            args.append(end)
    if after is not None:
        where.append(f"{column} > %s")
        args.append(after)
    return (" WHERE " + " AND ".join(where) if where else ""), args
