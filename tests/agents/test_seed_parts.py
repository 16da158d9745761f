"""Images and files in messages: the part values, their stored form, and the exact
request each adapter's SDK sends to a local HTTP server for them."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from provider_fixtures import FAST_RETRY, PROVIDERS, Provider, json_reply
from provider_server import ProviderServer, open_provider_server

from runtime import InvalidArgumentError, MemoryStore, open_runtime
from runtime.agents import (
    Agent,
    FilePart,
    ImagePart,
    MessageTooLargeError,
    ModelRequest,
    ModelRequestError,
    ModelResponse,
    RequestedCall,
    Runner,
    ScriptedModel,
    TextPart,
    ToolCall,
    ToolResult,
    UserMessage,
    entry_from_json,
    entry_to_json,
    function_tool,
)
from stores import MAX_EVENT_BYTES, InvalidEventError, decode_json, encode_json

PNG = b"\x89PNG\r\n\x1a\n-tiny-"
PNG64 = base64.b64encode(PNG).decode()
PDF = b"%PDF-1.4 tiny"
PDF64 = base64.b64encode(PDF).decode()
URL = "https://example.com/cat.png"

MESSAGE = UserMessage(
    "What is in these?",
    [
        ImagePart(url=URL, detail="low"),
        ImagePart(data=PNG, media_type="image/png"),
        FilePart(data=PDF, media_type="application/pdf", name="report.pdf"),
    ],
)


@pytest.fixture
async def server() -> AsyncIterator[ProviderServer]:
    """The scripted provider server on 127.0.0.1."""
    async with open_provider_server() as srv:
        yield srv


async def _send(server: ProviderServer, provider: Provider, *entries: Any) -> Any:
    """The body the adapter's SDK sent for a request holding ``entries``."""
    server.add(provider.path, json_reply(provider, "ok"))
    async with provider.make(server.url, retry=FAST_RETRY) as model:
        await model.respond(ModelRequest("a", "", tuple(entries), ()))
    [body] = server.bodies(provider.path)
    return body


CHAT, RESPONSES, ANTHROPIC = PROVIDERS


async def test_chat_sends_content_parts(server: ProviderServer) -> None:
    """Chat Completions: text, image_url (URL; bytes as a data URL) and file parts."""
    body = await _send(server, CHAT, MESSAGE)
    assert body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is in these?"},
                {"type": "image_url", "image_url": {"url": URL, "detail": "low"}},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG64}"}},
                {
                    "type": "file",
                    "file": {
                        "file_data": f"data:application/pdf;base64,{PDF64}",
                        "filename": "report.pdf",
                    },
                },
            ],
        }
    ]


async def test_responses_sends_input_parts(server: ProviderServer) -> None:
    """Responses: input_text, input_image (detail "auto" unless set) and input_file."""
    body = await _send(server, RESPONSES, MESSAGE)
    assert body["input"] == [
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "What is in these?"},
                {"type": "input_image", "image_url": URL, "detail": "low"},
                {
                    "type": "input_image",
                    "image_url": f"data:image/png;base64,{PNG64}",
                    "detail": "auto",
                },
                {
                    "type": "input_file",
                    "file_data": f"data:application/pdf;base64,{PDF64}",
                    "filename": "report.pdf",
                },
            ],
        }
    ]


async def test_anthropic_sends_image_and_document_blocks(server: ProviderServer) -> None:
    """Anthropic: a text block, image blocks with url and base64 sources, a document."""
    body = await _send(server, ANTHROPIC, MESSAGE)
    assert body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is in these?"},
                {"type": "image", "source": {"type": "url", "url": URL}},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": PNG64},
                },
                {
                    "type": "document",
                    "source": {"type": "base64", "media_type": "application/pdf", "data": PDF64},
                    "title": "report.pdf",
                },
            ],
        }
    ]


async def test_files_by_reference(server: ProviderServer) -> None:
    """A file by id (each API), by URL (Responses, Anthropic), text bytes (Anthropic's
    text source); Chat Completions refuses a file URL with ModelRequestError, unsent."""
    by_id = FilePart(file_id="file-abc", name="notes.pdf")
    by_url = FilePart(url="https://example.com/a.pdf")
    text = FilePart(data="héllo".encode(), media_type="text/markdown")
    chat = await _send(server, CHAT, UserMessage("", [by_id]))
    assert chat["messages"][0]["content"] == [
        {"type": "file", "file": {"file_id": "file-abc", "filename": "notes.pdf"}}
    ]
    responses = await _send(server, RESPONSES, UserMessage("", [by_id, by_url]))
    assert responses["input"][0]["content"] == [
        {"type": "input_file", "file_id": "file-abc", "filename": "notes.pdf"},
        {"type": "input_file", "file_url": "https://example.com/a.pdf"},
    ]
    anthropic = await _send(server, ANTHROPIC, UserMessage("", [by_id, by_url, text]))
    assert anthropic["messages"][0]["content"] == [
        {
            "type": "document",
            "source": {"type": "file", "file_id": "file-abc"},
            "title": "notes.pdf",
        },
        {"type": "document", "source": {"type": "url", "url": "https://example.com/a.pdf"}},
        {
            "type": "document",
            "source": {"type": "text", "media_type": "text/plain", "data": "héllo"},
        },
    ]
    async with CHAT.make(server.url, retry=FAST_RETRY) as model:
        with pytest.raises(ModelRequestError, match="no file by URL"):
            await model.respond(ModelRequest("a", "", (UserMessage("", [by_url]),), ()))
    assert len(server.bodies(CHAT.path)) == 1  # only the first request was sent


@function_tool
async def screenshot() -> list[object]:
    """Take a screenshot."""
    return ["the screen:", ImagePart(data=PNG, media_type="image/png")]


@pytest.mark.parametrize("provider", PROVIDERS, ids=[p.name for p in PROVIDERS])
async def test_tool_result_with_an_image(server: ProviderServer, provider: Provider) -> None:
    """A tool returning text and an image: the result stores both, and the next request
    carries the image in the API's shape (Chat: after the tool message, in a user one)."""
    server.add(
        provider.path,
        json_reply(provider, None, (("c1", "screenshot", {}),)),
        json_reply(provider, "a cat"),
    )
    async with open_runtime(MemoryStore()) as rt, provider.make(server.url) as model:
        agent = Agent("a", "", tools=(screenshot,), model=model)
        result = await Runner.run(agent, "look", runtime=rt)
    [stored] = [e for e in result.entries if isinstance(e, ToolResult)]
    assert stored == ToolResult(
        "c1", "the screen:", parts=[ImagePart(data=PNG, media_type="image/png")]
    )
    second = server.bodies(provider.path)[1]
    if provider.name == "chat":
        assert second["messages"][-2:] == [
            {
                "role": "tool",
                "tool_call_id": "c1",
                "content": [{"type": "text", "text": "the screen:"}],
            },
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Attached to the result of tool call c1:"},
                    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG64}"}},
                ],
            },
        ]
    elif provider.name == "responses":
        assert second["input"][-1] == {
            "type": "function_call_output",
            "call_id": "c1",
            "output": [
                {"type": "input_text", "text": "the screen:"},
                {
                    "type": "input_image",
                    "image_url": f"data:image/png;base64,{PNG64}",
                    "detail": "auto",
                },
            ],
        }
    else:
        assert second["messages"][-1] == {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "c1",
                    "content": [
                        {"type": "text", "text": "the screen:"},
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/png", "data": PNG64},
                        },
                    ],
                }
            ],
        }


async def test_plain_messages_are_sent_as_before(server: ProviderServer) -> None:
    """Without parts, content stays a string (Chat, Responses) and one text block."""
    entries = (UserMessage("hi"), ToolCall("c", "t", {}), ToolResult("c", "done"))
    chat = await _send(server, CHAT, *entries)
    assert chat["messages"][0] == {"role": "user", "content": "hi"}
    assert chat["messages"][2] == {"role": "tool", "tool_call_id": "c", "content": "done"}
    responses = await _send(server, RESPONSES, *entries)
    assert responses["input"][0] == {"role": "user", "content": "hi"}
    assert responses["input"][2]["output"] == "done"
    anthropic = await _send(server, ANTHROPIC, *entries)
    assert anthropic["messages"][0] == {"role": "user", "content": [{"type": "text", "text": "hi"}]}
    assert UserMessage("hi") == UserMessage("hi", ())
    assert entry_to_json(UserMessage("hi")) == {"kind": "user", "text": "hi"}


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: ImagePart(), "exactly one of url= or data=, not neither"),
        (
            lambda: ImagePart(url=URL, data=PNG, media_type="image/png"),
            "not both url= and data=",
        ),
        (lambda: ImagePart(data=b"", media_type="image/png"), "data must not be empty"),
        (lambda: ImagePart(data="abc", media_type="image/png"), "data must be bytes, not str"),  # type: ignore[arg-type]
        (lambda: ImagePart(data=bytearray(PNG), media_type="image/png"), "not bytearray"),  # type: ignore[arg-type]
        (lambda: ImagePart(data=PNG, media_type="application/pdf"), "must be image/\\*"),
        (lambda: ImagePart(data=PNG, media_type="PNG"), "type/subtype"),
        (lambda: ImagePart(data=PNG), "media_type is required with data="),
        (lambda: ImagePart(url="file:///etc/passwd"), "http\\(s\\) URL"),
        (lambda: ImagePart(url=URL, detail="max"), "detail must be one of"),
        (lambda: FilePart(data=PDF), "media_type is required"),
        (lambda: FilePart(url=URL, file_id="f"), "not both url= and file_id="),
        (lambda: FilePart(file_id=""), "non-empty"),
        (lambda: UserMessage("x", "not parts"), "parts must be a sequence"),  # type: ignore[arg-type]
        (lambda: UserMessage("x", [{"type": "text"}]), "parts\\[0\\] must be a TextPart"),  # type: ignore[list-item]
        (lambda: ToolResult("c", "x", parts=[3]), "tool_result.parts\\[0\\]"),  # type: ignore[list-item]
    ],
)
def test_bad_parts_are_refused(build: Any, message: str) -> None:
    """Each bad part or parts value raises InvalidArgumentError naming what is wrong."""
    with pytest.raises(InvalidArgumentError, match=message):
        build()


def test_a_message_too_large_for_one_event_is_refused() -> None:
    """An entry whose base64 would pass MAX_EVENT_BYTES raises MessageTooLargeError (an
    InvalidEventError) when it is built; one just under the limit is fine."""
    fits = (MAX_EVENT_BYTES - 1000) // 4 * 3
    UserMessage("", [ImagePart(data=bytes(fits), media_type="image/png")])
    big = ImagePart(data=bytes(fits + 1000), media_type="image/png")
    for build in (lambda: UserMessage("", [big]), lambda: ToolResult("c", "", parts=[big])):
        with pytest.raises(MessageTooLargeError, match="MAX_EVENT_BYTES") as info:
            build()
        assert isinstance(info.value, InvalidEventError)
        assert info.value.size > info.value.limit == MAX_EVENT_BYTES


async def test_a_too_large_tool_image_becomes_an_error_result() -> None:
    """A tool returning an image too large to store: the run records an error result
    naming MessageTooLargeError and goes on."""

    @function_tool
    async def huge() -> ImagePart:
        """A huge image."""
        return ImagePart(data=bytes(MAX_EVENT_BYTES), media_type="image/png")

    model = ScriptedModel(
        [ModelResponse(tool_calls=(RequestedCall("huge", {}, "h1"),)), ModelResponse("ok")]
    )
    async with open_runtime(MemoryStore()) as rt:
        result = await Runner.run(Agent("a", "", tools=(huge,), model=model), "go", runtime=rt)
    [stored] = [e for e in result.entries if isinstance(e, ToolResult)]
    assert stored.is_error
    assert stored.output.startswith("MessageTooLargeError:")
    assert not stored.parts


_text = st.text(st.characters(codec="utf-8"), max_size=20)
_char = st.characters(codec="utf-8", min_codepoint=0x20).filter(
    lambda c: not 0x7F <= ord(c) <= 0x9F
)
_token = st.text(_char, min_size=1, max_size=12)  # no control characters
_blob = st.binary(min_size=1, max_size=40)
_sub = st.sampled_from(["png", "jpeg", "webp", "pdf", "plain", "vnd.ms-excel", "svg+xml"])
_url = st.builds(lambda p: f"https://example.com/{p}", st.text("abc/._-", max_size=10))
_detail = st.none() | st.sampled_from(["auto", "low", "high", "original"])
_image = st.one_of(
    st.builds(
        ImagePart, url=_url, detail=_detail, media_type=st.none() | _sub.map("image/".__add__)
    ),
    st.builds(ImagePart, data=_blob, media_type=_sub.map("image/".__add__), detail=_detail),
)
_file = st.one_of(
    st.builds(
        FilePart, data=_blob, media_type=_sub.map("application/".__add__), name=st.none() | _token
    ),
    st.builds(FilePart, url=_url, name=st.none() | _token),
    st.builds(
        FilePart,
        file_id=_token,
        name=st.none() | _token,
        media_type=st.none() | _sub.map("text/".__add__),
    ),
)
_parts = st.lists(st.one_of(st.builds(TextPart, _text), _image, _file), max_size=5)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.one_of(
        st.builds(UserMessage, _text, _parts),
        st.builds(ToolResult, _token, _text, st.booleans(), _parts),
    )
)
def test_parts_round_trip_through_json_and_events(entry: UserMessage | ToolResult) -> None:
    """Every message with parts survives its JSON form, also as the text a store keeps."""
    assert entry_from_json(entry_to_json(entry)) == entry
    assert entry_from_json(decode_json(encode_json(entry_to_json(entry)))) == entry
