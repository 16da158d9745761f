"""``tidelog backup``: a consistent copy of a live store, made without stopping its
writers, then checked (``run_check``) before the command says it is done. A SQLite file
is copied by SQLite's online backup; other stores, and a copy into another kind of store,
go through a dump. Only the new copy is written: a failed or stopped copy into a new
file or directory is removed; a PostgreSQL schema keeps the sessions copied whole.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import tempfile
from typing import TextIO

import attrs
import trio

from runtime import (
    SqliteStore,
    Store,
    open_runtime,
)
from stores import StoreKind

from ._check import run_check
from ._errors import EXIT_FOUND, CliError, Interrupted, leaf
from ._opening import (
    StopFlag,
    kind_of,
    open_reader,
    open_writer,
    shown,
    stoppable,
)
from ._output import dumps, progress

__all__ = ["cmd_backup"]


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
