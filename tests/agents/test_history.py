"""Conversation history: one suite for MemoryHistory and RuntimeHistory (memory, SQLite)."""

from __future__ import annotations

import functools
import pathlib
from collections.abc import AsyncIterator

import pytest
import trio
from helpers import runtime_target

from runtime import (
    JSON,
    InvalidArgumentError,
    Runtime,
    SnapshotExpiredError,
    open_runtime,
)
from runtime.agents import (
    AssistantMessage,
    Checkpointer,
    MemoryCheckpointer,
    MemoryHistory,
    RunHead,
    RuntimeHistory,
    SidecarEntry,
    ToolCall,
    ToolResult,
    UserMessage,
    checkpoints,
    history,
)

#: A history, its checkpointer and its runtime (None for the in-memory history).
Setup = tuple[MemoryHistory | RuntimeHistory, Checkpointer, Runtime | None]


@pytest.fixture(params=["memory", "runtime-memory", "runtime-sqlite", "runtime-postgres"])
async def setup(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> AsyncIterator[Setup]:
    """A history with its checkpointer (and runtime, if any), per implementation."""
    if request.param == "memory":
        cp = MemoryCheckpointer()
        yield MemoryHistory(checkpointer=cp), cp, None
        return
    target = runtime_target(request.param.removeprefix("runtime-"), tmp_path, request)
    async with open_runtime(target) as rt:
        yield history(rt), checkpoints(rt), rt


def run(n: int, *, big: int = 0) -> list[UserMessage | AssistantMessage | ToolCall | ToolResult]:
    """A run: user, tool call, its result (``big`` characters long), assistant."""
    return [
        UserMessage(f"question {n}"),
        ToolCall(f"c{n}", "search", {"q": n}),
        ToolResult(f"c{n}", ("r" * big) if big else f"result {n}"),
        AssistantMessage(f"answer {n}"),
    ]


async def test_append_then_segments_and_load(setup: Setup) -> None:
    """Appended runs come back as segments in order, and flat through load()."""
    history = setup[0]
    assert await history.append("s", run(1), run_id="r1", meta={"k": 1}) == "r1"
    assert await history.append("s", run(2), run_id="r2") == "r2"
    segments = await history.segments("s")
    assert [(s.run_id, s.meta) for s in segments] == [("r1", {"k": 1}), ("r2", None)]
    assert list(segments[0].entries) == run(1)
    assert await history.load("s") == run(1) + run(2)
    assert await history.load("empty") == []


async def test_append_is_idempotent_per_run_id(setup: Setup) -> None:
    """A second append with a stored run_id is a no-op returning the id; first write wins."""
    history = setup[0]
    await history.append("s", run(1), run_id="r1", meta={"v": 1})
    assert await history.append("s", run(2), run_id="r1", meta={"v": 2}) == "r1"
    segments = await history.segments("s")
    assert len(segments) == 1
    assert segments[0].meta == {"v": 1}
    assert list(segments[0].entries) == run(1)


async def test_same_run_id_in_two_sessions(setup: Setup) -> None:
    """The same run_id in two sessions stores both."""
    history = setup[0]
    await history.append("a", run(1), run_id="r")
    await history.append("b", run(2), run_id="r")
    assert await history.load("a") == run(1)
    assert await history.load("b") == run(2)


async def test_generated_run_ids_are_unique(setup: Setup) -> None:
    """Without a run_id a fresh one is generated per append."""
    history = setup[0]
    a = await history.append("s", run(1))
    b = await history.append("s", run(1))
    assert a != b
    assert len(await history.segments("s")) == 2


async def test_no_aliasing(setup: Setup) -> None:
    """Mutating the caller's lists/dicts after append (or the loaded ones) changes nothing."""
    history = setup[0]
    entries = run(1)
    nested: dict[str, JSON] = {"x": 1}
    meta: dict[str, JSON] = {"nested": nested}
    await history.append("s", entries, run_id="r", meta=meta)
    entries.append(UserMessage("late"))
    nested["x"] = 2
    segment = (await history.segments("s"))[0]
    assert len(segment.entries) == 4
    assert segment.meta == {"nested": {"x": 1}}
    assert segment.meta is not None
    segment.meta["nested"] = "changed"
    assert (await history.segments("s"))[0].meta == {"nested": {"x": 1}}


async def test_concurrent_appends_of_one_run_store_it_once(setup: Setup) -> None:
    """Concurrent appends of the same run_id from several tasks store it once."""
    history = setup[0]
    async with trio.open_nursery() as nursery:
        for n in range(5):
            nursery.start_soon(functools.partial(history.append, "s", run(n), run_id="r"))
    assert len(await history.segments("s")) == 1


async def test_bad_input_refused_and_nothing_changed(setup: Setup) -> None:
    """Wrong types, empty run ids and reserved kinds raise, and nothing is stored."""
    history = setup[0]
    with pytest.raises(InvalidArgumentError):
        await history.append("s", ["not an entry"])  # type: ignore[list-item]  # bad input under test
    with pytest.raises(InvalidArgumentError):
        await history.append("s", run(1), run_id="")
    with pytest.raises(InvalidArgumentError):
        await history.append("s", run(1), meta=["x"])  # type: ignore[arg-type]  # bad input under test
    with pytest.raises(InvalidArgumentError):
        await history.append("s", [SidecarEntry("tidelog.segment", {})])
    with pytest.raises(InvalidArgumentError, match="keep_entries"):
        await history.rewind("s", -1)
    with pytest.raises(InvalidArgumentError, match="keep_chars"):
        await history.trim_tool_results("s", keep_chars=-1)
    with pytest.raises(InvalidArgumentError, match="keep_runs"):
        await history.trim_tool_results("s", keep_runs=-2)
    assert await history.segments("s") == []


async def test_clear(setup: Setup) -> None:
    """clear() removes every segment; later appends start afresh."""
    history = setup[0]
    await history.append("s", run(1), run_id="r1")
    await history.clear("s")
    assert await history.load("s") == []
    await history.clear("never")
    await history.append("s", run(2), run_id="r1")
    assert await history.load("s") == run(2)


async def test_trim_tool_results(setup: Setup) -> None:
    """Old tool outputs keep a prefix plus an honest marker; the last runs are untouched;
    a second trim does nothing; the full output is recallable."""
    history = setup[0]
    await history.append("s", run(1, big=2000), run_id="r1")
    await history.append("s", run(2, big=2000), run_id="r2")
    await history.append("s", run(3, big=50), run_id="r3")
    assert await history.trim_tool_results("s", keep_chars=100, keep_runs=1) == 2
    entries = await history.load("s")
    results = [e for e in entries if isinstance(e, ToolResult)]
    assert results[0].output.startswith("r" * 100)
    assert "trimmed 1900 of 2000 characters of tool result c1" in results[0].output
    assert len(results[0].output) < 2000
    assert results[2].output == "r" * 50
    assert [type(e) for e in entries] == [type(e) for e in run(1) + run(2) + run(3)]
    assert [e.call_id for e in results] == ["c1", "c2", "c3"]
    assert await history.trim_tool_results("s", keep_chars=100, keep_runs=1) == 0
    assert await history.recall_tool_result("s", "c1") == "r" * 2000
    assert await history.recall_tool_result("s", "c3") is None


async def test_trim_leaves_results_that_would_not_shrink(setup: Setup) -> None:
    """A result barely longer than keep_chars is left alone (the marker costs more)."""
    history = setup[0]
    await history.append("s", run(1, big=120), run_id="r1")
    await history.append("s", run(2), run_id="r2")
    assert await history.trim_tool_results("s", keep_chars=100, keep_runs=1) == 0
    assert await history.load("s") == run(1, big=120) + run(2)


async def test_rewind_cuts_inside_a_run(setup: Setup) -> None:
    """Rewind into a run truncates it, drops its dangling tool call, clears its meta, and
    deletes later runs whole (and the rewound runs' checkpoints)."""
    history, cp, _ = setup
    await history.append("s", run(1), run_id="r1", meta={"m": 1})
    await history.append("s", run(2), run_id="r2", meta={"m": 2})
    await history.append("s", run(3), run_id="r3")
    for r in ("r1", "r2", "r3"):
        await cp.append(r, [], RunHead("agent", status="completed", session_id="s"))
    removed = await history.rewind("s", 6)  # run 2: user + tool call kept, call dangles
    assert removed == 7
    segments = await history.segments("s")
    assert [s.run_id for s in segments] == ["r1", "r2"]
    assert segments[0].meta == {"m": 1}
    assert segments[1].meta is None
    assert list(segments[1].entries) == [UserMessage("question 2")]
    assert await cp.load("r1") is not None
    assert await cp.load("r2") is None
    assert await cp.load("r3") is None


async def test_rewind_edges(setup: Setup) -> None:
    """Rewind at or past the end is a no-op returning 0; 0 empties; at a boundary drops
    later runs whole."""
    history = setup[0]
    await history.append("s", run(1), run_id="r1")
    await history.append("s", run(2), run_id="r2")
    assert await history.rewind("s", 8) == 0
    assert await history.rewind("s", 100) == 0
    assert await history.rewind("s", 4) == 4
    assert await history.load("s") == run(1)
    assert await history.rewind("s", 0) == 4
    assert await history.load("s") == []
    assert await history.rewind("missing", 0) == 0


async def test_rewind_expires_snapshots(tmp_path: pathlib.Path) -> None:
    """A snapshot covering rewound events expires instead of mixing versions."""
    async with open_runtime(tmp_path / "db") as rt:
        await history(rt).append("s", run(1), run_id="r1")
        await history(rt).append("s", run(2), run_id="r2")
        async with rt.snapshot("s") as snap:
            await history(rt).rewind("s", 4)
            with pytest.raises(SnapshotExpiredError):
                await snap.read()


async def test_history_is_durable_across_runtimes(tmp_path: pathlib.Path) -> None:
    """Segments written by one runtime are read back by the next (SQLite)."""
    async with open_runtime(tmp_path / "db") as rt:
        await history(rt).append("s", run(1), run_id="r1", meta={"x": 1})
    async with open_runtime(tmp_path / "db") as rt:
        assert await history(rt).load("s") == run(1)
        assert await history(rt).append("s", run(9), run_id="r1") == "r1"
        assert len(await history(rt).segments("s")) == 1


async def test_trim_without_archive_loses_output(tmp_path: pathlib.Path) -> None:
    """With the archive off, a trimmed output cannot be recalled (as documented)."""
    async with open_runtime(tmp_path / "db") as rt:
        history = RuntimeHistory(rt, archive=False)
        await history.append("s", run(1, big=3000), run_id="r1")
        await history.append("s", run(2), run_id="r2")
        assert await history.trim_tool_results("s", keep_chars=10) == 1
        assert await history.recall_tool_result("s", "c1") is None
