"""Images and files in messages through the log: history, checkpoint resume, export and
import then replay, a store failing midway, and the too-large error writing nothing."""

from __future__ import annotations

import pathlib
from collections.abc import AsyncIterator

import pytest
import trio
from helpers import runtime_target
from write_contract import OneFailure

from runtime import MemoryStore, Runtime, TidelogError, open_runtime
from runtime.agents import (
    Agent,
    CheckpointOptions,
    Entry,
    FilePart,
    ImagePart,
    MessageTooLargeError,
    ModelRequest,
    ModelResponse,
    RequestedCall,
    Runner,
    ScriptedModel,
    SidecarEntry,
    TextPart,
    ToolResult,
    UserMessage,
    checkpoints,
    function_tool,
    history,
)
from runtime.cli import main
from stores import MAX_EVENT_BYTES

PNG = b"\x89PNG\r\n\x1a\n\x00\xff-bytes-"
MESSAGE = UserMessage(
    "compare",
    [
        ImagePart(data=PNG, media_type="image/png", detail="high"),
        TextPart("with"),
        ImagePart(url="https://example.com/b.jpg"),
        FilePart(data=b"%PDF-1.7\x00", media_type="application/pdf", name="spec.pdf"),
        FilePart(file_id="file-9"),
    ],
)
IMAGE_RESULT = ToolResult("c1", "shot", parts=[ImagePart(data=PNG, media_type="image/png")])


@function_tool(idempotent=True)
async def shoot() -> list[object]:
    """A screenshot."""
    return ["shot", ImagePart(data=PNG, media_type="image/png")]


def _respond(request: ModelRequest) -> ModelResponse:
    """Call the tool once, then answer; every request must carry the message unchanged."""
    assert MESSAGE in request.messages
    if not any(isinstance(e, ToolResult) for e in request.messages):
        return ModelResponse(tool_calls=(RequestedCall("shoot", {}, "c1"),))
    assert IMAGE_RESULT in request.messages
    return ModelResponse("the same")


def _agent() -> Agent:
    return Agent("a", "", tools=(shoot,), model=ScriptedModel([_respond, _respond]))


@pytest.fixture(params=["memory", "sqlite", "jsonl", "postgres"])
async def rt(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> AsyncIterator[Runtime]:
    async with open_runtime(runtime_target(request.param, tmp_path, request)) as runtime:
        yield runtime


async def test_history_and_checkpoint_keep_the_parts(rt: Runtime) -> None:
    """A run on an image message: history and checkpoint hold the message and the
    tool's image result as they were, and the replay returns them unchanged."""
    options = CheckpointOptions(checkpoints(rt), "r1")
    result = await Runner.run(_agent(), [MESSAGE], runtime=rt, session_id="s", checkpoint=options)
    assert result.output == "the same"
    loaded = await history(rt).load("s")
    assert loaded[0] == MESSAGE
    assert IMAGE_RESULT in loaded
    snapshot = await checkpoints(rt).load("r1")
    assert snapshot is not None
    assert snapshot.entries[0] == MESSAGE
    replayed = await Runner.run(
        Agent("a", "", model=ScriptedModel([])), "ignored", runtime=rt, checkpoint=options
    )
    assert replayed.entries == result.entries


async def test_resume_sends_the_stored_parts() -> None:
    """A run whose second model turn failed resumes from its checkpoint: the model is
    sent the stored message and image result, equal to the originals."""
    seen: list[tuple[Entry, ...]] = []

    def fail(request: ModelRequest) -> ModelResponse:  # noqa: ARG001
        raise RuntimeError("model down")

    def record(request: ModelRequest) -> ModelResponse:
        seen.append(request.messages)
        return _respond(request)

    async with open_runtime(MemoryStore()) as rt:
        options = CheckpointOptions(checkpoints(rt), "r1")
        failing = Agent("a", "", tools=(shoot,), model=ScriptedModel([_respond, fail]))
        with pytest.raises(RuntimeError, match="model down"):
            await Runner.run(failing, [MESSAGE], runtime=rt, checkpoint=options)
        resumed = Agent("a", "", tools=(shoot,), model=ScriptedModel([record]))
        result = await Runner.run(resumed, "ignored", runtime=rt, checkpoint=options)
    assert result.output == "the same"
    [messages] = seen
    assert messages[0] == MESSAGE
    assert IMAGE_RESULT in messages


def test_export_import_then_replay_is_equal(tmp_path: pathlib.Path) -> None:
    """``tidelog export`` then ``tidelog import`` into a new database: the conversation
    is equal and the completed run replays (no model) with the same entries."""
    source, copy, dump = tmp_path / "a.db", tmp_path / "b.db", tmp_path / "dump.jsonl"

    async def first() -> tuple[Entry, ...]:
        async with open_runtime(source) as rt:
            options = CheckpointOptions(checkpoints(rt), "r1")
            done = await Runner.run(
                _agent(), [MESSAGE], runtime=rt, session_id="s", checkpoint=options
            )
            return done.entries

    async def again() -> tuple[tuple[Entry, ...], list[Entry]]:
        async with open_runtime(copy) as rt:
            options = CheckpointOptions(checkpoints(rt), "r1")
            agent = Agent("a", "", model=ScriptedModel([]))
            replayed = await Runner.run(agent, "x", runtime=rt, session_id="s", checkpoint=options)
            return replayed.entries, await history(rt).load("s")

    entries = trio.run(first)
    assert main(["export", str(source), "-o", str(dump)]) == 0
    assert main(["import", str(copy), str(dump)]) == 0
    replayed, loaded = trio.run(again)
    assert replayed == entries
    assert loaded == list(entries)
    assert loaded[0] == MESSAGE


async def _until_done(store: OneFailure) -> tuple[list[Entry], list[Entry]]:
    """Re-issue the run after any failure until it completes; its checkpoint entries and
    its conversation."""
    try:
        async with open_runtime(store) as rt:
            options = CheckpointOptions(checkpoints(rt), "r")
            for _ in range(5):
                try:
                    await Runner.run(
                        _agent(), [MESSAGE], runtime=rt, session_id="s", checkpoint=options
                    )
                    break
                except TidelogError:
                    await trio.sleep(1.0)  # let the writer's retry land, then re-issue
    except TidelogError:
        pass  # the exit barrier failed: every commit is in the store
    async with open_runtime(store) as rt:
        snapshot = await checkpoints(rt).load("r")
        conversation = await history(rt).load("s")
    assert snapshot is not None
    assert snapshot.head.status == "completed"
    return list(snapshot.entries), conversation


def _proper(entries: list[Entry]) -> list[Entry]:
    return [e for e in entries if not isinstance(e, SidecarEntry)]


@pytest.mark.parametrize("ambiguous", [False, True], ids=["before", "after-commit"])
async def test_a_store_failing_midway_keeps_each_part_once(
    autojump_clock: trio.testing.MockClock,  # noqa: ARG001 (pytest-trio runs the test on it)
    ambiguous: bool,
) -> None:
    """Any one batch failing (before or after its commit): re-issued until done, the
    checkpoint and the conversation hold the image message, the call, the image result
    and the final answer exactly once each, in order, as a run without failures does."""
    clean = OneFailure(None, after_commit=False)
    _, reference = await _until_done(clean)
    for where in range(clean.calls):
        entries, conversation = await _until_done(OneFailure(where, after_commit=ambiguous))
        for log in (entries, conversation):
            assert log.count(MESSAGE) == 1, where
            assert log.count(IMAGE_RESULT) == 1, where
            assert _proper(log) == _proper(reference), where  # one final answer too


async def test_too_large_writes_nothing(rt: Runtime) -> None:
    """Building a message over the event size limit raises MessageTooLargeError before
    any write: the conversation's head and the checkpoints are as they were."""
    await history(rt).append("s", [UserMessage("before")], run_id="r0")
    info = await rt.stat("s")
    assert info is not None
    image = ImagePart(data=bytes(MAX_EVENT_BYTES), media_type="image/png")
    options = CheckpointOptions(checkpoints(rt), "r1")
    with pytest.raises(MessageTooLargeError):
        await Runner.run(
            _agent(), [UserMessage("", [image])], runtime=rt, session_id="s", checkpoint=options
        )
    after = await rt.stat("s")
    assert after is not None
    assert after.head == info.head
    assert await checkpoints(rt).list() == []
