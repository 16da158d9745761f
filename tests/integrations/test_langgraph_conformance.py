"""LangGraph's own conformance suite (langgraph-checkpoint-conformance) against the
tidelog saver, on every backend: natively under trio and through the asyncio bridge."""

from __future__ import annotations

import asyncio
import contextlib
import pathlib
from collections.abc import AsyncGenerator, Iterator
from typing import Any

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES
from langgraph.checkpoint.conformance.report import CapabilityReport

from runtime import MemoryStore, open_runtime
from runtime.integrations import Bridge, open_bridge
from runtime.integrations.langgraph import TidelogSaver

BACKENDS = ["memory", "sqlite", "jsonl", "postgres"]


@pytest.fixture(params=BACKENDS)
def target(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Any]:
    """What ``open_runtime`` opens for the backend."""
    backend = request.param
    with contextlib.ExitStack() as stack:
        if backend == "postgres":
            from pgtest import fresh_schema, url_of

            yield url_of(*stack.enter_context(fresh_schema()))
        elif backend == "jsonl":
            path = tmp_path / "threads.jsonl"
            path.mkdir()
            yield path
        elif backend == "sqlite":
            yield tmp_path / "threads.db"
        else:
            yield MemoryStore()


def _check(report: CapabilityReport) -> None:
    failures = {name: result.failures for name, result in report.results.items() if result.failures}
    assert failures == {}
    assert {name for name, result in report.results.items() if result.passed} == {
        capability.value for capability in ALL_CAPABILITIES
    }
    assert report.conformance_level() == "FULL"


async def test_conformance_natively_under_trio(target: Any, request: pytest.FixtureRequest) -> None:
    """validate() run by trio against a saver on a bridge of the same trio run reaches the
    full level (every base and extended capability)."""
    async with open_runtime(target) as rt, open_bridge(rt) as bridge:

        async def factory() -> AsyncGenerator[BaseCheckpointSaver[Any], None]:
            saver = TidelogSaver(bridge)
            yield saver
            await saver.aclose()

        registered = checkpointer_test(name=f"tidelog-trio-{request.node.callspec.id}")(factory)
        _check(await validate(registered))


def test_conformance_through_the_asyncio_bridge(
    target: Any, request: pytest.FixtureRequest
) -> None:
    """validate() run by asyncio.run against a saver whose runtime runs on the bridge's
    own thread reaches the full level."""
    with Bridge.start(target) as bridge:

        async def factory() -> AsyncGenerator[BaseCheckpointSaver[Any], None]:
            saver = TidelogSaver(bridge)
            yield saver
            await saver.aclose()

        registered = checkpointer_test(name=f"tidelog-asyncio-{request.node.callspec.id}")(factory)
        _check(asyncio.run(validate(registered)))
