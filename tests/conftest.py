"""Shared fixtures: runtimes over both backends, and a fault-injecting store."""

from __future__ import annotations

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


@pytest.fixture(params=["memory", "sqlite"])
def backend(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> str:
    """Run the test once per backend."""
    return str(request.param)


@pytest.fixture
def make_runtime(backend: str, tmp_path: pathlib.Path) -> RuntimeFactory:
    """A factory of runtimes on the selected backend (one shared store per test)."""
    from runtime import MemoryStore, open_runtime

    memory = MemoryStore()

    def factory(**options: object) -> AbstractAsyncContextManager[Runtime]:
        if backend == "memory":
            return open_runtime(memory, **options)  # type: ignore[arg-type]
        return open_runtime(tmp_path / "rt.db", **options)  # type: ignore[arg-type]

    return factory


@pytest.fixture
async def rt(make_runtime: RuntimeFactory) -> AsyncIterator[Runtime]:
    """A runtime on the selected backend."""
    async with make_runtime() as runtime:
        yield runtime
