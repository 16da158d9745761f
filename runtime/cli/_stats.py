"""``tidelog stats``: what a store holds (sessions, events, bytes, the largest sessions,
a SQLite file's WAL) and the live runtimes that publish their statistics beside it.
Read-only, every backend; a figure that exists for one backend only is said to be missing
for the others (docs/cli.md).
"""

from __future__ import annotations

import argparse
import contextlib
import heapq
import math
import os
import sys
import time
from collections.abc import Iterator
from typing import TextIO

import attrs
import trio

from runtime import (
    INTERNAL_PREFIX,
    JSON,
    PublishedStatistics,
    SqliteStore,
    Store,
    open_runtime,
    published_statistics,
)
from stores import LeaseInfo, holder_is_dead

from ._check import all_sessions, format_version
from ._opening import (
    kind_of,
    open_reader,
    shown,
)
from ._output import Column, dumps, key_values, printable, table

__all__ = ["cmd_stats"]


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
        async for page in all_sessions(rt):
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
