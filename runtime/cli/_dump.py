"""The dump format and ``tidelog export``.

A dump is JSON Lines (one JSON object per line, ASCII only), versioned by its first
record, written and read as a stream (see ``docs/cli.md``)::

    {"format": "tidelog-dump", "version": 1, "created_at": T, "tidelog": "0.1.0"}
    {"type": "session", "id": ID, "head": N, "created_at": T, "updated_at": T,
     "header": {...}, "parent": null | {"id": ID, "seq": N}}
    {"type": "event", "seq": 1, "ts": T, "kind": K, "run_id": null | R, "data": ...}
    ... (N events, seqs 1..N)
    {"type": "end", "id": ID, "events": N}
    ... (more sessions)
    {"type": "end-of-dump", "sessions": S}

Every session carries all its events (a fork's shared prefix too), so any subset of a
dump imports on its own; ``parent`` records the lineage. A fork comes after its parent
when both are in the dump, so that import can let it share the parent's prefix again
(see :mod:`runtime.cli._load`). Internal sessions (run
checkpoints ``tidelog/run/R``, archives) are sessions like any other. The trailer tells
a complete dump from a cut one.

Export reads through the public runtime API on a read-only store (any backend behind a
runtime works the same): each session from one pinned snapshot, a page at a time.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import AsyncIterator, Callable
from typing import TextIO

import trio

from runtime import JSON, STATISTICS_PREFIX, Runtime, SessionInfo, SessionNotFoundError
from runtime.agents import RuntimeHistory, checkpoint_sessions

from ._browse import snapshot_events
from ._errors import CliError, Interrupted, leaf
from ._opening import StopFlag, reading_runtime, stoppable
from ._output import dumps, progress, session_obj
from ._parsing import version

__all__ = [
    "DUMP_FORMAT",
    "DUMP_VERSION",
    "check_new_path",
    "cmd_export",
    "export",
    "export_runtime",
]

#: The first record's ``format``.
DUMP_FORMAT = "tidelog-dump"
#: The dump format version this tidelog writes (and the newest it reads).
DUMP_VERSION = 1


def dump_header() -> dict[str, JSON]:
    """The first record of a dump written now."""
    return {
        "format": DUMP_FORMAT,
        "version": DUMP_VERSION,
        "created_at": time.time(),
        "tidelog": version(),
    }


def session_record(info: SessionInfo, head: int) -> dict[str, JSON]:
    """A session's record, at ``head`` (its pinned length)."""
    return {"type": "session", **session_obj(info), "head": head}


def cmd_export(args: argparse.Namespace) -> int:
    """``tidelog export``."""
    if args.output is not None:
        check_new_path("export", args.output)
    with stoppable() as stop:
        if args.output is None:
            return trio.run(export, args.db, args.sessions, sys.stdout, stop)
        partial = f"{args.output}.partial"
        stop.on_abort.append(lambda: os.remove(partial))
        try:
            try:
                out = open(partial, "x", encoding="ascii", newline="\n")  # noqa: SIM115
            except OSError as exc:
                raise CliError(
                    f"tidelog: export: cannot create {args.output}: {exc.strerror}"
                ) from None
            with out:
                status = trio.run(export, args.db, args.sessions, out, stop)
                out.flush()
                os.fsync(out.fileno())
            os.link(partial, args.output)  # complete dumps only, never over another file
        except BaseException as exc:
            if isinstance(leaf(exc), Interrupted):
                raise Interrupted(f"no dump was written ({args.output} not created)") from None
            raise
        finally:
            if os.path.exists(partial):
                os.remove(partial)
        return status


def check_new_path(command: str, path: str) -> None:
    """Refuse an output path that exists, or whose folder does not, before any work."""
    if os.path.lexists(path):
        raise CliError(f"tidelog: {command}: {path} already exists (give a new path)")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise CliError(
            f"tidelog: {command}: no folder {folder} to write {path} in (create it first)"
        )


async def export(db: str, session_ids: list[str], out: TextIO, stop: StopFlag) -> int:
    """Write a dump of ``session_ids`` (all sessions if empty) of ``db`` to ``out``."""
    async with reading_runtime(db) as rt:
        await export_runtime(rt, session_ids, out, stop)
    return 0


async def export_runtime(
    rt: Runtime, session_ids: list[str], out: TextIO, stop: StopFlag | None = None
) -> int:
    """Write a dump of ``session_ids`` (all sessions, internal ones included, if empty)
    of any runtime to ``out``; return how many sessions it holds."""
    stop = StopFlag() if stop is None else stop
    if session_ids:
        chosen = sorted(await _with_internal(rt, session_ids), key=lambda info: info.id)
        total = sum(info.head for info in chosen)
        source = _parents_first(_given(chosen))
    else:
        total = await _count_events(rt) if sys.stderr.isatty() else 0
        source = _parents_first(_every_session(rt))
    out.write(dumps(dump_header()) + "\n")
    sessions = 0
    with progress("export", total or None, unit="events") as advance:
        async for info in source:
            stop.check(f"{sessions} sessions written; the dump is incomplete")
            await _export_session(rt, info.id, out, advance, stop, sessions)
            sessions += 1
    out.write(dumps({"type": "end-of-dump", "sessions": sessions}) + "\n")
    return sessions


async def _export_session(
    rt: Runtime,
    session_id: str,
    out: TextIO,
    advance: Callable[[int], None],
    stop: StopFlag,
    written: int,
) -> None:
    """One session's records, from one snapshot (a session deleted since it was listed
    is skipped); ``stop`` is checked between pages (``written``: the sessions before)."""
    try:
        async with rt.snapshot(session_id) as snap:
            info = await rt.stat(session_id)
            if info is None:
                return
            head = snap.as_of_seq
            out.write(dumps(session_record(info, head)) + "\n")
            async for page in snapshot_events(snap, 0, None, None):
                stop.check(f"{written} sessions written; the dump is incomplete")
                out.write(
                    "".join(
                        dumps(
                            {
                                "type": "event",
                                "seq": e.seq,
                                "ts": e.ts,
                                "kind": e.kind,
                                "run_id": e.run_id,
                                "data": e.data,
                            }
                        )
                        + "\n"
                        for e in page
                    )
                )
                advance(len(page))
            out.write(dumps({"type": "end", "id": session_id, "events": head}) + "\n")
    except SessionNotFoundError:
        return


async def _every_session(rt: Runtime) -> AsyncIterator[SessionInfo]:
    """Every session, internal ones included, by id with the stable cursor -- except
    the statistics records of live runtimes (runtime state, not data)."""
    cursor: str | None = None
    while True:
        page = await rt.list_sessions(limit=1000, after=cursor, include_internal=True)
        for info in page:
            if not info.id.startswith(STATISTICS_PREFIX):
                yield info
        if len(page) < 1000:
            return
        cursor = page[-1].id


async def _parents_first(infos: AsyncIterator[SessionInfo]) -> AsyncIterator[SessionInfo]:
    """``infos`` (in id order), except that a fork whose parent is still to come -- its
    id sorts after the fork's, or the parent itself waits -- waits until the end, where
    the waiting ones come parents first. Only their infos wait, never events."""
    waiting: dict[str, SessionInfo] = {}
    async for info in infos:
        parent = None if info.parent is None else info.parent[0]
        if parent is not None and (parent > info.id or parent in waiting):
            waiting[info.id] = info
        else:
            yield info
    while waiting:
        ready = [i for i in waiting.values() if i.parent is None or i.parent[0] not in waiting]
        for info in ready or list(waiting.values()):  # (a loop cannot happen; never stall)
            del waiting[info.id]
            yield info


async def _count_events(rt: Runtime) -> int:
    """How many events a full export writes (for the progress bar)."""
    return sum([info.head async for info in _every_session(rt)])


async def _given(infos: list[SessionInfo]) -> AsyncIterator[SessionInfo]:
    for info in infos:
        yield info


async def _with_internal(rt: Runtime, session_ids: list[str]) -> list[SessionInfo]:
    """The given sessions (each must exist), then the internal sessions that belong to
    them: their runs' checkpoints and their archives of trimmed tool outputs."""
    chosen: dict[str, SessionInfo] = {}
    for session_id in session_ids:
        info = await rt.stat(session_id)
        if info is None:
            raise SessionNotFoundError(session_id)
        chosen[session_id] = info
    wanted = set(chosen)
    for checkpoint in await checkpoint_sessions(rt):
        if checkpoint.conversation in wanted and checkpoint.session.id not in chosen:
            chosen[checkpoint.session.id] = checkpoint.session
    for session_id in sorted(wanted):
        archive = RuntimeHistory.archive_session(session_id)
        info = await rt.stat(archive)
        if info is not None:
            chosen[archive] = info
    return list(chosen.values())
