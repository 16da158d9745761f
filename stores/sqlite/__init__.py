"""The sqlite backend: :class:`SqliteStore`."""

from ._store import SqliteStore

__all__ = ["SqliteStore"]
