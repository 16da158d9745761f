"""Fixtures of the PostgreSQL store tests: the test's schema, PostgresStores on it, and a
plain psycopg connection (another host, an administrator)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

#: Opens a PostgresStore on the test's schema (options as the constructor's).
PgOpener = Callable[..., Any]


@pytest.fixture
def pg_where(pg_schema: tuple[str, str]) -> tuple[str, str]:
    """``(dsn, schema)`` of this test (a schema of its own, dropped afterwards)."""
    return pg_schema


@pytest.fixture
def pg_open(pg_where: tuple[str, str]) -> Iterator[PgOpener]:
    """Open PostgresStores on the test's schema (each a connection of its own: another
    host); all closed at teardown. ``dsn=`` and ``schema=`` override the test's."""
    from stores.postgres import PostgresStore

    dsn, schema = pg_where
    opened: list[PostgresStore] = []

    def make(**options: Any) -> PostgresStore:
        options.setdefault("schema", schema)
        store = PostgresStore(options.pop("dsn", dsn), **options)
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


@pytest.fixture
def pg_raw(pg_where: tuple[str, str]) -> Iterator[Any]:
    """A plain autocommit psycopg connection to the test's database, its search path on
    the test's schema."""
    import psycopg

    dsn, schema = pg_where
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"SET search_path = {schema}")
        yield conn
