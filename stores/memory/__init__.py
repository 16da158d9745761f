"""The memory backend: :class:`MemoryStore`."""

from ._store import MemoryStore

__all__ = ["MemoryStore"]
