"""Shared fixtures: runtimes over every backend, and a fault-injecting store."""

from __future__ import annotations

import contextlib
import pathlib
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:  # the runtime is imported by the fixtures that use it, not by every test
    from helpers import RuntimeFactory

    from runtime import Runtime


#: The modules whose tests run longest (many subprocesses or whole programs each), longest
#: first. The suite runs in two workers that take tests in collection order, so these
#: start first and the run does not end with one worker on a long test while the other
#: idles; then every other test marked ``slow``, then the rest, each in file order.
LONGEST_FIRST = (
    "test_bench_smoke",
    "test_battery_kill",
    "test_battery_model",
    "test_readme",
    "test_model_crash",
    "test_addresses",
    "test_basics",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the longest tests first (see :data:`LONGEST_FIRST`); the order within each
    group is the collection's."""

    def rank(item: pytest.Item) -> tuple[int, int]:
        module = item.path.stem
        if module in LONGEST_FIRST:
            return 0, LONGEST_FIRST.index(module)
        return (1, 0) if item.get_closest_marker("slow") else (2, 0)

    items.sort(key=rank)


@pytest.fixture
def pg_schema() -> Iterator[tuple[str, str]]:
    """``(dsn, schema)``: a PostgreSQL schema of this test's own, dropped afterwards
    (skips without a server, unless ``TIDELOG_REQUIRE_PG=1``; see ``tests/pgtest.py``)."""
    from pgtest import fresh_schema

    with fresh_schema() as found:
        yield found


@pytest.fixture
def pg_where(pg_schema: tuple[str, str]) -> tuple[str, str]:
    """``(dsn, schema)`` of this test (a schema of its own, dropped afterwards)."""
    return pg_schema


@pytest.fixture
def pg_open(pg_where: tuple[str, str]) -> Iterator[Callable[..., Any]]:
    """Open PostgresStores on the test's schema (each a connection of its own: another
    host); all closed at teardown. ``dsn=`` and ``schema=`` override the test's."""
    from stores import PostgresStore

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
    """A plain autocommit psycopg connection to the test's database (another host, an
    administrator), its search path on the test's schema."""
    import psycopg

    dsn, schema = pg_where
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"SET search_path = {schema}")
        yield conn


@pytest.fixture(params=["memory", "sqlite", "jsonl", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    """Run the test once per backend."""
    return str(request.param)


@pytest.fixture
def make_runtime(backend: str, tmp_path: pathlib.Path) -> Iterator[RuntimeFactory]:
    """A factory of runtimes on the selected backend (one shared store per test): a
    MemoryStore, a SQLite file, a JSONL directory, or a PostgreSQL schema of the test's
    own (opened by URL)."""
    from runtime import MemoryStore, open_runtime

    memory = MemoryStore()
    with contextlib.ExitStack() as stack:
        target: Any
        if backend == "postgres":
            from pgtest import fresh_schema, url_of

            target = url_of(*stack.enter_context(fresh_schema()))
        elif backend == "jsonl":  # a directory opens a JSONL store
            target = tmp_path / "rt.jsonl"
            target.mkdir(exist_ok=True)
        else:
            target = memory if backend == "memory" else tmp_path / "rt.db"

        def factory(**options: Any) -> AbstractAsyncContextManager[Runtime]:
            return open_runtime(target, **options)

        yield factory


@pytest.fixture
async def rt(make_runtime: RuntimeFactory) -> AsyncIterator[Runtime]:
    """A runtime on the selected backend."""
    async with make_runtime() as runtime:
        yield runtime
