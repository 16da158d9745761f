"""Agents, function tools and the model protocol of tidelog's run loop.

The loop is model-agnostic: a :class:`Model` gets a :class:`ModelRequest` (system prompt,
the conversation so far, the tools) and answers with a :class:`ModelResponse` (text, tool
calls, usage). :class:`ScriptedModel` replays a fixed list of responses -- tests, examples
and the demo use it, so nothing here needs a network or an API key.
"""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, TypeAlias, get_type_hints, overload, runtime_checkable

import attrs
import trio

from stores import JSON, InvalidArgumentError
from stores.records import decode_json, encode_json

from .transcript import Entry

__all__ = [
    "Agent",
    "FunctionTool",
    "Model",
    "ModelRequest",
    "ModelResponse",
    "RequestedCall",
    "RunContext",
    "ScriptedModel",
    "Usage",
    "function_tool",
    "handoff_tool_name",
]


@attrs.frozen
class Usage:
    """Token usage, summed over a run's model requests."""

    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.requests + other.requests,
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
        )

    def to_json(self) -> dict[str, JSON]:
        return {
            "requests": self.requests,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
        }

    @classmethod
    def from_json(cls, obj: JSON) -> Usage:
        if not isinstance(obj, dict):
            return cls()
        values = [obj.get(k, 0) for k in ("requests", "input_tokens", "output_tokens")]
        return cls(*(v if isinstance(v, int) else 0 for v in values))


@attrs.define
class RunContext:
    """What a tool (or dynamic instructions) sees of the run: ids, the active agent, and
    the caller's own ``context`` object (not persisted: pass it again on resume)."""

    run_id: str
    session_id: str | None
    agent: str
    context: Any = None


ToolBody: TypeAlias = Callable[..., Awaitable[Any]]


@attrs.frozen
class FunctionTool:
    """A tool the model may call. Build it with :func:`function_tool`.

    ``idempotent`` declares whether running the body twice for one call is harmless.
    On resume, a call whose body started but whose result was never recorded is re-run
    only if the tool is idempotent; otherwise the model gets a ``TOOL_OUTCOME_UNKNOWN``
    error result and must verify before retrying.
    """

    name: str
    description: str
    parameters: dict[str, JSON]
    body: ToolBody = attrs.field(repr=False)
    idempotent: bool = False
    takes_context: bool = False

    async def invoke(self, ctx: RunContext, arguments: dict[str, JSON]) -> str:
        """Run the body with ``arguments``; return its output as text (JSON if not str)."""
        result = await (
            self.body(ctx, **arguments) if self.takes_context else self.body(**arguments)
        )
        return result if isinstance(result, str) else encode_json(result)

    def schema(self) -> dict[str, JSON]:
        """The tool as a model sees it."""
        return {"name": self.name, "description": self.description, "parameters": self.parameters}


_JSON_TYPES: dict[Any, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    dict: "object",
    list: "array",
}


def _parameters(fn: Callable[..., Any], skip_first: bool) -> dict[str, JSON]:
    hints = get_type_hints(fn)
    properties: dict[str, JSON] = {}
    required: list[JSON] = []
    params = list(inspect.signature(fn).parameters.values())
    for param in params[1:] if skip_first else params:
        hint = hints.get(param.name, str)
        origin = getattr(hint, "__origin__", hint)
        prop: dict[str, JSON] = {"type": _JSON_TYPES.get(origin, "string")}
        properties[param.name] = prop
        if param.default is inspect.Parameter.empty:
            required.append(param.name)
    return {"type": "object", "properties": properties, "required": required}


@overload
def function_tool(fn: ToolBody, /) -> FunctionTool: ...


@overload
def function_tool(
    fn: ToolBody,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    idempotent: bool = False,
) -> FunctionTool: ...


@overload
def function_tool(
    fn: None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    idempotent: bool = False,
) -> Callable[[ToolBody], FunctionTool]: ...


def function_tool(
    fn: ToolBody | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    idempotent: bool = False,
) -> FunctionTool | Callable[[ToolBody], FunctionTool]:
    """Declare an async function as a tool: ``@function_tool`` or
    ``@function_tool(idempotent=True)``.

    The name defaults to the function's, the description to its docstring's first line,
    the JSON-schema parameters come from its annotated parameters. A first parameter
    annotated :class:`RunContext` receives the run context.

    Raises :class:`~stores.InvalidArgumentError` for a non-async function or bad options.
    """

    def wrap(body: ToolBody) -> FunctionTool:
        if not inspect.iscoroutinefunction(body):
            raise InvalidArgumentError(f"tool {body!r} must be an async function")
        if not isinstance(idempotent, bool):
            raise InvalidArgumentError("idempotent must be a bool")
        params = list(inspect.signature(body).parameters.values())
        hints = get_type_hints(body)
        takes_context = bool(params) and hints.get(params[0].name) is RunContext
        doc = (inspect.getdoc(body) or "").strip().splitlines()
        return FunctionTool(
            name=name or body.__name__,
            description=description if description is not None else (doc[0] if doc else ""),
            parameters=_parameters(body, takes_context),
            body=body,
            idempotent=idempotent,
            takes_context=takes_context,
        )

    return wrap(fn) if fn is not None else wrap


def handoff_tool_name(agent_name: str) -> str:
    """The tool name through which the model hands the run to ``agent_name``."""
    return f"transfer_to_{agent_name}"


@attrs.frozen(eq=False)
class Agent:
    """A named agent: instructions (text, or a function of the :class:`RunContext`), the
    tools it may call, the agents it may hand off to, and its model."""

    name: str
    instructions: str | Callable[[RunContext], str]
    tools: Sequence[FunctionTool] = ()
    handoffs: Sequence[Agent] = ()
    model: Model | None = None

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise InvalidArgumentError("Agent.name must be a non-empty str")
        names = [t.name for t in self.tools] + [handoff_tool_name(a.name) for a in self.handoffs]
        if len(set(names)) != len(names):
            raise InvalidArgumentError(f"agent {self.name!r}: duplicate tool names {names}")
        object.__setattr__(self, "tools", tuple(self.tools))
        object.__setattr__(self, "handoffs", tuple(self.handoffs))

    def system_prompt(self, ctx: RunContext) -> str:
        """Render the instructions for one request."""
        return self.instructions(ctx) if callable(self.instructions) else self.instructions

    def tool(self, name: str) -> FunctionTool | None:
        """The tool called ``name``, if this agent has it."""
        return next((t for t in self.tools if t.name == name), None)

    def handoff(self, tool_name: str) -> Agent | None:
        """The agent a handoff tool call switches to, if ``tool_name`` is one."""
        return next((a for a in self.handoffs if handoff_tool_name(a.name) == tool_name), None)

    def find(self, name: str) -> Agent | None:
        """Resolve an agent by name through this agent's handoff graph (itself included)."""
        seen: set[int] = set()
        stack: list[Agent] = [self]
        while stack:
            agent = stack.pop()
            if id(agent) in seen:
                continue
            seen.add(id(agent))
            if agent.name == name:
                return agent
            stack.extend(agent.handoffs)
        return None


@attrs.frozen
class RequestedCall:
    """A tool call the model asked for (the loop assigns ``call_id`` if it is empty)."""

    name: str
    arguments: dict[str, JSON] = attrs.field(factory=dict)
    call_id: str = ""

    def with_id(self) -> RequestedCall:
        return self if self.call_id else attrs.evolve(self, call_id=f"call_{uuid.uuid4().hex}")


@attrs.frozen
class ModelRequest:
    """What the model is asked: the active agent, its system prompt, the conversation so
    far (history, then this run's entries) and the tools it may call."""

    agent: str
    system: str
    messages: tuple[Entry, ...]
    tools: tuple[dict[str, JSON], ...]


@attrs.frozen
class ModelResponse:
    """The model's answer: text, tool calls (run by the loop), and usage."""

    text: str = ""
    tool_calls: tuple[RequestedCall, ...] = ()
    usage: Usage = Usage(requests=1)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "tool_calls", tuple(self.tool_calls))
        for call in self.tool_calls:
            decode_json(encode_json(call.arguments))


@runtime_checkable
class Model(Protocol):
    """Anything that answers model requests."""

    async def respond(self, request: ModelRequest) -> ModelResponse:
        """Answer one request. May raise; the run then fails."""
        ...


class ScriptedModel:
    """A :class:`Model` that replays ``responses`` in order (a response may also be a
    function of the request). Records every request in :attr:`requests`. Raises
    ``RuntimeError`` when it runs out of responses."""

    def __init__(
        self, responses: Sequence[ModelResponse | Callable[[ModelRequest], ModelResponse]]
    ) -> None:
        self.responses = list(responses)
        self.requests: list[ModelRequest] = []

    async def respond(self, request: ModelRequest) -> ModelResponse:
        await trio.lowlevel.checkpoint()
        if len(self.requests) >= len(self.responses):
            raise RuntimeError(f"ScriptedModel has no response #{len(self.requests) + 1}")
        self.requests.append(request)
        response = self.responses[len(self.requests) - 1]
        return response(request) if callable(response) else response
