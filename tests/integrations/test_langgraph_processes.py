"""LangGraph workers in real processes on one SQLite file: a second worker on a thread
is refused while the first holds it; the first, SIGKILLed mid-step, is resumed by
another process that re-runs only the unfinished step."""

from __future__ import annotations

import pathlib
import subprocess
import sys
from typing import Any

import pytest
from graphs import chain, file_recorder, recorded

from runtime import SessionOwnedError
from runtime.integrations.langgraph import TidelogSaver

WORKER = pathlib.Path(__file__).with_name("graph_worker.py")


@pytest.mark.slow
def test_second_worker_refused_and_killed_worker_resumed(tmp_path: pathlib.Path) -> None:
    """While worker A (a subprocess) is inside step ``two``, holding the thread, this
    process's claim of the same thread is refused with SessionOwnedError; A is
    SIGKILLed there; this process then resumes the thread: ``one`` is not run again,
    ``two`` is, and the history has each step's checkpoint exactly once."""
    db, calls = tmp_path / "graphs.db", tmp_path / "calls"
    config: Any = {"configurable": {"thread_id": "t"}}
    first = subprocess.Popen(
        [sys.executable, str(WORKER), str(db), "t", str(calls), "block"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    with TidelogSaver.from_target(db) as saver:
        try:
            assert first.stdout is not None
            assert first.stdout.readline().strip() == "in-two"
            with pytest.raises(SessionOwnedError):
                saver.acquire("t")
            assert recorded(calls) == ["one", "two"]
        finally:
            first.kill()  # SIGKILL, mid-step
            first.wait()
            first.stdin.close()  # type: ignore[union-attr]
            first.stdout.close()  # type: ignore[union-attr]
        graph = chain(file_recorder(calls)).compile(checkpointer=saver)
        assert graph.invoke(None, config)["log"] == ["one", "two", "three"]
        assert recorded(calls) == ["one", "two", "two", "three"]
        steps = [t.metadata["step"] for t in saver.list(config)]
    assert steps == [3, 2, 1, 0, -1]
