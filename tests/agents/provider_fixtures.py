"""Provider wire formats, shaped after the providers' documented examples.

Bodies and event streams follow the examples of the OpenAI API reference (Chat
Completions: the ``chatcmpl-123`` completion, its tool-call variant and its
``chat.completion.chunk`` stream ending in ``[DONE]``; Responses: the ``resp_...``
response with ``message``/``output_text`` and ``function_call`` items, and its
``response.*`` event stream) and of the Anthropic API reference (Messages: the
``msg_...`` message with ``text`` and ``tool_use`` blocks, and its
``message_start`` ... ``message_stop`` event stream with ``ping`` and ``error``). Only
ids, texts and token counts vary.

Each :class:`Provider` knows one API's path, how to build its adapter against the local
server, and how to write the replies a test scripts.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import attrs
from provider_server import Reply, sse

from runtime.agents import RetryPolicy

Call = tuple[str, str, dict[str, Any]]  # (call id, tool name, arguments)

FAST_RETRY = RetryPolicy(max_attempts=3, initial_delay=0.01, max_delay=0.05, budget=10)


# -- OpenAI Chat Completions ---------------------------------------------------------------


def chat_body(text: str | None = None, calls: tuple[Call, ...] = (), cached: int = 0) -> Any:
    message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None}
    if calls:
        message["tool_calls"] = [
            {
                "id": cid,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
            for cid, name, args in calls
        ]
    return {
        "id": "chatcmpl-123",
        "object": "chat.completion",
        "created": 1677652288,
        "model": "gpt-4o-mini",
        "system_fingerprint": "fp_44709d6fcb",
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": "tool_calls" if calls else "stop",
            }
        ],
        "usage": {
            "prompt_tokens": 9,
            "completion_tokens": 12,
            "total_tokens": 21,
            "prompt_tokens_details": {"cached_tokens": cached},
        },
    }


def _chunk(delta: dict[str, Any], finish: str | None = None, usage: Any = None) -> Any:
    return {
        "id": "chatcmpl-123",
        "object": "chat.completion.chunk",
        "created": 1694268190,
        "model": "gpt-4o-mini",
        "system_fingerprint": "fp_44709d6fcb",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        "usage": usage,
    }


def chat_stream(pieces: list[str], calls: tuple[Call, ...] = ()) -> list[bytes]:
    events: list[Any] = [_chunk({"role": "assistant", "content": ""})]
    events += [_chunk({"content": p}) for p in pieces]
    for i, (cid, name, args) in enumerate(calls):
        text = json.dumps(args)
        first = {
            "index": i,
            "id": cid,
            "type": "function",
            "function": {"name": name, "arguments": ""},
        }
        events.append(_chunk({"tool_calls": [first]}))
        events.append(_chunk({"tool_calls": [{"index": i, "function": {"arguments": text}}]}))
    events.append(_chunk({}, "tool_calls" if calls else "stop"))
    usage = {"prompt_tokens": 9, "completion_tokens": 12, "total_tokens": 21}
    events.append({**_chunk({}), "choices": [], "usage": usage})
    return sse([(None, e) for e in events] + [(None, "[DONE]")])


# -- OpenAI Responses ----------------------------------------------------------------------


def responses_body(text: str | None = None, calls: tuple[Call, ...] = (), cached: int = 0) -> Any:
    output: list[Any] = []
    if text is not None:
        output.append(
            {
                "type": "message",
                "id": "msg_67ccd2bf17f0819081ff3bb2cf6508e6",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        )
    for cid, name, args in calls:
        output.append(
            {
                "type": "function_call",
                "id": f"fc_{cid}",
                "call_id": cid,
                "name": name,
                "arguments": json.dumps(args),
                "status": "completed",
            }
        )
    return {
        "id": "resp_67ccd2bed1ec8190b14f964abc054267",
        "object": "response",
        "created_at": 1741476542,
        "status": "completed",
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "max_output_tokens": None,
        "model": "gpt-4.1-2025-04-14",
        "output": output,
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "reasoning": {"effort": None, "summary": None},
        "store": False,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": {
            "input_tokens": 36,
            "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": 87,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 123,
        },
        "user": None,
        "metadata": {},
    }


def responses_stream(pieces: list[str], calls: tuple[Call, ...] = ()) -> list[bytes]:
    done = responses_body("".join(pieces) if pieces else None, calls)
    started = {**done, "status": "in_progress", "output": [], "usage": None}
    seq = iter(range(1000))
    events: list[tuple[str, Any]] = [
        ("response.created", {"type": "response.created", "response": started}),
        ("response.in_progress", {"type": "response.in_progress", "response": started}),
    ]
    index = 0
    if pieces:
        item = {**done["output"][0], "status": "in_progress", "content": []}
        events.append(("response.output_item.added", {"output_index": 0, "item": item}))
        for piece in pieces:
            events.append(
                (
                    "response.output_text.delta",
                    {"item_id": item["id"], "output_index": 0, "content_index": 0, "delta": piece},
                )
            )
        index = 1
    for i, (cid, name, args) in enumerate(calls):
        item = {"type": "function_call", "id": f"fc_{cid}", "call_id": cid, "name": name}
        item |= {"arguments": "", "status": "in_progress"}
        events.append(("response.output_item.added", {"output_index": index + i, "item": item}))
        events.append(
            (
                "response.function_call_arguments.delta",
                {"item_id": item["id"], "output_index": index + i, "delta": json.dumps(args)},
            )
        )
    events.append(("response.completed", {"response": done}))
    return sse(
        [(name, {"type": name, **data, "sequence_number": next(seq)}) for name, data in events]
    )


# -- Anthropic Messages --------------------------------------------------------------------


def messages_body(text: str | None = None, calls: tuple[Call, ...] = (), cached: int = 0) -> Any:
    content: list[Any] = [] if text is None else [{"type": "text", "text": text}]
    content += [{"type": "tool_use", "id": cid, "name": n, "input": a} for cid, n, a in calls]
    return {
        "id": "msg_013Zva2CMHLNnXjNJJKqJ2EF",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": content,
        "stop_reason": "tool_use" if calls else "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 2095,
            "output_tokens": 503,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": cached,
        },
    }


def messages_stream(pieces: list[str], calls: tuple[Call, ...] = ()) -> list[bytes]:
    start = {**messages_body(), "content": [], "stop_reason": None}
    start["usage"] = {"input_tokens": 25, "output_tokens": 1}
    events: list[tuple[str, Any]] = [("message_start", {"message": start})]
    index = 0
    if pieces:
        block: dict[str, Any] = {"type": "text", "text": ""}
        events.append(("content_block_start", {"index": 0, "content_block": block}))
        events.append(("ping", {}))
        for piece in pieces:
            delta = {"type": "text_delta", "text": piece}
            events.append(("content_block_delta", {"index": 0, "delta": delta}))
        events.append(("content_block_stop", {"index": 0}))
        index = 1
    for i, (cid, name, args) in enumerate(calls):
        block = {"type": "tool_use", "id": cid, "name": name, "input": {}}
        events.append(("content_block_start", {"index": index + i, "content_block": block}))
        delta = {"type": "input_json_delta", "partial_json": json.dumps(args)}
        events.append(("content_block_delta", {"index": index + i, "delta": delta}))
        events.append(("content_block_stop", {"index": index + i}))
    stop = {"stop_reason": "tool_use" if calls else "end_turn", "stop_sequence": None}
    events.append(("message_delta", {"delta": stop, "usage": {"output_tokens": 15}}))
    events.append(("message_stop", {}))
    return sse([(name, {"type": name, **data}) for name, data in events])


ANTHROPIC_OVERLOADED = sse(
    [("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})]
)


# -- the providers -------------------------------------------------------------------------


@attrs.frozen
class Provider:
    """One API as the tests drive it."""

    name: str
    path: str
    body: Callable[..., Any]
    stream: Callable[..., list[bytes]]
    make: Callable[..., Any]  # (server url, **adapter options) -> adapter
    error_body: Any


def _openai_chat(url: str, **kw: Any) -> Any:
    from runtime.agents import OpenAIChatModel

    return OpenAIChatModel("gpt-4o-mini", base_url=url + "/v1", api_key="sk-test", **kw)


def _openai_responses(url: str, **kw: Any) -> Any:
    from runtime.agents import OpenAIResponsesModel

    return OpenAIResponsesModel("gpt-4.1", base_url=url + "/v1", api_key="sk-test", **kw)


def _anthropic(url: str, **kw: Any) -> Any:
    from runtime.agents import AnthropicModel

    return AnthropicModel("claude-sonnet-4-5", base_url=url, api_key="sk-ant-test", **kw)


_OPENAI_ERROR = {"error": {"message": "Rate limit reached", "type": "requests", "code": None}}

PROVIDERS = [
    Provider("chat", "/v1/chat/completions", chat_body, chat_stream, _openai_chat, _OPENAI_ERROR),
    Provider(
        "responses",
        "/v1/responses",
        responses_body,
        responses_stream,
        _openai_responses,
        _OPENAI_ERROR,
    ),
    Provider(
        "anthropic",
        "/v1/messages",
        messages_body,
        messages_stream,
        _anthropic,
        {"type": "error", "error": {"type": "rate_limit_error", "message": "Rate limited"}},
    ),
]


def json_reply(provider: Provider, *args: Any, **kwargs: Any) -> Reply:
    return Reply(body=provider.body(*args, **kwargs))
