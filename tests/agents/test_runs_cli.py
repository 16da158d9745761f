"""``tidelog runs``: the run listing, and approve / reject / stop from the command line."""

from __future__ import annotations

import json
import pathlib

import pytest
import trio

from runtime import open_runtime
from runtime.agents import (
    Agent,
    CheckpointOptions,
    ModelResponse,
    RequestedCall,
    Runner,
    ScriptedModel,
    checkpoints,
    function_tool,
)
from runtime.cli import main


@function_tool(needs_approval=True)
async def pay(amount: int) -> str:
    """Pay an amount."""
    return f"paid {amount}"


def _seed(db: pathlib.Path) -> None:
    """Two runs: ``waiting`` awaits approval of call c1, ``done`` completed."""

    async def seed() -> None:
        async with open_runtime(db) as rt:
            for run_id, reply in (
                ("waiting", ModelResponse(tool_calls=(RequestedCall("pay", {"amount": 4}, "c1"),))),
                ("done", ModelResponse("hello")),
            ):
                agent = Agent("clerk", "x", model=ScriptedModel([reply]), tools=(pay,))
                options = CheckpointOptions(checkpoints(rt), run_id)
                await Runner.run(agent, "go", runtime=rt, session_id="chat", checkpoint=options)

    trio.run(seed)


def test_runs_lists_status_and_pending_approvals(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The table and the JSON forms name each run's status and its pending calls."""
    db = tmp_path / "app.db"
    _seed(db)
    assert main(["runs", str(db)]) == 0
    text = capsys.readouterr().out
    assert "awaiting_approval" in text
    assert "c1:pay" in text
    assert main(["runs", str(db), "--json"]) == 0
    runs = {r["run_id"]: r for r in json.loads(capsys.readouterr().out)["runs"]}
    assert runs["waiting"]["status"] == "awaiting_approval"
    assert runs["waiting"]["pending_approvals"] == [
        {"call_id": "c1", "name": "pay", "arguments": {"amount": 4}}
    ]
    assert runs["done"]["status"] == "completed"
    assert main(["runs", str(db), "--jsonl", "--status", "completed"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(line)["run_id"] for line in lines] == ["done"]


def test_runs_approve_reject_and_stop(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """approve records the decision once (a second one is refused, naming the first);
    stop of a finished run says so and writes nothing; bad operands are usage errors."""
    db = tmp_path / "app.db"
    _seed(db)
    assert main(["runs", "approve", str(db), "waiting", "c1", "--by", "ada"]) == 0
    assert "approved call c1 of run waiting" in capsys.readouterr().out
    assert main(["runs", "reject", str(db), "waiting", "c1", "--by", "bob"]) != 0
    assert "already approved by 'ada'" in capsys.readouterr().err
    assert main(["runs", "stop", str(db), "done"]) == 0
    assert "is completed" in capsys.readouterr().out
    assert main(["runs", "approve", str(db), "waiting"]) != 0
    assert "expected DB RUN CALL" in capsys.readouterr().err
    assert main(["runs", "approve", str(db), "nope", "c1"]) != 0
    assert "nope" in capsys.readouterr().err
