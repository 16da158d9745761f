"""``tidelog check``, ``backup`` and ``stats``: what an operator asks of a store,
read-only (``backup`` writes only its new copy). Every backend: a SQLite file, a JSONL
store directory, a PostgreSQL schema (``postgresql://...?schema=S``); where a check or a
figure exists for one backend only, the others say so (docs/cli.md).

``check`` finds what is wrong and says what to do; its exit status is 1 when it found
something (errors or warnings; notes are information only).
"""

from __future__ import annotations

import argparse
import contextlib
import heapq
import io
import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from typing import Literal, TextIO

import attrs
import trio

from runtime import (
    INTERNAL_PREFIX,
    JSON,
    PublishedStatistics,
    Runtime,
    SessionInfo,
    SqliteStore,
    Store,
    StoreCorruptError,
    open_runtime,
    published_statistics,
)
from runtime.agents import checkpoint_sessions
from stores import JsonlStore, LeaseInfo, StoreKind, holder_is_dead

from ._errors import EXIT_FOUND, CliError, Interrupted, leaf
from ._opening import (
    StopFlag,
    kind_of,
    open_reader,
    open_writer,
    shown,
    stoppable,
)
from ._output import Column, Listing, dumps, key_values, printable, progress, show_time, table

__all__ = ["Finding", "cmd_backup", "cmd_check", "cmd_stats", "format_version", "run_check"]

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
            async for page in _all_sessions(rt):
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


# -- backup -------------------------------------------------------------------------------


def _dest_kind(args: argparse.Namespace, source: StoreKind) -> StoreKind:
    """What DEST becomes: a URL names PostgreSQL; a path becomes ``--dest-kind``, by
    default the source's kind (a SQLite file for a PostgreSQL source)."""
    if kind_of(args.dest) == "postgres":
        if args.dest_kind is not None:
            raise CliError(
                "tidelog: backup: --dest-kind is for a DEST path, not a postgresql:// URL"
            )
        return "postgres"
    from ._dump import check_new_path

    check_new_path("backup", args.dest)
    if args.dest_kind is not None:
        return args.dest_kind  # type: ignore[no-any-return]
    return "sqlite" if source == "postgres" else source


def cmd_backup(args: argparse.Namespace) -> int:
    """``tidelog backup``: the copy, then ``check`` of the copy."""
    source = kind_of(args.db)
    dest = _dest_kind(args, source)
    with stoppable() as stop:
        if source == "sqlite" and dest == "sqlite":
            _online_backup(args, stop)
        else:
            _copy_through_dump(args, dest, stop)
        copy = open_reader(args.dest)
        try:
            findings, sessions = trio.run(lambda: run_check(copy, dest, quick=False))
        finally:
            copy.close()
    bad = [f for f in findings if f.level != "note"]
    if args.format == "text":
        verdict = "checked: ok" if not bad else f"check found {len(bad)} problems"
        print(f"backed up {shown(args.db)} to {shown(args.dest)} ({sessions} sessions); {verdict}")
        for f in bad:
            print(f"  {f.level}: {f.check}: {f.session or '-'}: {f.message}")
    else:
        record = {
            "source": shown(args.db),
            "dest": shown(args.dest),
            "sessions": sessions,
            "ok": not bad,
            "findings": [attrs.asdict(f) for f in findings],
        }
        print(dumps(record))
    return EXIT_FOUND if bad else 0


def _online_backup(args: argparse.Namespace, stop: StopFlag) -> None:
    """SQLite to a new SQLite file: SQLite's online backup, one consistent snapshot."""
    store = open_reader(args.db)
    try:
        assert isinstance(store, SqliteStore)
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


def _copy_through_dump(args: argparse.Namespace, dest: StoreKind, stop: StopFlag) -> None:
    """Any other pair: export the source into a temporary dump, import it into DEST
    (each session copied from one snapshot of it; forks keep sharing their parent's
    prefix). A stopped or failed copy removes a new file or directory; a PostgreSQL
    DEST must hold no store yet, and keeps the sessions copied whole before a stop."""
    from ._load import import_dump, read_dump

    if dest == "jsonl":
        os.mkdir(args.dest)
    made = dest != "postgres"
    try:
        with (
            tempfile.TemporaryFile("w+b") as raw,
            io.TextIOWrapper(raw, encoding="ascii", newline="\n") as dump,
        ):
            reader = open_reader(args.db)
            try:
                trio.run(_export_into, reader, dump, stop)
            finally:
                reader.close()
            dump.flush()
            size = raw.seek(0, os.SEEK_END)
            raw.seek(0)  # the import reads the bytes
            target = open_writer(args.dest, create=True)
            try:
                if target.list_sessions(limit=1):
                    made = False
                    raise CliError(
                        f"tidelog: backup: {shown(args.dest)} already holds sessions "
                        "(give a new schema)"
                    )
                with progress("restore", size, unit="bytes") as advance:  # of the dump
                    import_dump(target, read_dump(raw, advance), stop, lambda _: None)
                target.sync()
            finally:
                target.close()
    except BaseException as exc:
        if made:
            _remove(args.dest, dest)
        if isinstance(leaf(exc), Interrupted):
            if made:
                raise Interrupted(f"no backup was written ({shown(args.dest)} removed)") from None
            raise Interrupted(
                f"the sessions copied so far are whole in {shown(args.dest)}; back up into "
                "a new schema, or import the rest"
            ) from None
        raise


async def _export_into(store: Store, out: TextIO, stop: StopFlag) -> None:
    from ._dump import export_runtime

    async with open_runtime(store) as rt:
        await export_runtime(rt, [], out, stop)


def _remove(path: str, kind: StoreKind) -> None:
    with contextlib.suppress(FileNotFoundError):
        if kind == "jsonl":
            shutil.rmtree(path)
        else:
            for suffix in ("", "-wal", "-shm", "-journal"):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(path + suffix)


# -- stats --------------------------------------------------------------------------------


def cmd_stats(args: argparse.Namespace) -> int:
    """``tidelog stats``."""
    kind = kind_of(args.db)
    store = open_reader(args.db)
    try:
        now = time.time()
        leases = [
            lease
            for lease in store.list_leases()
            if lease.expires > now and not holder_is_dead(lease.holder)
        ]
        conversations, internal, events, by_head = trio.run(_count, store, args.top)
        runtimes = published_statistics(store, now=now)
        record: dict[str, JSON] = {
            "path": shown(args.db),
            "backend": kind,
            "schema_version": format_version(kind),
            "sessions": conversations + internal,
            "conversations": conversations,
            "internal_sessions": internal,
            "events": events,
            "stored_events": None,
            "file_bytes": None,
            "wal_bytes": None,
            "page_size": None,
            "free_pages": None,
            "largest": [
                {"session_id": sid, "events": head, "bytes": None} for head, sid in by_head
            ],
            "live_writers": [{"session": i.session_id, "holder": i.holder} for i in leases],
            "runtimes": [_runtime_obj(r) for r in runtimes],
        }
        if isinstance(store, SqliteStore):
            storage = store.storage()
            record.update(
                schema_version=storage.schema_version,
                stored_events=storage.stored_events,
                file_bytes=storage.file_bytes,
                wal_bytes=storage.wal_bytes,
                page_size=storage.page_size,
                free_pages=storage.free_pages,
                largest=[attrs.asdict(s) for s in store.largest_sessions(args.top)],
            )
        elif kind == "jsonl":
            record["file_bytes"] = sum(_file_sizes(args.db))
    finally:
        store.close()
    out = sys.stdout
    if args.format != "text":
        out.write(dumps(record) + "\n")
        return 0
    _print_stats(out, record, conversations, internal, events, leases)
    _print_runtimes(out, runtimes, now)
    return 0


def _runtime_obj(item: PublishedStatistics) -> dict[str, JSON]:
    """The JSON form of a runtime's published statistics (see docs/cli.md)."""
    return {
        "session_id": item.session_id,
        "holder": item.holder,
        "live": item.live,
        "started_at": item.started_at,
        "published_at": item.published_at,
        "interval": item.interval if math.isfinite(item.interval) else None,
        "statistics": item.statistics,
    }


def _print_runtimes(out: TextIO, runtimes: list[PublishedStatistics], now: float) -> None:
    live = [r for r in runtimes if r.live]
    out.write("\n")
    if not live:
        out.write(
            "live runtimes: none publishes statistics here (a runtime does with "
            "open_runtime(..., publish_statistics=SECONDS))\n"
        )
        if runtimes:
            out.write(f"  ({len(runtimes)} stale records of runtimes that are gone)\n")
        return
    rows = []
    for item in live:
        writer = item.statistics.get("writer")
        counters = writer if isinstance(writer, dict) else {}
        age = "-" if item.published_at is None else f"{max(0.0, now - item.published_at):.1f}s ago"
        rows.append(
            [
                item.holder,
                age,
                str(item.statistics.get("sessions", "-")),
                f"{counters.get('batches_committed', '-')}",
                f"{counters.get('events_committed', '-')}",
                f"{counters.get('mailbox_depth', '-')}",
                f"{counters.get('fsyncs', '-')}",
            ]
        )
    table(
        out,
        (
            Column("LIVE RUNTIME", "id"),
            Column("PUBLISHED", "fixed", drop=1),
            *(Column(name, "fixed", right=True, drop=2) for name in ("ACTORS", "BATCHES")),
            *(Column(name, "fixed", right=True, drop=3) for name in ("EVENTS", "QUEUED")),
            Column("FSYNCS", "fixed", right=True, drop=2),
        ),
        rows,
    )


def _file_sizes(root: str) -> Iterator[int]:
    """The size of every file under ``root`` (a JSONL store: its session files and the
    rest), each file once however many hard links (forks' bases) name it."""
    seen: set[tuple[int, int]] = set()
    for directory, _, names in os.walk(root):
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                info = os.lstat(os.path.join(directory, name))
                if (info.st_dev, info.st_ino) not in seen:
                    seen.add((info.st_dev, info.st_ino))
                    yield info.st_size


def _print_stats(
    out: TextIO,
    record: dict[str, JSON],
    conversations: int,
    internal: int,
    events: int,
    leases: list[LeaseInfo],
) -> None:
    stored = record["stored_events"]
    shared = f" ({stored:,} stored: forks share prefixes)" if isinstance(stored, int) else ""
    rows = [
        ("store", f"{record['path']} ({record['backend']})"),
        (
            "sessions",
            f"{conversations + internal:,} ({internal:,} internal: run checkpoints, archives, "
            "runtime statistics)",
        ),
        ("events", f"{events:,}{shared}"),
    ]
    size, pages = record["file_bytes"], record["free_pages"]
    if isinstance(size, int) and isinstance(pages, int):
        rows.append(
            ("file", f"{size:,} bytes ({pages:,} free pages of {record['page_size']:,} bytes)")
        )
    elif isinstance(size, int):
        rows.append(("files", f"{size:,} bytes"))
    wal = record["wal_bytes"]
    if isinstance(wal, int):
        rows.append(("WAL", f"{wal:,} bytes"))
    rows.append(
        ("live writers", ", ".join(f"{i.session_id} ({i.holder})" for i in leases) or "none")
    )
    key_values(out, rows)
    largest = record["largest"]
    assert isinstance(largest, list)
    if largest:
        cells = []
        for item in largest:
            assert isinstance(item, dict)
            size_of = item["bytes"]
            cells.append(
                [
                    printable(str(item["session_id"])),
                    f"{item['events']:,}",
                    "-" if size_of is None else f"{size_of:,}",
                ]
            )
        out.write("\n")
        columns = (
            Column("LARGEST SESSIONS", "id"),
            Column("EVENTS", "fixed", right=True),
            Column("BYTES", "fixed", right=True, drop=1),
        )
        table(out, columns, cells)


async def _count(store: Store, top: int) -> tuple[int, int, int, list[tuple[int, str]]]:
    """Conversations, internal sessions, events (the sum of the heads) and the ``top``
    longest sessions as ``(head, id)``, longest first."""
    conversations = internal = events = 0
    longest: list[tuple[int, str]] = []
    async with open_runtime(store) as rt:
        async for page in _all_sessions(rt):
            for info in page:
                if info.id.startswith(INTERNAL_PREFIX):
                    internal += 1
                else:
                    conversations += 1
                events += info.head
                if top:
                    item = (info.head, info.id)
                    if len(longest) < top:
                        heapq.heappush(longest, item)
                    else:
                        heapq.heappushpop(longest, item)
    return conversations, internal, events, sorted(longest, key=lambda x: (-x[0], x[1]))
