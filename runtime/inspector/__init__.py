"""tidelog's web inspector: every session and run, live; any seq; fork from there.

``await nursery.start(serve_inspector, rt)`` serves it beside a trio program's own
runtime (``tidelog serve DB`` does the same on any store); :func:`build_app` is the
ASGI app alone, for a server of your own. The page and its JSON API are documented in
``docs/inspector.md``. A client of the public ``runtime`` and ``runtime.agents`` API only.

Needs the ``inspector`` extra (Starlette, hypercorn, sse-starlette): ``pip install
'tidelog[inspector]'``; importing this package works without it, starting it says what
to install.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._errors import ApiError
from ._extra import EXTRA_MODULES, missing_extra, require_extra
from ._serving import InspectorServer, serve_inspector

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from runtime import Runtime

__all__ = [
    "EXTRA_MODULES",
    "ApiError",
    "InspectorServer",
    "build_app",
    "missing_extra",
    "serve_inspector",
]


def build_app(rt: Runtime, **options: Any) -> Starlette:
    """The inspector's ASGI app on ``rt`` (the options of :func:`serve_inspector`, less
    host and port; ``token_for_reads``, ``allowed_hosts`` and ``nursery`` -- where the
    shared live feeds run -- as the server sets them).

    Raises: :class:`ImportError` with the install hint without the ``inspector`` extra."""
    require_extra()
    from ._app import build_app as build

    return build(rt, **options)


# Public names report their public home (``runtime.inspector.X``).
for _name in __all__:
    _obj = globals().get(_name)
    if getattr(_obj, "__module__", "").startswith(__name__ + "._"):
        _obj.__module__ = __name__
del _name, _obj
