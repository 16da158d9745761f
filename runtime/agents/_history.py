"""Conversation history (lovia's Session -- lovia being the Python agent framework whose
Session/Checkpoint/Runner design this layer follows) on the event log, and in memory.

A conversation is a tidelog session; a *segment* is one run's entries in it. Appending a
segment is one atomic append of the run's entries (each event tagged with the run_id)
followed by a ``tidelog.segment`` marker holding the run's meta -- so a run is in the
history whole or not at all. Appends are idempotent per ``(session, run_id)``: the first
write wins, a repeat is a no-op (replays re-apply their append safely). The check and the
write need no lock: the write carries the head the check saw (``expected_head``), so a
concurrent writer makes it fail with a conflict and the check runs again.

Maintenance rewrites the tail of the log in one atomic step (a ``ReplaceOp``):
``trim_tool_results`` shortens old tool outputs, ``rewind`` cuts the conversation back.
Snapshots covering what they change expire instead of mixing versions.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import attrs

from runtime import JSON, InvalidArgumentError, NewEvent
from stores import decode_json, encode_json

from ._checkpoints import Checkpointer
from ._home import SessionHome
from ._transcript import Entry, ToolResult, drop_dangling_tool_calls, entry_to_event, entry_to_json

__all__ = [
    "ARCHIVED_KIND",
    "SEGMENT_KIND",
    "History",
    "Segment",
    "check_count",
    "check_entries",
    "check_meta",
    "entries_json",
    "forget_runs",
    "plan_rewind",
    "segment_events",
    "trim_marker",
    "trimmed_result",
]

#: Event kind of the marker that closes a segment (reserved ``tidelog.`` prefix).
SEGMENT_KIND = "tidelog.segment"
#: Event kind of an archived tool output (in the archive session).
ARCHIVED_KIND = "tidelog.archived"
_RESERVED = "tidelog."
_MARKER = re.compile(r"\n\[tidelog: trimmed \d+ of \d+ characters of tool result .*\]\Z", re.S)


@attrs.frozen
class Segment:
    """One run's entries in a conversation, with the run's opaque ``meta``."""

    run_id: str
    entries: tuple[Entry, ...]
    meta: dict[str, JSON] | None = None


@runtime_checkable
class History(Protocol):
    """The conversation-history contract (every method is an async checkpoint)."""

    async def segments(self, session_id: str) -> list[Segment]:
        """The stored runs, in order."""
        ...

    async def load(self, session_id: str) -> list[Entry]:
        """All entries of all segments, flat, runs in order."""
        ...

    async def append(
        self,
        session_id: str,
        entries: Sequence[Entry],
        *,
        run_id: str | None = None,
        meta: dict[str, JSON] | None = None,
    ) -> str:
        """Store a run's entries as a segment; return its run_id (generated if None).
        A run_id already stored in this session makes it a no-op (first write wins)."""
        ...

    async def clear(self, session_id: str) -> None:
        """Remove every segment."""
        ...

    async def has_run(self, session_id: str, run_id: str) -> bool:
        """True if a segment of ``run_id`` is stored in the session."""
        ...

    def home(self, session_id: str) -> SessionHome | None:
        """The runtime session that holds the conversation, or ``None`` when the history
        keeps it elsewhere (see :meth:`Checkpointer.home`). Not a checkpoint (no I/O)."""
        ...


def trim_marker(call_id: str, cut: int, total: int) -> str:
    """The honest marker appended to a trimmed tool output."""
    return (
        f"\n[tidelog: trimmed {cut} of {total} characters of tool result {call_id}; "
        "recall_tool_result() returns the full output if it was archived]"
    )


def check_entries(entries: object) -> list[Entry]:
    if isinstance(entries, str | bytes) or not isinstance(entries, Sequence):
        raise InvalidArgumentError("entries must be a sequence of transcript entries")
    events = [entry_to_event(e) for e in entries]  # validates each entry
    for index, event in enumerate(events):
        if event.kind.startswith(_RESERVED):
            raise InvalidArgumentError(f"entry {index}: kind {event.kind!r} is reserved")
    return list(entries)


def check_meta(meta: object) -> dict[str, JSON] | None:
    if meta is None:
        return None
    if not isinstance(meta, dict):
        raise InvalidArgumentError(f"meta must be a dict or None, not {type(meta).__name__}")
    copy = decode_json(encode_json(meta))
    assert isinstance(copy, dict)
    return copy


def check_count(value: object, name: str) -> int:
    if type(value) is not int or value < 0:
        raise InvalidArgumentError(f"{name} must be an int >= 0, not {value!r}")
    return value


def segment_events(
    entries: Sequence[Entry], run_id: str, meta: dict[str, JSON] | None
) -> list[NewEvent]:
    events = [entry_to_event(e, run_id=run_id) for e in entries]
    events.append(NewEvent(SEGMENT_KIND, {"meta": meta, "entries": len(entries)}, run_id=run_id))
    return events


def trimmed_result(result: ToolResult, keep_chars: int) -> ToolResult | None:
    """The trimmed version of ``result``, or None if it must be left alone."""
    output = result.output
    if _MARKER.search(output):
        return None  # already trimmed: idempotent
    cut = len(output) - keep_chars
    if cut <= 0:
        return None
    marker = trim_marker(result.call_id, cut, len(output))
    if keep_chars + len(marker) >= len(output):
        return None  # would not shrink by more than the marker costs
    return attrs.evolve(result, output=output[:keep_chars] + marker)


def plan_rewind(
    segments: Sequence[Segment], keep_entries: int
) -> tuple[int, int, list[Entry], list[str]] | None:
    """Where a rewind cuts: ``(segment index k, removed count, entries kept of segment k,
    run_ids rewound)``; None if nothing is removed."""
    total = sum(len(s.entries) for s in segments)
    if keep_entries >= total:
        return None
    seen = 0
    for k, segment in enumerate(segments):
        if seen + len(segment.entries) > keep_entries:
            kept = drop_dangling_tool_calls(segment.entries[: keep_entries - seen])
            removed = total - seen - len(kept)
            return k, removed, kept, [s.run_id for s in segments[k:]]
        seen += len(segment.entries)
    raise AssertionError("unreachable")  # pragma: no cover


async def forget_runs(
    checkpointer: Checkpointer | None, session_id: str, run_ids: Sequence[str]
) -> None:
    """Delete the checkpoints of the rewound runs that belong to ``session_id``."""
    if checkpointer is None:
        return
    for run_id in run_ids:
        snapshot = await checkpointer.load(run_id)
        if snapshot is not None and snapshot.head.session_id == session_id:
            await checkpointer.delete(run_id)


def entries_json(entries: Sequence[Entry]) -> list[JSON]:
    """Entries as JSON objects (for printing and export)."""
    return [entry_to_json(e) for e in entries]
