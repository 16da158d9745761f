"""The OpenAI Chat Completions adapter (also any OpenAI-compatible server: vLLM, Ollama,
a LiteLLM proxy -- through ``base_url``), on the official ``openai`` SDK (the ``openai``
extra). Its async client runs under trio through anyio.

Mapping, transcript -> messages: the system prompt is a ``system`` message; a
:class:`UserMessage` a ``user`` message; an :class:`AssistantMessage` an ``assistant``
message, which the :class:`ToolCall` entries after it join as ``tool_calls`` (calls
without a message before them get an assistant message of their own); a
:class:`ToolResult` a ``tool`` message. Handoffs are tool calls and results like any
other. Sidecar entries are never sent.

Parts (images, files, more text) make a message's ``content`` a list of content parts:
``text``, ``image_url`` (the URL, or a ``data:`` URL of the bytes; ``detail`` when set)
and ``file`` (``file_data`` as a ``data:`` URL with ``filename``: the part's name or
``file.<ext>``; or ``file_id``). A file by URL cannot be sent (the API takes none):
:class:`~runtime.agents.ModelRequestError`. A ``tool`` message holds text only, so a
tool result's text parts stay in it and its images and files follow the group of tool
messages in a ``user`` message that names the call. Plain messages are sent as strings,
as before. Response -> :class:`ModelResponse`: the message's
content (or refusal), its tool calls (arguments parsed from JSON; text that is not a JSON
object is kept under ``UNPARSED_ARGUMENTS``), the finish reason, and usage with
``prompt_tokens_details.cached_tokens``.

The agent's output type goes out as ``response_format`` (``json_schema``, strict when
the schema allows); tools as ``function`` tools (``strict`` when the schema allows).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import openai

from stores import JSON

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
from ._parts import FilePart, ImagePart, Part, TextPart, data_url, file_name
from ._provider import ProviderModel, RetryPolicy, stream_cut
from ._transcript import (
    AssistantMessage,
    Entry,
    SidecarEntry,
    ToolCall,
    ToolResult,
    UserMessage,
)

__all__ = ["OpenAIChatModel", "parse_arguments", "unparse_arguments"]

_FINISH = {"function_call": "tool_calls"}


def parse_arguments(text: str | None) -> dict[str, JSON]:
    """A call's arguments from the model's JSON text (kept raw if not a JSON object)."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {UNPARSED_ARGUMENTS: text}
    return value if isinstance(value, dict) else {UNPARSED_ARGUMENTS: text}


def unparse_arguments(arguments: dict[str, JSON]) -> str:
    """A call's arguments as the model sent them."""
    raw = arguments.get(UNPARSED_ARGUMENTS)
    if set(arguments) == {UNPARSED_ARGUMENTS} and isinstance(raw, str):
        return raw
    return json.dumps(arguments, ensure_ascii=False)


def chat_part(part: Part) -> dict[str, Any]:
    """One part as a Chat Completions content part (see the module docstring)."""
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    if isinstance(part, ImagePart):
        image: dict[str, Any] = {"url": part.url if part.url is not None else data_url(part)}
        if part.detail is not None:
            image["detail"] = part.detail
        return {"type": "image_url", "image_url": image}
    return {"type": "file", "file": _chat_file(part)}


def _chat_file(part: FilePart) -> dict[str, Any]:
    if part.file_id is not None:
        file: dict[str, Any] = {"file_id": part.file_id}
        if part.name is not None:
            file["filename"] = part.name
        return file
    if part.url is not None:
        raise ModelRequestError(
            "openai",
            f"Chat Completions takes no file by URL ({part.url!r}): send its bytes "
            "(FilePart(data=...)) or an uploaded file_id, or use OpenAIResponsesModel",
        )
    return {"file_data": data_url(part), "filename": file_name(part)}


def chat_messages(system: str, entries: tuple[Entry, ...]) -> list[dict[str, Any]]:
    """The transcript as Chat Completions messages (see the module docstring)."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    attached: list[dict[str, Any]] = []  # tool results' images and files, sent after them
    for entry in entries:
        if isinstance(entry, SidecarEntry):
            continue
        if attached and not isinstance(entry, ToolResult):
            messages.extend(attached)
            attached.clear()
        if isinstance(entry, UserMessage):
            content: Any = entry.text
            if entry.parts:
                content = [chat_part(p) for p in entry.content]
            messages.append({"role": "user", "content": content})
        elif isinstance(entry, AssistantMessage):
            messages.append({"role": "assistant", "content": entry.text})
        elif isinstance(entry, ToolCall):
            last = messages[-1] if messages else None
            if last is None or last["role"] != "assistant":
                last = {"role": "assistant", "content": None}
                messages.append(last)
            last.setdefault("tool_calls", []).append(
                {
                    "id": entry.call_id,
                    "type": "function",
                    "function": {
                        "name": entry.name,
                        "arguments": unparse_arguments(entry.arguments),
                    },
                }
            )
        elif isinstance(entry, ToolResult):
            content = entry.output
            if entry.parts:
                texts = [p for p in entry.content if isinstance(p, TextPart)]
                content = [chat_part(p) for p in texts] or ""
                others = [chat_part(p) for p in entry.parts if not isinstance(p, TextPart)]
                if others:
                    note = f"Attached to the result of tool call {entry.call_id}:"
                    others.insert(0, {"type": "text", "text": note})
                    attached.append({"role": "user", "content": others})
            messages.append({"role": "tool", "tool_call_id": entry.call_id, "content": content})
    messages.extend(attached)
    return messages


def chat_tools(request: ModelRequest) -> list[dict[str, Any]]:
    tools = []
    for tool in request.tools:
        function: dict[str, Any] = {
            "name": tool["name"],
            "description": tool.get("description", ""),
            "parameters": tool.get("parameters") or {"type": "object", "properties": {}},
        }
        if tool.get("strict"):
            function["strict"] = True
        tools.append({"type": "function", "function": function})
    return tools


def chat_usage(usage: Any) -> Usage:
    if usage is None:
        return Usage(requests=1)
    details = getattr(usage, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None) or 0
    return Usage(1, usage.prompt_tokens or 0, usage.completion_tokens or 0, cached)


class OpenAIChatModel(ProviderModel):
    """A :class:`~runtime.agents.StreamingModel` on OpenAI's Chat Completions API.

    ``model``: the model name. ``client``: an ``openai.AsyncOpenAI`` to use (the adapter
    copies it with the SDK's retries off), or none: the adapter makes one from
    ``base_url`` and ``api_key`` (each defaulting to the SDK's environment variables,
    ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY``) and closes it in :meth:`aclose`.
    ``retry``: see :class:`RetryPolicy` (the adapter retries, not the SDK).
    ``timeout``: seconds per attempt (for a stream: between two chunks).
    ``stream_usage``: ask for usage in streams (``stream_options``); turn off for a
    server that does not support it. ``settings``: more ``create`` arguments
    (``temperature``, ``max_completion_tokens``, ...), sent as given.

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
        stream_usage: bool = True,
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
        self.stream_usage = stream_usage

    def arguments(self, request: ModelRequest) -> dict[str, Any]:
        """The ``chat.completions.create`` arguments for ``request``."""
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": chat_messages(request.system, request.messages),
            "timeout": self.timeout,
            **self.settings,
        }
        if request.tools:
            kwargs["tools"] = chat_tools(request)
        if request.output_schema is not None:
            kwargs["response_format"] = {
                "type": "json_schema",
                "json_schema": request.output_schema,
            }
        return kwargs

    async def _once(self, request: ModelRequest) -> ModelResponse:
        completion = await self.client.chat.completions.create(**self.arguments(request))
        if not completion.choices:
            raise ValueError("the completion has no choices")
        choice = completion.choices[0]
        message = choice.message
        calls = tuple(
            RequestedCall(c.function.name, parse_arguments(c.function.arguments), c.id)
            for c in message.tool_calls or ()
            if c.type == "function"
        )
        reason = choice.finish_reason
        return ModelResponse(
            message.content or message.refusal or "",
            calls,
            chat_usage(completion.usage),
            _FINISH.get(reason, reason) if reason else None,
        )

    async def _stream_once(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        kwargs = self.arguments(request)
        if self.stream_usage:
            kwargs["stream_options"] = {"include_usage": True}
        text: list[str] = []
        calls: dict[int, list[str]] = {}  # index -> [id, name, arguments]
        reason: str | None = None
        usage = Usage(requests=1)
        async with await self.client.chat.completions.create(**kwargs, stream=True) as chunks:
            async for chunk in chunks:
                if chunk.usage is not None:
                    usage = chat_usage(chunk.usage)
                for choice in chunk.choices[:1]:
                    delta = choice.delta
                    if delta.content:
                        text.append(delta.content)
                        yield TextDelta(delta.content)
                    for tc in delta.tool_calls or ():
                        call = calls.setdefault(tc.index, ["", "", ""])
                        fn = tc.function
                        piece = ToolCallDelta(
                            tc.index,
                            tc.id or "",
                            (fn and fn.name) or "",
                            (fn and fn.arguments) or "",
                        )
                        call[0] += piece.call_id
                        call[1] += piece.name
                        call[2] += piece.arguments
                        yield piece
                    if choice.finish_reason:
                        reason = choice.finish_reason
        if reason is None:
            raise stream_cut(self.provider, "finish_reason")
        yield ModelResponse(
            "".join(text),
            tuple(
                RequestedCall(name, parse_arguments(args), call_id)
                for _, (call_id, name, args) in sorted(calls.items())
            ),
            usage,
            _FINISH.get(reason, reason),
        )
