"""PostgresStore's leases (see :meth:`Store.acquire_lease
<stores._contract.Store.acquire_lease>`): a part of :class:`~stores.PostgresStore`
(a mixin); the SQL is in :mod:`stores.postgres._auxiliary`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, TypeVar

import psycopg

from .._checks import check_lease_args, check_list_args, check_session_ids
from .._records import LeaseInfo, validate_session_id
from . import _auxiliary as aux
from ._connection import rows_of
from ._read import id_range

__all__ = ["PgLeases"]

Conn = psycopg.Connection[Any]
T = TypeVar("T")


class PgLeases:
    """The lease methods of :class:`~stores.PostgresStore` (a mixin)."""

    schema: str
    _advisory: dict[int, str]

    def _connection(self, what: str, *, write: bool = False) -> AbstractContextManager[Conn]:
        raise NotImplementedError  # pragma: no cover  (PostgresStore's)

    def _read(self, what: str, query: Callable[..., T], *args: Any) -> T:
        raise NotImplementedError  # pragma: no cover  (PostgresStore's)

    def acquire_lease(self, session_id: str, owner: str, *, ttl: float, holder: str) -> None:
        """See :meth:`Store.acquire_lease` and :mod:`stores.postgres._auxiliary` (a dead holder
        is found through its advisory lock, on any host)."""
        validate_session_id(session_id)
        check_lease_args(owner, ttl=ttl, holder=holder)
        with self._connection("acquire_lease", write=True) as conn:
            aux.acquire_lease(
                conn, self.schema, self._advisory, session_id, owner, holder, float(ttl)
            )

    def renew_lease(self, session_id: str, owner: str, *, ttl: float) -> None:
        """See :meth:`Store.renew_lease`."""
        validate_session_id(session_id)
        check_lease_args(owner, ttl=ttl)
        with self._connection("renew_lease", write=True) as conn:
            aux.renew_lease(conn, self.schema, self._advisory, session_id, owner, float(ttl))

    def renew_leases(self, owner: str, session_ids: Sequence[str], *, ttl: float) -> list[str]:
        """See :meth:`Store.renew_leases`."""
        ids = check_session_ids(session_ids)
        check_lease_args(owner, ttl=ttl)
        with self._connection("renew_leases", write=True) as conn:
            if not ids:
                return []
            return aux.renew_leases(conn, self.schema, self._advisory, owner, ids, float(ttl))

    def release_lease(self, session_id: str, owner: str) -> None:
        """See :meth:`Store.release_lease`."""
        validate_session_id(session_id)
        check_lease_args(owner)
        with self._connection("release_lease", write=True) as conn:
            aux.release_lease(conn, self.schema, self._advisory, session_id, owner)

    def list_leases(self, *, prefix: str | None = None) -> list[LeaseInfo]:
        """See :meth:`Store.list_leases` (``expires`` is the server's clock, in seconds
        since the epoch)."""
        check_list_args(None, prefix, None, "id")
        where, args = id_range("id", prefix, None)
        sql = f"SELECT id, owner, holder, expires FROM leases{where} ORDER BY id"
        rows = self._read("list_leases", rows_of, sql, *args)
        return [LeaseInfo(sid, owner, holder, expires) for sid, owner, holder, expires in rows]
