"""The jsonl backend: :class:`JsonlStore`."""

from ._store import JsonlStore

__all__ = ["JsonlStore"]
