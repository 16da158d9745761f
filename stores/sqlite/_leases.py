"""SqliteStore's single-writer leases (see :meth:`Store.acquire_lease
<stores._contract.Store.acquire_lease>`): a part of :class:`~stores.SqliteStore`
(a mixin); the SQL is in :mod:`stores.sqlite._auxiliary`."""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

from .._checks import check_lease_args, check_list_args, check_session_ids
from .._records import LeaseInfo, validate_session_id
from . import _auxiliary as aux
from ._readonly import rereads

__all__ = ["SqliteLeases"]


class SqliteLeases:
    """The lease methods of :class:`~stores.SqliteStore` (a mixin)."""

    def _connection(self, what: str, *, write: bool = False) -> AbstractContextManager[Any]:
        raise NotImplementedError  # pragma: no cover  (SqliteStore's)

    def _write(self, what: str) -> AbstractContextManager[Any]:
        raise NotImplementedError  # pragma: no cover  (SqliteStore's)

    def acquire_lease(self, session_id: str, owner: str, *, ttl: float, holder: str) -> None:
        """See :meth:`Store.acquire_lease`."""
        validate_session_id(session_id)
        check_lease_args(owner, ttl=ttl, holder=holder)
        with self._write("acquire_lease") as conn:
            aux.acquire_lease(conn, session_id, owner, holder, time.time(), ttl)

    def renew_lease(self, session_id: str, owner: str, *, ttl: float) -> None:
        """See :meth:`Store.renew_lease`."""
        validate_session_id(session_id)
        check_lease_args(owner, ttl=ttl)
        with self._write("renew_lease") as conn:
            aux.renew_lease(conn, session_id, owner, time.time() + ttl)

    def renew_leases(self, owner: str, session_ids: Sequence[str], *, ttl: float) -> list[str]:
        """See :meth:`Store.renew_leases`."""
        ids = check_session_ids(session_ids)
        check_lease_args(owner, ttl=ttl)
        if not ids:
            with self._connection("renew_leases", write=True):
                return []
        with self._write("renew_leases") as conn:
            return aux.renew_leases(conn, owner, ids, time.time() + ttl)

    def release_lease(self, session_id: str, owner: str) -> None:
        """See :meth:`Store.release_lease`."""
        validate_session_id(session_id)
        check_lease_args(owner)
        with self._write("release_lease") as conn:
            aux.release_lease(conn, session_id, owner)

    @rereads
    def list_leases(self, *, prefix: str | None = None) -> list[LeaseInfo]:
        """See :meth:`Store.list_leases`."""
        check_list_args(None, prefix, None, "id")
        with self._connection("list_leases") as conn:
            return aux.list_leases(conn, prefix)
