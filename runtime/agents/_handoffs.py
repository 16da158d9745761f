"""Handoff objects: ``AgentHandoff(target, tool_name=..., description=...)`` (lovia's
``Handoff``; lovia being the Python agent framework whose Session/Checkpoint/Runner
design this layer follows). The name ``Handoff`` is the run event saying a handoff
happened, so the object that configures one is ``AgentHandoff``.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import attrs

from stores import InvalidArgumentError

if TYPE_CHECKING:
    from ._agent import Agent

__all__ = ["AgentHandoff"]

_TOOL_NAME = re.compile(r"\A[A-Za-z0-9_-]{1,64}\Z")


@attrs.frozen
class AgentHandoff:
    """Hand the run to ``target`` through a tool the model sees as ``tool_name``
    (default ``transfer_to_<target name>``), described by ``description`` (default
    ``"Hand off to <name>"``: say *when* to use it). Put it in ``Agent(handoffs=...)``
    beside or instead of bare agents. Resume resolves the active agent by its name
    through the handoff graph, whatever tool led there.

    Raises :class:`~stores.InvalidArgumentError` for a target that is not an Agent, a
    tool name providers refuse (1-64 letters, digits, ``_``, ``-``) or an empty
    description."""

    target: Agent
    tool_name: str | None = attrs.field(default=None, kw_only=True)
    description: str | None = attrs.field(default=None, kw_only=True)

    def __attrs_post_init__(self) -> None:
        from ._agent import Agent, handoff_tool_name

        if not isinstance(self.target, Agent):
            raise InvalidArgumentError(
                f"AgentHandoff.target must be an Agent, not {type(self.target).__name__}"
            )
        if self.tool_name is None:
            object.__setattr__(self, "tool_name", handoff_tool_name(self.target.name))
        elif not isinstance(self.tool_name, str) or not _TOOL_NAME.match(self.tool_name):
            raise InvalidArgumentError(
                f"AgentHandoff.tool_name must be 1-64 letters, digits, '_' or '-', "
                f"not {self.tool_name!r}"
            )
        if self.description is None:
            object.__setattr__(self, "description", f"Hand off to {self.target.name}")
        elif not isinstance(self.description, str) or not self.description.strip():
            raise InvalidArgumentError("AgentHandoff.description must be a non-empty str")

    @property
    def name(self) -> str:
        """The tool name (set at construction)."""
        assert self.tool_name is not None
        return self.tool_name
