"""``tidelog ls``, ``show`` and ``tail``: read-only browsing, streamed.

They open the database read-only (no lease, no write, no file created) and read through
the runtime's public API: sessions a page at a time with the stable id cursor, events a
page at a time from one pinned snapshot -- so the first line comes at once and memory
stays flat whatever the session's length.
"""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from typing import TextIO

import trio

from runtime import JSON, Runtime, SessionInfo, SessionNotFoundError, Snapshot, StoredEvent

from ._errors import CliError
from ._opening import reading_runtime
from ._opening import shown as address_shown
from ._output import Column, Listing, compact, event_obj, printable, session_obj, show_time

__all__ = ["cmd_ls", "cmd_show", "cmd_tail", "event_cells", "snapshot_events"]

#: Sessions asked of the store per page by ``ls``.
LIST_PAGE = 1000
#: Events per page: the first page is small so the first line comes at once, later
#: ones grow to the largest.
FIRST_PAGE, LARGEST_PAGE = 64, 1000

EVENT_HEADER = f"{'SEQ':>6}  {'TIME':<23}  {'KIND':<16}  {'RUN_ID':<12}  DATA"


def event_cells(event: StoredEvent) -> list[str]:
    """The text cells of one event: seq, time, kind, run_id, short data."""
    return [
        str(event.seq),
        show_time(event.ts),
        printable(event.kind),
        printable(event.run_id or "-"),
        compact(event.data),
    ]


def _add_event(listing: Listing, event: StoredEvent) -> None:
    """One event into ``listing``, in the one form it prints (the text cells cost as
    much as the JSON: never both)."""
    if listing.fmt == "text":
        listing.add({}, event_cells(event))
    else:
        listing.add(event_obj(event))


def _event_line(cells: Sequence[str]) -> str:
    seq, time, kind, run_id, data = cells
    return f"{seq:>6}  {time}  {kind:<16}  {run_id:<12}  {data}"


async def snapshot_events(
    snap: Snapshot, since: int, until: int | None, limit: int | None
) -> AsyncIterator[list[StoredEvent]]:
    """Pages of the snapshot's events after ``since`` (up to ``until``, at most
    ``limit``), in seq order."""
    cursor, left, size = since, limit, FIRST_PAGE
    while left is None or left > 0:
        want = size if left is None else min(size, left)
        page = await snap.read(since_seq=cursor, until_seq=until, limit=want)
        if page:
            yield page
        if len(page) < want:
            return
        cursor = page[-1].seq
        left = None if left is None else left - len(page)
        size = min(LARGEST_PAGE, size * 4)


async def _require(rt: Runtime, session_id: str) -> SessionInfo:
    info = await rt.stat(session_id)
    if info is None:
        raise SessionNotFoundError(session_id)
    return info


# -- ls -----------------------------------------------------------------------------------


def cmd_ls(args: argparse.Namespace) -> int:
    """``tidelog ls``."""
    return trio.run(_ls, args, sys.stdout)


def _wanted(info: SessionInfo, args: argparse.Namespace) -> bool:
    return args.since_updated is None or info.updated_at >= args.since_updated


async def _ls(args: argparse.Namespace, out: TextIO) -> int:
    limit = args.limit or None
    async with reading_runtime(args.db) as rt:
        shown: list[SessionInfo] = []
        more = False
        if args.sort == "updated":
            if args.after is not None:
                raise CliError("tidelog: --after pages in id order only: drop --sort updated")
            infos = await rt.list_sessions(
                prefix=args.prefix, order="updated", include_internal=args.internal
            )
            picked = [info for info in infos if _wanted(info, args)]
            shown, more = picked[:limit], limit is not None and len(picked) > limit
        else:
            cursor = args.after
            while not more:
                page = await rt.list_sessions(
                    limit=LIST_PAGE,
                    prefix=args.prefix,
                    after=cursor,
                    include_internal=args.internal,
                )
                for info in page:
                    if not _wanted(info, args):
                        continue
                    if limit is not None and len(shown) == limit:
                        more = True
                        break
                    shown.append(info)
                if len(page) < LIST_PAGE:
                    break
                cursor = page[-1].id
    following = shown[-1].id if more and args.sort == "id" else None
    listing = Listing(
        args.format,
        out,
        key="sessions",
        columns=(
            Column("ID", "id"),
            Column("HEAD", "fixed", right=True),
            Column("UPDATED", "fixed", drop=2),
            Column("PARENT", "id", drop=3),
            Column("HEADER", "text", drop=1),
        ),
    )
    for info in shown:
        parent = "-" if info.parent is None else f"{printable(info.parent[0])}@{info.parent[1]}"
        cells = [printable(info.id), str(info.head), show_time(info.updated_at), parent]
        listing.add(session_obj(info), [*cells, compact(info.header)])
    listing.finish({"next": following}, empty=f"no sessions in {address_shown(args.db)}")
    if more and args.format == "text":
        hint = f" go on with --after {shlex.quote(following)}" if following is not None else ""
        print(f"tidelog: more sessions than --limit {args.limit};{hint}", file=sys.stderr)
    return 0


# -- show ---------------------------------------------------------------------------------


def cmd_show(args: argparse.Namespace) -> int:
    """``tidelog show``."""
    return trio.run(_show, args, sys.stdout)


async def _show(args: argparse.Namespace, out: TextIO) -> int:
    async with reading_runtime(args.db) as rt, rt.snapshot(args.session) as snap:
        info = await _require(rt, args.session)
        head: dict[str, JSON] = {"session": session_obj(info), "as_of_seq": snap.as_of_seq}
        listing = Listing(
            args.format, out, key="events", head=head, header=EVENT_HEADER, line=_event_line
        )
        async for page in snapshot_events(snap, args.since, args.until, args.limit):
            for event in page:
                _add_event(listing, event)
            out.flush()
        listing.finish()
    return 0


# -- tail ---------------------------------------------------------------------------------


def cmd_tail(args: argparse.Namespace) -> int:
    """``tidelog tail``."""
    if args.follow and args.until is not None:
        raise CliError("tidelog: tail: -f follows past any end: drop --until or -f")
    if args.follow and args.format == "json":
        raise CliError(
            "tidelog: tail: -f never finishes a --json document: use --jsonl "
            "(one JSON object per line)"
        )
    return trio.run(_tail, args, sys.stdout)


async def _tail(args: argparse.Namespace, out: TextIO) -> int:
    async with reading_runtime(args.db) as rt:
        listing = Listing(args.format, out, key="events", line=_event_line)
        async with rt.snapshot(args.session) as snap:
            end = snap.as_of_seq if args.until is None else min(args.until, snap.as_of_seq)
            start = args.since if args.lines is None else max(args.since, end - args.lines)
            async for page in snapshot_events(snap, start, end, None):
                for event in page:
                    _add_event(listing, event)
                out.flush()
        if args.follow:
            await _follow(rt, args.session, max(args.since, end), listing)
        listing.finish()
    return 0


async def _follow(rt: Runtime, session_id: str, since: int, listing: Listing) -> None:
    """Print new events as they are committed until SIGINT or SIGTERM."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:

            async def stop_on_signal() -> None:
                async for _ in signals:
                    nursery.cancel_scope.cancel()
                    return

            nursery.start_soon(stop_on_signal)
            async for event in rt.tail(session_id, since_seq=since):
                _add_event(listing, event)
                listing.out.flush()
