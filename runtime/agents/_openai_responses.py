"""The OpenAI Responses API adapter, on the official ``openai`` SDK (the ``openai`` extra).

Stateless: every request carries the whole conversation (``store=False``), as the
checkpoint is the state. Mapping, transcript -> ``input`` items: the system prompt is
``instructions``; a :class:`UserMessage` / :class:`AssistantMessage` an input message of
that role; a :class:`ToolCall` a ``function_call`` item; a :class:`ToolResult` a
``function_call_output`` item (handoffs are calls and results like any other); sidecar
entries are never sent. Parts make a message's ``content`` (and a tool result's
``output``) a list of ``input_text``, ``input_image`` (``image_url``: the URL or a
``data:`` URL of the bytes; ``detail``, ``"auto"`` unless set) and ``input_file``
(``file_data`` as a ``data:`` URL with ``filename``: the part's name or ``file.<ext>``;
``file_url``; or ``file_id``); plain ones stay strings, as before. Response ->
:class:`ModelResponse`: the ``output_text`` of the message items, the ``function_call``
items, usage with ``input_tokens_details.cached_tokens``, and a finish reason derived
from the items and the status (``"tool_calls"``, ``"stop"``, or an incomplete
response's reason, e.g. ``"max_output_tokens"`` becomes ``"length"``). The output type
goes out as ``text.format`` (``json_schema``). A ``response.failed`` or ``error`` event in a stream
is a server error (retried like a 5xx).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import openai

from ._errors import ModelServerError
from ._models import (
    ModelRequest,
    ModelResponse,
    ModelStreamEvent,
    RequestedCall,
    TextDelta,
    ToolCallDelta,
    Usage,
)
from ._openai import parse_arguments, unparse_arguments
from ._parts import ImagePart, Part, TextPart, data_url, file_name
from ._provider import ProviderModel, RetryPolicy, stream_cut
from ._transcript import AssistantMessage, Entry, ToolCall, ToolResult, UserMessage

__all__ = ["OpenAIResponsesModel"]

_INCOMPLETE = {"max_output_tokens": "length", "content_filter": "content_filter"}


def response_part(part: Part) -> dict[str, Any]:
    """One part as a Responses API input content item (see the module docstring)."""
    if isinstance(part, TextPart):
        return {"type": "input_text", "text": part.text}
    if isinstance(part, ImagePart):
        url = part.url if part.url is not None else data_url(part)
        return {"type": "input_image", "image_url": url, "detail": part.detail or "auto"}
    item: dict[str, Any] = {"type": "input_file"}
    if part.file_id is not None:
        item["file_id"] = part.file_id
    elif part.url is not None:
        item["file_url"] = part.url
    else:
        item["file_data"] = data_url(part)
        item["filename"] = file_name(part)
    if part.name is not None:
        item["filename"] = part.name
    return item


def response_input(entries: tuple[Entry, ...]) -> list[dict[str, Any]]:
    """The transcript as Responses API input items (see the module docstring)."""
    items: list[dict[str, Any]] = []
    for entry in entries:
        if isinstance(entry, UserMessage):
            content: Any = entry.text
            if entry.parts:
                content = [response_part(p) for p in entry.content]
            items.append({"role": "user", "content": content})
        elif isinstance(entry, AssistantMessage):
            if entry.text:
                items.append({"role": "assistant", "content": entry.text})
        elif isinstance(entry, ToolCall):
            items.append(
                {
                    "type": "function_call",
                    "call_id": entry.call_id,
                    "name": entry.name,
                    "arguments": unparse_arguments(entry.arguments),
                }
            )
        elif isinstance(entry, ToolResult):
            output: Any = entry.output
            if entry.parts:
                output = [response_part(p) for p in entry.content]
            items.append(
                {"type": "function_call_output", "call_id": entry.call_id, "output": output}
            )
    return items


def response_tools(request: ModelRequest) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "name": tool["name"],
            "description": tool.get("description", ""),
            "parameters": tool.get("parameters") or {"type": "object", "properties": {}},
            "strict": bool(tool.get("strict")),
        }
        for tool in request.tools
    ]


def response_usage(usage: Any) -> Usage:
    if usage is None:
        return Usage(requests=1)
    details = getattr(usage, "input_tokens_details", None)
    cached = getattr(details, "cached_tokens", None) or 0
    return Usage(1, usage.input_tokens or 0, usage.output_tokens or 0, cached)


def parse_response(response: Any) -> ModelResponse:
    """A Responses API ``Response`` as a :class:`ModelResponse`."""
    if response.status == "failed":
        error = response.error
        raise ModelServerError(
            "openai", error.message if error else "the response failed", retryable=True
        )
    calls = tuple(
        RequestedCall(item.name, parse_arguments(item.arguments), item.call_id)
        for item in response.output
        if item.type == "function_call"
    )
    reason = "tool_calls" if calls else "stop"
    if response.status == "incomplete":
        why = getattr(response.incomplete_details, "reason", None) or "incomplete"
        reason = _INCOMPLETE.get(why, why)
    return ModelResponse(response.output_text, calls, response_usage(response.usage), reason)


class OpenAIResponsesModel(ProviderModel):
    """A :class:`~runtime.agents.StreamingModel` on OpenAI's Responses API.

    Arguments as :class:`OpenAIChatModel` (``settings`` are more ``responses.create``
    arguments: ``reasoning``, ``max_output_tokens``, ``temperature``, ...).

    Raises :class:`~runtime.agents.ModelError` subclasses when a turn fails for good.
    """

    provider = "openai"
    client_class = "AsyncOpenAI"
    sdk = openai

    def __init__(
        self,
        model: str,
        *,
        client: openai.AsyncOpenAI | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
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

    def arguments(self, request: ModelRequest) -> dict[str, Any]:
        """The ``responses.create`` arguments for ``request``."""
        kwargs: dict[str, Any] = {
            "model": self.model,
            "input": response_input(request.messages),
            "store": False,
            "timeout": self.timeout,
            **self.settings,
        }
        if request.system:
            kwargs["instructions"] = request.system
        if request.tools:
            kwargs["tools"] = response_tools(request)
        if request.output_schema is not None:
            kwargs["text"] = {"format": {"type": "json_schema", **request.output_schema}}
        return kwargs

    async def _once(self, request: ModelRequest) -> ModelResponse:
        return parse_response(await self.client.responses.create(**self.arguments(request)))

    async def _stream_once(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        final: ModelResponse | None = None
        index: dict[int, int] = {}  # output_index -> the call's index among the calls
        async with await self.client.responses.create(
            **self.arguments(request), stream=True
        ) as events:
            async for event in events:
                kind = event.type
                if kind == "response.output_text.delta":
                    yield TextDelta(event.delta)
                elif kind == "response.output_item.added" and event.item.type == "function_call":
                    index[event.output_index] = len(index)
                    item = event.item
                    yield ToolCallDelta(index[event.output_index], item.call_id, item.name)
                elif kind == "response.function_call_arguments.delta":
                    yield ToolCallDelta(index.get(event.output_index, 0), arguments=event.delta)
                elif kind in ("response.completed", "response.incomplete", "response.failed"):
                    final = parse_response(event.response)
                elif kind == "error":
                    raise ModelServerError("openai", event.message, retryable=True)
        if final is None:
            raise stream_cut(self.provider, "response.completed event")
        yield final
