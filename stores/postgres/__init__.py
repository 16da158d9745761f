"""The postgres backend: :class:`PostgresStore`, and :data:`FORMAT_VERSION`, the store format
this version writes (the schema's version row): an older one is migrated by a writer, a
newer one refused."""

from ._schema import SCHEMA_VERSION as FORMAT_VERSION
from ._store import PostgresStore

__all__ = ["FORMAT_VERSION", "PostgresStore"]
