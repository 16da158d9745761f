"""``tidelog check``, ``backup`` and ``stats``: what an operator asks of a database file,
read-only (``backup`` writes only its new copy).

``check`` finds what is wrong and says what to do; its exit status is 1 when it found
something (errors or warnings; notes are information only).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import AsyncIterator
from typing import Literal, TextIO

import attrs
import trio

from runtime import (
    INTERNAL_PREFIX,
    JSON,
    Runtime,
    SessionInfo,
    SqliteStore,
    StoreCorruptError,
    open_runtime,
)
from runtime.agents import checkpoint_sessions
from stores.leases import holder_is_dead
from stores.sqlite_schema import SCHEMA_VERSION

from ._errors import EXIT_FOUND, CliError
from ._opening import StopFlag, open_reader, stoppable
from ._output import Listing, dumps, key_values, printable, progress, show_time, table

__all__ = ["Finding", "cmd_backup", "cmd_check", "cmd_stats", "run_check"]

Level = Literal["error", "warning", "note"]


@attrs.frozen
class Finding:
    """One thing ``check`` found: how bad (``level``), which ``check``, the session if
    any, what (``message``) and what to do (``hint``)."""

    level: Level
    check: str
    session: str | None
    message: str
    hint: str | None = None


_RESTORE = (
    "restore the latest good backup (tidelog backup makes them), or export what still "
    "reads (tidelog export) and import it into a new file"
)


async def _all_sessions(rt: Runtime) -> AsyncIterator[list[SessionInfo]]:
    cursor: str | None = None
    while True:
        page = await rt.list_sessions(limit=1000, after=cursor, include_internal=True)
        yield page
        if len(page) < 1000:
            return
        cursor = page[-1].id


def _lineage_header(info: SessionInfo) -> str | None:
    """A fork's header names its parent as the store does (``forked_from``/``fork_seq``)."""
    if info.parent is None:
        return None
    named = (info.header.get("forked_from"), info.header.get("fork_seq"))
    if named != info.parent:
        return f"its header says forked from {named[0]!r} at {named[1]!r}, the store {info.parent}"
    return None


async def run_check(
    store: SqliteStore, *, quick: bool, stop: StopFlag | None = None
) -> tuple[list[Finding], int]:
    """Check ``store``'s file; the findings and the number of sessions."""
    findings: list[Finding] = []
    if not quick:
        with progress("integrity", None, unit="checks"):
            ok, detail = await trio.to_thread.run_sync(store.check_integrity)
        if not ok:
            message = "SQLite's integrity check failed: " + detail.replace("\n", "; ")[:500]
            findings.append(Finding("error", "integrity", None, message, _RESTORE))
    try:
        storage = await trio.to_thread.run_sync(store.storage)
    except StoreCorruptError as exc:
        if not findings:
            findings.append(Finding("error", "integrity", None, str(exc), _RESTORE))
        findings.append(Finding("note", "integrity", None, "the file is damaged: stopped here"))
        return findings, 0
    if storage.schema_version != SCHEMA_VERSION:
        findings.append(
            Finding(
                "error",
                "format",
                None,
                f"schema version {storage.schema_version}, this tidelog writes {SCHEMA_VERSION}",
                "open it once with a writable tidelog of the right version to migrate it",
            )
        )
    async with open_runtime(store) as rt:
        with progress("lineage", storage.sessions, unit="sessions") as advance:
            async for page in _all_sessions(rt):
                for info in page:
                    try:
                        problems = await trio.to_thread.run_sync(store.check_lineage, info.id)
                    except StoreCorruptError as exc:
                        problems = [f"cannot be read: {exc}"]
                    for problem in problems:
                        findings.append(Finding("error", "lineage", info.id, problem, _RESTORE))
                    mismatch = _lineage_header(info)
                    if mismatch is not None:
                        findings.append(Finding("warning", "lineage", info.id, mismatch))
                advance(len(page))
                if stop is not None:
                    stop.check("the check was not finished")
        now = time.time()
        leases = await trio.to_thread.run_sync(store.list_leases)
        live = set()
        for lease in leases:
            if lease.expires > now and not holder_is_dead(lease.holder):
                live.add(lease.session_id)
                until = show_time(lease.expires)
                message = (
                    f"written now by {lease.holder} (lease until {until}, renewed while it runs)"
                )
                findings.append(Finding("note", "lease", lease.session_id, message))
            else:
                why = "expired" if lease.expires <= now else "its holder has exited"
                message = f"stale lease of {lease.holder} ({why}); the next writer takes it over"
                findings.append(Finding("note", "lease", lease.session_id, message))
        findings += await _checkpoint_findings(rt, live)
    return findings, storage.sessions


async def _checkpoint_findings(rt: Runtime, live: set[str]) -> list[Finding]:
    found: list[Finding] = []
    prune = "tidelog prune --orphaned-checkpoints removes it"
    for run in await checkpoint_sessions(rt):
        sid = run.session.id
        if sid in live:
            continue  # a run in progress
        if run.head is None:
            message = f"run {run.run_id!r}: a checkpoint without a saved head"
            found.append(Finding("warning", "checkpoints", sid, message, prune))
        elif run.conversation is not None and await rt.stat(run.conversation) is None:
            message = f"run {run.run_id!r}: its conversation {run.conversation!r} is gone"
            found.append(Finding("warning", "checkpoints", sid, message, prune))
        elif run.head.status == "running":
            message = f"run {run.run_id!r} of {run.conversation!r} was interrupted"
            hint = "run it again with the same run_id to resume it, or prune it"
            found.append(Finding("note", "checkpoints", sid, message, hint))
    return found


def cmd_check(args: argparse.Namespace) -> int:
    """``tidelog check``."""
    with stoppable() as stop:
        store = open_reader(args.db)
        try:
            findings, sessions = trio.run(lambda: run_check(store, quick=args.quick, stop=stop))
            immutable = store.immutable
        finally:
            store.close()
    bad = [f for f in findings if f.level != "note"]
    _report(sys.stdout, args, findings, sessions, immutable)
    return EXIT_FOUND if bad else 0


def _report(
    out: TextIO, args: argparse.Namespace, findings: list[Finding], sessions: int, immutable: bool
) -> None:
    bad = [f for f in findings if f.level != "note"]
    head: dict[str, JSON] = {
        "path": args.db,
        "ok": not bad,
        "schema_version": SCHEMA_VERSION,
        "sessions": sessions,
        "read_as_immutable": immutable,
    }
    listing = Listing(
        args.format,
        out,
        key="findings",
        head=head,
        columns=("LEVEL", "CHECK", "SESSION", "FINDING", "WHAT TO DO"),
    )
    for f in findings:
        cells = [f.level, f.check, printable(f.session or "-"), f.message, f.hint or ""]
        listing.add(attrs.asdict(f), cells)
    if args.format == "text":
        verdict = "ok" if not bad else f"{len(bad)} problems"
        out.write(f"{args.db}: tidelog format {SCHEMA_VERSION}, {sessions} sessions: {verdict}\n")
    listing.finish()


# -- backup -------------------------------------------------------------------------------


def cmd_backup(args: argparse.Namespace) -> int:
    """``tidelog backup``: the copy, then ``check`` of the copy."""
    if os.path.lexists(args.dest):
        raise CliError(f"tidelog: backup: {args.dest} already exists (give a new file)")
    with stoppable() as stop:
        store = open_reader(args.db)
        try:
            total = store.storage().page_count
            with progress("backup", total, unit="pages") as advance:
                done = [0]

                def step(copied: int, pages: int) -> None:  # noqa: ARG001 (backup callback)
                    advance(copied - done[0])
                    done[0] = copied
                    stop.check("no backup was written")

                store.backup(args.dest, progress=step)
        finally:
            store.close()
        copy = open_reader(args.dest)
        try:
            findings, sessions = trio.run(lambda: run_check(copy, quick=False))
        finally:
            copy.close()
    bad = [f for f in findings if f.level != "note"]
    if args.format == "text":
        verdict = "checked: ok" if not bad else f"check found {len(bad)} problems"
        print(f"backed up {args.db} to {args.dest} ({sessions} sessions); {verdict}")
        for f in bad:
            print(f"  {f.level}: {f.check}: {f.session or '-'}: {f.message}")
    else:
        record = {
            "source": args.db,
            "dest": args.dest,
            "sessions": sessions,
            "ok": not bad,
            "findings": [attrs.asdict(f) for f in findings],
        }
        print(dumps(record))
    return EXIT_FOUND if bad else 0


# -- stats --------------------------------------------------------------------------------


def cmd_stats(args: argparse.Namespace) -> int:
    """``tidelog stats``."""
    store = open_reader(args.db)
    try:
        storage = store.storage()
        largest = store.largest_sessions(args.top)
        now = time.time()
        leases = [
            lease
            for lease in store.list_leases()
            if lease.expires > now and not holder_is_dead(lease.holder)
        ]
        conversations, internal, events = trio.run(_count, store)
    finally:
        store.close()
    record: dict[str, JSON] = {
        "path": args.db,
        "schema_version": storage.schema_version,
        "sessions": conversations + internal,
        "conversations": conversations,
        "internal_sessions": internal,
        "events": events,
        "stored_events": storage.stored_events,
        "file_bytes": storage.file_bytes,
        "wal_bytes": storage.wal_bytes,
        "page_size": storage.page_size,
        "free_pages": storage.free_pages,
        "largest": [attrs.asdict(s) for s in largest],
        "live_writers": [{"session": i.session_id, "holder": i.holder} for i in leases],
    }
    out = sys.stdout
    if args.format != "text":
        out.write(dumps(record) + "\n")
        return 0
    key_values(
        out,
        [
            ("database", args.db),
            (
                "sessions",
                f"{conversations + internal:,} ({internal:,} internal: run checkpoints, archives)",
            ),
            ("events", f"{events:,} ({storage.stored_events:,} stored: forks share prefixes)"),
            (
                "file",
                f"{storage.file_bytes:,} bytes ({storage.free_pages:,} free pages of "
                f"{storage.page_size:,} bytes)",
            ),
            ("WAL", f"{storage.wal_bytes:,} bytes"),
            ("live writers", ", ".join(f"{i.session_id} ({i.holder})" for i in leases) or "none"),
        ],
    )
    if largest:
        rows = [[printable(s.session_id), f"{s.events:,}", f"{s.bytes:,}"] for s in largest]
        out.write("\n")
        table(out, ("LARGEST SESSIONS", "EVENTS", "BYTES"), rows, right=frozenset({1, 2}))
    return 0


async def _count(store: SqliteStore) -> tuple[int, int, int]:
    """Conversations, internal sessions and events (the sum of the heads)."""
    conversations = internal = events = 0
    async with open_runtime(store) as rt:
        async for page in _all_sessions(rt):
            for info in page:
                if info.id.startswith(INTERNAL_PREFIX):
                    internal += 1
                else:
                    conversations += 1
                events += info.head
    return conversations, internal, events
