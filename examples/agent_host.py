"""A small agent host: a checkpointed run with two tools, then the conversation history.

The model is scripted (no network, no API key). ``save_note`` is idempotent -- running it
twice for one call is harmless -- so recovery may re-run it after a crash; ``notify`` is
not, so recovery would report its outcome unknown instead of sending twice.

Run: python examples/agent_host.py [DB_PATH]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import trio

from runtime import open_runtime
from runtime.agents import (
    Agent,
    AssistantMessage,
    CheckpointOptions,
    Entry,
    ModelResponse,
    RequestedCall,
    Runner,
    ScriptedModel,
    ToolCall,
    ToolResult,
    UserMessage,
    checkpoints,
    function_tool,
    history,
)

NOTES: dict[str, str] = {}
SENT: list[str] = []


@function_tool(idempotent=True)
async def save_note(title: str, text: str) -> str:
    """Save a note under a title (saving the same note twice changes nothing)."""
    NOTES[title] = text
    return f"saved note {title!r}"


@function_tool  # not idempotent: each call notifies once more
async def notify(channel: str, message: str) -> str:
    """Post a message to a channel."""
    SENT.append(f"#{channel}: {message}")
    return f"posted to #{channel}"


model = ScriptedModel(
    [
        ModelResponse(
            "Saving the summary and telling the team.",
            tool_calls=(
                RequestedCall(
                    "save_note", {"title": "standup", "text": "Ship 2.4.1 today."}, "call_1"
                ),
                RequestedCall(
                    "notify", {"channel": "team", "message": "Standup notes saved."}, "call_2"
                ),
            ),
        ),
        ModelResponse("Done: the note is saved and #team knows."),
    ]
)

assistant = Agent(
    "assistant",
    "You keep the team's notes. Save them, then tell the team.",
    tools=[save_note, notify],
    model=model,
)


async def main(db_path: str) -> None:
    async with open_runtime(db_path) as rt:
        result = await Runner.run(
            assistant,
            "Summarise today's standup: we ship 2.4.1 today.",
            runtime=rt,
            session_id="team-chat",
            checkpoint=CheckpointOptions(checkpoints(rt), "standup-1"),
        )
        print(f"output: {result.output}")
        print(f"usage: {result.usage.requests} model requests; notes: {NOTES}; sent: {SENT}")
        print("history of 'team-chat':")
        for entry in await history(rt).load("team-chat"):
            print(f"  {describe(entry)}")


def describe(entry: Entry) -> str:
    """One line per history entry."""
    if isinstance(entry, UserMessage | AssistantMessage):
        return f"{entry.kind:<12} {entry.text}"
    if isinstance(entry, ToolCall):
        return f"tool_call    {entry.call_id} {entry.name}({entry.arguments})"
    if isinstance(entry, ToolResult):
        return f"tool_result  {entry.call_id} {entry.output!r}"
    return f"{entry.kind:<12} {entry.data}"  # sidecar bookkeeping, e.g. tool_started


if __name__ == "__main__":
    if len(sys.argv) > 1:
        trio.run(main, sys.argv[1])
    else:
        with tempfile.TemporaryDirectory() as tmp:
            trio.run(main, str(Path(tmp) / "agent_host.db"))
