"""Queries over transcript entries: sidecars, and tool calls still waiting for a result."""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Iterable

from ._entries import Entry, SidecarEntry, ToolCall, ToolResult, check_entry

__all__ = ["drop_dangling_tool_calls", "is_sidecar", "pending_tool_calls"]


def is_sidecar(entry: Entry) -> bool:
    """Whether ``entry`` is a :class:`SidecarEntry` (known or unknown kind).

    Sidecar entries are not part of the conversation proper: folding ignores them.

    Raises:
        InvalidArgumentError: ``entry`` is not a transcript entry.
    """
    return isinstance(check_entry(entry), SidecarEntry)


def _pending_positions(entries: list[Entry]) -> list[int]:
    """Positions of the calls without a result, in order of occurrence."""
    open_calls: defaultdict[str, deque[int]] = defaultdict(deque)
    for position, entry in enumerate(entries):
        check_entry(entry, f"entries[{position}]")
        if isinstance(entry, ToolCall):
            open_calls[entry.call_id].append(position)
        elif isinstance(entry, ToolResult):
            waiting = open_calls.get(entry.call_id)
            if waiting:
                waiting.popleft()
    return sorted(position for waiting in open_calls.values() for position in waiting)


def pending_tool_calls(entries: Iterable[Entry]) -> list[ToolCall]:
    """The tool calls in ``entries`` that have no result, in order of occurrence.

    Pairing is by ``call_id`` and by occurrence: each :class:`ToolResult` pairs with the
    earliest *earlier* :class:`ToolCall` with the same id that is not paired yet, so with
    duplicate ids the n-th result pairs with the n-th call. A result with no such call (it
    comes first, or its id is unknown) is ignored. Other entries do not matter.

    Raises:
        InvalidArgumentError: an element is not a transcript entry.
    """
    items = list(entries)
    pending: list[ToolCall] = []
    for position in _pending_positions(items):
        call = items[position]
        assert isinstance(call, ToolCall)
        pending.append(call)
    return pending


def drop_dangling_tool_calls(entries: Iterable[Entry]) -> list[Entry]:
    """``entries`` without the calls :func:`pending_tool_calls` reports; all else unchanged.

    Removal is by position, not by value: of two equal calls where only the first has a
    result, the second is dropped. The order of the remaining entries is kept; nothing
    but :class:`ToolCall` entries is ever removed, and the result has no pending calls
    (so the function is idempotent). Use it before writing an interrupted run's partial
    transcript to a session, so every call in history has its result.

    Raises:
        InvalidArgumentError: an element is not a transcript entry.
    """
    items = list(entries)
    dropped = set(_pending_positions(items))
    return [entry for position, entry in enumerate(items) if position not in dropped]
