"""The ``inspector`` extra: its modules, and the install hint when one is missing."""

from __future__ import annotations

import importlib.util

__all__ = ["EXTRA_MODULES", "missing_extra", "require_extra"]

#: The modules of the ``inspector`` extra (Starlette, hypercorn, sse-starlette).
EXTRA_MODULES = ("starlette", "hypercorn", "sse_starlette")


def missing_extra() -> str | None:
    """The install hint when a module of the ``inspector`` extra is missing, else
    ``None``."""
    missing = [m for m in EXTRA_MODULES if importlib.util.find_spec(m) is None]
    if not missing:
        return None
    return f"the inspector needs {', '.join(missing)}: pip install 'tidelog[inspector]'"


def require_extra() -> None:
    """Raise :class:`ImportError` with the install hint if the extra is missing."""
    hint = missing_extra()
    if hint is not None:
        raise ImportError(hint)
