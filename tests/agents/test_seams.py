"""The agent layer works through its own seams: the History and Checkpointer protocols,
arguments validated once, events encoded once per claimed save, no private sibling imports."""

from __future__ import annotations

import ast
import pathlib
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

import attrs
import pytest

import runtime.agents._checkpoints_runtime as checkpoints_runtime
from runtime import JSON, MemoryStore, Runtime, open_runtime
from runtime.agents import (
    Agent,
    Checkpointer,
    CheckpointOptions,
    Entry,
    FunctionTool,
    ModelResponse,
    RequestedCall,
    RunHead,
    RunInfo,
    Runner,
    RunSnapshot,
    RunStatus,
    ScriptedModel,
    SessionHome,
    checkpoints,
    function_tool,
    history,
    unwrap_group,
)
from stores import prepare_events

AGENTS = pathlib.Path(__file__).resolve().parents[2] / "runtime" / "agents"


@pytest.fixture
async def rt() -> AsyncIterator[Runtime]:
    async with open_runtime(MemoryStore()) as runtime:
        yield runtime


@attrs.define
class Delegating:
    """A Checkpointer of the user's own (no tidelog class) that keeps runs in another one,
    counting its appends."""

    inner: Checkpointer
    appends: int = 0

    async def append(self, run_id: str, entries: Sequence[Entry], head: RunHead) -> None:
        self.appends += 1
        await self.inner.append(run_id, entries, head)

    async def load(self, run_id: str) -> RunSnapshot | None:
        return await self.inner.load(run_id)

    async def delete(self, run_id: str) -> None:
        await self.inner.delete(run_id)

    async def list(self, *, status: RunStatus | None = None) -> list[RunInfo]:
        return await self.inner.list(status=status)

    def claim(self, run_id: str, *, wait: bool = False) -> AbstractAsyncContextManager[None]:
        return self.inner.claim(run_id, wait=wait)

    def home(self, run_id: str) -> SessionHome | None:
        return self.inner.home(run_id)


async def test_a_checkpointer_on_the_runtime_completes_atomically_through_its_home(
    rt: Runtime,
) -> None:
    """The completion commits with the history segment for any checkpointer whose home()
    is on the history's runtime -- not only for the runtime's own class -- and falls back
    to checkpoint-then-history for one off the runtime."""
    on = Delegating(checkpoints(rt))
    agent = Agent("a", "x", model=ScriptedModel([ModelResponse("done")]))
    await Runner.run(
        agent, "hi", runtime=rt, session_id="s", checkpoint=CheckpointOptions(on, "r1")
    )
    assert on.appends == 2  # the start and the turn; the completion went atomically
    snap = await checkpoints(rt).load("r1")
    assert snap is not None
    assert snap.head.status == "completed"
    assert len(await history(rt).segments("s")) == 1

    @attrs.define
    class Off(Delegating):
        def home(self, run_id: str) -> SessionHome | None:  # noqa: ARG002 (the protocol's)
            return None

    off = Off(checkpoints(rt))
    agent = Agent("a", "x", model=ScriptedModel([ModelResponse("done")]))
    await Runner.run(
        agent, "hi", runtime=rt, session_id="s", checkpoint=CheckpointOptions(off, "r2")
    )
    assert off.appends == 3  # the start, the turn, the completed checkpoint; then history
    assert len(await history(rt).segments("s")) == 2


async def test_tool_arguments_are_validated_once_per_call(rt: Runtime) -> None:
    """The loop validates a call's arguments once and the body gets what it returned."""
    seen: list[dict[str, JSON]] = []

    @function_tool
    async def book(room: int) -> str:
        """Book a room."""
        return f"room {room} ({type(room).__name__})"

    def counting(arguments: dict[str, JSON]) -> dict[str, Any]:
        seen.append(arguments)
        return book.validator(arguments)

    tool: FunctionTool = attrs.evolve(book, validator=counting)
    model = ScriptedModel(
        [
            ModelResponse(tool_calls=(RequestedCall("book", {"room": "12"}, "c1"),)),
            ModelResponse("booked"),
        ]
    )
    result = await Runner.run(Agent("a", "x", model=model, tools=(tool,)), "go", runtime=rt)
    assert seen == [{"room": "12"}]
    outputs = [getattr(e, "output", None) for e in result.entries]
    assert "room 12 (int)" in outputs


async def test_a_claimed_save_encodes_its_events_once(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A save through the run's claim leaves the encoding to the writer (once); a save
    without a claim checks its events before the open that may create the run session."""
    calls: list[int] = []
    real = prepare_events

    def counting(events: Any) -> Any:
        calls.append(len(events))
        return real(events)

    monkeypatch.setattr(checkpoints_runtime, "prepare_events", counting)
    cp = checkpoints(rt)
    async with cp.claim("r"):
        await cp.append("r", [], RunHead("a"))
    assert calls == []
    await cp.append("r", [], RunHead("a", turns=1))
    assert calls == [1]
    snap = await cp.load("r")
    assert snap is not None
    assert snap.head.turns == 1


def test_agent_modules_import_no_private_sibling_names() -> None:
    """No module of the agent layer imports an underscore name from a sibling module: what
    siblings share is a plain name of a package-internal module."""
    offenders = []
    for path in sorted(AGENTS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                offenders += [
                    f"{path.name}: {a.name}" for a in node.names if a.name.startswith("_")
                ]
    assert offenders == []


def test_agent_modules_test_no_concrete_backend_class() -> None:
    """The loop and the completion step test no concrete checkpointer or history class."""
    concrete = {"RuntimeCheckpointer", "MemoryCheckpointer", "RuntimeHistory", "MemoryHistory"}
    for name in ("_loop.py", "_completion.py", "_runner.py"):
        tree = ast.parse((AGENTS / name).read_text())
        used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        assert not used & concrete, name


def test_unwrap_group_returns_the_one_error_or_the_group() -> None:
    """A nested group of one error unwraps to it; a group of several stays a group."""
    error = KeyError("k")
    assert unwrap_group(error) is error
    assert unwrap_group(ExceptionGroup("a", [ExceptionGroup("b", [error])])) is error
    several = ExceptionGroup("a", [error, ValueError("v")])
    assert unwrap_group(several) is several
