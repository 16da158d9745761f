"""The model protocol of tidelog's run loop: requests, responses, usage, stream deltas.

The loop is model-agnostic: a :class:`Model` gets a :class:`ModelRequest` (system prompt,
the conversation so far, the tools, the output schema) and answers with a
:class:`ModelResponse` (text, tool calls, finish reason, usage). A model that can stream
also has ``stream(request)``: an async iterator of :data:`ModelStreamEvent` -- text and
tool-call deltas as they arrive, :class:`StreamRestarted` when the turn is being asked
again after a failure, and last the whole :class:`ModelResponse`. Models without
``stream`` work everywhere (a streamed run then gets whole turns only).

:class:`ScriptedModel` replays a fixed list of responses (and streams them in pieces):
tests, examples and the demo use it, so nothing needs a network or an API key. The
provider adapters (``OpenAIChatModel``, ``OpenAIResponsesModel``, ``AnthropicModel``)
live in their own modules.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Protocol, TypeAlias, runtime_checkable

import attrs
import trio

from stores import JSON, decode_json, encode_json

from ._transcript import Entry

__all__ = [
    "UNPARSED_ARGUMENTS",
    "Model",
    "ModelRequest",
    "ModelResponse",
    "ModelStreamEvent",
    "RequestedCall",
    "ScriptedModel",
    "StreamRestarted",
    "StreamingModel",
    "TextDelta",
    "ToolCallDelta",
    "Usage",
]

#: Key of the only argument of a call whose arguments were not a JSON object (the raw
#: text is kept under it, so the call is recorded, sent back as it came, and its tool
#: result tells the model what was wrong).
UNPARSED_ARGUMENTS = "__unparsed_arguments__"

_USAGE_FIELDS = ("requests", "input_tokens", "output_tokens", "cached_tokens")


@attrs.frozen
class Usage:
    """Token usage, summed over a run's model requests.

    ``input_tokens`` counts every prompt token (cached ones included), ``cached_tokens``
    those of them read from the provider's prompt cache."""

    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(*(getattr(self, f) + getattr(other, f) for f in _USAGE_FIELDS))

    def to_json(self) -> dict[str, JSON]:
        return {f: getattr(self, f) for f in _USAGE_FIELDS}

    def entry_json(self) -> dict[str, JSON]:
        """The usage as recorded on an assistant entry: the turn's token counts
        (``cached_tokens`` only when some were cached)."""
        out: dict[str, JSON] = {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
        }
        if self.cached_tokens:
            out["cached_tokens"] = self.cached_tokens
        return out

    @classmethod
    def from_json(cls, obj: JSON) -> Usage:
        """Load a stored usage; fields missing (older versions) or not ints count 0."""
        if not isinstance(obj, dict):
            return cls()
        values = [obj.get(k, 0) for k in _USAGE_FIELDS]
        return cls(*(v if type(v) is int else 0 for v in values))


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
    far (history, then this run's entries; sidecar entries included -- adapters never
    send them), the tools it may call (``{"name", "description", "parameters"}`` plus
    ``"strict": True`` when the schema is strict-compatible), and the schema the final
    answer must follow (``{"name", "schema", "strict"}``) or ``None`` for plain text."""

    agent: str
    system: str
    messages: tuple[Entry, ...]
    tools: tuple[dict[str, JSON], ...]
    output_schema: dict[str, JSON] | None = None


@attrs.frozen
class ModelResponse:
    """The model's answer: text, tool calls (run by the loop), usage, and why it stopped
    (``"stop"``, ``"tool_calls"``, ``"length"``, ``"content_filter"``, a provider's own
    reason, or ``None`` when the model does not say)."""

    text: str = ""
    tool_calls: tuple[RequestedCall, ...] = ()
    usage: Usage = Usage(requests=1)
    finish_reason: str | None = None

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "tool_calls", tuple(self.tool_calls))
        for call in self.tool_calls:
            decode_json(encode_json(call.arguments))


@attrs.frozen
class TextDelta:
    """A piece of the answer's text, as it arrived."""

    text: str


@attrs.frozen
class ToolCallDelta:
    """A piece of a tool call, as it arrived: ``index`` tells the calls of one turn
    apart; ``call_id`` and ``name`` come with the call's first piece (empty after),
    ``arguments`` is the next fragment of its JSON text."""

    index: int
    call_id: str = ""
    name: str = ""
    arguments: str = ""


@attrs.frozen
class StreamRestarted:
    """The turn failed after some deltas and is being requested again (within the retry
    budget): drop what this turn streamed so far."""

    reason: str


#: What ``Model.stream`` yields: deltas, restarts, and last the whole response.
ModelStreamEvent: TypeAlias = TextDelta | ToolCallDelta | StreamRestarted | ModelResponse


@runtime_checkable
class Model(Protocol):
    """Anything that answers model requests."""

    async def respond(self, request: ModelRequest) -> ModelResponse:
        """Answer one request. May raise; the run then fails."""
        ...


@runtime_checkable
class StreamingModel(Model, Protocol):
    """A model that can also stream its answer."""

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        """Answer one request piece by piece: deltas as they arrive, then exactly one
        :class:`ModelResponse` (the whole turn) as the last item. The caller closes the
        iterator (``aclose``) if it stops early."""
        ...


Script: TypeAlias = ModelResponse | Callable[[ModelRequest], ModelResponse]


class ScriptedModel:
    """A :class:`StreamingModel` that replays ``responses`` in order (a response may also
    be a function of the request). Records every request in :attr:`requests`. Raises
    ``RuntimeError`` when it runs out of responses. Streaming yields the text word by
    word and each call in two pieces, then the response."""

    def __init__(self, responses: Sequence[Script]) -> None:
        self.responses = list(responses)
        self.requests: list[ModelRequest] = []

    async def respond(self, request: ModelRequest) -> ModelResponse:
        await trio.lowlevel.checkpoint()
        if len(self.requests) >= len(self.responses):
            raise RuntimeError(f"ScriptedModel has no response #{len(self.requests) + 1}")
        self.requests.append(request)
        response = self.responses[len(self.requests) - 1]
        return response(request) if callable(response) else response

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        response = await self.respond(request)
        words = response.text.split(" ")
        for i, word in enumerate(words):
            if word or i:
                yield TextDelta(word if i == 0 else " " + word)
        for index, call in enumerate(response.tool_calls):
            text = encode_json(call.arguments)
            half = len(text) // 2
            yield ToolCallDelta(index, call.call_id, call.name, text[:half])
            yield ToolCallDelta(index, arguments=text[half:])
        yield response
