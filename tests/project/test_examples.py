"""Every program in examples/ runs to completion as a real subprocess (the real-model
example against a local OpenAI-compatible server on 127.0.0.1)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from provider_server import Reply, open_provider_server, sse

ROOT = Path(__file__).resolve().parents[2]
#: Examples that talk to a model endpoint: run by test_real_model_example, with a server.
NEED_A_SERVER = {"real_model_agent.py"}
ALL_EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
EXAMPLES = [p for p in ALL_EXAMPLES if p.name not in NEED_A_SERVER]

#: Text an example must print, by file name (examples not listed only need exit code 0).
EXPECTED_OUTPUT: dict[str, list[str]] = {
    "store_basics.py": [
        "created session 'chat-1'",
        "appended 3 events, head is now 3",
        "conflict: expected head 1, actual head 3",
        "retried with the actual head, head is now 4",
        "read seq 2: assistant",
        "removed 2 events, head 2",
        "session 'notes': head 1",
        "integrity check: ok",
        "done",
    ],
    "inspected_service.py": [
        "inspector at http://127.0.0.1:",
        "support-1 has 9 events",
        "turns as the page shows them: 3",
        "done",
    ],
    "langgraph_saver.py": [
        "paused: {'question': 'ship it?'}",
        "steps: ['plan', 'approve', 'ship']",
        "checkpoints: 5",
        "copy has the same state: True",
        "async steps: ['plan', 'approve', 'hold']",
    ],
    "openai_agents_session.py": [
        "assistant: Hello Ada.",
        "assistant: Ada.",
        "items in the session: 4",
        "the model saw the history: True",
        "undo the last item: assistant",
    ],
}


def test_examples_are_found() -> None:
    """The glob finds the examples directory's programs (guards against a silent empty run)."""
    assert "store_basics.py" in {p.name for p in EXAMPLES}
    assert {p.name for p in ALL_EXAMPLES} >= NEED_A_SERVER


@pytest.mark.slow
@pytest.mark.parametrize("example", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_runs(example: Path, tmp_path: Path) -> None:
    """An example exits 0 within the timeout, run with no arguments in a fresh cwd."""
    proc = subprocess.run(
        [sys.executable, str(example)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    for text in EXPECTED_OUTPUT.get(example.name, []):
        assert text in proc.stdout, f"missing {text!r} in:\n{proc.stdout}"


def _chunks(delta: dict[str, object], finish: str | None = None) -> dict[str, object]:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [choice],
    }


@pytest.mark.slow
async def test_real_model_example(tmp_path: Path) -> None:
    """real_model_agent.py runs against a local OpenAI-compatible server (its endpoint
    and key from the environment): it streams, calls its tool, and prints the answer."""
    call = {"index": 0, "id": "call_1", "type": "function"}
    call["function"] = {"name": "convert", "arguments": json.dumps({"amount": 26.2, "unit": "mi"})}
    answer = json.dumps({"summary": "A marathon is 42.16 km.", "kilometres": 42.16})
    async with open_provider_server() as server:
        server.add(
            "/v1/chat/completions",
            Reply(
                stream=sse(
                    [(None, _chunks({"tool_calls": [call]}, "tool_calls")), (None, "[DONE]")]
                )
            ),
            Reply(stream=sse([(None, _chunks({"content": answer}, "stop")), (None, "[DONE]")])),
        )
        env = dict(os.environ, OPENAI_BASE_URL=server.url + "/v1", OPENAI_API_KEY="sk-local")
        with trio.fail_after(60):
            proc = await trio.run_process(
                [sys.executable, str(ROOT / "examples" / "real_model_agent.py")],
                cwd=tmp_path,
                env=env,
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
    out = proc.stdout.decode()
    assert proc.returncode == 0, out + proc.stderr.decode()
    assert "[tool ran: 26.2 mi = 42.16 km]" in out
    assert "answer: A marathon is 42.16 km. (42.16 km)" in out
    assert server.bodies("/v1/chat/completions")[0]["model"] == "gpt-4o-mini"
