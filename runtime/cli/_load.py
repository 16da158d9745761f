"""``tidelog import``: load a dump (see :mod:`runtime.cli._dump`) into a database.

Streaming, through the Store contract (so any backend can be the target): records are
read a line at a time and written as :class:`~stores.RestoreOp` pieces -- events keep
their commit times, sessions their creation time, header and lineage.

Idempotent and resumable, session by session:

* missing -> created (``created``);
* present with the same header, times and lineage and a prefix of the dump's events
  (an import that stopped or crashed part-way) -> checked event by event, then
  completed (``resumed``), or left alone if complete (``unchanged``);
* anything else -- other content, more events, a live writer holding it -> left
  untouched and reported (``conflict``; exit status 1).

Each piece is one atomic write that names the head it expects, so an import never
interleaves with another writer. A session is imported whole or not at all: when the
import stops inside one -- Ctrl-C, a damaged or cut dump, an event the store refuses, a
failing store -- the sessions before it stay imported whole, and that one is put back as
it was before this run (removed if this run created it, cut back to its old head if it
was being resumed), provided no one else wrote it meanwhile.

Reading the dump is in ``_load_records``; writing its sessions into the store in
``_importer``.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import IO

import attrs

from ._errors import EXIT_FOUND, CliError
from ._importer import ImportResult, Status, import_dump
from ._load_records import read_dump
from ._opening import open_writer, shown, stoppable
from ._output import Listing, progress

__all__ = ["ImportResult", "cmd_import", "import_dump", "read_dump"]


def cmd_import(args: argparse.Namespace) -> int:
    """``tidelog import``."""
    source: IO[bytes]
    if args.dump == "-":
        source, size = sys.stdin.buffer, None
    else:
        try:
            source = open(args.dump, "rb")  # noqa: SIM115 (closed below)
        except OSError as exc:
            raise CliError(f"tidelog: cannot read the dump {args.dump}: {exc.strerror}") from None
        size = os.fstat(source.fileno()).st_size
    listing = Listing(args.format, sys.stdout, key="sessions")
    results: list[ImportResult] = []

    def report(result: ImportResult) -> None:
        results.append(result)
        if args.format != "text":
            listing.add(attrs.asdict(result))
        elif result.status == "conflict":
            print(f"conflict: {result.session_id}: {result.message}")

    try:
        with stoppable() as stop, progress("import", size, unit="bytes") as advance:
            lines = read_dump(source, advance)  # the header is checked before DB is opened
            store = open_writer(args.db, create=True)
            try:
                import_dump(store, lines, stop, report)
                store.sync()
            finally:
                store.close()
    finally:
        if source is not sys.stdin.buffer:
            source.close()
    totals: dict[str, int] = {s: sum(1 for r in results if r.status == s) for s in _STATUSES}
    events = sum(r.events for r in results)
    listing.finish({**totals, "events": events})
    if args.format == "text":
        print(
            f"imported {len(results)} sessions into {shown(args.db)}: {totals['created']} created, "
            f"{totals['resumed']} resumed, {totals['unchanged']} unchanged, "
            f"{totals['conflict']} conflicts; {events} events written"
        )
    return EXIT_FOUND if totals["conflict"] else 0


_STATUSES: tuple[Status, ...] = ("created", "resumed", "unchanged", "conflict")
