"""Projections: named, versioned folds over a session's events, read at a snapshot.

A projection turns the log into a current value (usage totals, the conversation the model
sees, a turn outline) without being a second source of truth: ``Snapshot.values()`` folds
exactly the events up to the snapshot's ``as_of_seq``. States are JSON so they can be
cached: a cold read starts from the newest valid cache (same version, nothing below its
seq destroyed since) and folds only the events after it. A changed ``version``, or a
truncate/rewrite below the cache, refolds from scratch. Writing a cache never fails a read.
"""

from __future__ import annotations

from typing import Any, ClassVar

from stores import JSON, StoredEvent

__all__ = ["Projection", "StatsProjection"]


def _int(value: JSON) -> int:
    return value if isinstance(value, int) else 0


class Projection:
    """Subclass and set :attr:`name` and :attr:`version`; implement :meth:`init` and
    :meth:`apply` (which may update ``state`` in place and return it); optionally
    :meth:`view`. States must be JSON values (they are cached as JSON). Bump
    ``version`` whenever :meth:`apply` changes meaning: older caches are then ignored.
    """

    name: ClassVar[str] = ""
    version: ClassVar[int] = 1

    def init(self) -> JSON:
        """The state of an empty session."""
        raise NotImplementedError

    def apply(self, state: JSON, event: StoredEvent) -> JSON:
        """Fold one event into ``state``; return the new state."""
        raise NotImplementedError

    def view(self, state: JSON) -> Any:
        """What readers get (default: the state itself)."""
        return state


class StatsProjection(Projection):
    """``stats``: event counts by kind, token usage totals from assistant events (their
    ``usage`` object), and the first and last commit time."""

    name = "stats"
    version = 1

    def init(self) -> JSON:
        return {
            "events": 0,
            "kinds": {},
            "usage": {"input_tokens": 0, "output_tokens": 0},
            "first_ts": None,
            "last_ts": None,
        }

    def apply(self, state: JSON, event: StoredEvent) -> JSON:
        assert isinstance(state, dict)
        kinds = state["kinds"]
        assert isinstance(kinds, dict)
        state["events"] = _int(state["events"]) + 1
        kinds[event.kind] = _int(kinds.get(event.kind, 0)) + 1
        if event.kind == "assistant" and isinstance(event.data, dict):
            usage = event.data.get("usage")
            totals = state["usage"]
            if isinstance(usage, dict) and isinstance(totals, dict):
                for key in ("input_tokens", "output_tokens"):
                    value = usage.get(key)
                    if isinstance(value, int):
                        totals[key] = _int(totals[key]) + value
        if state["first_ts"] is None:
            state["first_ts"] = event.ts
        state["last_ts"] = event.ts
        return state
