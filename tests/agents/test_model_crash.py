"""SIGKILL a host while a real model turn streams, and while a real HTTP tool call is in
flight; a new host resumes and settles the run as the recovery rules say."""

from __future__ import annotations

import functools
import json
import os
import pathlib
import signal
import subprocess
import sys
from typing import Any

import pytest
import trio
from provider_fixtures import PROVIDERS
from provider_server import ProviderServer, Reply, open_provider_server

from runtime import open_runtime
from runtime.agents import TOOL_OUTCOME_UNKNOWN, AssistantMessage, checkpoints, history

WORKER = pathlib.Path(__file__).with_name("model_crash_worker.py")
ROOT = pathlib.Path(__file__).resolve().parents[2]
CHAT = PROVIDERS[0]
CHARGE = (("call_charge", "charge", {"amount": 5}),)


def _command(db: pathlib.Path, server: ProviderServer) -> list[str]:
    return [sys.executable, str(WORKER), str(db), server.url]


_ENV = dict(os.environ, PYTHONPATH=str(ROOT))


async def _killed_when(server: ProviderServer, db: pathlib.Path, signal_event: str) -> None:
    """Start a host, wait until the server sees it reach the point, SIGKILL it."""
    async with trio.open_nursery() as nursery:
        run = functools.partial(
            trio.run_process,
            _command(db, server),
            check=False,
            env=_ENV,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        proc: trio.Process = await nursery.start(run)
        with trio.fail_after(30):
            await getattr(server, signal_event)()
        proc.send_signal(signal.SIGKILL)
    assert proc.returncode == -signal.SIGKILL


async def _resume(server: ProviderServer, db: pathlib.Path) -> dict[str, Any]:
    with trio.fail_after(60):
        done = await trio.run_process(
            _command(db, server), capture_stdout=True, capture_stderr=True, env=_ENV, check=False
        )
    assert done.returncode == 0, done.stderr.decode()
    summary: dict[str, Any] = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return summary


@pytest.mark.slow
async def test_kill_while_a_model_turn_streams(tmp_path: pathlib.Path) -> None:
    """Killed mid-stream: nothing of the turn was checkpointed, so the resumed host asks
    for the turn again and the run completes with the whole answer, once."""
    db = tmp_path / "host.db"
    async with open_provider_server() as server:
        partial = CHAT.stream(["Half ", "an ", "answer"])
        server.add(CHAT.path, Reply(stream=partial, stall_after=3))
        await _killed_when(server, db, "wait_stalled")
        server.add(CHAT.path, Reply(stream=CHAT.stream(["The ", "whole ", "answer."])))
        summary = await _resume(server, db)
    assert summary == {"output": "The whole answer.", "how": {}}
    assert len(server.bodies(CHAT.path)) == 2
    async with open_runtime(db) as rt:
        snap = await checkpoints(rt).load("model-crash")
        entries = await history(rt).load("chat")
    assert snap is not None
    assert snap.head.status == "completed"
    assert [e.text for e in entries if isinstance(e, AssistantMessage)] == ["The whole answer."]


@pytest.mark.slow
async def test_kill_while_a_http_tool_call_is_in_flight(tmp_path: pathlib.Path) -> None:
    """Killed while the non-idempotent tool's HTTP request is in flight: its
    tool_started record is durable, so the resumed host never re-sends the charge and
    the model is told the outcome is unknown."""
    db = tmp_path / "host.db"
    async with open_provider_server() as server:
        server.add(CHAT.path, Reply(stream=CHAT.stream([], CHARGE)))
        server.add("/tool/charge", Reply(body="charged 5", stall_after=0))
        await _killed_when(server, db, "wait_stalled")
        server.add(CHAT.path, Reply(stream=CHAT.stream(["I could not confirm the charge."])))
        summary = await _resume(server, db)
    assert summary == {
        "output": "I could not confirm the charge.",
        "how": {"call_charge": "unknown"},
    }
    assert len([r for r in server.requests if r.path == "/tool/charge"]) == 1
    last_request = server.bodies(CHAT.path)[-1]
    tool_message = next(m for m in last_request["messages"] if m["role"] == "tool")
    assert tool_message["tool_call_id"] == "call_charge"
    assert TOOL_OUTCOME_UNKNOWN in tool_message["content"]
