"""How the commands open a store, and how long ones stop cleanly on Ctrl-C.

Every command takes a store *address* wherever it takes a database: a SQLite file, a
JSONL store directory, or a ``postgresql://`` / ``postgres://`` URL (its ``schema`` query
parameter chooses the schema) -- :func:`stores._urls.store_kind` decides which, here and
in :func:`runtime.open_runtime` alike.

Read commands open the store read-only (:func:`open_reader`): it must exist, it is never
created, migrated or written (for SQLite, no file is created beside it either: see
:mod:`stores.sqlite._readonly`). Write commands open it normally through the runtime
(:func:`writing_runtime`), so leases keep them off sessions that a live writer holds.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import urllib.parse
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from types import FrameType

import trio

from runtime import Runtime, Store, open_runtime
from stores import StoreKind, is_postgres_url, open_store, store_kind

from ._errors import EXIT_INTERRUPTED, CliError, Interrupted

__all__ = [
    "StopFlag",
    "check_database",
    "kind_of",
    "open_reader",
    "open_writer",
    "reading_runtime",
    "shown",
    "stoppable",
    "writing_runtime",
]

#: The file that marks a directory as a JSONL store (``stores.jsonl._root.MARKER``).
JSONL_MARKER = "tidelog-jsonl.json"


def kind_of(address: str) -> StoreKind:
    """The backend ``address`` names: ``"postgres"``, ``"jsonl"`` or ``"sqlite"``."""
    return store_kind(address)


def shown(address: str) -> str:
    """``address`` for messages: a PostgreSQL URL without its password."""
    if not is_postgres_url(address):
        return address
    parts = urllib.parse.urlsplit(address)
    if parts.password is None and "password=" not in parts.query:
        return address
    netloc = parts.netloc
    if parts.password is not None:
        user, _, host = netloc.rpartition("@")
        netloc = f"{user.partition(':')[0]}:***@{host}"
    query = urllib.parse.urlencode(
        [
            (key, "***" if key == "password" else value)
            for key, value in urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
        ],
        safe="*",
    )
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def check_database(address: str, *, probe: bool = True) -> None:
    """Refuse an address that names no existing store -- before anything opens it (a
    writable open of a missing file would create a new database, of a PostgreSQL schema
    a new store). A PostgreSQL URL is checked by a read-only open (``probe``; a caller
    that opens it read-only anyway skips that)."""
    kind = kind_of(address)
    if kind == "postgres":
        if probe:
            open_store(address, read_only=True).close()  # refuses a schema without a store
        return
    if kind == "jsonl":
        if not os.path.exists(os.path.join(address, JSONL_MARKER)):
            raise CliError(
                f"tidelog: {address} is a directory but not a tidelog JSONL store (no "
                f"{JSONL_MARKER} in it)"
            )
        return
    if not os.path.lexists(address):
        raise CliError(f"tidelog: no such database file or store directory: {address}")
    if not os.path.isfile(address):
        raise CliError(f"tidelog: {address} is not a regular file")
    if os.path.getsize(address) == 0:
        raise CliError(f"tidelog: {address} is empty: not a tidelog database")


def open_reader(address: str) -> Store:
    """Open ``address`` read-only (checked first). If a SQLite file's WAL index cannot be
    made here (a directory this user may not write) the file is read as immutable: say
    so on stderr, since commits made meanwhile by a writer may not be seen."""
    check_database(address, probe=False)
    store = open_store(address, read_only=True)
    if store.capabilities.immutable and os.path.exists(address + "-wal"):
        print(
            f"tidelog: note: {address} is read as an immutable file: its WAL index cannot be "
            "created here (the directory is not writable for this user), so commits made "
            "while this command runs may not be seen",
            file=sys.stderr,
        )
    return store


def open_writer(address: str, *, create: bool = False) -> Store:
    """Open ``address`` to write it; it must exist unless ``create`` (then a missing
    path becomes a new SQLite file, an empty directory a new JSONL store, a PostgreSQL
    schema without a store a new one)."""
    if not create:
        check_database(address)
    return open_store(address)


@asynccontextmanager
async def reading_runtime(address: str) -> AsyncIterator[Runtime]:
    """A runtime on a read-only store of ``address``: it takes no lease, writes nothing."""
    store = await trio.to_thread.run_sync(open_reader, address)
    try:
        async with open_runtime(store) as rt:
            yield rt
    finally:
        store.close()


@asynccontextmanager
async def writing_runtime(address: str) -> AsyncIterator[Runtime]:
    """A runtime that may write ``address`` (which must name an existing store)."""
    await trio.to_thread.run_sync(check_database, address)
    async with open_runtime(address) as rt:
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
