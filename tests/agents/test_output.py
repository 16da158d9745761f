"""Structured output: the schema goes to the model, the answer is validated, and the
stored output round-trips through the checkpoint and replay."""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import AsyncIterator
from typing import Any

import attrs
import pytest
from typing_extensions import TypedDict  # pydantic needs it on Python < 3.12

from runtime import JSON, InvalidArgumentError, Runtime, open_runtime
from runtime.agents import (
    Agent,
    CheckpointOptions,
    ModelResponse,
    OutputValidationError,
    Runner,
    ScriptedModel,
    checkpoints,
)


@pytest.fixture
async def rt(tmp_path: pathlib.Path) -> AsyncIterator[Runtime]:
    """A runtime on a SQLite file."""
    async with open_runtime(tmp_path / "output.db") as runtime:
        yield runtime


@attrs.frozen
class Line:
    item: str
    qty: int


@attrs.frozen
class Invoice:
    """An invoice."""

    customer: str
    lines: tuple[Line, ...]
    paid: bool


@dataclasses.dataclass
class Score:
    value: float
    reason: str


class Verdict(TypedDict):
    ok: bool
    why: str


INVOICE = '{"customer": "ada", "lines": [{"item": "tea", "qty": "2"}], "paid": false}'


async def test_attrs_output_is_validated_stored_and_replayed(rt: Runtime) -> None:
    """The model gets the schema (strict), the answer becomes an attrs instance, the
    checkpoint stores its JSON, and a replay rebuilds the same instance."""
    model = ScriptedModel([ModelResponse(INVOICE)])
    agent = Agent("a", "x", model=model, output_type=Invoice)
    cp = CheckpointOptions(checkpoints(rt), "inv")
    result = await Runner.run(agent, "bill ada", runtime=rt, checkpoint=cp)
    expected = Invoice("ada", (Line("tea", 2),), False)
    assert result.final_output == expected
    assert result.output == {"customer": "ada", "lines": [{"item": "tea", "qty": 2}], "paid": False}
    sent: Any = model.requests[0].output_schema
    assert sent["name"] == "Invoice"
    assert sent["strict"] is True
    assert sent["schema"]["required"] == ["customer", "lines", "paid"]
    snap = await checkpoints(rt).load("inv")
    assert snap is not None
    assert snap.head.output == result.output
    replayed = await Runner.run(
        Agent("a", "x", model=ScriptedModel([]), output_type=Invoice),
        "x",
        runtime=rt,
        checkpoint=cp,
    )
    assert replayed.final_output == expected
    assert replayed.finish_reason is None


@pytest.mark.parametrize(
    ("output_type", "text", "final"),
    [
        (Score, '{"value": 0.5, "reason": "fine"}', Score(0.5, "fine")),
        (Verdict, '{"ok": true, "why": "tests pass"}', {"ok": True, "why": "tests pass"}),
        (
            {
                "title": "verdict",
                "type": "object",
                "properties": {"ok": {"type": "boolean"}},
                "required": ["ok"],
                "additionalProperties": False,
            },
            '{"ok": false}',
            {"ok": False},
        ),
    ],
    ids=["dataclass", "typeddict", "json-schema"],
)
async def test_other_output_types(rt: Runtime, output_type: Any, text: str, final: Any) -> None:
    """Dataclasses, TypedDicts and plain JSON schemas validate the answer the same way."""
    agent = Agent("a", "x", model=ScriptedModel([ModelResponse(text)]), output_type=output_type)
    result = await Runner.run(agent, "judge", runtime=rt)
    assert result.final_output == final


async def test_invalid_output_fails_the_run_and_resume_asks_again(rt: Runtime) -> None:
    """An answer that does not fit fails the run (its checkpoint names the error);
    resuming it asks the model again, and a fitting answer completes it."""
    cp = CheckpointOptions(checkpoints(rt), "bad")
    first = Agent(
        "a", "x", model=ScriptedModel([ModelResponse('{"customer": 1}')]), output_type=Invoice
    )
    with pytest.raises(OutputValidationError) as info:
        await Runner.run(first, "bill", runtime=rt, checkpoint=cp)
    assert "lines" in info.value.problems
    snap = await checkpoints(rt).load("bad")
    assert snap is not None
    assert snap.head.status == "failed"
    assert snap.head.error is not None
    assert snap.head.error["type"] == "OutputValidationError"
    again = ScriptedModel([ModelResponse(INVOICE)])
    result = await Runner.run(
        Agent("a", "x", model=again, output_type=Invoice), "bill", runtime=rt, checkpoint=cp
    )
    assert result.final_output.customer == "ada"
    assert len(again.requests) == 1


def test_output_type_without_a_schema_is_refused() -> None:
    """An output type pydantic cannot describe, or an invalid JSON schema, is refused."""
    with pytest.raises(InvalidArgumentError):
        Agent("a", "x", output_type=object())
    with pytest.raises(InvalidArgumentError, match="JSON schema"):
        Agent("a", "x", output_type={"type": 12})


async def test_older_usage_and_heads_still_load(rt: Runtime) -> None:
    """A head and an assistant entry stored before cached tokens existed load as they
    were (cached_tokens 0), and a run resumed from that head adds to them."""
    from runtime.agents import AssistantMessage, RunHead, Usage, UserMessage

    old_usage: dict[str, JSON] = {"requests": 1, "input_tokens": 10, "output_tokens": 5}
    assert Usage.from_json(old_usage) == Usage(1, 10, 5, 0)
    entry = AssistantMessage("hi", agent="a", usage={"input_tokens": 10, "output_tokens": 5})
    head = RunHead.from_json({"v": 1, "agent": "a", "usage": old_usage, "turns": 1})
    await checkpoints(rt).append("old", [UserMessage("x"), entry], head)
    snap = await checkpoints(rt).load("old")
    assert snap is not None
    assert snap.entries[1] == entry
    model = ScriptedModel([ModelResponse('{"value": 1, "reason": "r"}', usage=Usage(1, 3, 2, 1))])
    result = await Runner.run(
        Agent("a", "x", model=model, output_type=Score),
        "x",
        runtime=rt,
        checkpoint=CheckpointOptions(checkpoints(rt), "old"),
    )
    assert result.usage == Usage(2, 13, 7, 1)
