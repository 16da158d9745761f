"""The inspector's web application: the JSON API, the event stream and the page's
static files, as one Starlette app on a runtime (served by :mod:`._serving`).

Every route reads through the public runtime API. The write routes (``_write_routes``)
answer only when writes are enabled, and only with the token in a request header.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import trio
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from runtime import (
    InvalidArgumentError,
    ReadOnlyError,
    Runtime,
    SessionExistsError,
    SessionNotFoundError,
    SnapshotExpiredError,
    Store,
)
from runtime.agents import ForkPointError, fork_conversation

from . import _controls as controls
from . import _params as params
from ._errors import ApiError
from ._feeds import Feeds, follow, message_of
from ._reads import read_events, read_runs, read_session, read_sessions, session_obj

__all__ = ["STATIC", "TOKEN_HEADER", "InspectorState", "build_app"]

#: The page's files, shipped in the package (served from here only).
STATIC = Path(__file__).resolve().parent / "static"
#: The request header that carries the token (``Authorization: Bearer TOKEN`` also works).
TOKEN_HEADER = "X-Tidelog-Token"
#: Seconds between keep-alive comments on an idle event stream.
PING_SECONDS = 15.0
#: How long a browser waits before it reconnects a dropped event stream (milliseconds).
RETRY_MS = 1000
#: Default events per window, sessions per page.
DEFAULT_EVENTS, DEFAULT_SESSIONS = 200, 100
#: What the page may load: its own files and API only (no inline script, no other site).
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


class InspectorState:
    """What the routes share: the runtime, the token, whether writes are on, whether
    reads need the token too, and where the live leases are read from."""

    def __init__(
        self,
        rt: Runtime,
        *,
        token: str | None,
        writes: bool,
        token_for_reads: bool,
        store: Store | None,
        feeds: Feeds | None,
    ) -> None:
        self.rt = rt
        self.feeds = feeds
        self.token = token
        self.writes = writes
        self.token_for_reads = token_for_reads
        self.store = store

    def token_of(self, request: Request, *, allow_query: bool) -> str | None:
        """The token the request carries: the header, ``Authorization: Bearer``, or (for
        reads only: an ``EventSource`` cannot send headers) the ``token`` parameter."""
        given = request.headers.get(TOKEN_HEADER)
        if given is None:
            auth = request.headers.get("authorization", "")
            if auth.lower().startswith("bearer "):
                given = auth[7:].strip()
        if given is None and allow_query:
            given = request.query_params.get("token")
        return given

    def check_token(self, request: Request, *, allow_query: bool) -> None:
        """Refuse (401) a request without the right token."""
        given = self.token_of(request, allow_query=allow_query)
        if self.token is None or given is None:
            raise ApiError(401, f"this inspector needs its token (header {TOKEN_HEADER})")
        if not secrets.compare_digest(given.encode(), self.token.encode()):
            raise ApiError(401, "wrong token")

    async def writers(self) -> dict[str, str] | None:
        """``{session id: holder}`` of the write leases held now; ``None`` when the
        inspector was given no store to read them from."""
        store = self.store
        if store is None:
            return None
        leases = await trio.to_thread.run_sync(store.list_leases)
        now = time.time()
        return {lease.session_id: lease.holder for lease in leases if lease.expires > now}


Handler = Callable[[Request, InspectorState], Awaitable[Response]]


def _answer(error: ApiError) -> JSONResponse:
    return JSONResponse(error.body(), status_code=error.status)


def _endpoint(
    state: InspectorState, handler: Handler, *, write: bool = False
) -> Callable[[Request], Awaitable[Response]]:
    """``handler`` behind the token and write checks, its errors as JSON answers."""

    async def endpoint(request: Request) -> Response:
        try:
            if write:
                if not state.writes:
                    raise ApiError(
                        403,
                        "writes are disabled on this inspector (start it with --writes, "
                        "or serve_inspector(..., writes=True))",
                    )
                state.check_token(request, allow_query=False)
            elif state.token_for_reads:
                state.check_token(request, allow_query=True)
            return await handler(request, state)
        except ApiError as exc:
            return _answer(exc)
        except SnapshotExpiredError as exc:
            return _answer(ApiError(409, f"the session changed while it was read ({exc}); retry"))
        except ReadOnlyError as exc:
            return _answer(ApiError(403, f"the store is opened read-only: {exc}"))
        except InvalidArgumentError as exc:
            return _answer(ApiError(400, str(exc)))

    return endpoint


# -- reads --------------------------------------------------------------------------------


async def _info(request: Request, state: InspectorState) -> Response:  # noqa: ARG001
    return JSONResponse(
        {
            "writes": state.writes,
            "write_routes": [route.path for route in _write_routes(state)],
            "projections": sorted(state.rt.projections),
            "leases": state.store is not None,
            "max_limit": params.MAX_LIMIT,
        }
    )


async def _sessions(request: Request, state: InspectorState) -> Response:
    q = request.query_params
    limit = params.integer(q, "limit", default=DEFAULT_SESSIONS, low=1, high=params.MAX_LIMIT)
    assert limit is not None
    body = await read_sessions(
        state.rt,
        limit=limit,
        prefix=params.text(q, "prefix"),
        after=params.text(q, "after") or None,
        internal=params.flag(q, "internal"),
        writers=await state.writers(),
    )
    return JSONResponse(body)


async def _session(request: Request, state: InspectorState) -> Response:
    q = request.query_params
    session_id = params.session_id(q)
    as_of = params.seq(q, "as_of_seq")
    body = await read_session(state.rt, session_id, as_of_seq=as_of, writers=await state.writers())
    return JSONResponse(body)


async def _events(request: Request, state: InspectorState) -> Response:
    q = request.query_params
    session_id = params.session_id(q)
    since = params.seq(q, "since_seq", default=0)
    until = params.seq(q, "until_seq")
    limit = params.integer(q, "limit", default=DEFAULT_EVENTS, low=1, high=params.MAX_LIMIT)
    assert since is not None and limit is not None
    body = await read_events(
        state.rt,
        session_id,
        since_seq=since,
        until_seq=until,
        limit=limit,
        from_end=params.flag(q, "from_end"),
    )
    return JSONResponse(body)


async def _runs(request: Request, state: InspectorState) -> Response:
    session_id = params.session_id(request.query_params)
    return JSONResponse(await read_runs(state.rt, session_id))


def _resume_point(request: Request) -> int:
    """Where a stream starts: after ``Last-Event-ID`` (a reconnecting ``EventSource``
    sends the id of the last event it got), else after ``since_seq``, else 0."""
    last = request.headers.get("last-event-id")
    if last is not None and last.strip() != "":
        found = params.seq({"Last-Event-ID": last.strip()}, "Last-Event-ID")
        assert found is not None
        return found
    since = params.seq(request.query_params, "since_seq", default=0)
    assert since is not None
    return since


async def _stream(request: Request, state: InspectorState) -> Response:
    session_id = params.session_id(request.query_params)
    since = _resume_point(request)
    info = await state.rt.stat(session_id)
    if info is None:
        raise ApiError(404, f"no session {session_id!r}", "id")
    rt = state.rt

    feeds = state.feeds

    async def events() -> AsyncIterator[ServerSentEvent | bytes]:
        # A dropped connection is retried after a second (the browser's default is 3).
        yield ServerSentEvent(comment="tidelog", retry=RETRY_MS)
        try:
            if feeds is None:  # an app without a nursery of its own: a tail per stream
                async for event in rt.tail(session_id, since_seq=since):
                    yield message_of(event)
                return
            async with (
                feeds.subscribe(session_id, info.head) as feed,
                contextlib.aclosing(follow(rt, feed, since)) as followed,
            ):
                # Each piece: the messages of every event not sent yet (one write).
                async for _, messages in followed:
                    yield messages
        except (SnapshotExpiredError, SessionNotFoundError) as exc:
            # Cut or deleted below the stream's position: say so, then end the stream
            # (the page reloads the session).
            yield ServerSentEvent(data=json.dumps({"error": str(exc)}), event="expired")

    return EventSourceResponse(
        events(),
        ping=PING_SECONDS,
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


# -- writes -------------------------------------------------------------------------------


async def _fork(request: Request, state: InspectorState) -> Response:
    body = params.json_body(await request.body())
    source = params.session_id({"id": params.body_text(body, "id") or ""}, "id")
    new_id = params.session_id({"new_id": params.body_text(body, "new_id") or ""}, "new_id")
    at = params.body_seq(body, "at_seq")
    allow_open = params.body_flag(body, "allow_open_run")
    info = await state.rt.stat(source)
    if info is None:
        raise ApiError(404, f"no session {source!r}", "id")
    if at is not None and at > info.head:
        raise ApiError(400, f"at_seq {at} is past the last seq {info.head} of {source!r}", "at_seq")
    try:
        forked = await fork_conversation(
            state.rt, source, new_id, at_seq=at, allow_open_run=allow_open
        )
    except SessionExistsError:
        raise ApiError(409, f"session {new_id!r} already exists", "new_id") from None
    except ForkPointError as exc:
        raise ApiError(409, str(exc), "at_seq") from None
    except InvalidArgumentError as exc:
        raise ApiError(400, str(exc), "new_id") from None
    return JSONResponse({"session": session_obj(forked, None)}, status_code=201)


async def _approve(request: Request, state: InspectorState) -> Response:
    decision = await controls.decide(state.rt, await request.body(), approved=True)
    return JSONResponse({"decision": decision.to_json()})


async def _reject(request: Request, state: InspectorState) -> Response:
    decision = await controls.decide(state.rt, await request.body(), approved=False)
    return JSONResponse({"decision": decision.to_json()})


async def _stop(request: Request, state: InspectorState) -> Response:
    status, body = await controls.stop(state.rt, await request.body())
    return JSONResponse(body, status_code=status)


def _write_routes(state: InspectorState) -> list[Route]:
    """The routes that change the store: each answers only with writes enabled and the
    token in a header."""
    writes: list[tuple[str, Handler]] = [
        ("/api/fork", _fork),
        ("/api/approve", _approve),
        ("/api/reject", _reject),
        ("/api/stop", _stop),
    ]
    return [Route(path, _endpoint(state, h, write=True), methods=["POST"]) for path, h in writes]


# -- the app ------------------------------------------------------------------------------


async def _page(request: Request) -> Response:  # noqa: ARG001
    return FileResponse(STATIC / "index.html", media_type="text/html; charset=utf-8")


async def _no_such_route(request: Request) -> Response:
    return JSONResponse(
        {"error": f"no such endpoint: {request.url.path}", "parameter": None}, status_code=404
    )


class _SecurityHeaders:
    """Adds the headers that keep the page to its own files (CSP) on every answer."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: dict[str, object]) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))  # type: ignore[call-overload]
                headers += [
                    (b"content-security-policy", CSP.encode()),
                    (b"x-content-type-options", b"nosniff"),
                    (b"referrer-policy", b"no-referrer"),
                    (b"x-frame-options", b"DENY"),
                ]
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, send_with_headers)  # type: ignore[arg-type]


def build_app(
    rt: Runtime,
    *,
    token: str | None = None,
    writes: bool = False,
    token_for_reads: bool = False,
    store: Store | None = None,
    allowed_hosts: list[str] | None = None,
    nursery: trio.Nursery | None = None,
) -> Starlette:
    """The inspector's ASGI app on ``rt`` (see :func:`runtime.inspector.serve_inspector`
    for the arguments). ``allowed_hosts``: the ``Host`` names it answers (others get a
    400: a page of another site that rebinds its name to this address reads nothing).
    ``nursery``: where the shared live feeds run (one tail per session however many
    streams follow it); without one, each stream runs a tail of its own."""
    feeds = None if nursery is None else Feeds(rt, nursery)
    state = InspectorState(
        rt, token=token, writes=writes, token_for_reads=token_for_reads, store=store, feeds=feeds
    )
    reads: list[tuple[str, Handler]] = [
        ("/api/info", _info),
        ("/api/sessions", _sessions),
        ("/api/session", _session),
        ("/api/events", _events),
        ("/api/runs", _runs),
        ("/api/stream", _stream),
    ]
    routes: list[BaseRoute] = [Route("/", _page, methods=["GET"])]
    routes += [Route(path, _endpoint(state, h), methods=["GET"]) for path, h in reads]
    routes += _write_routes(state)
    routes += [
        Route("/api/{rest:path}", _no_such_route, methods=["GET", "POST"]),
        Mount("/static", app=StaticFiles(directory=STATIC), name="static"),
    ]
    middleware = [Middleware(_SecurityHeaders)]
    if allowed_hosts is not None:
        middleware.append(Middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts))
    return Starlette(routes=routes, middleware=middleware)
