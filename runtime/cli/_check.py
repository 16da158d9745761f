"""``tidelog check``: what is wrong with a store, read-only (``backup`` and ``stats``, the
other questions an operator asks of a store, are in ``_backup`` and ``_stats``). Every
backend: a SQLite file, a JSONL store directory, a PostgreSQL schema
(``postgresql://...?schema=S``); where a check exists for one backend only, the others
say so (docs/cli.md).

``check`` finds what is wrong and says what to do; its exit status is 1 when it found
something (errors or warnings; notes are information only).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import AsyncIterator
from typing import Literal, TextIO

import attrs
import trio

from runtime import (
    JSON,
    Runtime,
    SessionInfo,
    SqliteStore,
    Store,
    StoreCorruptError,
    open_runtime,
)
from runtime.agents import checkpoint_sessions
from stores import JsonlStore, StoreKind, holder_is_dead

from ._errors import EXIT_FOUND, leaf
from ._opening import (
    StopFlag,
    kind_of,
    open_reader,
    shown,
    stoppable,
)
from ._output import Column, Listing, printable, progress, show_time

__all__ = ["Finding", "all_sessions", "cmd_check", "format_version", "run_check"]

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
    "reads (tidelog export) and import it into a new store"
)


def format_version(kind: StoreKind) -> int:
    """The store format this tidelog writes on backend ``kind`` (what opening checked:
    an older one is migrated by a writer, a newer one refused)."""
    if kind == "sqlite":
        from stores.sqlite import FORMAT_VERSION

        return FORMAT_VERSION
    if kind == "jsonl":
        from stores.jsonl import FORMAT_VERSION as JSONL_FORMAT

        return JSONL_FORMAT
    from stores.postgres import FORMAT_VERSION as PG_FORMAT

    return PG_FORMAT


async def all_sessions(rt: Runtime) -> AsyncIterator[list[SessionInfo]]:
    """Every session of ``rt``'s store, internal ones included, a page of 1,000 at a time
    in id order."""
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


async def _read_problems(rt: Runtime, info: SessionInfo) -> list[str]:
    """The lineage check of a backend without a stored-lineage query: a fork's events
    are read through its chain of bases, a page at a time, and must be seqs 1..head."""
    from ._browse import snapshot_events

    expected = 0
    async with rt.snapshot(info.id) as snap:
        async for page in snapshot_events(snap, 0, None, None):
            for event in page:
                expected += 1
                if event.seq != expected:
                    return [f"seq {expected} is missing along its chain of fork bases"]
        if expected != snap.as_of_seq:
            return [f"seqs {expected + 1}..{snap.as_of_seq} cannot be read"]
    return []


async def _integrity(
    store: Store, kind: StoreKind, quick: bool, findings: list[Finding]
) -> int | None:
    """The backend's own integrity check (not with ``quick``); the file's format version
    for SQLite (``None`` when the file is too damaged to say)."""
    if kind == "postgres":
        findings.append(
            Finding(
                "note",
                "integrity",
                None,
                "PostgreSQL keeps its own storage consistent (and checks page checksums if "
                "enabled); not repeated here -- lineage, leases and checkpoints are checked",
            )
        )
        return format_version(kind)
    if not quick and isinstance(store, SqliteStore | JsonlStore):
        with progress("integrity", None, unit="checks"):
            ok, detail = await trio.to_thread.run_sync(store.check_integrity)
        if not ok:
            what = "SQLite's integrity check" if kind == "sqlite" else "reading every file"
            message = f"{what} failed: " + detail.replace("\n", "; ")[:500]
            findings.append(Finding("error", "integrity", None, message, _RESTORE))
    if not isinstance(store, SqliteStore):
        return format_version(kind)
    try:
        storage = await trio.to_thread.run_sync(store.storage)
    except StoreCorruptError as exc:
        if not findings:
            findings.append(Finding("error", "integrity", None, str(exc), _RESTORE))
        findings.append(Finding("note", "integrity", None, "the file is damaged: stopped here"))
        return None
    if storage.schema_version != format_version(kind):
        findings.append(
            Finding(
                "error",
                "format",
                None,
                f"schema version {storage.schema_version}, this tidelog writes "
                f"{format_version(kind)}",
                "open it once with a writable tidelog of the right version to migrate it",
            )
        )
    return storage.schema_version


async def run_check(
    store: Store, kind: StoreKind, *, quick: bool, stop: StopFlag | None = None
) -> tuple[list[Finding], int]:
    """Check ``store`` (of backend ``kind``); the findings and the number of sessions."""
    findings: list[Finding] = []
    version = await _integrity(store, kind, quick, findings)
    if version is None:
        return findings, 0
    counted = [0]
    try:
        await _check_sessions(store, findings, counted, stop)
    except BaseException as exc:
        damage = leaf(exc)
        if not isinstance(damage, StoreCorruptError):
            raise
        # Damage that stops even the listing (a JSONL file a list must read): a finding.
        if not any(f.level == "error" and f.check == "integrity" for f in findings):
            findings.append(Finding("error", "integrity", None, str(damage), _RESTORE))
        findings.append(Finding("note", "integrity", None, "the store is damaged: stopped here"))
    return findings, counted[0]


async def _check_sessions(
    store: Store, findings: list[Finding], counted: list[int], stop: StopFlag | None
) -> None:
    """The lineage of every session, the leases and the run checkpoints (``counted[0]``:
    the sessions seen)."""
    parents: dict[str, str] = {}  # every fork -> its parent (the lineage the store records)
    async with open_runtime(store) as rt:
        with progress("lineage", None, unit="sessions") as advance:
            async for page in all_sessions(rt):
                for info in page:
                    counted[0] += 1
                    if info.parent is not None:
                        parents[info.id] = info.parent[0]
                    try:
                        if isinstance(store, SqliteStore):
                            problems = await trio.to_thread.run_sync(store.check_lineage, info.id)
                        elif info.parent is not None:
                            problems = await _read_problems(rt, info)
                        else:
                            problems = []
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
        findings += _lineage_loops(parents)
        now = time.time()
        leases = await trio.to_thread.run_sync(store.list_leases)
        live = set()
        for lease in leases:
            if lease.expires > now and not holder_is_dead(lease.holder):
                live.add(lease.session_id)
                if math.isfinite(lease.expires):
                    until = show_time(lease.expires)
                    message = (
                        f"written now by {lease.holder} "
                        f"(lease until {until}, renewed while it runs)"
                    )
                else:  # another process's kernel lock (JSONL): held while that process lives
                    message = f"written now by {lease.holder} (held while that process runs)"
                findings.append(Finding("note", "lease", lease.session_id, message))
            else:
                why = "expired" if lease.expires <= now else "its holder has exited"
                message = f"stale lease of {lease.holder} ({why}); the next writer takes it over"
                findings.append(Finding("note", "lease", lease.session_id, message))
        findings += await _checkpoint_findings(rt, live)


def _lineage_loops(parents: dict[str, str]) -> list[Finding]:
    """A finding for each loop of recorded fork lineage (a fork that is, through its
    parents, its own ancestor: no tidelog writes one, and retention can never remove it)."""
    found: list[Finding] = []
    done: set[str] = set()
    for start in sorted(parents):
        chain: list[str] = []
        at: str | None = start
        while at is not None and at not in done and at not in chain:
            chain.append(at)
            at = parents.get(at)
        if at is not None and at in chain:
            loop = chain[chain.index(at) :]
            message = "fork lineage loops: " + " -> ".join(printable(s) for s in [*loop, at])
            hint = (
                "delete one of these sessions (tidelog delete; export it first if it is "
                "needed): the others keep their events"
            )
            found.append(Finding("error", "lineage", at, message, hint))
        done.update(chain)
    return found


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
    kind = kind_of(args.db)
    with stoppable() as stop:
        store = open_reader(args.db)
        try:
            findings, sessions = trio.run(
                lambda: run_check(store, kind, quick=args.quick, stop=stop)
            )
            immutable = store.capabilities.immutable
        finally:
            store.close()
    bad = [f for f in findings if f.level != "note"]
    _report(sys.stdout, args, kind, findings, sessions, immutable)
    return EXIT_FOUND if bad else 0


def _report(
    out: TextIO,
    args: argparse.Namespace,
    kind: StoreKind,
    findings: list[Finding],
    sessions: int,
    immutable: bool,
) -> None:
    bad = [f for f in findings if f.level != "note"]
    version = format_version(kind)
    head: dict[str, JSON] = {
        "path": shown(args.db),
        "backend": kind,
        "ok": not bad,
        "schema_version": version,
        "sessions": sessions,
        "read_as_immutable": immutable,
    }
    listing = Listing(
        args.format,
        out,
        key="findings",
        head=head,
        columns=(
            Column("LEVEL", "fixed"),
            Column("CHECK", "fixed", drop=2),
            Column("SESSION", "id"),
            Column("FINDING", "text"),
            Column("WHAT TO DO", "text", drop=1),
        ),
    )
    for f in findings:
        cells = [f.level, f.check, printable(f.session or "-"), f.message, f.hint or ""]
        listing.add(attrs.asdict(f), cells)
    if args.format == "text":
        verdict = "ok" if not bad else f"{len(bad)} problems"
        name = "tidelog format" if kind == "sqlite" else f"tidelog {kind} format"
        out.write(f"{shown(args.db)}: {name} {version}, {sessions} sessions: {verdict}\n")
    listing.finish()
