"""MemoryStore's single-writer leases (see :meth:`Store.acquire_lease
<stores._contract.Store.acquire_lease>`): a part of :class:`~stores.MemoryStore`,
kept apart to keep each module to one concern."""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

import attrs

from .._checks import check_lease_args, check_list_args, check_session_ids
from .._errors import OwnershipLostError, SessionOwnedError
from .._leases import lease_is_free
from .._records import LeaseInfo, validate_session_id

__all__ = ["Lease", "MemoryLeases"]


@attrs.define
class Lease:
    """A held lease: its owner token, holder description and expiry time."""

    owner: str
    holder: str
    expires: float


class MemoryLeases:
    """The lease methods of :class:`~stores.MemoryStore` (a mixin)."""

    def _locked(self, write: str = "") -> AbstractContextManager[Any]:
        raise NotImplementedError  # pragma: no cover  (MemoryStore's)

    def acquire_lease(self, session_id: str, owner: str, *, ttl: float, holder: str) -> None:
        """See :meth:`Store.acquire_lease`."""
        validate_session_id(session_id)
        check_lease_args(owner, ttl=ttl, holder=holder)
        with self._locked("acquire_lease") as state:
            now = time.time()
            lease = state.leases.get(session_id)
            held = None if lease is None else (lease.owner, lease.holder, lease.expires)
            if held is not None and not lease_is_free(held, owner, now):
                raise SessionOwnedError(session_id, held[1])
            state.leases[session_id] = Lease(owner, holder, now + ttl)

    def renew_lease(self, session_id: str, owner: str, *, ttl: float) -> None:
        """See :meth:`Store.renew_lease`."""
        validate_session_id(session_id)
        check_lease_args(owner, ttl=ttl)
        with self._locked("renew_lease") as state:
            lease = state.leases.get(session_id)
            if lease is None or lease.owner != owner:
                raise OwnershipLostError(session_id)
            lease.expires = time.time() + ttl

    def renew_leases(self, owner: str, session_ids: Sequence[str], *, ttl: float) -> list[str]:
        """See :meth:`Store.renew_leases`."""
        ids = check_session_ids(session_ids)
        check_lease_args(owner, ttl=ttl)
        lost: list[str] = []
        with self._locked("renew_leases") as state:
            expires = time.time() + ttl
            for session_id in ids:
                lease = state.leases.get(session_id)
                if lease is None or lease.owner != owner:
                    lost.append(session_id)
                else:
                    lease.expires = expires
        return lost

    def release_lease(self, session_id: str, owner: str) -> None:
        """See :meth:`Store.release_lease`."""
        validate_session_id(session_id)
        check_lease_args(owner)
        with self._locked("release_lease") as state:
            lease = state.leases.get(session_id)
            if lease is not None and lease.owner == owner:
                del state.leases[session_id]

    def list_leases(self, *, prefix: str | None = None) -> list[LeaseInfo]:
        """See :meth:`Store.list_leases`."""
        check_list_args(None, prefix, None, "id")
        with self._locked() as state:
            return [
                LeaseInfo(sid, lease.owner, lease.holder, lease.expires)
                for sid, lease in sorted(state.leases.items())
                if prefix is None or sid.startswith(prefix)
            ]
