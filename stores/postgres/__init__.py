"""The postgres backend: :class:`PostgresStore`."""

from ._store import PostgresStore

__all__ = ["PostgresStore"]
