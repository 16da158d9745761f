"""Shared fixtures: runtimes over both backends, and a fault-injecting store."""

from __future__ import annotations

import pathlib
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:  # the runtime is imported by the fixtures that use it, not by every test
    from helpers import RuntimeFactory

    from runtime import Runtime


@pytest.fixture(params=["memory", "sqlite", "jsonl"])
def backend(request: pytest.FixtureRequest) -> str:
    """Run the test once per backend."""
    return str(request.param)


@pytest.fixture
def make_runtime(backend: str, tmp_path: pathlib.Path) -> RuntimeFactory:
    """A factory of runtimes on the selected backend (one shared store per test)."""
    from runtime import MemoryStore, open_runtime

    memory = MemoryStore()

    def factory(**options: Any) -> AbstractAsyncContextManager[Runtime]:
        if backend == "memory":
            return open_runtime(memory, **options)
        if backend == "jsonl":  # a directory opens a JSONL store
            (tmp_path / "rt.jsonl").mkdir(exist_ok=True)
            return open_runtime(tmp_path / "rt.jsonl", **options)
        return open_runtime(tmp_path / "rt.db", **options)

    return factory


@pytest.fixture
async def rt(make_runtime: RuntimeFactory) -> AsyncIterator[Runtime]:
    """A runtime on the selected backend."""
    async with make_runtime() as runtime:
        yield runtime
