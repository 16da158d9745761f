"""Where a conversation may be forked: never inside a run with unanswered tool calls."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stores import ForkPointError, InvalidArgumentError, StoredEvent

from .history import SEGMENT_KIND
from .transcript import Entry, entry_from_stored, pending_tool_calls

if TYPE_CHECKING:
    from .runtime import Runtime

__all__ = ["check_fork_point"]

_PAGE = 200


async def check_fork_point(runtime: Runtime, session_id: str, at_seq: int) -> None:
    """Raise :class:`ForkPointError` if the events up to ``at_seq`` end inside a run (or an
    open stretch of events) with tool calls that have no result.

    Reads backwards from ``at_seq`` only to the previous segment marker: forking at a run
    boundary costs one small read, however long the session is.
    """
    tail: list[StoredEvent] = []
    until = at_seq
    while until > 0:
        page = await runtime._read(session_id, 0, until, _PAGE, from_end=True)
        if not page:
            break
        markers = [i for i, e in enumerate(page) if e.kind == SEGMENT_KIND]
        if markers:
            tail = page[markers[-1] + 1 :] + tail
            break
        tail = page + tail
        until = page[0].seq - 1
    entries: list[Entry] = []
    for event in tail:
        try:
            entries.append(entry_from_stored(event))
        except InvalidArgumentError:
            continue  # not a transcript event: it opens or closes no tool call
    pending = pending_tool_calls(entries)
    if pending:
        raise ForkPointError(session_id, at_seq, [call.call_id for call in pending])
