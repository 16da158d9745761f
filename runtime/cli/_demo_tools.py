"""The pieces every step of ``tidelog demo`` (:mod:`runtime.cli._demo`) is made of: the
workspace its tools write into, the tools, the scripted agents and tool calls, and
:class:`DemoError`, a step that did not produce what it must.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeAlias

import trio

from runtime import JSON, Runtime, TidelogError
from runtime.agents import (
    Agent,
    CheckpointOptions,
    FunctionTool,
    ModelRequest,
    ModelResponse,
    RequestedCall,
    ScriptedModel,
    checkpoints,
    function_tool,
)

__all__ = [
    "OUTBOX",
    "DemoError",
    "Workspace",
    "checkpoint_options",
    "expect",
    "make_tools",
    "scripted_agent",
    "scripted_call",
    "short",
]

OUTBOX = "outbox.log"

#: One scripted model answer: fixed, or computed from the request.
Script: TypeAlias = ModelResponse | Callable[[ModelRequest], ModelResponse]


class DemoError(TidelogError):
    """A demo step did not produce what it must (the demo then exits with status 1)."""


def expect(condition: bool, message: str) -> None:
    """Raise :class:`DemoError` with ``message`` unless ``condition`` holds."""
    if not condition:
        raise DemoError(message)


def short(value: JSON, width: int = 64) -> str:
    """Compact one-line JSON of ``value``, cut to ``width`` characters."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= width else text[: width - 3] + "..."


# -- the workspace and the tools ----------------------------------------------------------


class Workspace:
    """The directory the demo's tools write into: files, and ``outbox.log`` (one line per
    email "sent")."""

    def __init__(self, root: Path) -> None:
        """Use ``root`` (an existing directory) as the workspace."""
        self.root = root

    def _resolve(self, relative: str) -> Path:
        """``relative`` inside the workspace; refuse absolute paths and ``..``."""
        path = Path(relative)
        if path.is_absolute() or ".." in path.parts or not path.parts:
            raise ValueError(f"path must be relative and stay in the workspace: {relative!r}")
        return self.root / path

    def write(self, relative: str, text: str) -> int:
        """Write ``text`` to ``relative`` (parents created); return its size in bytes."""
        path = self._resolve(relative)
        path.parent.mkdir(parents=True, exist_ok=True)
        data = text.encode("utf-8")
        path.write_bytes(data)
        return len(data)

    def send(self, to: str, subject: str) -> None:
        """Append one line to the outbox and make it durable (the side effect)."""
        with open(self.root / OUTBOX, "a", encoding="utf-8") as outbox:
            outbox.write(f"{to}\t{subject}\n")
            outbox.flush()
            os.fsync(outbox.fileno())

    def outbox(self) -> list[str]:
        """The outbox's lines (emails sent so far)."""
        path = self.root / OUTBOX
        return path.read_text(encoding="utf-8").splitlines() if path.exists() else []

    def files(self) -> list[str]:
        """The files written by ``write_file``, relative, sorted."""
        return sorted(
            p.relative_to(self.root).as_posix()
            for p in self.root.rglob("*")
            if p.is_file() and p.name != OUTBOX
        )


def make_tools(workspace: Workspace, *, crash_in_send_email: bool = False) -> list[FunctionTool]:
    """The demo's tools: ``write_file`` (idempotent), ``send_email`` (not idempotent) and
    ``check_outbox`` (idempotent, read-only). With ``crash_in_send_email`` the process
    kills itself with SIGKILL right after the email's side effect happened."""

    async def write_file(path: str, text: str) -> str:
        """Write a text file into the workspace (same path, same content: idempotent)."""
        size = await trio.to_thread.run_sync(workspace.write, path, text)
        return f"wrote {size} bytes to {path}"

    async def send_email(to: str, subject: str) -> str:
        """Send an email (fake: one line in outbox.log per email sent)."""
        if crash_in_send_email:
            workspace.send(to, subject)  # synchronous: nothing runs between effect and crash
            print(f"  send_email: {subject!r} is in the outbox; now SIGKILL", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
            await trio.sleep_forever()
        await trio.to_thread.run_sync(workspace.send, to, subject)
        return f"sent {subject!r} to {to}"

    async def check_outbox() -> str:
        """List the emails already sent (one line each)."""
        lines = await trio.to_thread.run_sync(workspace.outbox)
        return "\n".join(lines) if lines else "(the outbox is empty)"

    return [
        function_tool(write_file, idempotent=True),
        function_tool(send_email),  # idempotent=False, the default: a re-run sends twice
        function_tool(check_outbox, idempotent=True),
    ]


def scripted_agent(name: str, tools: Sequence[FunctionTool], responses: Sequence[Script]) -> Agent:
    """An agent answering with a scripted model."""
    return Agent(
        name,
        f"You are {name}. Use the tools to do the task, then answer briefly.",
        tools=tools,
        model=ScriptedModel(responses),
    )


def scripted_call(call_id: str, name: str, **arguments: JSON) -> RequestedCall:
    """A scripted tool call with a fixed call id (so the output is deterministic)."""
    return RequestedCall(name, dict(arguments), call_id)


def checkpoint_options(rt: Runtime, run_id: str, *, wait: bool = False) -> CheckpointOptions:
    """Checkpoint ``run_id`` on ``rt``; resume it if it exists (replay if completed).
    ``wait``: wait for a host that still holds the run (a dead host's claim is taken
    over at once on this machine, else after its lease expires)."""
    return CheckpointOptions(checkpoints(rt), run_id, if_run_exists="resume", wait_for_owner=wait)
