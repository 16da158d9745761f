"""Where a conversation may be forked: never inside a run with unanswered tool calls."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stores import ForkPointError, InvalidArgumentError

from .history import SEGMENT_KIND
from .transcript import Entry, entry_from_stored, pending_tool_calls

if TYPE_CHECKING:
    from .runtime import Runtime

__all__ = ["check_fork_point"]


async def check_fork_point(runtime: Runtime, session_id: str, at_seq: int) -> None:
    """Raise :class:`ForkPointError` if ``at_seq`` falls inside a run (events sharing a
    run_id, not yet closed by its segment marker) that has tool calls without results.

    Cost is that of the run, never of the session: the event at ``at_seq`` names the run,
    the run's first seq comes from the run index, and only the run's events are read.
    Events without a run_id belong to no run and are not checked.
    """
    if at_seq == 0:
        return
    [last] = await runtime._read(session_id, 0, at_seq, 1, from_end=True)
    run_id = last.run_id
    if run_id is None or last.kind == SEGMENT_KIND:
        return
    lane = runtime._read_lane
    found = await lane.run(lane.store.find_run, session_id, run_id)
    assert found is not None
    entries: list[Entry] = []
    for event in await runtime._read_all(session_id, since_seq=found[0] - 1):
        if event.seq > at_seq:
            break
        if event.run_id != run_id:
            continue
        try:
            entries.append(entry_from_stored(event))
        except InvalidArgumentError:
            continue  # not a transcript event: it opens or closes no tool call
    pending = pending_tool_calls(entries)
    if pending:
        raise ForkPointError(session_id, at_seq, [call.call_id for call in pending])
