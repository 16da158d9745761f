"""What the inspector tests share: a conversation with every kind of entry, run
checkpoints in each state, a fork, and the running inspector on a runtime."""

from __future__ import annotations

import contextlib
import json
import urllib.parse
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import h11
import trio

from runtime import JSON, NewEvent, Runtime
from runtime.agents import (
    TOOL_OUTCOME_UNKNOWN,
    Agent,
    AssistantMessage,
    CheckpointOptions,
    Entry,
    ModelResponse,
    RequestedCall,
    RunHead,
    Runner,
    ScriptedModel,
    SidecarEntry,
    ToolCall,
    ToolResult,
    UserMessage,
    agent_projections,
    checkpoints,
    function_tool,
    history,
)
from runtime.inspector import InspectorServer, serve_inspector

#: What a hostile transcript holds: markup and script that must show as characters.
HOSTILE = [
    "<script>window.__pwned = 1; alert('script')</script>",
    "<img src=x onerror=\"window.__pwned = 2; alert('img')\">",
    "<a href=\"javascript:window.__pwned=3;alert('link')\">click me</a>",
    "javascript:window.__pwned=4",
]


async def fill(rt: Runtime) -> None:
    """``chat``: two runs of history (a tool call with its result and its sidecar
    record, messages), then ``chat-fork`` forked at 4; run checkpoints of chat: ``r1``
    completed, ``r3`` interrupted with a call still pending, ``r4`` failed with an outcome
    reported unknown; ``notes``: plain events; an internal session."""
    for projection in agent_projections():
        rt.register_projection(projection)
    conversation = history(rt)
    call = ToolCall("call-1", "lookup", {"q": "tide tables"})
    first: list[Entry] = [
        UserMessage("When is high tide?"),
        AssistantMessage("Let me look.", agent="helper"),
        call,
        SidecarEntry("tool_started", {"call_id": "call-1"}),
        ToolResult("call-1", "06:12 and 18:40"),
        AssistantMessage("High tide is at 06:12.", agent="helper"),
    ]
    await conversation.append("chat", first, run_id="r1")
    await conversation.append(
        "chat", [UserMessage("Thanks"), AssistantMessage("You are welcome.")], run_id="r2"
    )
    await checkpoints(rt).append(
        "r1", first, RunHead("helper", status="completed", turns=2, session_id="chat")
    )
    pending = ToolCall("call-3", "send_mail", {"to": "ada"})
    await checkpoints(rt).append(
        "r3",
        [UserMessage("Mail Ada"), pending],
        RunHead("helper", status="interrupted", turns=1, session_id="chat"),
    )
    unknown = ToolResult("call-4", f"{TOOL_OUTCOME_UNKNOWN}: the tool 'pay' started", True)
    await checkpoints(rt).append(
        "r4",
        [UserMessage("Pay"), ToolCall("call-4", "pay", {}), unknown],
        RunHead(
            "helper",
            status="failed",
            session_id="chat",
            error={"type": "ModelError", "message": "down"},
        ),
    )
    await rt.fork("chat", "chat-fork", at_seq=4)
    async with rt.open_session("notes", header={"who": "ada"}) as writer:
        await writer.append([NewEvent("note", {"n": n}) for n in range(1, 6)])
    await rt.flush()


async def awaiting_run(rt: Runtime, run_id: str = "pay-run", session_id: str = "office") -> None:
    """Run an agent on ``session_id`` whose one turn asks ``pay`` (needs approval: call
    ``c-pay``) and ``look`` (needs none: call ``c-look``, which runs): the run ends
    ``awaiting_approval`` with ``c-pay`` pending. The conversation has an earlier run."""
    await history(rt).append(
        session_id, [UserMessage("hello"), AssistantMessage("hi")], run_id=f"{run_id}-0"
    )

    @function_tool(needs_approval=True)
    async def pay(amount: int) -> str:
        """Pay an amount."""
        return f"paid {amount}"

    @function_tool
    async def look() -> str:
        """Look around."""
        return "nothing"

    turn = ModelResponse(
        tool_calls=(
            RequestedCall("pay", {"amount": 5}, "c-pay"),
            RequestedCall("look", {}, "c-look"),
        )
    )
    agent = Agent("clerk", "x", model=ScriptedModel([turn]), tools=(pay, look))
    options = CheckpointOptions(checkpoints(rt), run_id)
    result = await Runner.run(
        agent, "pay the bill", runtime=rt, session_id=session_id, checkpoint=options
    )
    assert result.status == "awaiting_approval"


@contextlib.contextmanager
def store_address(kind: str, tmp_path: Path) -> Iterator[str]:
    """The address of a new store of ``kind`` (``sqlite``, ``jsonl``, ``postgres``: a
    schema of its own, dropped afterwards) in ``tmp_path``."""
    if kind == "postgres":
        from pgtest import fresh_schema, url_of

        with fresh_schema() as where:
            yield url_of(*where)
        return
    if kind == "jsonl":
        (tmp_path / "store").mkdir()
        yield str(tmp_path / "store")
        return
    yield str(tmp_path / "app.db")


@contextlib.asynccontextmanager
async def inspector(rt: Runtime, **options: Any) -> AsyncIterator[InspectorServer]:
    """The inspector on ``rt`` for the block."""
    async with trio.open_nursery() as nursery:
        server: InspectorServer = await nursery.start(
            lambda task_status: serve_inspector(rt, task_status=task_status, **options)
        )
        yield server
        nursery.cancel_scope.cancel()


def sse_events(text: str) -> list[dict[str, str]]:
    """The events of an SSE body (``id``, ``event``, ``data`` of each; comments dropped)."""
    found: list[dict[str, str]] = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.split("\n"):
            if not line or line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            fields[name] = value[1:] if value.startswith(" ") else value
        if fields:
            found.append(fields)
    return found


def data_of(fields: dict[str, str]) -> JSON:
    """The JSON ``data`` of one SSE event."""
    value: JSON = json.loads(fields["data"])
    return value


async def sse_read(
    server: InspectorServer, count: int, headers: dict[str, str] | None = None, **params: Any
) -> list[dict[str, str]]:
    """The first ``count`` events (those with an id) of ``/api/stream?params``, read over
    a plain TCP connection with h11; the connection is closed afterwards."""
    target = "/api/stream?" + urllib.parse.urlencode(params)
    conn = h11.Connection(h11.CLIENT)
    request_headers = [("Host", f"127.0.0.1:{server.port}"), *(headers or {}).items()]
    stream = await trio.open_tcp_stream("127.0.0.1", server.port)
    found: list[dict[str, str]] = []
    async with stream:
        await stream.send_all(
            conn.send(h11.Request(method="GET", target=target, headers=request_headers))
            + conn.send(h11.EndOfMessage())
        )
        buffer = ""
        while len(found) < count:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await stream.receive_some(65536))
                continue
            if isinstance(event, h11.Response):
                assert event.status_code == 200, event
                content_type = dict(event.headers).get(b"content-type", b"")
                assert content_type.startswith(b"text/event-stream")
            elif isinstance(event, h11.Data):
                buffer += bytes(event.data).decode()
                blocks = buffer.replace("\r\n", "\n").split("\n\n")
                buffer = blocks.pop()
                found += [e for e in sse_events("\n\n".join(blocks)) if "id" in e]
            elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                break
    return found[:count]
