"""The provider adapters through the official SDKs, under trio, against a local HTTP
server on 127.0.0.1 speaking each API's wire format: a tool-calling conversation, a
streamed answer, 429 then success, a 500 and a stream broken mid-way, a timeout, a
malformed body, a stream cut before its end, cancellation, and the mapping of every
transcript entry."""

from __future__ import annotations

import pathlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
import sniffio
import trio
from provider_fixtures import FAST_RETRY, PROVIDERS, Provider, json_reply
from provider_server import ProviderServer, Reply, open_provider_server

from runtime import Runtime, open_runtime
from runtime.agents import (
    Agent,
    AssistantMessage,
    CheckpointOptions,
    Entry,
    ModelConnectionError,
    ModelError,
    ModelRateLimitError,
    ModelRequest,
    ModelResponseError,
    ModelTimeoutError,
    RetryPolicy,
    RunCompleted,
    RunEvent,
    RunFailed,
    Runner,
    RunResult,
    SidecarEntry,
    StreamRestarted,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolResult,
    UserMessage,
    checkpoints,
    function_tool,
    history,
)


@pytest.fixture
async def rt(tmp_path: pathlib.Path) -> AsyncIterator[Runtime]:
    """A runtime on a SQLite file."""
    async with open_runtime(tmp_path / "providers.db") as runtime:
        yield runtime


@pytest.fixture
async def server() -> AsyncIterator[ProviderServer]:
    """The scripted provider server on 127.0.0.1."""
    async with open_provider_server() as srv:
        yield srv


@pytest.fixture(params=PROVIDERS, ids=[p.name for p in PROVIDERS])
def provider(request: pytest.FixtureRequest) -> Provider:
    """Each API in turn."""
    return request.param  # type: ignore[no-any-return]


@function_tool
async def get_weather(city: str, unit: str = "celsius") -> str:
    """Get the weather.

    Args:
        city: The city.
        unit: celsius or fahrenheit.
    """
    assert sniffio.current_async_library() == "trio"
    return f"18 degrees {unit} in {city}"


def _sent_texts(body: Any) -> list[str]:
    """Every text a request body carries, in order (to find what was sent)."""
    out: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
        elif isinstance(node, str):
            out.append(node)

    walk(body["messages"] if "messages" in body else body["input"])
    return out


async def test_tool_calling_conversation(
    rt: Runtime, server: ProviderServer, provider: Provider
) -> None:
    """The model calls a tool, the loop runs it and sends the result back in the API's
    own shape; the answer completes the run with usage (cached tokens too) on the
    assistant entry. The SDK runs under trio."""
    server.add(
        provider.path,
        json_reply(provider, None, (("call_1", "get_weather", {"city": "Paris"}),)),
        json_reply(provider, "It is 18 degrees in Paris.", cached=4),
    )
    async with provider.make(server.url, retry=FAST_RETRY) as model:
        agent = Agent("weather", "Answer briefly.", tools=(get_weather,), model=model)
        result = await Runner.run(agent, "Weather in Paris?", runtime=rt, session_id="s")
    assert result.output == "It is 18 degrees in Paris."
    assert result.finish_reason == "stop"
    first, second = server.bodies(provider.path)
    tool_names = [t.get("name") or t["function"]["name"] for t in first["tools"]]
    assert tool_names == ["get_weather"]
    result_entry = next(e for e in result.entries if isinstance(e, ToolResult))
    assert result_entry.output == "18 degrees celsius in Paris"
    assert "18 degrees celsius in Paris" in _sent_texts(second)
    assert "Weather in Paris?" in _sent_texts(second)
    answer = result.entries[-1]
    assert isinstance(answer, AssistantMessage)
    assert answer.usage is not None
    assert answer.usage["cached_tokens"] == 4
    assert result.usage.requests == 2
    assert result.usage.cached_tokens == 4
    headers = server.requests[0].headers
    assert "test" in headers.get("authorization", "") + headers.get("x-api-key", "")


async def test_streamed_answer(rt: Runtime, server: ProviderServer, provider: Provider) -> None:
    """run_streamed yields the text and tool-call deltas as they arrive, before the
    checkpointed turn; the result is the joined text."""
    server.add(
        provider.path,
        Reply(stream=provider.stream([], (("call_9", "get_weather", {"city": "Oslo"}),))),
        Reply(stream=provider.stream(["Cold ", "in ", "Oslo."])),
    )
    seen: list[Any] = []
    result: RunResult | None = None
    async with provider.make(server.url, retry=FAST_RETRY) as model:
        agent = Agent("weather", "x", tools=(get_weather,), model=model)
        async with Runner.run_streamed(agent, "Oslo?", runtime=rt) as events:
            async for event in events:
                seen.append(event)
                result = getattr(event, "result", result)
    deltas = [e.text for e in seen if isinstance(e, TextDelta)]
    assert deltas == ["Cold ", "in ", "Oslo."]
    call_deltas = [e for e in seen if isinstance(e, ToolCallDelta)]
    assert call_deltas[0].call_id == "call_9"
    assert call_deltas[0].name == "get_weather"
    assert "".join(d.arguments for d in call_deltas) == '{"city": "Oslo"}'
    assert isinstance(result, RunResult)
    assert result.output == "Cold in Oslo."
    last_turn = max(i for i, e in enumerate(seen) if type(e).__name__ == "ModelTurn")
    assert seen.index(next(e for e in seen if isinstance(e, TextDelta))) < last_turn


async def test_429_then_success_honours_retry_after(
    rt: Runtime, server: ProviderServer, provider: Provider
) -> None:
    """A 429 with Retry-After is retried after that long, and the run completes."""
    server.add(
        provider.path,
        Reply(429, provider.error_body, headers=[("retry-after", "0.3")]),
        json_reply(provider, "fine"),
    )
    async with provider.make(server.url, retry=FAST_RETRY) as model:
        start = trio.current_time()
        result = await Runner.run(Agent("a", "x", model=model), "hi", runtime=rt)
        waited = trio.current_time() - start
    assert result.output == "fine"
    assert len(server.requests) == 2
    assert waited >= 0.3


async def test_rate_limit_past_the_budget_fails_at_once(
    rt: Runtime, server: ProviderServer, provider: Provider
) -> None:
    """A Retry-After longer than the retry budget fails the run at once, recorded on its
    checkpoint with the error's type and message."""
    server.add(provider.path, Reply(429, provider.error_body, headers=[("retry-after", "60")]))
    cp = CheckpointOptions(checkpoints(rt), "limited")
    async with provider.make(server.url, retry=RetryPolicy(budget=5)) as model:
        with trio.fail_after(5), pytest.raises(ModelRateLimitError) as info:
            await Runner.run(Agent("a", "x", model=model), "hi", runtime=rt, checkpoint=cp)
    assert info.value.status == 429
    assert info.value.attempts == 1
    snap = await checkpoints(rt).load("limited")
    assert snap is not None
    assert snap.head.status == "failed"
    assert snap.head.error is not None
    assert snap.head.error["type"] == "ModelRateLimitError"
    assert "429" in str(snap.head.error["message"])


async def test_500_and_a_stream_broken_midway_are_retried(
    rt: Runtime, server: ProviderServer, provider: Provider
) -> None:
    """A 500 is retried; a stream that breaks after some deltas is asked again, the
    consumer told with StreamRestarted; only the whole retried turn is checkpointed."""
    broken = provider.stream(["Par", "tial", " answer", " lost"])
    server.add(
        provider.path,
        Reply(500, {"error": {"message": "boom", "type": "server_error"}}),
        Reply(stream=broken, drop_after=len(broken) - 2),
        Reply(stream=provider.stream(["Whole ", "answer."])),
    )
    seen: list[Any] = []
    result: RunResult | None = None
    cp = CheckpointOptions(checkpoints(rt), "mid")
    async with (
        provider.make(server.url, retry=FAST_RETRY) as model,
        Runner.run_streamed(
            Agent("a", "x", model=model), "hi", runtime=rt, checkpoint=cp
        ) as events,
    ):
        async for event in events:
            seen.append(event)
            result = getattr(event, "result", result)
    assert isinstance(result, RunResult)
    assert result.output == "Whole answer."
    restarts = [e for e in seen if isinstance(e, StreamRestarted)]
    assert len(restarts) == 1
    after = seen[seen.index(restarts[0]) + 1 :]
    assert [e.text for e in after if isinstance(e, TextDelta)] == ["Whole ", "answer."]
    assert len(server.requests) == 3
    snap = await checkpoints(rt).load("mid")
    assert snap is not None
    texts = [e.text for e in snap.entries if isinstance(e, AssistantMessage)]
    assert texts == ["Whole answer."]


async def test_error_event_mid_stream_is_retried(rt: Runtime, server: ProviderServer) -> None:
    """An Anthropic ``error`` event (overloaded) inside a 200 stream is a server error:
    retried, then the run completes."""
    from provider_fixtures import ANTHROPIC_OVERLOADED

    anthropic = next(p for p in PROVIDERS if p.name == "anthropic")
    server.add(
        anthropic.path,
        Reply(stream=anthropic.stream(["Hel"])[:3] + ANTHROPIC_OVERLOADED),
        Reply(stream=anthropic.stream(["Hello"])),
    )
    result: RunResult | None = None
    async with (
        anthropic.make(server.url, retry=FAST_RETRY) as model,
        Runner.run_streamed(Agent("a", "x", model=model), "hi", runtime=rt) as events,
    ):
        async for event in events:
            result = getattr(event, "result", result)
    assert isinstance(result, RunResult)
    assert result.output == "Hello"


async def test_timeout_fails_the_run_and_resume_finishes_it(
    rt: Runtime, server: ProviderServer, provider: Provider
) -> None:
    """A server that does not answer times out on every attempt: the run fails with a
    ModelTimeoutError recorded on its checkpoint; re-issuing it asks again and completes."""
    server.add(provider.path, Reply(stall_after=0), Reply(stall_after=0))
    cp = CheckpointOptions(checkpoints(rt), "slow")
    policy = RetryPolicy(max_attempts=2, initial_delay=0.01, budget=10)
    async with provider.make(server.url, retry=policy, timeout=0.3) as model:
        with trio.fail_after(10), pytest.raises(ModelTimeoutError) as info:
            await Runner.run(Agent("a", "x", model=model), "hi", runtime=rt, checkpoint=cp)
        assert info.value.attempts == 2
        snap = await checkpoints(rt).load("slow")
        assert snap is not None
        assert snap.head.status == "failed"
        assert snap.head.error is not None
        assert snap.head.error["type"] == "ModelTimeoutError"
        server.add(provider.path, json_reply(provider, "at last"))
        result = await Runner.run(Agent("a", "x", model=model), "hi", runtime=rt, checkpoint=cp)
    assert result.output == "at last"


#: How many events at the end of each provider's stream carry (or follow) its end marker:
#: Chat's finish chunk, usage chunk and [DONE]; Responses' response.completed; Anthropic's
#: message_delta (the stop_reason) and message_stop.
_END_EVENTS = {"chat": 3, "responses": 1, "anthropic": 2}


def _unfinished(provider: Provider, how: str) -> Reply:
    """A reply to a stream request that never says the answer is complete: the stream
    closed cleanly before its end marker, or one JSON body instead of a stream."""
    if how == "json":
        return json_reply(provider, "An answer the stream never sent.")
    chunks = provider.stream(["Cut ", "short"])
    return Reply(stream=chunks[: -_END_EVENTS[provider.name]])


async def _run_streamed(rt: Runtime, model: Any, run_id: str) -> list[RunEvent]:
    cp = CheckpointOptions(checkpoints(rt), run_id)
    agent = Agent("a", "x", model=model)
    async with Runner.run_streamed(agent, "hi", runtime=rt, session_id=run_id, checkpoint=cp) as ev:
        return [event async for event in ev]


@pytest.mark.parametrize("how", ["cut", "json"])
async def test_a_stream_that_did_not_finish_is_retried_and_never_an_answer(
    rt: Runtime, server: ProviderServer, provider: Provider, how: str
) -> None:
    """A stream that ends without its end marker (or a JSON body where a stream was
    asked) is a broken connection: retried under the RetryPolicy, and once the attempts
    are spent the run fails with ModelConnectionError -- nothing of it is an answer."""
    whole = Reply(stream=provider.stream(["Whole ", "answer."]))
    server.add(provider.path, _unfinished(provider, how), whole)
    async with provider.make(server.url, retry=FAST_RETRY) as model:
        seen = await _run_streamed(rt, model, "retried")
        assert [e.result.output for e in seen if isinstance(e, RunCompleted)] == ["Whole answer."]
        assert len(server.requests) == 2
        server.add(provider.path, *[_unfinished(provider, how)] * FAST_RETRY.max_attempts)
        seen = await _run_streamed(rt, model, "cut")
    failures = [e.error for e in seen if isinstance(e, RunFailed)]
    assert len(failures) == 1
    error = failures[0]
    assert isinstance(error, ModelConnectionError)
    assert error.retryable
    assert error.attempts == FAST_RETRY.max_attempts
    assert len(server.requests) == 2 + FAST_RETRY.max_attempts
    snap = await checkpoints(rt).load("cut")
    assert snap is not None
    assert snap.head.status == "failed"
    assert snap.head.error is not None
    assert snap.head.error["type"] == "ModelConnectionError"
    assert not [e for e in snap.entries if isinstance(e, AssistantMessage)]
    assert await history(rt).load("cut") == []


async def test_malformed_body_is_a_response_error(
    rt: Runtime, server: ProviderServer, provider: Provider
) -> None:
    """A body that is not JSON fails the run with ModelResponseError (not retried)."""
    server.add(provider.path, Reply(body=b'{"id": "x", "choices": [tru'))
    cp = CheckpointOptions(checkpoints(rt), "garbled")
    async with provider.make(server.url, retry=FAST_RETRY) as model:
        with pytest.raises(ModelResponseError):
            await Runner.run(Agent("a", "x", model=model), "hi", runtime=rt, checkpoint=cp)
    assert len(server.requests) == 1
    snap = await checkpoints(rt).load("garbled")
    assert snap is not None
    assert snap.head.error is not None
    assert snap.head.error["type"] == "ModelResponseError"


async def test_bad_request_is_not_retried(
    rt: Runtime, server: ProviderServer, provider: Provider
) -> None:
    """A 400 is the request's fault: not retried, raised as a ModelError at once."""
    server.add(provider.path, Reply(400, {"error": {"message": "bad tools", "type": "invalid"}}))
    async with provider.make(server.url, retry=FAST_RETRY) as model:
        with pytest.raises(ModelError) as info:
            await Runner.run(Agent("a", "x", model=model), "hi", runtime=rt)
    assert info.value.status == 400
    assert not info.value.retryable
    assert len(server.requests) == 1


async def test_cancellation_aborts_the_request_at_once(
    rt: Runtime, server: ProviderServer, provider: Provider
) -> None:
    """Cancelling a run whose model request is in flight closes the HTTP connection
    at once (the server sees the client go) and checkpoints the run as interrupted."""
    server.add(provider.path, Reply(stall_after=0))
    cp = CheckpointOptions(checkpoints(rt), "cancelled")
    async with provider.make(server.url, retry=FAST_RETRY, timeout=30) as model:
        with trio.fail_after(2):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(
                    lambda: Runner.run(
                        Agent("a", "x", model=model), "hi", runtime=rt, checkpoint=cp
                    )
                )
                await server.wait_stalled()
                gone = server.gone
                nursery.cancel_scope.cancel()
            await gone.wait()
    assert server.aborted == 1
    snap = await checkpoints(rt).load("cancelled")
    assert snap is not None
    assert snap.head.status == "interrupted"


async def test_mapping_of_every_entry(
    rt: Runtime, server: ProviderServer, provider: Provider
) -> None:
    """System prompt, user and assistant text, tool calls and results (errors too), a
    handoff, and an output schema all reach the API in its shape; sidecar entries never
    do."""
    server.add(provider.path, json_reply(provider, '{"ok": true}'))
    history: list[Entry] = [
        UserMessage("first question"),
        AssistantMessage("checking", agent="a"),
        ToolCall("c1", "get_weather", {"city": "Rome"}),
        SidecarEntry("tool_started", {"call_id": "c1", "name": "secret-bookkeeping"}),
        ToolResult("c1", "sunny", is_error=False),
        ToolCall("c2", "transfer_to_b", {}),
        ToolResult("c2", "failed here", is_error=True),
        UserMessage("and now?"),
    ]
    schema = {
        "title": "Verdict",
        "type": "object",
        "properties": {"ok": {"type": "boolean"}},
        "required": ["ok"],
        "additionalProperties": False,
    }
    async with provider.make(server.url, retry=FAST_RETRY) as model:
        agent = Agent("a", "Be exact.", tools=(get_weather,), model=model, output_type=schema)
        result = await Runner.run(agent, history, runtime=rt)
    assert result.final_output == {"ok": True}
    [body] = server.bodies(provider.path)
    texts = _sent_texts(body)
    assert "secret-bookkeeping" not in str(body)
    for text in ("first question", "checking", "sunny", "failed here", "and now?"):
        assert text in texts
    if provider.name == "chat":
        roles = [m["role"] for m in body["messages"]]
        assert roles == ["system", "user", "assistant", "tool", "assistant", "tool", "user"]
        assert body["messages"][2]["tool_calls"][0]["function"]["arguments"] == '{"city": "Rome"}'
        assert body["response_format"]["json_schema"]["schema"]["required"] == ["ok"]
        assert body["response_format"]["json_schema"]["strict"] is True
    elif provider.name == "responses":
        kinds = [i.get("type", i.get("role")) for i in body["input"]]
        assert kinds == [
            "user",
            "assistant",
            "function_call",
            "function_call_output",
            "function_call",
            "function_call_output",
            "user",
        ]
        assert body["instructions"] == "Be exact."
        assert body["store"] is False
        assert body["text"]["format"]["type"] == "json_schema"
    else:
        roles = [m["role"] for m in body["messages"]]
        assert roles == ["user", "assistant", "user", "assistant", "user"]
        assert body["system"] == "Be exact."
        blocks = body["messages"][3]["content"]
        assert blocks[0]["type"] == "tool_use"
        assert blocks[0]["name"] == "transfer_to_b"
        results = body["messages"][4]["content"]
        assert results[0]["is_error"] is True
        assert results[1] == {"type": "text", "text": "and now?"}
        assert body["output_config"]["format"]["schema"]["required"] == ["ok"]


def test_adapters_satisfy_the_streaming_protocol() -> None:
    """Every adapter is a StreamingModel (respond and stream)."""
    from runtime.agents import StreamingModel

    for provider in PROVIDERS:
        model = provider.make("http://127.0.0.1:9")
        assert isinstance(model, StreamingModel)
        trio.run(model.aclose)  # type: ignore[attr-defined]  # every adapter has aclose


async def test_request_carries_the_model_request(server: ProviderServer) -> None:
    """A ModelRequest's tools keep their strict flag through the mapping."""
    chat = PROVIDERS[0]
    server.add(chat.path, json_reply(chat, "ok"))
    request = ModelRequest("a", "sys", (UserMessage("hi"),), (get_weather.schema(),))
    async with chat.make(server.url) as model:
        response = await model.respond(request)
    assert response.text == "ok"
    assert response.finish_reason == "stop"
    [body] = server.bodies(chat.path)
    assert body["tools"][0]["function"]["strict"] is True
