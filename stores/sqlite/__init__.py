"""The sqlite backend: :class:`SqliteStore`, and :data:`FORMAT_VERSION`, the store format this
version writes (the file's user_version): an older one is migrated by a writer, a newer one
refused."""

from ._schema import SCHEMA_VERSION as FORMAT_VERSION
from ._store import SqliteStore

__all__ = ["FORMAT_VERSION", "SqliteStore"]
