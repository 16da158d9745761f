"""Typed output per run: the run call's output_type, typed replay, None, unstorable."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
from collections.abc import AsyncIterator

import pydantic
import pytest
import trio
from helpers import runtime_target

from runtime import MemoryStore, Runtime, open_runtime
from runtime.agents import (
    Agent,
    CheckpointOptions,
    ModelResponse,
    OutputNotStorableError,
    Runner,
    ScriptedModel,
    checkpoints,
)

WORKER = pathlib.Path(__file__).with_name("typed_output_worker.py")
ROOT = pathlib.Path(__file__).resolve().parents[2]


class Verdict(pydantic.BaseModel):
    ok: bool
    score: int


class Reading(pydantic.BaseModel):
    value: float


@pytest.fixture(params=["memory", "sqlite", "jsonl", "postgres"])
async def rt(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> AsyncIterator[Runtime]:
    async with open_runtime(runtime_target(request.param, tmp_path, request)) as runtime:
        yield runtime


def _agent(*answers: str, output_type: object = None) -> Agent:
    return Agent(
        "judge",
        "judge",
        model=ScriptedModel([ModelResponse(a) for a in answers]),
        output_type=output_type,
    )


async def test_run_output_type_overrides_and_replays_typed(rt: Runtime) -> None:
    """The run call's type wins over the agent's; the replay (no model call) returns the
    model instance again, from the stored JSON."""
    agent = _agent('{"ok": true, "score": 3}', output_type=int)
    options = CheckpointOptions(checkpoints(rt), "r1")
    first = await Runner.run(agent, "go", runtime=rt, checkpoint=options, output_type=Verdict)
    assert first.final_output == Verdict(ok=True, score=3)
    assert first.output == {"ok": True, "score": 3}
    replayed = await Runner.run(_agent(), "go", runtime=rt, checkpoint=options, output_type=Verdict)
    assert isinstance(replayed.final_output, Verdict)
    assert replayed.final_output == first.final_output


async def test_none_output_replays_as_none(rt: Runtime) -> None:
    """A None value is a completed output: it replays as None, status completed."""
    agent = _agent("null")
    options = CheckpointOptions(checkpoints(rt), "r1")
    first = await Runner.run(
        agent, "go", runtime=rt, checkpoint=options, output_type=Verdict | None
    )
    assert first.status == "completed"
    assert first.final_output is None
    snapshot = await checkpoints(rt).load("r1")
    assert snapshot is not None
    assert snapshot.head.status == "completed"
    replayed = await Runner.run(
        _agent(), "go", runtime=rt, checkpoint=options, output_type=Verdict | None
    )
    assert replayed.status == "completed"
    assert replayed.final_output is None


async def test_unstorable_output_fails_and_replay_refuses(rt: Runtime) -> None:
    """NaN validates as a float but is not JSON: the run fails with
    OutputNotStorableError, its head names it, and re-issuing it refuses the same way
    without asking the model."""
    agent = _agent('{"value": "NaN"}')
    options = CheckpointOptions(checkpoints(rt), "r1")
    with pytest.raises(OutputNotStorableError, match="cannot be stored"):
        await Runner.run(agent, "go", runtime=rt, checkpoint=options, output_type=Reading)
    snapshot = await checkpoints(rt).load("r1")
    assert snapshot is not None
    assert snapshot.head.status == "failed"
    assert snapshot.head.error is not None
    assert snapshot.head.error["type"] == "OutputNotStorableError"
    assert "not JSON" in str(snapshot.head.error["message"])
    again = _agent('{"value": 1.0}')
    with pytest.raises(OutputNotStorableError, match="not JSON"):
        await Runner.run(again, "go", runtime=rt, checkpoint=options, output_type=Reading)
    model = again.model
    assert isinstance(model, ScriptedModel)
    assert model.requests == []


async def test_unstorable_output_without_checkpoint_writes_no_segment() -> None:
    """Without a checkpoint the run still fails before its history segment is written."""
    async with open_runtime(MemoryStore()) as rt:
        with pytest.raises(OutputNotStorableError):
            await Runner.run(
                _agent('{"value": "Infinity"}'),
                "go",
                runtime=rt,
                session_id="s",
                output_type=Reading,
            )
        assert await rt.stat("s") is None or (await rt.stat("s")).head == 0  # type: ignore[union-attr]


def test_typed_output_replayed_after_a_host_was_killed(tmp_path: pathlib.Path) -> None:
    """A host SIGKILLed right after completing a typed run: a new process replays it
    (no model call) and gets the pydantic model back."""
    db = tmp_path / "typed.db"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, str(WORKER), str(db)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr

    class Verdict(pydantic.BaseModel):  # the same shape, defined by the new process
        ok: bool
        score: int

    async def replay() -> object:
        async with open_runtime(db) as rt:
            options = CheckpointOptions(checkpoints(rt), "typed-run", if_run_exists="resume_only")
            result = await Runner.run(
                _agent(),
                "judge it",
                runtime=rt,
                session_id="s",
                checkpoint=options,
                output_type=Verdict,
            )
            return result.final_output

    final = trio.run(replay)
    assert isinstance(final, Verdict)
    assert final == Verdict(ok=True, score=7)
