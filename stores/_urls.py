"""Opening a store from its address, the one place that decides which backend an
address names:

* ``postgresql://...`` or ``postgres://...``: a :class:`~stores.PostgresStore`
  (a ``schema`` query parameter chooses its schema: ``postgresql://host/db?schema=s``);
* an existing directory: a :class:`~stores.JsonlStore`;
* anything else: a :class:`~stores.SqliteStore` file.

Importable without psycopg (the optional extra ``tidelog[postgres]``), which is only
needed to open a PostgreSQL store; the backends are imported when one is opened.
"""

from __future__ import annotations

import os
from typing import Any, Literal, TypeGuard

from ._contract import Store
from ._errors import InvalidArgumentError

__all__ = [
    "POSTGRES_SCHEMES",
    "StoreKind",
    "is_postgres_url",
    "open_postgres_url",
    "open_store",
    "store_kind",
]

#: URL prefixes that name a PostgreSQL store.
POSTGRES_SCHEMES = ("postgresql://", "postgres://")

#: The backends an address can name.
StoreKind = Literal["sqlite", "jsonl", "postgres"]


def is_postgres_url(target: object) -> TypeGuard[str]:
    """True for a ``str`` starting with ``postgresql://`` or ``postgres://``."""
    return isinstance(target, str) and target.startswith(POSTGRES_SCHEMES)


def store_kind(address: str | os.PathLike[str]) -> StoreKind:
    """Which backend ``address`` names (see the module doc); looks at the file system."""
    if is_postgres_url(address):
        return "postgres"
    return "jsonl" if os.path.isdir(address) else "sqlite"


def open_postgres_url(url: str, **options: Any) -> Store:
    """Open the PostgresStore ``url`` names (see
    :meth:`~stores.PostgresStore.from_url`) with ``options``. Blocking.

    Raises :class:`InvalidArgumentError` if psycopg is not installed, and whatever the
    store's open raises."""
    try:
        from .postgres import PostgresStore
    except ImportError as exc:
        raise InvalidArgumentError(
            "a postgresql:// target needs psycopg: pip install 'tidelog[postgres]'"
        ) from exc
    return PostgresStore.from_url(url, **options)


def open_store(
    address: str | os.PathLike[str],
    *,
    read_only: bool = False,
    synchronous: Literal["normal", "full"] = "normal",
    busy_timeout_ms: int = 5000,
    sqlite_checkpoints: Literal["auto", "deferred"] = "auto",
) -> Store:
    """Open the store ``address`` names (see the module doc) with the options every
    backend shares; ``sqlite_checkpoints`` is SqliteStore's ``checkpoints``. Blocking.

    Raises :class:`InvalidArgumentError` for an address that is neither a ``str`` nor a
    path, and whatever the store's open raises."""
    if not isinstance(address, str | os.PathLike):
        raise InvalidArgumentError(
            f"a store address is a path or a postgresql:// URL, not {type(address).__name__}"
        )
    kind = store_kind(address)
    if kind == "postgres":
        assert isinstance(address, str)
        return open_postgres_url(
            address, read_only=read_only, synchronous=synchronous, busy_timeout_ms=busy_timeout_ms
        )
    if kind == "jsonl":
        from .jsonl import JsonlStore

        return JsonlStore(
            address, read_only=read_only, synchronous=synchronous, busy_timeout_ms=busy_timeout_ms
        )
    from .sqlite import SqliteStore

    return SqliteStore(
        address,
        read_only=read_only,
        synchronous=synchronous,
        busy_timeout_ms=busy_timeout_ms,
        checkpoints=sqlite_checkpoints,
    )
