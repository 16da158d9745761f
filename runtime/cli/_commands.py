"""The ``tidelog`` command: run the demo, and list, show and tail sessions of a database.

``tidelog demo [--db PATH] [--keep]``
    The main job: scripted agent sessions, a crash mid-tool and its recovery, a pinned
    snapshot and a live tail (see :mod:`runtime.demo`).
``tidelog ls DB [--json]``
    Sessions (id, head, last update, header), most recently updated first.
``tidelog show DB ID [--json] [--since N] [--limit N]``
    A session's events as a table, or one JSON object per line with ``--json``.
``tidelog tail DB ID [-f] [--since N] [--json]``
    A session's events; ``-f`` keeps following new commits (from any process) until
    Ctrl-C or SIGTERM, then exits with status 0.

The read commands never create, migrate-by-accident or lock anything: the file must exist
(it is checked before it is opened, since opening would create it), and they use only
read methods of the runtime, so they hold no lease and write no data. Problems with the
file or the session are one line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import TextIO

import trio

from stores import (
    JSON,
    InvalidArgumentError,
    SessionExistsError,
    SessionInfo,
    SessionNotFoundError,
    SessionOwnedError,
    StoreCorruptError,
    StoredEvent,
    TidelogError,
    UnsupportedFormatError,
)

from .runtime import Runtime, open_runtime

__all__ = ["CliError", "build_parser", "main"]

#: Exit status for a problem with the arguments, the file or the session.
EXIT_USAGE = 2
#: Events read per page by ``show`` and ``tail``.
_PAGE = 1000
#: Width of the data column of the event table.
_DATA_WIDTH = 72


class CliError(Exception):
    """A problem to report as one line on stderr, with exit status ``code``."""

    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        """Report ``message``; exit with ``code``."""
        super().__init__(message)
        self.message = message
        self.code = code


# -- argument parsing ----------------------------------------------------------------------


def _count(text: str) -> int:
    """An argparse type: an integer >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, not {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The ``tidelog`` argument parser (subcommands demo, ls, show, tail, fork, rewind)."""
    parser = argparse.ArgumentParser(
        prog="tidelog",
        description="Durable, actor-based agent sessions on SQLite: demo and inspection.",
    )
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="{demo,ls,show,tail,fork,rewind}"
    )

    demo = commands.add_parser(
        "demo",
        help="run the demo: concurrent sessions, a crash mid-tool and its recovery",
        description="Run scripted agent sessions on an embedded SQLite file, kill a host "
        "mid-tool, resume it, and show a pinned snapshot and a live tail.",
    )
    demo.add_argument("--db", metavar="PATH", help="a new database file (default: a temp dir)")
    demo.add_argument("--keep", action="store_true", help="keep the temporary directory")

    ls = commands.add_parser("ls", help="list sessions, most recently updated first")
    ls.add_argument("db", metavar="DB", help="tidelog database file")
    ls.add_argument("--json", action="store_true", help="one JSON object per line")

    show = commands.add_parser("show", help="print a session's events")
    show.add_argument("db", metavar="DB", help="tidelog database file")
    show.add_argument("session", metavar="ID", help="session id")
    show.add_argument("--json", action="store_true", help="one JSON object per line (exact)")
    show.add_argument("--since", type=_count, default=0, metavar="N", help="events after seq N")
    show.add_argument("--limit", type=_count, default=None, metavar="N", help="at most N events")

    tail = commands.add_parser("tail", help="print a session's events; -f follows new ones")
    tail.add_argument("db", metavar="DB", help="tidelog database file")
    tail.add_argument("session", metavar="ID", help="session id")
    tail.add_argument(
        "-f", "--follow", action="store_true", help="keep printing new events until Ctrl-C"
    )
    tail.add_argument("--since", type=_count, default=0, metavar="N", help="events after seq N")
    tail.add_argument("--json", action="store_true", help="one JSON object per line (exact)")

    fork = commands.add_parser("fork", help="fork a session (O(1): shares the prefix)")
    fork.add_argument("db", metavar="DB", help="tidelog database file")
    fork.add_argument("source", metavar="SOURCE", help="the session to fork")
    fork.add_argument("new", metavar="NEW", help="the new session's id")
    fork.add_argument("--at", type=_count, default=None, metavar="SEQ", help="fork point")
    fork.add_argument(
        "--allow-open-run", action="store_true", help="fork even inside a run with open calls"
    )

    rewind = commands.add_parser("rewind", help="cut a conversation back to N entries")
    rewind.add_argument("db", metavar="DB", help="tidelog database file")
    rewind.add_argument("session", metavar="ID", help="session id")
    rewind.add_argument("--keep", type=_count, required=True, metavar="N", help="entries kept")

    host = commands.add_parser("demo-host")  # hidden: the demo's crashing host process
    host.add_argument("--db", required=True)
    host.add_argument("--workspace", required=True)
    return parser


# -- formatting ----------------------------------------------------------------------------


def _time(ts: float) -> str:
    """A commit time as local ``YYYY-MM-DD HH:MM:SS.mmm``."""
    return datetime.fromtimestamp(ts).isoformat(sep=" ", timespec="milliseconds")


def _printable(text: str) -> str:
    """``text`` with every non-printable character (line and paragraph separators,
    C1 controls...) escaped as ``\\uXXXX``, so one value stays on one table line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else f"\\u{ord(c):04x}" for c in text)


def _compact(value: JSON, width: int | None = None) -> str:
    """One-line, printable JSON of ``value``, cut to ``width`` characters with ``...``."""
    text = _printable(json.dumps(value, ensure_ascii=False, separators=(",", ":")))
    if width is not None and len(text) > width:
        text = text[: width - 3] + "..."
    return text


def _event_json(event: StoredEvent) -> str:
    """The exact, machine-readable form of one event (one line)."""
    obj: dict[str, JSON] = {
        "session_id": event.session_id,
        "seq": event.seq,
        "ts": event.ts,
        "kind": event.kind,
        "run_id": event.run_id,
        "data": event.data,
    }
    return json.dumps(obj, ensure_ascii=True, separators=(",", ":"))


def _session_json(info: SessionInfo) -> str:
    """The machine-readable form of one session (one line)."""
    obj: dict[str, JSON] = {
        "id": info.id,
        "head": info.head,
        "created_at": info.created_at,
        "updated_at": info.updated_at,
        "header": info.header,
        "parent": None if info.parent is None else [info.parent[0], info.parent[1]],
    }
    return json.dumps(obj, ensure_ascii=True, separators=(",", ":"))


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], right: set[int]) -> list[str]:
    """Align ``rows`` under ``header``; columns in ``right`` are right-aligned, the last
    column is never padded."""
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(header)]
    lines = []
    for row in [list(header), *rows]:
        cells = []
        for i, cell in enumerate(row):
            if i == len(row) - 1:
                cells.append(cell)
            elif i in right:
                cells.append(cell.rjust(widths[i]))
            else:
                cells.append(cell.ljust(widths[i]))
        lines.append("  ".join(cells).rstrip())
    return lines


def _event_cells(event: StoredEvent) -> list[str]:
    """The table cells of one event: seq, time, kind, run_id, short data."""
    return [
        str(event.seq),
        _time(event.ts),
        _printable(event.kind),
        _printable(event.run_id or "-"),
        _compact(event.data, _DATA_WIDTH),
    ]


def _event_line(event: StoredEvent) -> str:
    """One event as a fixed-width line (for ``tail``, which cannot size columns ahead)."""
    seq, time, kind, run_id, data = _event_cells(event)
    return f"{seq:>6}  {time}  {kind:<16}  {run_id:<12}  {data}"


_EVENT_HEADER = ("SEQ", "TIME", "KIND", "RUN_ID", "DATA")


# -- the commands --------------------------------------------------------------------------


def _check_database(path: str) -> None:
    """Refuse a path that is not an existing, non-empty file -- before anything opens it
    (opening a missing file would create a new database)."""
    if not os.path.lexists(path):
        raise CliError(f"tidelog: no such database file: {path}")
    if os.path.isdir(path):
        raise CliError(f"tidelog: {path} is a directory, not a database file")
    if not os.path.isfile(path):
        raise CliError(f"tidelog: {path} is not a regular file")
    if os.path.getsize(path) == 0:
        raise CliError(f"tidelog: {path} is empty: not a tidelog database")


async def _require_session(rt: Runtime, session_id: str) -> SessionInfo:
    """The session's info; :class:`SessionNotFoundError` if it does not exist."""
    info = await rt.stat(session_id)
    if info is None:
        raise SessionNotFoundError(session_id)
    return info


async def _cmd_ls(args: argparse.Namespace, out: TextIO) -> None:
    """``tidelog ls``: the sessions, most recently updated first."""
    async with open_runtime(args.db) as rt:
        sessions = await rt.list_sessions()
    if args.json:
        for info in sessions:
            print(_session_json(info), file=out)
        return
    if not sessions:
        print(f"no sessions in {args.db}", file=out)
        return
    rows = [
        [
            _printable(info.id),
            str(info.head),
            _time(info.updated_at),
            _compact(info.header, _DATA_WIDTH),
        ]
        for info in sessions
    ]
    for line in _table(("ID", "HEAD", "UPDATED", "HEADER"), rows, right={1}):
        print(line, file=out)


async def _read_events(
    rt: Runtime, session_id: str, since: int, limit: int | None
) -> list[StoredEvent]:
    """Events after ``since`` (at most ``limit``), all from one pinned snapshot."""
    events: list[StoredEvent] = []
    async with rt.snapshot(session_id) as snap:
        cursor = since
        while limit is None or len(events) < limit:
            want = _PAGE if limit is None else min(_PAGE, limit - len(events))
            page = await snap.read(since_seq=cursor, limit=want)
            events.extend(page)
            if len(page) < want:
                break
            cursor = page[-1].seq
    return events


async def _cmd_show(args: argparse.Namespace, out: TextIO) -> None:
    """``tidelog show``: a session's events as a table, or JSON lines."""
    async with open_runtime(args.db) as rt:
        await _require_session(rt, args.session)
        events = await _read_events(rt, args.session, args.since, args.limit)
    if args.json:
        for event in events:
            print(_event_json(event), file=out)
        return
    rows = [_event_cells(e) for e in events]
    for line in _table(_EVENT_HEADER, rows, right={0}):
        print(line, file=out)


async def _cmd_tail(args: argparse.Namespace, out: TextIO) -> None:
    """``tidelog tail``: print events; with ``-f`` follow new commits until a signal."""
    render = _event_json if args.json else _event_line
    async with open_runtime(args.db) as rt:
        await _require_session(rt, args.session)
        if not args.follow:
            for event in await _read_events(rt, args.session, args.since, None):
                print(render(event), file=out)
            return
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with trio.open_nursery() as nursery:

                async def stop_on_signal() -> None:
                    """Stop following at the first SIGINT or SIGTERM."""
                    async for _ in signals:
                        nursery.cancel_scope.cancel()
                        return

                nursery.start_soon(stop_on_signal)
                async for event in rt.tail(args.session, since_seq=args.since):
                    print(render(event), file=out, flush=True)


async def _cmd_fork(args: argparse.Namespace, out: TextIO) -> None:
    """``tidelog fork``: create NEW from SOURCE's first SEQ events."""
    async with open_runtime(args.db) as rt:
        info = await rt.fork(
            args.source, args.new, at_seq=args.at, allow_open_run=args.allow_open_run
        )
    assert info.parent is not None
    print(f"forked {info.id!r} from {info.parent[0]!r} at seq {info.parent[1]}", file=out)


async def _cmd_rewind(args: argparse.Namespace, out: TextIO) -> None:
    """``tidelog rewind``: keep the conversation's first N entries."""
    async with open_runtime(args.db) as rt:
        await _require_session(rt, args.session)
        removed = await rt.history.rewind(args.session, args.keep)
    print(f"rewound {args.session!r}: {removed} entries removed", file=out)


def _leaf(exc: BaseException) -> BaseException:
    """The single exception inside nested one-member exception groups, else ``exc``."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def _explain(exc: TidelogError, args: argparse.Namespace) -> str:
    """The one-line message for a tidelog error met by a read command."""
    path = args.db
    if isinstance(exc, SessionNotFoundError):
        return f"tidelog: no session {exc.session_id!r} in {path}"
    if isinstance(exc, UnsupportedFormatError):
        return f"tidelog: {path}: {exc}"
    if isinstance(exc, StoreCorruptError):
        return f"tidelog: {path}: corrupt file, or not a database at all ({exc})"
    if isinstance(exc, SessionExistsError):
        return f"tidelog: session {exc.session_id!r} already exists in {path}"
    if isinstance(exc, SessionOwnedError):
        return f"tidelog: {exc}; close its writer first"
    if isinstance(exc, InvalidArgumentError):
        return f"tidelog: {exc}"
    return f"tidelog: {path}: {type(exc).__name__}: {exc}"


def _run_read_command(
    command: Callable[[argparse.Namespace, TextIO], Awaitable[None]], args: argparse.Namespace
) -> int:
    """Run a read command in trio; map the expected errors to a message and status 2."""
    _check_database(args.db)
    try:
        trio.run(command, args, sys.stdout)
    except BaseException as exc:
        leaf = _leaf(exc)
        if isinstance(leaf, TidelogError):
            raise CliError(_explain(leaf, args)) from leaf
        if leaf is not exc and isinstance(leaf, KeyboardInterrupt | BrokenPipeError):
            raise leaf from None
        raise
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``tidelog`` command line with ``argv`` (default ``sys.argv[1:]``); return
    the exit status."""
    args = build_parser().parse_args(argv)
    try:
        if args.command == "demo":
            from .demo import run_demo

            return run_demo(args.db, keep=args.keep)
        if args.command == "demo-host":
            from .demo import crash_host

            return crash_host(args.db, args.workspace)
        commands = {
            "ls": _cmd_ls,
            "show": _cmd_show,
            "tail": _cmd_tail,
            "fork": _cmd_fork,
            "rewind": _cmd_rewind,
        }
        return _run_read_command(commands[args.command], args)
    except CliError as exc:
        print(exc.message, file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        return 0 if args.command == "tail" else 130
    except BrokenPipeError:
        # The reader went away (``tidelog show ... | head``): not an error of ours.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
