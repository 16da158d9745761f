"""A tiny HTTP/1.1 server on 127.0.0.1 that speaks the model providers' wire formats.

Built on h11 (the HTTP/1.1 state machine httpx itself depends on) and ``trio.serve_tcp``:
h11 parses requests and frames responses (content-length or chunked), so the official
SDKs talk to it exactly as to the real APIs, keep-alive included. Each test scripts the
replies per path (a JSON body, a server-sent-event stream, a status with headers, a
stall, a connection dropped mid-stream) and reads back what the SDK sent.
"""

from __future__ import annotations

import functools
import json
from collections import defaultdict, deque
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import attrs
import h11
import trio

__all__ = ["ProviderServer", "Recorded", "Reply", "open_provider_server", "sse"]


def sse(events: Sequence[tuple[str | None, Any]]) -> list[bytes]:
    """Server-sent events as the providers frame them: ``event:`` (when named) and one
    ``data:`` line of JSON (or a raw string such as ``[DONE]``), then a blank line."""
    out = []
    for name, data in events:
        text = data if isinstance(data, str) else json.dumps(data)
        head = f"event: {name}\n" if name else ""
        out.append(f"{head}data: {text}\n\n".encode())
    return out


@attrs.frozen
class Reply:
    """One scripted response.

    ``body``: a JSON value (or raw bytes, e.g. a malformed body) sent with
    content-length. ``stream``: SSE chunks sent one by one (chunked encoding) with
    ``chunk_delay`` between them. ``stall_after``: after that many chunks (0: before the
    status line) the server stops answering and waits forever. ``drop_after``: after that
    many chunks the connection is closed without finishing the body.
    """

    status: int = 200
    body: Any = None
    stream: Sequence[bytes] | None = None
    headers: Sequence[tuple[str, str]] = ()
    chunk_delay: float = 0.0
    stall_after: int | None = None
    drop_after: int | None = None


@attrs.frozen
class Recorded:
    """A request the server received."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any


@attrs.define
class ProviderServer:
    """The scripted server: queue replies with :meth:`add`, read :attr:`requests`."""

    port: int = 0
    replies: dict[str, deque[Reply]] = attrs.Factory(lambda: defaultdict(deque))
    requests: list[Recorded] = attrs.Factory(list)
    #: Set each time a request arrives; replaced by a fresh event after it fires.
    arrived: trio.Event = attrs.Factory(trio.Event)
    #: Set when a stalled reply stalls; replaced after it fires.
    stalled: trio.Event = attrs.Factory(trio.Event)
    #: Connections closed by the client while their reply was being served.
    aborted: int = 0
    #: Set when a client closes a connection mid-reply; replaced after it fires.
    gone: trio.Event = attrs.Factory(trio.Event)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def add(self, path: str, *replies: Reply) -> None:
        """Queue replies for requests to ``path`` (served in order)."""
        self.replies[path].extend(replies)

    def bodies(self, path: str) -> list[Any]:
        """The JSON bodies received at ``path``, in order."""
        return [r.body for r in self.requests if r.path == path]

    async def wait_for_requests(self, count: int) -> None:
        """Wait until at least ``count`` requests arrived."""
        while len(self.requests) < count:
            event = self.arrived
            await event.wait()

    async def wait_gone(self) -> None:
        """Wait until a client closes a connection in the middle of a reply."""
        event = self.gone
        await event.wait()

    async def wait_stalled(self) -> None:
        event = self.stalled
        await event.wait()

    def _fire(self, name: str) -> None:
        event = getattr(self, name)
        setattr(self, name, trio.Event())
        event.set()

    async def handle(self, stream: trio.SocketStream) -> None:
        """Serve one connection (keep-alive: request after request)."""
        conn = h11.Connection(h11.SERVER)
        try:
            while True:
                request, body = await _read_request(conn, stream)
                if request is None:
                    return
                path = request.target.decode()
                try:
                    parsed = json.loads(body) if body else None
                except ValueError:
                    parsed = body
                headers = {k.decode().lower(): v.decode() for k, v in request.headers}
                self.requests.append(Recorded(request.method.decode(), path, headers, parsed))
                self._fire("arrived")
                queue = self.replies.get(path)
                reply = queue.popleft() if queue else Reply(404, {"error": f"no reply for {path}"})
                if not await self._send(conn, stream, reply):
                    return
                if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                    return
                conn.start_next_cycle()
        except (trio.BrokenResourceError, trio.ClosedResourceError, h11.RemoteProtocolError):
            self.aborted += 1
            self._fire("gone")
        finally:
            await stream.aclose()

    async def _send(self, conn: h11.Connection, stream: trio.SocketStream, reply: Reply) -> bool:
        """Send ``reply``; False if the connection must close after it."""
        if reply.stall_after == 0:
            await self._stall(stream)
        headers = [(k.encode(), v.encode()) for k, v in reply.headers]
        if reply.stream is not None:
            headers.append((b"content-type", b"text/event-stream"))
            await stream.send_all(_head(conn, reply.status, headers))
            for index, chunk in enumerate(reply.stream):
                if reply.drop_after == index:
                    return False  # closed mid-body: the client sees an incomplete message
                if reply.stall_after == index and index:
                    await self._stall(stream)
                await stream.send_all(conn.send(h11.Data(data=chunk)))
                if reply.chunk_delay:
                    await trio.sleep(reply.chunk_delay)
            if reply.stall_after == len(reply.stream):
                await self._stall(stream)
        else:
            raw = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
            headers.append((b"content-type", b"application/json"))
            headers.append((b"content-length", b"%d" % len(raw)))
            await stream.send_all(_head(conn, reply.status, headers))
            await stream.send_all(conn.send(h11.Data(data=raw)))
        await stream.send_all(conn.send(h11.EndOfMessage()))
        return True

    async def _stall(self, stream: trio.SocketStream) -> None:
        """Answer nothing more; notice when the client gives up (closes the socket)."""
        self._fire("stalled")
        while await stream.receive_some(65536):
            pass
        raise trio.BrokenResourceError("the client closed a stalled connection")


def _head(conn: h11.Connection, status: int, headers: list[tuple[bytes, bytes]]) -> bytes:
    data = conn.send(h11.Response(status_code=status, headers=headers))
    assert data is not None
    return data


async def _read_request(
    conn: h11.Connection, stream: trio.SocketStream
) -> tuple[h11.Request | None, bytes]:
    """The next request and its body, or (None, b"") when the client closed."""
    request: h11.Request | None = None
    body = b""
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            data = await stream.receive_some(65536)
            if not data and request is None:
                return None, b""
            conn.receive_data(data)
        elif isinstance(event, h11.Request):
            request = event
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage):
            return request, body
        elif isinstance(event, h11.ConnectionClosed):
            return None, b""


@asynccontextmanager
async def open_provider_server() -> AsyncIterator[ProviderServer]:
    """Serve on 127.0.0.1 (a free port) for the block; everything stops when it ends."""
    server = ProviderServer()
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            functools.partial(trio.serve_tcp, server.handle, 0, host="127.0.0.1")
        )
        server.port = listeners[0].socket.getsockname()[1]
        yield server
        nursery.cancel_scope.cancel()
