"""How the commands open a database, and how long ones stop cleanly on Ctrl-C.

Read commands open the file read-only (:func:`open_reader`): it must exist, it is never
created, migrated or written, and no file is created beside it (see
:mod:`stores.sqlite_readonly`). Write commands open it normally through the runtime
(:func:`writing_runtime`), so leases keep them off sessions that a live writer holds.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from types import FrameType

import trio

from runtime import Runtime, SqliteStore, open_runtime

from ._errors import EXIT_INTERRUPTED, CliError, Interrupted

__all__ = [
    "StopFlag",
    "check_database",
    "open_reader",
    "reading_runtime",
    "stoppable",
    "writing_runtime",
]


def check_database(path: str) -> None:
    """Refuse a path that is not an existing, non-empty file -- before anything opens it
    (a writable open of a missing file would create a new database)."""
    if not os.path.lexists(path):
        raise CliError(f"tidelog: no such database file: {path}")
    if os.path.isdir(path):
        raise CliError(f"tidelog: {path} is a directory, not a database file")
    if not os.path.isfile(path):
        raise CliError(f"tidelog: {path} is not a regular file")
    if os.path.getsize(path) == 0:
        raise CliError(f"tidelog: {path} is empty: not a tidelog database")


def open_reader(path: str) -> SqliteStore:
    """Open ``path`` read-only (checked first). If its WAL index cannot be made here (a
    directory this user may not write) the file is read as immutable: say so on stderr,
    since commits made meanwhile by a writer may not be seen."""
    check_database(path)
    store = SqliteStore(path, read_only=True)
    if store.immutable and os.path.exists(path + "-wal"):
        print(
            f"tidelog: note: {path} is read as an immutable file: its WAL index cannot be "
            "created here (the directory is not writable for this user), so commits made "
            "while this command runs may not be seen",
            file=sys.stderr,
        )
    return store


@asynccontextmanager
async def reading_runtime(path: str) -> AsyncIterator[Runtime]:
    """A runtime on a read-only store of ``path``: it takes no lease and writes nothing."""
    store = await trio.to_thread.run_sync(open_reader, path)
    try:
        async with open_runtime(store) as rt:
            yield rt
    finally:
        store.close()


@asynccontextmanager
async def writing_runtime(path: str) -> AsyncIterator[Runtime]:
    """A runtime that may write ``path`` (which must exist)."""
    check_database(path)
    async with open_runtime(path) as rt:
        yield rt


class StopFlag:
    """Set by Ctrl-C (SIGINT) or SIGTERM inside :func:`stoppable`; long loops call
    :meth:`check` where stopping leaves nothing half-done. ``on_abort`` holds what to
    undo if a second signal ends the process at once (files to remove)."""

    def __init__(self) -> None:
        self.requested = False
        self.on_abort: list[Callable[[], None]] = []

    def check(self, done: str) -> None:
        """Raise :class:`Interrupted` (with ``done``, what is complete) if a stop was
        requested."""
        if self.requested:
            raise Interrupted(done)


@contextmanager
def stoppable() -> Iterator[StopFlag]:
    """For the block, the first Ctrl-C or SIGTERM only sets the flag (the command stops
    at its next safe point); a second one ends the process at once, status 130, after
    the flag's ``on_abort`` undo steps. (At once means without unwinding: an exception
    raised from a signal handler could land inside trio's run loop. Every write is a
    transaction, so the database is never left inconsistent; an import may leave a
    session part-imported, which the next import completes.)"""
    flag = StopFlag()

    def handler(signum: int, frame: FrameType | None) -> None:  # noqa: ARG001 (signal API)
        if flag.requested:
            for undo in flag.on_abort:
                with contextlib.suppress(Exception):
                    undo()
            os.write(2, b"tidelog: stopped at once\n")
            os._exit(EXIT_INTERRUPTED)
        flag.requested = True

    previous = {
        signum: signal.signal(signum, handler) for signum in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        yield flag
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)
