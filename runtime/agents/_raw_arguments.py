"""Tool-call arguments as the model sent them, when they were not a JSON object.

A call whose arguments text was not valid JSON, or valid JSON but not an object, is
stored like any other with ``arguments == {UNPARSED_ARGUMENTS: raw_text}``: the call is
checkpointed, replayed and sent back to the model as it came (OpenAI adapters send the
raw text; Anthropic, whose ``tool_use.input`` must be an object, sends ``{}``), and its
result is an error telling the model what was wrong (the body never runs).
"""

from __future__ import annotations

from ._models import UNPARSED_ARGUMENTS
from ._transcript import ToolCall

__all__ = ["raw_arguments"]


def raw_arguments(call: ToolCall) -> str | None:
    """The raw arguments text of a call whose arguments were not a JSON object, else
    ``None`` (its ``arguments`` are the object the model sent)."""
    raw = call.arguments.get(UNPARSED_ARGUMENTS)
    if set(call.arguments) == {UNPARSED_ARGUMENTS} and isinstance(raw, str):
        return raw
    return None
