"""``tidelog prune`` and ``tidelog delete``: removing sessions, never from under a live
writer.

Both delete through a writing runtime (each delete takes the session's lease first, so a
session another process writes is refused, not destroyed). ``prune`` applies the agent
layer's retention policy (:func:`runtime.agents.prune`); ``prune --dry-run`` opens the
database read-only and changes nothing.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TextIO

import attrs
import trio

from runtime import JSON, SessionOwnedError, Store, open_runtime
from runtime.agents import PruneReport, conversation_sessions, delete_owned, prune
from stores import holder_is_dead

from ._errors import EXIT_FOUND, CliError, Interrupted
from ._opening import (
    StopFlag,
    check_database,
    open_reader,
    open_writer,
    stoppable,
    writing_runtime,
)
from ._output import Column, Listing, printable, progress

__all__ = ["cmd_delete", "cmd_prune"]


def _held(store: Store) -> set[str]:
    """The sessions a live writer holds now (their lease is current, their holder runs)."""
    now = time.time()
    return {
        lease.session_id
        for lease in store.list_leases()
        if lease.expires > now and not holder_is_dead(lease.holder)
    }


def cmd_prune(args: argparse.Namespace) -> int:
    """``tidelog prune``."""
    if (
        args.older_than is None
        and args.keep_last_runs is None
        and not args.completed_checkpoints
        and not args.orphaned_checkpoints
    ):
        raise CliError(
            "tidelog: prune: say what to remove: --older-than AGE, --keep-last-runs N, "
            "--completed-checkpoints or --orphaned-checkpoints"
        )
    with stoppable() as stop:
        report = trio.run(_prune, args, stop)
    _show(sys.stdout, args, report)
    if report.interrupted:
        raise Interrupted(f"{len(report.deleted)} sessions deleted, each whole")
    return 0


async def _prune(args: argparse.Namespace, stop: StopFlag) -> PruneReport:
    check_database(args.db)
    if args.dry_run:
        store = await trio.to_thread.run_sync(open_reader, args.db)
    else:
        store = await trio.to_thread.run_sync(open_writer, args.db)
    try:
        held = await trio.to_thread.run_sync(_held, store)
        async with open_runtime(store) as rt:
            with progress("prune", None, unit="sessions") as advance:
                return await prune(
                    rt,
                    older_than=args.older_than,
                    keep_last_runs=args.keep_last_runs,
                    completed_checkpoints=args.completed_checkpoints,
                    orphaned_checkpoints=args.orphaned_checkpoints,
                    dry_run=args.dry_run,
                    held=held,
                    stop=lambda: stop.requested,
                    progress=advance,
                )
    finally:
        store.close()


def _show(out: TextIO, args: argparse.Namespace, report: PruneReport) -> None:
    head: dict[str, JSON] = {"dry_run": report.dry_run}
    listing = Listing(
        args.format,
        out,
        key="actions",
        head=head,
        columns=(Column("ACTION", "fixed"), Column("SESSION", "id"), Column("WHY")),
    )
    for action in report.actions:
        if action.kept is not None:
            what, why = "kept", f"{action.reason}; kept: {action.kept}"
        else:
            what, why = ("deleted" if action.deleted else "would delete"), action.reason
        listing.add(attrs.asdict(action), [what, printable(action.session_id), why])
    tail: dict[str, JSON] = {
        "deleted": len(report.deleted),
        "kept": len(report.kept),
        "interrupted": report.interrupted,
    }
    listing.finish(tail, empty="nothing to prune")
    if args.format == "text" and report.actions:
        if report.dry_run:
            would = len(report.actions) - len(report.kept)
            out.write(f"dry run: {would} sessions would be deleted, {len(report.kept)} kept\n")
        else:
            out.write(f"{len(report.deleted)} sessions deleted, {len(report.kept)} kept\n")


def cmd_delete(args: argparse.Namespace) -> int:
    """``tidelog delete``: each session with its run checkpoints and archive."""
    return trio.run(_delete, args, sys.stdout)


async def _delete(args: argparse.Namespace, out: TextIO) -> int:
    listing = Listing(
        args.format, out, key="sessions", columns=(Column("SESSION", "id"), Column("RESULT"))
    )
    failed = 0
    async with writing_runtime(args.db) as rt:
        for session_id in args.sessions:
            owned = await conversation_sessions(rt, session_id)
            deleted: list[str] = []
            if await rt.stat(session_id) is not None:
                try:
                    await rt.delete(session_id)  # first: refused while a live writer holds it
                except SessionOwnedError as exc:
                    failed += 1
                    error = f"a live writer holds it ({exc.owner or 'another process'})"
                    record: dict[str, JSON] = {
                        "session": session_id,
                        "deleted": [],
                        "error": error,
                    }
                    listing.add(record, [printable(session_id), "kept: " + error])
                    continue
                deleted.append(session_id)
            # Without the session, what a delete that stopped midway left of it goes.
            for internal in owned:
                try:
                    if await delete_owned(rt, internal):
                        deleted.append(internal)
                except SessionOwnedError:
                    pass  # a run still in progress keeps its checkpoint and control session
            if not deleted:
                failed += 1
                result = {"session": session_id, "deleted": [], "error": "no such session"}
                listing.add(result, [printable(session_id), "no such session"])
                continue
            internals = len(deleted) - (session_id in deleted)
            what = f"{internals} run checkpoints/controls/archives"
            if session_id not in deleted:
                text = f"deleted what was left of it: {what}"
            else:
                text = f"deleted and {what}" if internals else "deleted"
            listing.add(
                {"session": session_id, "deleted": list(deleted), "error": None},
                [printable(session_id), text],
            )
    listing.finish()
    return EXIT_FOUND if failed else 0
