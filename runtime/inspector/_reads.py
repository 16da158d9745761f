"""What the inspector's JSON endpoints read, through the public runtime API only: the
session list, one session at a seq (its projection values from one snapshot), windows of
events, lineage and runs. Independent of the web framework."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from runtime import (
    INTERNAL_PREFIX,
    JSON,
    InvalidArgumentError,
    InvalidSessionIdError,
    Projection,
    Runtime,
    SessionInfo,
    SessionNotFoundError,
    Snapshot,
    StoredEvent,
)
from runtime.agents import (
    TOOL_OUTCOME_UNKNOWN,
    Decision,
    SidecarEntry,
    ToolCall,
    ToolResult,
    awaiting_approval,
    checkpoint_sessions,
    checkpoints,
    pending_tool_calls,
)

from ._errors import ApiError

__all__ = [
    "event_obj",
    "read_events",
    "read_runs",
    "read_session",
    "read_sessions",
    "session_obj",
]

#: Events folded per read when the projection values are asked at an earlier seq.
FOLD_PAGE = 1000
#: Sessions read per page when a parent's forks are looked for.
LIST_PAGE = 1000
#: The sidecar kind of a person's decision on a call (docs/agents.md, approvals).
APPROVAL_DECISION = "approval_decision"


def session_obj(info: SessionInfo, writers: dict[str, str] | None) -> dict[str, JSON]:
    """The JSON form of a session: the CLI's (docs/cli.md) plus ``internal`` and
    ``writer`` (the holder of its write lease now, ``null`` for none; absent when the
    inspector cannot see leases)."""
    obj: dict[str, JSON] = {
        "id": info.id,
        "head": info.head,
        "created_at": info.created_at,
        "updated_at": info.updated_at,
        "header": info.header,
        "parent": None if info.parent is None else {"id": info.parent[0], "seq": info.parent[1]},
        "internal": info.id.startswith(INTERNAL_PREFIX),
    }
    if writers is not None:
        obj["writer"] = writers.get(info.id)
    return obj


def event_obj(event: StoredEvent) -> dict[str, JSON]:
    """The JSON form of an event (as ``tidelog show --json`` prints it)."""
    return {
        "seq": event.seq,
        "ts": event.ts,
        "kind": event.kind,
        "run_id": event.run_id,
        "data": event.data,
    }


def _store_error(exc: Exception, parameter: str) -> ApiError:
    """An argument the runtime refused, as a 400 naming the request's parameter."""
    return ApiError(400, str(exc), parameter)


async def _stat(rt: Runtime, session_id: str) -> SessionInfo:
    try:
        info = await rt.stat(session_id)
    except InvalidSessionIdError as exc:
        raise _store_error(exc, "id") from None
    if info is None:
        raise ApiError(404, f"no session {session_id!r}", "id")
    return info


async def read_sessions(
    rt: Runtime,
    *,
    limit: int,
    prefix: str | None,
    after: str | None,
    internal: bool,
    writers: dict[str, str] | None,
) -> dict[str, JSON]:
    """A page of sessions in id order after ``after``; ``next`` is the cursor of the
    next page (``null`` on the last one)."""
    try:
        page = await rt.list_sessions(
            limit=limit + 1, prefix=prefix or None, after=after, include_internal=internal
        )
    except InvalidArgumentError as exc:
        message = str(exc)
        parameter = next((p for p in ("prefix", "after") if message.startswith(p)), "prefix")
        raise _store_error(exc, parameter) from None
    more = len(page) > limit
    page = page[:limit]
    return {
        "sessions": [session_obj(info, writers) for info in page],
        "next": page[-1].id if more and page else None,
    }


async def _forks(rt: Runtime, session_id: str) -> list[JSON]:
    """The sessions forked from ``session_id`` (one pass over the session list)."""
    found: list[JSON] = []
    cursor: str | None = None
    while True:
        page = await rt.list_sessions(limit=LIST_PAGE, after=cursor, include_internal=True)
        for info in page:
            if info.parent is not None and info.parent[0] == session_id:
                found.append({"id": info.id, "seq": info.parent[1]})
        if len(page) < LIST_PAGE:
            return found
        cursor = page[-1].id


async def _values_at(snap: Snapshot, projections: dict[str, Projection], at: int) -> JSON:
    """The projection values as of seq ``at`` of the snapshot: the snapshot's own fold
    (cached) at its head, else every projection folded from the first event to ``at``."""
    if at == snap.as_of_seq:
        values: dict[str, Any] = await snap.values()
        return values
    states = {name: p.init() for name, p in projections.items()}
    cursor = 0
    while cursor < at:
        page = await snap.read(since_seq=cursor, until_seq=at, limit=FOLD_PAGE)
        if not page:
            break
        for event in page:
            for name, projection in projections.items():
                states[name] = projection.apply(states[name], event)
        cursor = page[-1].seq
    return {name: projections[name].view(state) for name, state in states.items()}


async def read_session(
    rt: Runtime, session_id: str, *, as_of_seq: int | None, writers: dict[str, str] | None
) -> dict[str, JSON]:
    """One session: its info, the seq viewed (``as_of_seq``, default its head), the
    projection values exactly as of that seq (from one snapshot), its fork parent and
    its forks."""
    await _stat(rt, session_id)
    try:
        async with rt.snapshot(session_id) as snap:
            info = await _stat(rt, session_id)
            at = snap.as_of_seq if as_of_seq is None else as_of_seq
            if at > snap.as_of_seq:
                raise ApiError(
                    400,
                    f"as_of_seq {at} is past the last committed seq {snap.as_of_seq}",
                    "as_of_seq",
                )
            values = await _values_at(snap, rt.projections, at)
            head = snap.as_of_seq
    except SessionNotFoundError:
        raise ApiError(404, f"no session {session_id!r}", "id") from None
    return {
        "session": session_obj(info, writers),
        "head": head,
        "as_of_seq": at,
        "values": values,
        "forks": await _forks(rt, session_id),
    }


async def read_events(
    rt: Runtime,
    session_id: str,
    *,
    since_seq: int,
    until_seq: int | None,
    limit: int,
    from_end: bool,
) -> dict[str, JSON]:
    """Events with ``since_seq < seq <= until_seq`` (clamped to the head), at most
    ``limit`` -- the first ones, or the last ones with ``from_end`` -- from one snapshot;
    ``head`` is the snapshot's seq."""
    await _stat(rt, session_id)
    if until_seq is not None and until_seq < since_seq:
        raise ApiError(400, f"until_seq {until_seq} is below since_seq {since_seq}", "until_seq")
    try:
        async with rt.snapshot(session_id) as snap:
            end = snap.as_of_seq if until_seq is None else min(until_seq, snap.as_of_seq)
            start = max(since_seq, end - limit) if from_end else since_seq
            events = await snap.read(since_seq=start, until_seq=end, limit=limit)
            head = snap.as_of_seq
    except SessionNotFoundError:
        raise ApiError(404, f"no session {session_id!r}", "id") from None
    return {"id": session_id, "head": head, "events": [event_obj(e) for e in events]}


async def read_runs(rt: Runtime, session_id: str) -> dict[str, JSON]:
    """The runs of a conversation (or the one run of a checkpoint session, or those of a
    conversation whose session is not written yet) whose checkpoints are stored: status,
    agent, turns, error, the checkpoint's session, the tool calls still without a result, those that
    await a person's approval, the decisions recorded, the calls whose outcome was
    reported unknown after a crash, and where the run lies in the conversation
    (``first_seq``, ``last_seq``; ``null`` until its history segment is written)."""
    try:
        info = await rt.stat(session_id)
    except InvalidSessionIdError as exc:
        raise _store_error(exc, "id") from None
    runs: list[JSON] = []
    saved = [
        c
        for c in await checkpoint_sessions(rt)
        if session_id in (c.conversation, c.session.id) and c.head is not None
    ]
    if info is None and not saved:  # a conversation's first run has no session yet
        raise ApiError(404, f"no session {session_id!r}", "id")
    for stored in saved:
        head = stored.head
        assert head is not None
        snapshot = await checkpoints(rt).load(stored.run_id)
        entries: Sequence[Any] = () if snapshot is None else snapshot.entries
        unknown = [
            e.call_id
            for e in entries
            if isinstance(e, ToolResult) and e.output.startswith(TOOL_OUTCOME_UNKNOWN)
        ]
        conversation = head.session_id
        span = None if conversation is None else await _find_run(rt, conversation, stored.run_id)
        runs.append(
            {
                "run_id": stored.run_id,
                "status": head.status,
                "agent": head.agent,
                "turns": head.turns,
                "updated_at": head.updated_at,
                "error": head.error,
                "checkpoint": stored.session.id,
                "pending_calls": [_call(c) for c in pending_tool_calls(entries)],
                "pending_approvals": [_call(c) for c in awaiting_approval(entries)],
                "decisions": _decisions(entries),
                "unknown_outcomes": list(unknown),
                "first_seq": None if span is None else span[0],
                "last_seq": None if span is None else span[1],
            }
        )
    runs.sort(key=lambda r: (-_number(r, "updated_at"), str(_field(r, "run_id"))))
    return {"id": session_id, "runs": runs, "checked_at": time.time()}


async def _find_run(rt: Runtime, conversation: str, run_id: str) -> tuple[int, int] | None:
    try:
        return await rt.find_run(conversation, run_id)
    except SessionNotFoundError:
        return None


def _call(call: ToolCall) -> dict[str, JSON]:
    return {"call_id": call.call_id, "name": call.name, "arguments": call.arguments}


def _decisions(entries: Sequence[Any]) -> list[JSON]:
    """The decisions recorded in a run's checkpoint, in order."""
    found: list[JSON] = []
    for entry in entries:
        if isinstance(entry, SidecarEntry) and entry.kind == APPROVAL_DECISION:
            decision = Decision.from_json(entry.data)
            if decision is not None:
                found.append(decision.to_json())
    return found


def _field(obj: JSON, name: str) -> JSON:
    assert isinstance(obj, dict)
    return obj[name]


def _number(obj: JSON, name: str) -> float:
    value = _field(obj, name)
    return float(value) if isinstance(value, int | float) else 0.0
