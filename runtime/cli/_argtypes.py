"""The argument types of the ``tidelog`` command line (argparse ``type=`` functions): each
turns one argument's text into its value or raises :class:`argparse.ArgumentTypeError`
with what was wrong, which argparse reports as a usage error (status 2)."""

from __future__ import annotations

import argparse
import re
import time
from datetime import datetime

__all__ = ["count", "duration", "events_to_show", "moment", "port", "seq"]


def count(text: str) -> int:
    """An argparse type: an integer >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, not {value}")
    if value > 2**63 - 1:
        raise argparse.ArgumentTypeError(f"too large: {value}")
    return value


def port(text: str) -> int:
    """``--port``'s type: 0..65535."""
    value = count(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"not a port: {value}")
    return value


#: A seq is a count (0 is "before the first event").
seq = count


def events_to_show(text: str) -> int | None:
    """``-n``'s type: a count, or ``all`` (``None``)."""
    return None if text == "all" else count(text)


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"\A(\d+(?:\.\d+)?)([smhdw])\Z")


def duration(text: str) -> float:
    """An argparse type: a duration such as ``90s``, ``15m``, ``12h``, ``30d``, ``2w``;
    returns seconds."""
    match = _DURATION.match(text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(
            f"not a duration: {text!r} (a number and a unit: s, m, h, d or w, as in 30d)"
        )
    return float(match.group(1)) * _UNITS[match.group(2)]


def moment(text: str) -> float:
    """An argparse type: a point in time, as an ISO date or date and time (local time
    unless it names a zone), or a duration ago (``7d``); returns seconds since the epoch."""
    if _DURATION.match(text.strip()):
        return time.time() - duration(text)
    try:
        return datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a time: {text!r} (an ISO date such as 2026-01-31 or 2026-01-31T12:00, "
            "or a duration ago such as 7d)"
        ) from None
