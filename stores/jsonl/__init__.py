"""The jsonl backend: :class:`JsonlStore`, and :data:`FORMAT_VERSION`, the store format this
version writes (the store's marker): an older one is migrated by a writer, a newer one
refused."""

from ._root import STORE_FORMAT as FORMAT_VERSION
from ._store import JsonlStore

__all__ = ["FORMAT_VERSION", "JsonlStore"]
