"""Opening a store from a URL: ``postgresql://...`` (or ``postgres://``) names a
:class:`~stores.postgres.PostgresStore`. Importable without psycopg (the optional extra
``tidelog[postgres]``), which is only needed to open one.
"""

from __future__ import annotations

from typing import Any, TypeGuard

from .contract import Store
from .errors import InvalidArgumentError

__all__ = ["POSTGRES_SCHEMES", "is_postgres_url", "open_postgres_url"]

#: URL prefixes that name a PostgreSQL store.
POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def is_postgres_url(target: object) -> TypeGuard[str]:
    """True for a ``str`` starting with ``postgresql://`` or ``postgres://``."""
    return isinstance(target, str) and target.startswith(POSTGRES_SCHEMES)


def open_postgres_url(url: str, **options: Any) -> Store:
    """Open the PostgresStore ``url`` names (see
    :meth:`~stores.postgres.PostgresStore.from_url`) with ``options``. Blocking.

    Raises :class:`InvalidArgumentError` if psycopg is not installed, and whatever the
    store's open raises."""
    try:
        from .postgres import PostgresStore
    except ImportError as exc:
        raise InvalidArgumentError(
            "a postgresql:// target needs psycopg: pip install 'tidelog[postgres]'"
        ) from exc
    return PostgresStore.from_url(url, **options)
