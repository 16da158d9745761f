"""Snapshot: a session pinned at ``as_of_seq``, read without holding any transaction."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stores import ClosedError, Pin, StoredEvent

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

    def close(self) -> None:
        self._closed = True
