"""Forking a conversation: never inside a run with unanswered tool calls."""

from __future__ import annotations

from runtime import InvalidArgumentError, Runtime, SessionInfo

from ._errors import ForkPointError
from ._history import SEGMENT_KIND
from ._transcript import Entry, entry_from_stored, pending_tool_calls

__all__ = ["check_fork_point", "fork_conversation"]


async def check_fork_point(runtime: Runtime, session_id: str, at_seq: int) -> None:
    """Raise :class:`ForkPointError` if ``at_seq`` falls inside a run (events sharing a
    run_id, not yet closed by its segment marker) that has tool calls without results.

    Cost is that of the run, never of the session: the event at ``at_seq`` names the run,
    the run's first seq comes from the run index, and only the run's events are read.
    Events without a run_id belong to no run and are not checked.
    """
    if at_seq == 0:
        return
    last = await runtime.read(session_id, until_seq=at_seq, limit=1, from_end=True)
    if not last:
        return
    run_id = last[0].run_id
    if run_id is None or last[0].kind == SEGMENT_KIND:
        return
    found = await runtime.find_run(session_id, run_id)
    if found is None:
        return
    entries: list[Entry] = []
    async for event in runtime.iter_events(session_id, since_seq=found[0] - 1, until_seq=at_seq):
        if event.run_id != run_id:
            continue
        try:
            entries.append(entry_from_stored(event))
        except InvalidArgumentError:
            continue  # not a transcript event: it opens or closes no tool call
    pending = pending_tool_calls(entries)
    if pending:
        raise ForkPointError(session_id, at_seq, [call.call_id for call in pending])


async def fork_conversation(
    runtime: Runtime,
    source: str,
    new_id: str,
    *,
    at_seq: int | None = None,
    allow_open_run: bool = False,
) -> SessionInfo:
    """:meth:`Runtime.fork` for a conversation: refused, unless ``allow_open_run``, if
    ``at_seq`` falls inside a run with unanswered tool calls (the child would start with
    dangling calls). The child's runs keep their checkpoints with the parent: rewinding the
    child never touches them.

    Raises: as :meth:`Runtime.fork`, then :class:`ForkPointError`."""
    if not allow_open_run and await runtime.stat(new_id) is None:
        info = await runtime.stat(source)
        if info is not None:
            at = info.head if at_seq is None else at_seq
            if isinstance(at, int) and 0 <= at <= info.head:
                await check_fork_point(runtime, source, at)
    return await runtime.fork(source, new_id, at_seq=at_seq)
