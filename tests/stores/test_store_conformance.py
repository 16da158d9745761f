"""Run the shared Store conformance suite against the built-in backends."""

from __future__ import annotations

import pathlib

import pytest

from stores import JsonlStore, MemoryStore, SqliteStore, Store
from stores.conformance import DurableStoreConformance, StoreConformance


class TestMemoryStore(StoreConformance):
    """The in-memory backend (not durable: no reopen cases)."""

    def make_store(self, tmp_path: pathlib.Path) -> Store:  # noqa: ARG002 (memory needs no files)
        return MemoryStore()


class TestSqliteStore(DurableStoreConformance):
    """The SQLite (apsw) backend, including the durability cases."""

    def make_store(self, tmp_path: pathlib.Path) -> Store:
        return SqliteStore(tmp_path / "store.db")

    def reopen_store(self, store: Store, tmp_path: pathlib.Path) -> Store | None:
        store.close()
        return SqliteStore(tmp_path / "store.db")


class TestJsonlStore(DurableStoreConformance):
    """The JSONL file backend (one file per session), including the durability cases, with
    plain files and with zstd-compressed ones (``compress=True``)."""

    compress = False

    @pytest.fixture(autouse=True, params=[False, True], ids=["plain", "zstd"])
    def _encoding(self, request: pytest.FixtureRequest) -> None:
        self.compress = bool(request.param)

    def make_store(self, tmp_path: pathlib.Path) -> Store:
        return JsonlStore(tmp_path / "store", compress=self.compress)

    def reopen_store(self, store: Store, tmp_path: pathlib.Path) -> Store | None:
        store.close()
        return JsonlStore(tmp_path / "store", compress=self.compress)


class TestPostgresStore(DurableStoreConformance):
    """The PostgreSQL (psycopg) backend, each test in a schema of its own."""

    @pytest.fixture(autouse=True)
    def _schema(self, pg_schema: tuple[str, str]) -> None:
        self._dsn, self._schema_name = pg_schema

    def _open(self) -> Store:
        from stores import PostgresStore

        return PostgresStore(self._dsn, schema=self._schema_name)

    def make_store(self, tmp_path: pathlib.Path) -> Store:  # noqa: ARG002 (a schema, no files)
        return self._open()

    def reopen_store(self, store: Store, tmp_path: pathlib.Path) -> Store | None:  # noqa: ARG002
        store.close()
        return self._open()
