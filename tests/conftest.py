"""Shared fixtures: runtimes over both backends, and a fault-injecting store."""

from __future__ import annotations

import contextlib
import pathlib
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:  # the runtime is imported by the fixtures that use it, not by every test
    from helpers import RuntimeFactory

    from runtime import Runtime


@pytest.fixture
def pg_schema() -> Iterator[tuple[str, str]]:
    """``(dsn, schema)``: a PostgreSQL schema of this test's own, dropped afterwards
    (skips without a server, unless ``TIDELOG_REQUIRE_PG=1``; see ``tests/pgtest.py``)."""
    from pgtest import fresh_schema

    with fresh_schema() as found:
        yield found


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> str:
    """Run the test once per backend."""
    return str(request.param)


@pytest.fixture
def make_runtime(backend: str, tmp_path: pathlib.Path) -> Iterator[RuntimeFactory]:
    """A factory of runtimes on the selected backend (one shared store per test): a
    MemoryStore, a SQLite file, or a PostgreSQL schema of the test's own (opened by URL)."""
    from runtime import MemoryStore, open_runtime

    memory = MemoryStore()
    with contextlib.ExitStack() as stack:
        if backend == "postgres":
            from pgtest import fresh_schema, url_of

            target: object = url_of(*stack.enter_context(fresh_schema()))
        else:
            target = memory if backend == "memory" else tmp_path / "rt.db"

        def factory(**options: object) -> AbstractAsyncContextManager[Runtime]:
            return open_runtime(target, **options)  # type: ignore[arg-type]

        yield factory


@pytest.fixture
async def rt(make_runtime: RuntimeFactory) -> AsyncIterator[Runtime]:
    """A runtime on the selected backend."""
    async with make_runtime() as runtime:
        yield runtime
