"""``serve_inspector``: the inspector served by hypercorn's trio worker in the caller's
``trio.run``, beside its runtime."""

from __future__ import annotations

import functools
import ipaddress
import logging
import secrets
from typing import TYPE_CHECKING, cast

import attrs
import trio

from runtime import InvalidArgumentError, Runtime, Store

from ._extra import require_extra

if TYPE_CHECKING:
    from hypercorn.typing import ASGIFramework

__all__ = ["InspectorServer", "serve_inspector"]

#: The addresses that need no token for reads (this machine only).
LOOPBACK = ("127.0.0.1", "::1", "localhost")


@attrs.frozen
class InspectorServer:
    """Where a started inspector listens: ``task_status.started()``'s value.

    ``url`` is the page's address (``http://host:port/``); ``token`` the token that
    writes (and, off 127.0.0.1, every request) need -- ``None`` when none is needed;
    ``writes`` whether the write routes answer. :attr:`page_url` carries the token in the
    URL's fragment, which browsers never send to a server."""

    url: str
    host: str
    port: int
    token: str | None
    writes: bool

    @property
    def page_url(self) -> str:
        """:attr:`url` with ``#token=...`` when there is a token (the page keeps it for
        the tab and sends it in a header)."""
        return self.url if self.token is None else f"{self.url}#token={self.token}"


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


async def serve_inspector(
    rt: Runtime,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    token: str | None = None,
    writes: bool = False,
    store: Store | None = None,
    task_status: trio.TaskStatus[InspectorServer] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the web inspector of ``rt`` on ``host:port`` until cancelled: start it with
    ``server = await nursery.start(serve_inspector, rt)``; ``server.url`` is the page.

    ``port=0`` picks a free port. On 127.0.0.1 (the default; any loopback address) reads
    need no token. Binding another address needs a token for every request: pass
    ``token``, or one is generated (``server.token``). ``writes``: enable the write
    routes (fork); they need the token in the ``X-Tidelog-Token`` (or ``Authorization:
    Bearer``) header, never a cookie, so another site cannot send them from the user's
    browser -- a token is generated for them too when none is given. ``store``: the
    runtime's store, to show which sessions a writer holds now (``None``: not shown).

    Cancellation stops the server (open event streams end). Needs the ``inspector`` extra
    (``pip install 'tidelog[inspector]'``).

    Raises: :class:`InvalidArgumentError` (a bad port or token, before anything listens),
    :class:`OSError` if the address cannot be bound."""
    require_extra()
    from hypercorn.config import Config
    from hypercorn.trio import serve

    from ._app import build_app

    if type(port) is not int or not 0 <= port <= 65535:
        raise InvalidArgumentError(f"port must be an int in 0..65535, not {port!r}")
    if token is not None and (not isinstance(token, str) or len(token) < 8):
        raise InvalidArgumentError("token must be a str of at least 8 characters")
    if token is not None and not (token.isascii() and token.isprintable()):
        raise InvalidArgumentError("token must be printable ASCII")
    loopback = _is_loopback(host)
    if token is None and (writes or not loopback):
        token = secrets.token_urlsafe(24)
    allowed = ["127.0.0.1", "localhost", "[::1]", "::1"] if loopback else None
    config = Config()
    config.bind = [f"{_url_host(host)}:{port}"]
    config.accesslog = None
    config.errorlog = logging.getLogger("tidelog.inspector")
    config.graceful_timeout = 0.5
    config.keep_alive_timeout = 30

    async with trio.open_nursery() as nursery:
        app = build_app(
            rt,
            token=token,
            writes=writes,
            token_for_reads=not loopback,
            store=store,
            allowed_hosts=allowed,
            nursery=nursery,
        )
        binds: list[str] = await nursery.start(
            functools.partial(serve, cast("ASGIFramework", app), config)
        )
        port_bound = int(binds[0].rpartition(":")[2])
        url = f"http://{_url_host(host)}:{port_bound}/"
        task_status.started(InspectorServer(url, host, port_bound, token, writes))
