"""Real LangGraph graphs on the tidelog saver: a parallel branch failing once, an
interrupt resumed with Command(resume=...), history and update_state forks, copy_thread."""

from __future__ import annotations

import asyncio
import pathlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import trio
from graphs import asking, chain, fan_out
from langgraph.types import Command

from runtime import InvalidArgumentError, open_runtime
from runtime.integrations import open_bridge
from runtime.integrations.langgraph import TidelogSaver


@pytest.fixture
def saver(tmp_path: pathlib.Path) -> Iterator[TidelogSaver]:
    """A saver on a SQLite file, its runtime on a bridge thread."""
    with TidelogSaver.from_target(tmp_path / "graphs.db") as made:
        yield made


def config(thread: str) -> Any:
    return {"configurable": {"thread_id": thread}}


def until_kept(saver: TidelogSaver, thread: str, node: str) -> Callable[[], None]:
    """A ``before_failing`` hook: wait (in the failing node's worker thread, for at most
    10 s) until the saver holds ``node``'s write as a pending write of ``thread``, so the
    failure cancels no branch that is still running, however loaded the machine."""

    def wait() -> None:
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline:
            found = saver.get_tuple(config(thread))
            if found is not None and any(
                channel == "log" and value == [node]
                for _, channel, value in found.pending_writes or ()
            ):
                return
            time.sleep(0.005)  # a worker thread waiting on another one's commit
        raise AssertionError(f"{node}'s write was never kept")

    return wait


def test_failed_parallel_branch_reruns_alone(saver: TidelogSaver) -> None:
    """A parallel branch that fails once: on resume only that node runs again; its
    sibling's result comes from the pending writes the saver kept."""
    calls: list[str] = []
    graph = fan_out(
        calls.append, fail_once={"right"}, before_failing=until_kept(saver, "t", "left")
    ).compile(checkpointer=saver)
    with pytest.raises(RuntimeError, match="right failed once"):
        graph.invoke({"log": []}, config("t"))
    assert sorted(calls) == ["left", "right", "start"]
    pending = saver.get_tuple(config("t"))
    assert pending is not None
    assert pending.pending_writes
    assert {channel for _, channel, _ in pending.pending_writes} >= {"log", "__error__"}
    calls.clear()
    final = graph.invoke(None, config("t"))
    assert calls == ["right", "join"]
    assert sorted(final["log"]) == ["join", "left", "right", "start"]


def test_failed_parallel_branch_reruns_alone_async(saver: TidelogSaver) -> None:
    """The same through ainvoke on an asyncio loop."""
    calls: list[str] = []
    graph = fan_out(
        calls.append, fail_once={"left"}, before_failing=until_kept(saver, "a", "right")
    ).compile(checkpointer=saver)

    async def main() -> dict[str, Any]:
        with pytest.raises(RuntimeError, match="left failed once"):
            await graph.ainvoke({"log": []}, config("a"))
        calls.clear()
        return await graph.ainvoke(None, config("a"))

    final = asyncio.run(main())
    assert calls == ["left", "join"]
    assert sorted(final["log"]) == ["join", "left", "right", "start"]


def test_interrupt_resumed_with_command(saver: TidelogSaver) -> None:
    """interrupt() stops the run with the question saved; Command(resume=...) continues
    it, with the node before the interrupt not run again."""
    calls: list[str] = []
    graph = asking(calls.append).compile(checkpointer=saver)
    first = graph.invoke({"log": []}, config("i"))
    assert first["__interrupt__"][0].value == {"question": "name?"}
    state = graph.get_state(config("i"))
    assert state.next == ("ask",)
    final = graph.invoke(Command(resume="Ada"), config("i"))
    assert final["answer"] == "Ada"
    assert final["log"] == ["start", "ask", "done"]
    assert calls == ["start", "ask", "ask", "done"]  # ask runs again up to its interrupt


def test_history_and_update_state_fork(saver: TidelogSaver) -> None:
    """get_state_history lists every checkpoint newest first; update_state on an old one
    forks the thread from there, and a run continues the fork, leaving the old branch in
    the history."""
    calls: list[str] = []
    graph = chain(calls.append).compile(checkpointer=saver)
    graph.invoke({"log": []}, config("h"))
    history = list(graph.get_state_history(config("h")))
    assert [snapshot.next for snapshot in history] == [
        (),
        ("three",),
        ("two",),
        ("one",),
        ("__start__",),
    ]
    after_one = history[2]  # next is "two": "one" has run
    assert after_one.values["log"] == ["one"]
    forked = graph.update_state(after_one.config, {"log": ["edited"]})
    calls.clear()
    final = graph.invoke(None, forked)
    assert calls == ["two", "three"]
    assert final["log"] == ["one", "edited", "two", "three"]
    newer = list(graph.get_state_history(config("h")))
    assert len(newer) == len(history) + 3  # the update and two steps, the old branch kept
    assert graph.get_state(config("h")).values["log"] == final["log"]


def test_copy_thread_is_a_fork_sharing_the_prefix(saver: TidelogSaver) -> None:
    """copy_thread makes the target a tidelog fork of the source (the same checkpoints,
    parent recorded); each thread then goes on alone."""
    calls: list[str] = []
    graph = asking(calls.append).compile(checkpointer=saver)
    graph.invoke({"log": []}, config("src"))
    saver.copy_thread("src", "dst")
    source_ids = [t.checkpoint["id"] for t in saver.list(config("src"))]
    assert [t.checkpoint["id"] for t in saver.list(config("dst"))] == source_ids

    async def info() -> Any:
        async def stat() -> Any:
            return await saver.bridge.runtime.stat(saver.session_id("dst"))

        return await saver.bridge.call(stat)

    dst_info = asyncio.run(info())
    assert dst_info is not None
    assert dst_info.parent is not None
    assert dst_info.parent[0] == saver.session_id("src")
    done_dst = graph.invoke(Command(resume="dst"), config("dst"))
    done_src = graph.invoke(Command(resume="src"), config("src"))
    assert (done_dst["answer"], done_src["answer"]) == ("dst", "src")
    assert len(list(saver.list(config("src")))) == len(source_ids) + 2


def test_state_typed_dict_round_trips(saver: TidelogSaver) -> None:
    """Channel values survive the serde round trip through the tidelog events."""
    graph = chain(lambda _: None).compile(checkpointer=saver)
    result = graph.invoke({"log": ["seed"]}, config("v"))
    assert result["log"] == ["seed", "one", "two", "three"]
    assert graph.get_state(config("v")).values == result


async def test_trio_program_runs_graphs_in_threads(tmp_path: pathlib.Path) -> None:
    """In a trio program the saver's async methods run natively, a graph's sync invoke
    runs from trio.to_thread, and a sync call on the trio thread itself is refused."""
    async with open_runtime(tmp_path / "native.db") as rt, open_bridge(rt) as bridge:
        saver = TidelogSaver(bridge)
        calls: list[str] = []
        graph = chain(calls.append).compile(checkpointer=saver)
        final = await trio.to_thread.run_sync(graph.invoke, {"log": []}, config("n"))
        assert final["log"] == ["one", "two", "three"]
        latest = await saver.aget_tuple(config("n"))
        assert latest is not None
        assert latest.checkpoint["channel_values"]["log"] == final["log"]
        with pytest.raises(InvalidArgumentError, match="would block it"):
            saver.get_tuple(config("n"))
