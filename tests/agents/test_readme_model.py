"""The README's real-model example runs as written, against a local OpenAI-compatible
server on 127.0.0.1 (its endpoint and key come from the environment, as it says)."""

from __future__ import annotations

import os
import pathlib
import re
import sys

import pytest
import trio
from provider_fixtures import PROVIDERS
from provider_server import Reply, open_provider_server

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _block() -> str:
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    [block] = [b for b in blocks if "OpenAIChatModel(" in b]
    return str(block)


@pytest.mark.slow
async def test_readme_real_model_block_runs(tmp_path: pathlib.Path) -> None:
    """The block runs: one tool call, then the answer it prints."""
    chat = PROVIDERS[0]
    async with open_provider_server() as server:
        server.add(
            chat.path,
            Reply(body=chat.body(None, (("c1", "population", {"city": "Paris"}),))),
            Reply(body=chat.body("About 2.1 million.")),
        )
        env = dict(os.environ, OPENAI_BASE_URL=server.url + "/v1", OPENAI_API_KEY="sk-local")
        env["PYTHONPATH"] = str(ROOT)
        with trio.fail_after(60):
            proc = await trio.run_process(
                [sys.executable, "-c", _block()],
                cwd=tmp_path,
                env=env,
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stdout.decode().strip() == "About 2.1 million."
    tool_reply = server.bodies(chat.path)[1]["messages"][-1]
    assert tool_reply == {"role": "tool", "tool_call_id": "c1", "content": "Paris: 2.1 million"}
