"""Snapshot: a session pinned at ``as_of_seq``, read without holding any transaction."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from stores import ClosedError, InvalidArgumentError, Pin, StoredEvent

from .views import fold_values

if TYPE_CHECKING:
    from .runtime import Runtime

__all__ = ["Snapshot"]


class Snapshot:
    """A consistent view of one session as of ``as_of_seq`` (``rt.snapshot(id)``).

    Every read returns the same data while writers append: reads are clamped to
    ``as_of_seq``. A snapshot holds no lock and no open SQLite transaction (so it never pins
    the WAL); instead each read checks the session's version, and if destructive
    maintenance (truncate, delete, later rewind/trim) removed anything it covers, the read
    raises :class:`~stores.SnapshotExpiredError` -- never a silent mix of versions.
    """

    def __init__(self, runtime: Runtime, pin: Pin) -> None:
        self._runtime = runtime
        self._pin = pin
        self.session_id = pin.session_id
        self.as_of_seq = pin.as_of_seq
        self._closed = False

    async def read(
        self, *, since_seq: int = 0, until_seq: int | None = None, limit: int | None = None
    ) -> list[StoredEvent]:
        """Events with ``since_seq < seq <= min(until_seq, as_of_seq)``, at most ``limit``.

        Raises: :class:`SnapshotExpiredError`, :class:`InvalidArgumentError`,
        :class:`ClosedError` (after the ``async with`` block), store errors."""
        if self._closed:
            raise ClosedError("this snapshot was closed")
        return await self._runtime._read(
            self.session_id, since_seq, until_seq, limit, pin=self._pin
        )

    async def values(self, names: Sequence[str] | None = None) -> dict[str, Any]:
        """``{name: value}`` of the registered projections (or just ``names``), folded
        exactly up to :attr:`as_of_seq` -- consistent with :meth:`read`. Starts from the
        newest valid projection checkpoint and folds only the events after it.

        Raises: :class:`SnapshotExpiredError`, :class:`InvalidArgumentError` (unknown
        name), :class:`ClosedError`."""
        if self._closed:
            raise ClosedError("this snapshot was closed")
        registered = self._runtime._projections
        wanted = list(registered) if names is None else list(names)
        unknown = [n for n in wanted if n not in registered]
        if unknown:
            raise InvalidArgumentError(f"no projection named {unknown[0]!r}")
        return await fold_values(self._runtime, self._pin, [registered[n] for n in wanted])

    def close(self) -> None:
        self._closed = True
