"""The Anthropic Messages API adapter, on the official ``anthropic`` SDK (the
``anthropic`` extra). Its async client runs under trio through anyio.

Mapping, transcript -> messages: the system prompt is ``system``; a :class:`UserMessage`
a user text block; an :class:`AssistantMessage` an assistant text block (empty text is
left out: the API refuses empty blocks), the :class:`ToolCall` entries after it
``tool_use`` blocks of the same assistant message; a :class:`ToolResult` a
``tool_result`` block (``is_error`` kept) in a user message. Consecutive blocks of one
role share a message, as the API wants roles to alternate. Handoffs are tool calls and
results like any other; sidecar entries are never sent. Parts become blocks after the
text (plain messages are sent as before): ``text`` (empty ones left out), ``image``
(source ``url``, or ``base64`` with the media type), and ``document`` for a file
(``title``: its name) -- bytes of ``application/pdf`` as a ``base64`` source, of
``text/*`` as a ``text`` source (UTF-8), of ``image/*`` as an image block; a ``url``
source; a ``file`` source for a ``file_id`` (the Files API may need its beta header on
the client). A tool result with parts has these blocks as its ``content``. Bytes of
another media type, or text that is not UTF-8, cannot be sent:
:class:`~runtime.agents.ModelRequestError`. Response ->
:class:`ModelResponse`: the text blocks, the ``tool_use`` blocks, the stop reason
(``end_turn``/``stop_sequence`` -> ``"stop"``, ``tool_use`` -> ``"tool_calls"``,
``max_tokens`` -> ``"length"``, ``refusal`` -> ``"content_filter"``), and usage:
``input_tokens`` counts every prompt token (the API's uncached ones plus cache reads
and writes), ``cached_tokens`` the cache reads. The output type goes out as
``output_config.format`` (``json_schema``); tools carry ``strict`` when their schema
allows it. An ``error`` event in a stream is a server error (retried like a 5xx).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anthropic

from ._errors import ModelRequestError
from ._models import (
    UNPARSED_ARGUMENTS,
    ModelRequest,
    ModelResponse,
    ModelStreamEvent,
    RequestedCall,
    TextDelta,
    ToolCallDelta,
    Usage,
)
from ._openai import parse_arguments
from ._parts import FilePart, ImagePart, Part, TextPart
from ._provider import ProviderModel, RetryPolicy, stream_cut
from ._transcript import AssistantMessage, Entry, ToolCall, ToolResult, UserMessage

__all__ = ["AnthropicModel"]

_STOP = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "refusal": "content_filter",
}


def anthropic_block(part: ImagePart | FilePart) -> dict[str, Any]:
    """An image or file part as a Messages API block (see the module docstring)."""
    if isinstance(part, ImagePart):
        if part.url is not None:
            return {"type": "image", "source": {"type": "url", "url": part.url}}
        source = {"type": "base64", "media_type": part.media_type, "data": part.base64}
        return {"type": "image", "source": source}
    family = (part.media_type or "").split("/", 1)[0]
    if part.file_id is not None:
        source = {"type": "file", "file_id": part.file_id}
        if family == "image":
            return {"type": "image", "source": source}
    elif part.url is not None:
        source = {"type": "url", "url": part.url}
    elif family == "image":
        return {"type": "image", "source": {**_base64(part), "media_type": part.media_type}}
    elif part.media_type == "application/pdf":
        source = {**_base64(part), "media_type": "application/pdf"}
    elif family == "text":
        assert part.data is not None
        try:
            text = part.data.decode("utf-8")
        except UnicodeDecodeError:
            raise ModelRequestError(
                "anthropic", f"the text file {file_label(part)} is not UTF-8"
            ) from None
        source = {"type": "text", "media_type": "text/plain", "data": text}
    else:
        raise ModelRequestError(
            "anthropic",
            f"the Messages API takes no {part.media_type} file ({file_label(part)}): send a "
            "PDF, text or image, or the file by url= or file_id=",
        )
    block: dict[str, Any] = {"type": "document", "source": source}
    if part.name is not None:
        block["title"] = part.name
    return block


def _base64(part: FilePart) -> dict[str, Any]:
    return {"type": "base64", "data": part.base64}


def file_label(part: FilePart) -> str:
    return repr(part.name) if part.name is not None else "unnamed"


def anthropic_content(parts: tuple[Part, ...]) -> list[dict[str, Any]]:
    """Parts as content blocks; empty texts left out (the API refuses empty blocks)."""
    blocks = []
    for part in parts:
        if isinstance(part, TextPart):
            if part.text:
                blocks.append({"type": "text", "text": part.text})
        else:
            blocks.append(anthropic_block(part))
    return blocks


def anthropic_messages(entries: tuple[Entry, ...]) -> list[dict[str, Any]]:
    """The transcript as Messages API messages (see the module docstring)."""
    messages: list[dict[str, Any]] = []

    def add(role: str, block: dict[str, Any]) -> None:
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"].append(block)
        else:
            messages.append({"role": role, "content": [block]})

    for entry in entries:
        if isinstance(entry, UserMessage):
            blocks = anthropic_content(entry.content) if entry.parts else []
            for part_block in blocks or [{"type": "text", "text": entry.text}]:
                add("user", part_block)
        elif isinstance(entry, AssistantMessage):
            if entry.text:
                add("assistant", {"type": "text", "text": entry.text})
        elif isinstance(entry, ToolCall):
            arguments = entry.arguments
            if set(arguments) == {UNPARSED_ARGUMENTS}:
                arguments = {}  # tool_use input must be an object; the result says why
            add(
                "assistant",
                {"type": "tool_use", "id": entry.call_id, "name": entry.name, "input": arguments},
            )
        elif isinstance(entry, ToolResult):
            content: Any = entry.output
            if entry.parts:
                content = anthropic_content(entry.content)
            block: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": entry.call_id,
                "content": content,
            }
            if entry.is_error:
                block["is_error"] = True
            add("user", block)
    return messages


def anthropic_tools(request: ModelRequest) -> list[dict[str, Any]]:
    tools = []
    for tool in request.tools:
        spec: dict[str, Any] = {
            "name": tool["name"],
            "description": tool.get("description", ""),
            "input_schema": tool.get("parameters") or {"type": "object", "properties": {}},
        }
        if tool.get("strict"):
            spec["strict"] = True
        tools.append(spec)
    return tools


def anthropic_usage(usage: Any) -> Usage:
    if usage is None:
        return Usage(requests=1)
    read = usage.cache_read_input_tokens or 0
    written = usage.cache_creation_input_tokens or 0
    return Usage(1, (usage.input_tokens or 0) + read + written, usage.output_tokens or 0, read)


class AnthropicModel(ProviderModel):
    """A :class:`~runtime.agents.StreamingModel` on Anthropic's Messages API.

    ``model``: the model name. ``client``: an ``anthropic.AsyncAnthropic`` to use (the
    adapter copies it with the SDK's retries off), or none: the adapter makes one from
    ``base_url`` and ``api_key`` (defaulting to ``ANTHROPIC_BASE_URL`` and
    ``ANTHROPIC_API_KEY``) and closes it in :meth:`aclose`. ``max_tokens``: the answer's
    limit (the API requires one). ``retry``, ``timeout``: as :class:`OpenAIChatModel`.
    ``settings``: more ``messages.create`` arguments (``temperature``, ``thinking``, ...).

    Raises :class:`~runtime.agents.ModelError` subclasses when a turn fails for good.
    """

    provider = "anthropic"
    client_class = "AsyncAnthropic"
    sdk = anthropic

    def __init__(
        self,
        model: str,
        *,
        client: anthropic.AsyncAnthropic | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        max_tokens: int = 4096,
        retry: RetryPolicy | None = None,
        timeout: float = 60.0,
        settings: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(
            model,
            client=client,
            base_url=base_url,
            api_key=api_key,
            retry=retry,
            timeout=timeout,
            settings=settings,
        )
        self.max_tokens = max_tokens

    def arguments(self, request: ModelRequest) -> dict[str, Any]:
        """The ``messages.create`` arguments for ``request``."""
        kwargs: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "messages": anthropic_messages(request.messages),
            "timeout": self.timeout,
            **self.settings,
        }
        if request.system:
            kwargs["system"] = request.system
        if request.tools:
            kwargs["tools"] = anthropic_tools(request)
        if request.output_schema is not None:
            schema = request.output_schema["schema"]
            kwargs["output_config"] = {"format": {"type": "json_schema", "schema": schema}}
        return kwargs

    async def _once(self, request: ModelRequest) -> ModelResponse:
        message = await self.client.messages.create(**self.arguments(request))
        text = "".join(block.text for block in message.content if block.type == "text")
        calls = tuple(
            RequestedCall(block.name, dict(block.input), block.id)
            for block in message.content
            if block.type == "tool_use"
        )
        reason = message.stop_reason
        return ModelResponse(
            text,
            calls,
            anthropic_usage(message.usage),
            _STOP.get(reason, reason) if reason else None,
        )

    async def _stream_once(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        text: list[str] = []
        calls: dict[int, list[str]] = {}  # block index -> [id, name, input JSON]
        order: list[int] = []
        usage: Any = None
        output_tokens = 0
        reason: str | None = None
        kwargs = self.arguments(request)
        async with await self.client.messages.create(**kwargs, stream=True) as events:
            async for event in events:
                if event.type == "message_start":
                    usage = event.message.usage
                elif event.type == "content_block_start":
                    block = event.content_block
                    if block.type == "tool_use":
                        calls[event.index] = [block.id, block.name, ""]
                        order.append(event.index)
                        yield ToolCallDelta(order.index(event.index), block.id, block.name)
                elif event.type == "content_block_delta":
                    delta = event.delta
                    if delta.type == "text_delta":
                        text.append(delta.text)
                        yield TextDelta(delta.text)
                    elif delta.type == "input_json_delta" and event.index in calls:
                        calls[event.index][2] += delta.partial_json
                        yield ToolCallDelta(order.index(event.index), arguments=delta.partial_json)
                elif event.type == "message_delta":
                    reason = event.delta.stop_reason
                    output_tokens = event.usage.output_tokens
        if reason is None:
            raise stream_cut(self.provider, "stop_reason")
        total = anthropic_usage(usage)
        yield ModelResponse(
            "".join(text),
            tuple(
                RequestedCall(calls[i][1], parse_arguments(calls[i][2]), calls[i][0]) for i in order
            ),
            Usage(1, total.input_tokens, output_tokens or total.output_tokens, total.cached_tokens),
            _STOP.get(reason, reason),
        )
