"""Parsing the query parameters and JSON bodies of the inspector's API: every bad value
becomes a 400 naming its parameter, before anything is read or written."""

from __future__ import annotations

import json
from collections.abc import Mapping

from runtime import JSON

from ._errors import ApiError

__all__ = [
    "MAX_LIMIT",
    "body_flag",
    "body_seq",
    "body_text",
    "flag",
    "integer",
    "json_body",
    "seq",
    "session_id",
    "text",
]

#: The largest ``limit`` a request may ask for (events or sessions per answer).
MAX_LIMIT = 1000
#: The largest seq the stores take (SQLite's signed 64-bit integer).
MAX_SEQ = 2**63 - 1
#: The longest session id the stores take (the same bound as theirs).
MAX_ID = 256


def text(query: Mapping[str, str], name: str) -> str | None:
    """The parameter as given, or ``None`` when absent."""
    return query.get(name)


def session_id(query: Mapping[str, str], name: str = "id") -> str:
    """A required session id: non-empty, at most :data:`MAX_ID` characters, printable.
    (The store checks the rest and answers an invalid one with a 400 naming ``name``.)"""
    value = query.get(name)
    if value is None or value == "":
        raise ApiError(400, f"{name} is required (a session id)", name)
    if len(value) > MAX_ID:
        raise ApiError(400, f"{name} is longer than {MAX_ID} characters", name)
    if not value.isprintable():
        raise ApiError(400, f"{name} contains control characters", name)
    return value


def integer(
    query: Mapping[str, str], name: str, *, default: int | None, low: int, high: int
) -> int | None:
    """An optional integer in ``[low, high]`` (decimal digits, an optional minus)."""
    raw = query.get(name)
    if raw is None or raw == "":
        return default
    body = raw[1:] if raw.startswith("-") else raw
    if not body.isdigit() or not body.isascii() or len(body) > 20:
        raise ApiError(400, f"{name} must be an integer, not {raw!r}", name)
    value = int(raw)
    if value < low:
        raise ApiError(400, f"{name} must be >= {low}, not {value}", name)
    if value > high:
        raise ApiError(400, f"{name} must be <= {high}, not {value}", name)
    return value


def seq(query: Mapping[str, str], name: str, *, default: int | None = None) -> int | None:
    """An optional seq (an integer >= 0)."""
    return integer(query, name, default=default, low=0, high=MAX_SEQ)


def flag(query: Mapping[str, str], name: str) -> bool:
    """An optional boolean: ``1``/``true``/``yes`` or ``0``/``false``/``no`` (default false)."""
    raw = query.get(name)
    if raw is None or raw == "":
        return False
    if raw.lower() in ("1", "true", "yes"):
        return True
    if raw.lower() in ("0", "false", "no"):
        return False
    raise ApiError(400, f"{name} must be true or false, not {raw!r}", name)


# -- JSON bodies (the write routes) ---------------------------------------------------------


def json_body(raw: bytes) -> dict[str, JSON]:
    """A request body that must be one JSON object."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise ApiError(400, "the body must be a JSON object") from None
    if not isinstance(body, dict):
        raise ApiError(400, "the body must be a JSON object")
    return body


def body_text(body: Mapping[str, JSON], name: str, *, required: bool = False) -> str | None:
    """An optional (or ``required``) string field; an empty one counts as absent."""
    value = body.get(name)
    if value is None or value == "":
        if required:
            raise ApiError(400, f"{name} is required (a string)", name)
        return None
    if not isinstance(value, str):
        raise ApiError(400, f"{name} must be a string", name)
    return value


def body_seq(body: Mapping[str, JSON], name: str) -> int | None:
    """An optional seq field (a JSON integer >= 0)."""
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise ApiError(400, f"{name} must be an integer", name)
    return seq({name: str(value)}, name)


def body_flag(body: Mapping[str, JSON], name: str) -> bool:
    """An optional JSON boolean field (default false)."""
    value = body.get(name, False)
    if not isinstance(value, bool):
        raise ApiError(400, f"{name} must be true or false", name)
    return value
