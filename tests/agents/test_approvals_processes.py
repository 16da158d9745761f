"""Approvals across real processes: a host runs until the run awaits approval and exits
(or is killed with SIGKILL), another process decides, a third re-issues the run, which
acts on the decision exactly once -- on SQLite and on PostgreSQL."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
from typing import Any

import pytest
from helpers import runtime_target

WORKER = pathlib.Path(__file__).with_name("approval_worker.py")


def _worker(*args: str) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, str(WORKER), *args], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def _effects(workdir: pathlib.Path) -> list[str]:
    log = workdir / "effects.log"
    return log.read_text().splitlines() if log.exists() else []


@pytest.fixture(params=["sqlite", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> str:
    """Where the processes share their store."""
    return str(runtime_target(request.param, tmp_path, request))


def test_approve_in_one_process_then_resume_in_another_runs_the_call_once(
    target: str, tmp_path: pathlib.Path
) -> None:
    """Host awaits and exits; a second process approves; a third re-issues the run: the
    approved call runs exactly once and the run finishes."""
    first = _worker("host", target, str(tmp_path), "r")
    assert first == {
        "status": "awaiting_approval",
        "pending": ["c1"],
        "output": None,
        "model_calls": 1,
    }
    assert _worker("decide", target, "r", "c1", "approve", "ada") == {
        "decided": True,
        "approved": True,
        "by": "ada",
    }
    done = _worker("host", target, str(tmp_path), "r")
    assert done["status"] == "completed"
    assert done["output"] == "done: paid 7"
    assert _effects(tmp_path) == ["pay 7"]
    again = _worker("host", target, str(tmp_path), "r")  # a replay: nothing runs again
    assert again["output"] == "done: paid 7"
    assert again["model_calls"] == 0
    assert _effects(tmp_path) == ["pay 7"]


def test_reject_in_another_process_reaches_the_model(tmp_path: pathlib.Path) -> None:
    """A rejection from another process: the resumed run never runs the call and the
    model answers on the rejection."""
    target = str(tmp_path / "approvals.db")
    _worker("host", target, str(tmp_path), "r")
    assert _worker("decide", target, "r", "c1", "reject", "bob")["decided"]
    done = _worker("host", target, str(tmp_path), "r")
    assert done["status"] == "completed"
    assert "REJECTED" in done["output"]
    assert "bob says no" in done["output"]
    assert _effects(tmp_path) == []


def test_two_deciding_processes_race_and_one_decision_is_written(
    tmp_path: pathlib.Path,
) -> None:
    """Two processes approve and reject at the same moment: one decides, the other is
    told how; the resumed run acts on the one decision."""
    target = str(tmp_path / "approvals.db")
    _worker("host", target, str(tmp_path), "r")
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), "decide", target, "r", "c1", verdict, by],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for verdict, by in (("approve", "ada"), ("reject", "bob"))
    ]
    outs = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 0, stderr
        outs.append(json.loads(stdout.strip().splitlines()[-1]))
    assert sorted(o["decided"] for o in outs) == [False, True]
    winner = next(o for o in outs if o["decided"])
    loser = next(o for o in outs if not o["decided"])
    assert (loser["approved"], loser["by"]) == (winner["approved"], winner["by"])
    done = _worker("host", target, str(tmp_path), "r")
    assert done["status"] == "completed"
    assert _effects(tmp_path) == (["pay 7"] if winner["approved"] else [])


def test_a_host_killed_while_the_run_awaits_approval_loses_nothing(
    tmp_path: pathlib.Path,
) -> None:
    """SIGKILL of the host while the run awaits approval: the request is in the log, the
    decision lands from another process, and the resume runs the call once."""
    target = str(tmp_path / "approvals.db")
    host = subprocess.Popen(
        [sys.executable, str(WORKER), "host", target, str(tmp_path), "r", "hang"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert host.stdout is not None
    line = host.stdout.readline()
    assert json.loads(line)["status"] == "awaiting_approval"
    os.kill(host.pid, signal.SIGKILL)
    host.wait(timeout=60)
    host.stdout.close()
    assert host.stderr is not None
    host.stderr.close()
    assert host.returncode == -signal.SIGKILL
    assert _worker("decide", target, "r", "c1", "approve", "ada")["decided"]
    done = _worker("host", target, str(tmp_path), "r")
    assert done["output"] == "done: paid 7"
    assert _effects(tmp_path) == ["pay 7"]


def test_a_waiting_host_wakes_when_another_process_decides(tmp_path: pathlib.Path) -> None:
    """A host waiting for the decision (wait_for_decisions) continues the run as soon as
    another process approves, without being re-issued."""
    target = str(tmp_path / "approvals.db")
    host = subprocess.Popen(
        [sys.executable, str(WORKER), "host", target, str(tmp_path), "r", "wait"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert host.stdout is not None
        assert host.stdout.readline().strip() == "awaiting"
        assert _worker("decide", target, "r", "c1", "approve", "ada")["decided"]
        out, err = host.communicate(timeout=60)
        assert host.returncode == 0, err
    finally:
        if host.poll() is None:
            host.kill()
            host.wait()
    done = json.loads(out.strip().splitlines()[-1])
    assert done["status"] == "completed"
    assert done["output"] == "done: paid 7"
    assert _effects(tmp_path) == ["pay 7"]
