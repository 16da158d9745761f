"""Parsing the query parameters of the inspector's API: every bad value becomes a 400
naming its parameter, before anything is read."""

from __future__ import annotations

from collections.abc import Mapping

from ._errors import ApiError

__all__ = ["MAX_LIMIT", "flag", "integer", "seq", "session_id", "text"]

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
