"""Crash recovery with real SIGKILLs at every barrier of a scripted run.

A host process runs a scripted agent run (two tools: ``note`` is idempotent, ``charge``
is not) and kills itself at one barrier; a new host resumes; a third one must replay.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
from collections import Counter

import pytest

from runtime import SqliteStore
from runtime.agents import TOOL_OUTCOME_UNKNOWN, ToolCall, ToolResult
from runtime.agents._history import SEGMENT_KIND
from runtime.agents._transcript import entry_from_stored

WORKER = pathlib.Path(__file__).with_name("recovery_worker.py")
ROOT = pathlib.Path(__file__).resolve().parents[2]


def worker(
    db: pathlib.Path, workdir: pathlib.Path, mode: str, crash_at: str = ""
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, str(WORKER), str(db), str(workdir), mode, crash_at],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )


CRASH_POINTS = [
    "before_model_0",  # first model request, after the input was flushed
    "after_model_turn",  # the tool calls are checkpointed, no tool has started
    "inside_note_c1",  # an idempotent tool dies mid-body
    "inside_charge",  # a non-idempotent tool dies after its side effect
    "after_tool_result",  # the first result is checkpointed
    "before_model_2",  # second model request
    "inside_note_c3",  # the second turn's tool dies
    "between_completion_and_history",  # checkpoint completed, history not yet appended
]


@pytest.mark.slow
@pytest.mark.parametrize("crash_at", CRASH_POINTS)
def test_kill_at_barrier_then_resume_then_replay(tmp_path: pathlib.Path, crash_at: str) -> None:
    """SIGKILL at a barrier, resume, replay: no completed call re-runs, a started
    non-idempotent call is reported unknown, every call has exactly one result, and a
    second resume is a replay that never calls the model."""
    db = tmp_path / "host.db"
    crashed = worker(db, tmp_path, "run", crash_at)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    before = (
        Counter((tmp_path / "executions.log").read_text().split("\n"))
        if (tmp_path / "executions.log").exists()
        else Counter()
    )

    resumed = worker(db, tmp_path, "resume")
    assert resumed.returncode == 0, resumed.stderr
    summary = json.loads(resumed.stdout.strip().splitlines()[-1])
    assert summary["output"] == "done"

    executions = Counter((tmp_path / "executions.log").read_text().split("\n"))
    executions.pop("", None)
    # The non-idempotent charge never runs twice; it ran once unless the crash left its
    # outcome unknown (its tool_started record was durable, its result was not).
    assert executions["charge 5"] <= 1
    if summary["how"].get("c2") != "unknown":
        assert executions["charge 5"] == 1
    if crash_at == "inside_charge":
        assert summary["how"]["c2"] == "unknown"
    if crash_at == "inside_note_c1":
        assert summary["how"]["c1"] == "re-ran"
        assert executions["note c1"] == 2
    # A call the resume did not have to settle (its result was recorded before the
    # crash) never ran again.
    for line, count in before.items():
        if not line:
            continue
        call_id = "c2" if line.startswith("charge") else line.split()[1]
        if call_id not in summary["how"]:
            assert executions[line] == count, line

    store = SqliteStore(db)
    try:
        events = [e for e in store.read("conversation") if e.kind != SEGMENT_KIND]
        assert sum(1 for e in store.read("conversation") if e.kind == SEGMENT_KIND) == 1
    finally:
        store.close()
    entries = [entry_from_stored(e) for e in events]
    calls = [e.call_id for e in entries if isinstance(e, ToolCall)]
    results = Counter(e.call_id for e in entries if isinstance(e, ToolResult))
    assert sorted(calls) == ["c1", "c2", "c3"]
    assert all(results[c] == 1 for c in calls), results
    unknown = [e for e in entries if isinstance(e, ToolResult) and TOOL_OUTCOME_UNKNOWN in e.output]
    assert [e.call_id for e in unknown] == (["c2"] if summary["how"].get("c2") == "unknown" else [])
    if crash_at in ("inside_charge", "inside_note_c1"):  # died while c2 was started
        assert summary["how"]["c2"] == "unknown"
    elif crash_at != "after_tool_result":
        assert "unknown" not in summary["how"].values()

    replay = worker(db, tmp_path, "replay")
    assert replay.returncode == 0, replay.stderr
    again = json.loads(replay.stdout.strip().splitlines()[-1])
    assert again == {"output": "done", "finish_reason": None, "model_calls": 0, "how": {}}
