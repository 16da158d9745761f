"""Snapshot: a session pinned at ``as_of_seq``, read without holding any transaction."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, final

from stores import ClosedError, InvalidArgumentError, Pin, StoredEvent

from ._constructors import NoPublicConstructor
from ._engine import Engine
from ._folding import fold_values

__all__ = ["Snapshot", "new_snapshot"]


def new_snapshot(engine: Engine, pin: Pin) -> Snapshot:
    """A snapshot reading through ``pin`` (``Runtime.snapshot``)."""
    return Snapshot._create(engine, pin)


@final
class Snapshot(metaclass=NoPublicConstructor):
    """A consistent view of one session as of ``as_of_seq`` (``rt.snapshot(id)``).

    Every read returns the same data while writers append: reads are clamped to
    ``as_of_seq``. A snapshot holds no lock and no open SQLite transaction (so it never pins
    the WAL); instead each read checks the session's version, and if destructive
    maintenance (truncate, delete, a rewrite of the tail) removed anything it covers, the read
    raises :class:`~stores.SnapshotExpiredError` -- never a silent mix of versions.
    """

    def __init__(self, engine: Engine, pin: Pin) -> None:
        self._engine = engine
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
        return await self._engine.store.read(
            self.session_id, since_seq=since_seq, until_seq=until_seq, limit=limit, pin=self._pin
        )

    async def values(self, names: Sequence[str] | None = None) -> dict[str, Any]:
        """``{name: value}`` of the registered projections (or just ``names``), folded
        exactly up to :attr:`as_of_seq` -- consistent with :meth:`read`. Starts from the
        newest valid projection cache and folds only the events after it.

        Raises: :class:`SnapshotExpiredError`, :class:`InvalidArgumentError` (unknown
        name), :class:`ClosedError`."""
        if self._closed:
            raise ClosedError("this snapshot was closed")
        registered = self._engine.projections
        wanted = list(registered) if names is None else list(names)
        unknown = [n for n in wanted if n not in registered]
        if unknown:
            raise InvalidArgumentError(f"no projection named {unknown[0]!r}")
        return await fold_values(self._engine, self._pin, [registered[n] for n in wanted])

    def close(self) -> None:
        """End the snapshot: later reads raise :class:`ClosedError` (the ``async with``
        block's exit does this)."""
        self._closed = True
