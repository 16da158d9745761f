"""Function tools: schemas a model can trust, validated and coerced arguments, sync and
async bodies, timeouts, and the error results that keep a run going."""

from __future__ import annotations

import dataclasses
import pathlib
import threading
from collections.abc import AsyncIterator
from typing import Any, Literal, Optional

import attrs
import pytest
import trio
from typing_extensions import TypedDict  # pydantic needs it on Python < 3.12

from runtime import InvalidArgumentError, Runtime, open_runtime
from runtime.agents import (
    UNPARSED_ARGUMENTS,
    Agent,
    ModelResponse,
    RequestedCall,
    Runner,
    RunResult,
    ScriptedModel,
    ToolArgumentsError,
    ToolFinished,
    ToolResult,
    function_tool,
)


@pytest.fixture
async def rt(tmp_path: pathlib.Path) -> AsyncIterator[Runtime]:
    """A runtime on a SQLite file."""
    async with open_runtime(tmp_path / "tools.db") as runtime:
        yield runtime


@attrs.frozen
class Point:
    """A point on the map."""

    x: float
    y: float = 0.0


@dataclasses.dataclass
class Box:
    label: str
    size: int = 1


class Address(TypedDict):
    street: str
    number: int


async def place(
    name: str,
    count: int | None,
    ratio: Optional[float],  # noqa: UP045 (the issue's exact spelling)
    mode: Literal["fast", "safe"],
    tags: list[str],
    weights: dict[str, int],
    where: Point,
    path: list[Point],
    box: Box,
    address: Address,
    note: str = "none",
) -> str:
    """Place things on the map.

    Args:
        name: Who places them.
        count: How many, if known.
        ratio: The ratio.
        mode: How careful to be.
        tags: Labels.
        weights: Weight per label.
        where: Where to put it.
        path: The way there.
        box: What it is packed in.
        address: The postal address.
        note: Anything else.
    """
    return f"{name} {count} {where} {path} {box} {address} {note}"


def test_schema_covers_every_annotation() -> None:
    """Optional and unions are nullable, Literal is an enum, lists have items, dicts
    additionalProperties, attrs/dataclass/TypedDict are nested objects, defaults and
    required are right, and every parameter is described from the docstring."""
    tool = function_tool(place, strict=False)
    schema = tool.parameters
    props: Any = schema["properties"]
    assert tool.description == "Place things on the map."
    assert props["count"]["anyOf"] == [{"type": "integer"}, {"type": "null"}]
    assert props["ratio"]["anyOf"] == [{"type": "number"}, {"type": "null"}]
    assert props["mode"]["enum"] == ["fast", "safe"]
    assert props["tags"] == {"type": "array", "items": {"type": "string"}, **_meta(props["tags"])}
    assert props["weights"]["additionalProperties"] == {"type": "integer"}
    defs: Any = schema["$defs"]
    assert defs["Point"]["properties"]["x"]["type"] == "number"
    assert defs["Point"]["required"] == ["x"]
    assert defs["Point"]["description"] == ("A point on the map.")
    assert props["path"]["items"] == {"$ref": "#/$defs/Point"}
    assert defs["Box"]["required"] == ["label"]
    assert defs["Address"]["required"] == ["street", "number"]
    assert props["note"]["default"] == "none"
    assert set(schema["required"]) == set(props) - {"note"}  # type: ignore[arg-type]
    assert all(props[name]["description"] for name in props)
    assert props["where"]["description"] == "Where to put it."
    assert schema["additionalProperties"] is False


def _meta(prop: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in prop.items() if k in ("title", "description")}


def test_docstring_styles() -> None:
    """NumPy and Sphinx docstrings describe the tool and its parameters like Google's."""

    def numpy_style(city: str, days: int = 1) -> str:
        """Forecast the weather.

        Parameters
        ----------
        city : str
            The city to forecast.
        days : int
            How many days ahead.
        """
        return city

    def sphinx_style(city: str) -> str:
        """Forecast the weather.

        :param city: The city to forecast.
        """
        return city

    for fn in (numpy_style, sphinx_style):
        tool = function_tool(fn)
        props: Any = tool.parameters["properties"]
        assert tool.description == "Forecast the weather."
        assert props["city"]["description"] == "The city to forecast."
    assert function_tool(numpy_style).parameters["properties"]["days"]["description"] == (  # type: ignore[index, call-overload]
        "How many days ahead."
    )


def test_strict_schema_is_closed_and_nulls_mean_defaults() -> None:
    """Strict mode: every property required, nothing else allowed, an optional one
    nullable; a null for it means its default. A free-form dict turns strict off."""

    def book(room: str, nights: int = 1, late: bool | None = None) -> str:
        """Book a room."""
        return room

    tool = function_tool(book)
    assert tool.strict
    assert tool.schema()["strict"] is True
    assert tool.parameters["required"] == ["room", "nights", "late"]
    assert tool.parameters["additionalProperties"] is False
    props: Any = tool.parameters["properties"]
    assert {"type": "null"} in props["nights"]["anyOf"]
    assert tool.validate({"room": "12", "nights": None, "late": None}) == {
        "room": "12",
        "nights": 1,
        "late": None,
    }
    assert not function_tool(place).strict  # dict[str, int] cannot be closed
    assert "strict" not in function_tool(place).schema()


def test_arguments_are_validated_and_coerced() -> None:
    """Strings become numbers, dicts become attrs/dataclass instances; an invalid call
    raises ToolArgumentsError naming each problem and what was sent."""
    tool = function_tool(place)
    args = tool.validate(
        {
            "name": "ada",
            "count": "3",
            "ratio": None,
            "mode": "safe",
            "tags": ["a"],
            "weights": {"a": "2"},
            "where": {"x": "1.5"},
            "path": [{"x": 1, "y": 2}],
            "box": {"label": "crate"},
            "address": {"street": "Main", "number": "7"},
        }
    )
    assert args["count"] == 3
    assert args["weights"] == {"a": 2}
    assert args["where"] == Point(1.5)
    assert args["path"] == [Point(1.0, 2.0)]
    assert args["box"] == Box("crate")
    assert args["address"] == {"street": "Main", "number": 7}
    with pytest.raises(ToolArgumentsError) as info:
        tool.validate({"name": "ada", "count": "many", "mode": "reckless", "extra": 1})
    text = str(info.value)
    assert "count" in text
    assert "'many'" in text
    assert "mode" in text
    assert "'reckless'" in text
    assert "tags: Field required" in text
    assert "extra" in text
    with pytest.raises(ToolArgumentsError, match="not a JSON object"):
        tool.validate({UNPARSED_ARGUMENTS: "{oops"})


def test_bad_tool_declarations_are_refused() -> None:
    """*args, **kwargs and a type with no JSON schema are refused when declared."""

    def star(*items: str) -> str:
        return ""

    def unschemable(lock: threading.Lock) -> str:
        return ""

    with pytest.raises(InvalidArgumentError, match="plain or keyword-only"):
        function_tool(star)
    with pytest.raises(InvalidArgumentError, match="no JSON schema"):
        function_tool(unschemable)
    with pytest.raises(InvalidArgumentError, match="timeout"):
        function_tool(timeout=0)(star)


async def _run(rt: Runtime, agent: Agent) -> tuple[RunResult, dict[str, str]]:
    how: dict[str, str] = {}
    result: RunResult | None = None
    async with Runner.run_streamed(agent, "go", runtime=rt) as events:
        async for event in events:
            if isinstance(event, ToolFinished):
                how[event.result.call_id] = event.how
            result = getattr(event, "result", result)
    assert isinstance(result, RunResult)
    return result, how


async def test_invalid_and_unknown_calls_become_error_results(rt: Runtime) -> None:
    """An invalid call never runs its body and an unknown tool is named: both become
    error results that say what was wrong, and the run goes on to its answer."""
    ran: list[int] = []

    @function_tool
    async def charge(amount: int) -> str:
        """Charge an amount."""
        ran.append(amount)
        return f"charged {amount}"

    model = ScriptedModel(
        [
            ModelResponse(
                tool_calls=(
                    RequestedCall("charge", {"amount": "ten"}, "bad"),
                    RequestedCall("refund", {}, "unknown"),
                    RequestedCall("charge", {"amount": "10"}, "good"),
                )
            ),
            ModelResponse("done"),
        ]
    )
    result, how = await _run(rt, Agent("a", "x", tools=(charge,), model=model))
    assert result.output == "done"
    assert ran == [10]
    assert how == {"bad": "invalid", "unknown": "error", "good": "ran"}
    results = {e.call_id: e for e in result.entries if isinstance(e, ToolResult)}
    assert results["bad"].is_error
    assert "amount" in results["bad"].output
    assert "'ten'" in results["bad"].output
    assert results["unknown"].is_error
    assert "'refund'" in results["unknown"].output
    assert "charge" in results["unknown"].output
    assert results["good"].output == "charged 10"
    seen = model.requests[1].messages
    assert any(isinstance(e, ToolResult) and e.call_id == "bad" and e.is_error for e in seen)


async def test_sync_tools_run_in_a_thread_and_timeouts_become_errors(rt: Runtime) -> None:
    """A sync body runs in a worker thread, not on the trio thread; a tool over its
    timeout gives a timeout error result and the run goes on."""
    threads: list[int] = []

    @function_tool
    def blocking(n: int) -> dict[str, int]:
        """Work synchronously."""
        threads.append(threading.get_ident())
        return {"double": n * 2}

    @function_tool(timeout=0.05)
    async def slow() -> str:
        """Take too long."""
        await trio.sleep(10)
        return "never"  # pragma: no cover

    model = ScriptedModel(
        [
            ModelResponse(
                tool_calls=(
                    RequestedCall("blocking", {"n": 4}, "b"),
                    RequestedCall("slow", {}, "s"),
                )
            ),
            ModelResponse("ok"),
        ]
    )
    with trio.fail_after(5):
        result, _ = await _run(rt, Agent("a", "x", tools=(blocking, slow), model=model))
    results = {e.call_id: e for e in result.entries if isinstance(e, ToolResult)}
    assert results["b"].output == '{"double":8}'
    assert threads != [threading.get_ident()]
    assert results["s"].is_error
    assert "did not finish within 0.05s" in results["s"].output
    assert result.output == "ok"
