"""Agents and handoffs.

An :class:`Agent` is a name, instructions, the tools it may call, the agents it may hand
the run to (each through a ``transfer_to_<name>`` tool), its model, and optionally the
type of its final answer (see ``_output``). Tools, models and the model protocol live in
``_tools`` and ``_models``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs

from stores import JSON, InvalidArgumentError

from ._handoffs import AgentHandoff
from ._models import Model
from ._output import OutputSchema
from ._tools import FunctionTool, RunContext

__all__ = ["Agent", "handoff_tool_name"]


def handoff_tool_name(agent_name: str) -> str:
    """The tool name through which the model hands the run to ``agent_name``."""
    return f"transfer_to_{agent_name}"


def _route(handoff: Agent | AgentHandoff) -> AgentHandoff:
    """A bare agent as the handoff it stands for."""
    return handoff if isinstance(handoff, AgentHandoff) else AgentHandoff(handoff)


def _handoff_schema(handoff: AgentHandoff) -> dict[str, JSON]:
    return {
        "name": handoff.name,
        "description": handoff.description,
        "parameters": {
            "type": "object",
            "properties": {},
            "required": [],
            "additionalProperties": False,
        },
        "strict": True,
    }


@attrs.frozen(eq=False)
class Agent:
    """A named agent: instructions (text, or a function of the :class:`RunContext`), the
    tools it may call, the agents it may hand off to, its model, and ``output_type``:
    ``None`` for a text answer, else an attrs class, dataclass, TypedDict, other
    annotation, or a JSON schema ``dict`` the final answer must follow.

    Raises :class:`~stores.InvalidArgumentError` for an empty name, duplicate tool names
    or an output type with no JSON schema."""

    name: str
    instructions: str | Callable[[RunContext], str]
    tools: Sequence[FunctionTool] = ()
    handoffs: Sequence[Agent | AgentHandoff] = ()
    model: Model | None = None
    output_type: Any = None
    output: OutputSchema | None = attrs.field(init=False, default=None, repr=False)
    #: ``handoffs`` as :class:`AgentHandoff` objects (a bare agent with the defaults).
    routes: tuple[AgentHandoff, ...] = attrs.field(init=False, default=(), repr=False)

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise InvalidArgumentError("Agent.name must be a non-empty str")
        for h in self.handoffs:
            if not isinstance(h, Agent | AgentHandoff):
                raise InvalidArgumentError(
                    f"agent {self.name!r}: a handoff must be an Agent or an AgentHandoff, "
                    f"not {type(h).__name__}"
                )
        routes = tuple(_route(h) for h in self.handoffs)
        names = [t.name for t in self.tools] + [r.name for r in routes]
        if len(set(names)) != len(names):
            raise InvalidArgumentError(f"agent {self.name!r}: duplicate tool names {names}")
        object.__setattr__(self, "tools", tuple(self.tools))
        object.__setattr__(self, "handoffs", tuple(self.handoffs))
        object.__setattr__(self, "routes", routes)
        if self.output_type is not None:
            object.__setattr__(self, "output", OutputSchema.of(self.output_type))

    def system_prompt(self, ctx: RunContext) -> str:
        """Render the instructions for one request."""
        return self.instructions(ctx) if callable(self.instructions) else self.instructions

    def tool_schemas(self) -> tuple[dict[str, JSON], ...]:
        """The tools as the model sees them: the function tools, then the handoffs."""
        return tuple(t.schema() for t in self.tools) + tuple(
            _handoff_schema(r) for r in self.routes
        )

    def tool(self, name: str) -> FunctionTool | None:
        """The tool called ``name``, if this agent has it."""
        return next((t for t in self.tools if t.name == name), None)

    def handoff(self, tool_name: str) -> Agent | None:
        """The agent a handoff tool call switches to, if ``tool_name`` is one."""
        return next((r.target for r in self.routes if r.name == tool_name), None)

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
            stack.extend(r.target for r in agent.routes)
        return None
