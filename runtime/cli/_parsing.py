"""The ``tidelog`` command line's arguments: one parser, a subcommand per operation.

Only :mod:`argparse` and the standard library are imported here, so ``tidelog --help``
and a usage error cost no more than importing the runtime package; each command's module
is imported when that command runs (:data:`COMMANDS`).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ._argtypes import count, duration, events_to_show, moment, port, seq

__all__ = ["COMMANDS", "build_parser", "version"]

#: Every command: its module (under ``runtime.cli``), the function that runs it, and the
#: one-line summary ``tidelog --help`` shows.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "demo": ("_demo", "run_demo", "run the demo: agent sessions, a crash mid-tool, recovery"),
    "ls": ("_browse", "cmd_ls", "list sessions by id (paged: --limit, --after, --prefix)"),
    "show": ("_browse", "cmd_show", "print a session's events, streamed from the first"),
    "tail": ("_browse", "cmd_tail", "print a session's last events; -f follows new ones"),
    "export": ("_dump", "cmd_export", "write sessions to a dump (JSON Lines) on stdout or -o"),
    "import": ("_load", "cmd_import", "load a dump into a database (idempotent, resumable)"),
    "check": ("_check", "cmd_check", "check integrity, format, lineage, leases, checkpoints"),
    "backup": ("_backup", "cmd_backup", "copy a live store consistently, then check the copy"),
    "stats": ("_stats", "cmd_stats", "sessions, events, bytes, WAL, largest, live runtimes"),
    "prune": ("_cleanup", "cmd_prune", "delete old sessions and run checkpoints (see --dry-run)"),
    "delete": ("_cleanup", "cmd_delete", "delete sessions (never one a live writer holds)"),
    "fork": ("_edit", "cmd_fork", "fork a session at a seq (O(1): shares the prefix)"),
    "rewind": ("_edit", "cmd_rewind", "cut a conversation back to its first N entries"),
    "serve": ("_serve", "cmd_serve", "serve the web inspector of a store until Ctrl-C"),
    "runs": ("_runs", "cmd_runs", "list agent runs; approve, reject or stop one"),
}


def version() -> str:
    """The installed tidelog's version (read from the package metadata when asked:
    importing ``importlib.metadata`` costs more than the rest of the parser)."""
    from importlib import metadata

    try:
        return metadata.version("tidelog")
    except metadata.PackageNotFoundError:  # run from a source tree without installing
        return "unknown (not installed)"


class _Version(argparse.Action):
    """``--version``: looks the version up only when asked (reading the package metadata
    costs more than parsing every other argument)."""

    def __init__(self, option_strings: list[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,  # noqa: ARG002 (argparse.Action's signature)
        values: object,  # noqa: ARG002
        option_string: str | None = None,  # noqa: ARG002
    ) -> None:
        print(f"tidelog {version()}")
        parser.exit()


# -- the parser --------------------------------------------------------------------------


def _formats(parser: argparse.ArgumentParser, *, jsonl_only: bool = False) -> None:
    """``--json`` (one document) and ``--jsonl`` (one JSON object per line), exclusive."""
    group = parser.add_mutually_exclusive_group()
    if not jsonl_only:
        group.add_argument(
            "--json",
            dest="format",
            action="store_const",
            const="json",
            help="print one JSON document (schema: docs/cli.md)",
        )
    group.add_argument(
        "--jsonl",
        dest="format",
        action="store_const",
        const="jsonl",
        help="print one JSON object per line (JSON Lines; schema: docs/cli.md)",
    )
    parser.set_defaults(format="text")


def _database(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "db",
        metavar="DB",
        help="the store: a SQLite file, a JSONL store directory, or a postgresql:// URL "
        "(?schema=S chooses the schema)",
    )


if TYPE_CHECKING:  # argparse's class is generic only in its stubs
    _Commands = argparse._SubParsersAction[argparse.ArgumentParser]


def _add(commands: _Commands, name: str, description: str) -> argparse.ArgumentParser:
    summary = COMMANDS[name][2]
    return commands.add_parser(name, help=summary, description=description or summary + ".")


def _demo_command(commands: _Commands) -> None:
    demo = _add(
        commands,
        "demo",
        "Run scripted agent sessions on an embedded SQLite file, kill a host mid-tool, "
        "resume it, and show a pinned snapshot and a live tail.",
    )
    demo.add_argument("--db", metavar="PATH", help="a new database file (default: a temp dir)")
    demo.add_argument("--keep", action="store_true", help="keep the temporary directory")


def _ls_command(commands: _Commands) -> None:
    ls = _add(
        commands,
        "ls",
        "List sessions in id order, a page at a time: the next page starts --after the "
        "last id printed. Paging is stable while others write. Internal sessions (run "
        "checkpoints, archives: ids starting with 'tidelog/') only with --internal.",
    )
    _database(ls)
    ls.add_argument(
        "--limit", type=count, default=1000, metavar="N", help="at most N (default 1000; 0: all)"
    )
    ls.add_argument("--prefix", metavar="P", help="only ids starting with P")
    ls.add_argument("--after", metavar="ID", help="only ids after ID (the previous page's last)")
    ls.add_argument(
        "--since-updated",
        type=moment,
        metavar="WHEN",
        help="only sessions updated since WHEN (2026-01-31, 2026-01-31T12:00, or 7d for "
        "7 days ago)",
    )
    ls.add_argument(
        "--sort",
        choices=("id", "updated"),
        default="id",
        help="id (default; pages with --after) or updated (most recent first, one page)",
    )
    ls.add_argument("--internal", action="store_true", help="include internal sessions")
    _formats(ls)


def _show_command(commands: _Commands) -> None:
    show = _add(
        commands,
        "show",
        "Print a session's events from a consistent snapshot, streamed: the first line "
        "comes at once and memory stays flat however long the session is.",
    )
    _database(show)
    show.add_argument("session", metavar="ID", help="session id")
    show.add_argument("--since", type=seq, default=0, metavar="SEQ", help="events after SEQ")
    show.add_argument("--until", type=seq, metavar="SEQ", help="events up to SEQ")
    show.add_argument(
        "-n", "--limit", type=count, metavar="N", help="at most N events (the first N)"
    )
    _formats(show)


def _tail_command(commands: _Commands) -> None:
    tail = _add(
        commands,
        "tail",
        "Print a session's last events (10 unless -n says otherwise) of the window "
        "--since/--until; with -f, then follow new commits from any process until Ctrl-C "
        "or SIGTERM (exit status 0).",
    )
    _database(tail)
    tail.add_argument("session", metavar="ID", help="session id")
    tail.add_argument(
        "-n",
        "--lines",
        type=events_to_show,
        default=10,
        metavar="N",
        help="how many of the last events to print (default 10; 'all' for the whole window)",
    )
    tail.add_argument("--since", type=seq, default=0, metavar="SEQ", help="window after SEQ")
    tail.add_argument("--until", type=seq, metavar="SEQ", help="window up to SEQ")
    tail.add_argument("-f", "--follow", action="store_true", help="then follow new events")
    _formats(tail)


def _export_command(commands: _Commands) -> None:
    export = _add(
        commands,
        "export",
        "Write sessions -- header, events, fork lineage -- to a versioned dump in JSON "
        "Lines, streamed. Without IDs: every session, internal ones (run checkpoints, "
        "archives) included. With IDs: those, with their run checkpoints and archives.",
    )
    _database(export)
    export.add_argument("sessions", metavar="ID", nargs="*", help="sessions to export")
    export.add_argument(
        "-o", "--output", metavar="FILE", help="write the dump to FILE (default: stdout)"
    )


def _import_command(commands: _Commands) -> None:
    load = _add(
        commands,
        "import",
        "Load a dump into DB (created if missing: a new path becomes a SQLite file, an "
        "empty directory a JSONL store, a PostgreSQL schema a new store; a fork whose "
        "parent is there shares its prefix again). Idempotent: a session already there "
        "with the same content is left alone, one imported in part is completed, one "
        "that differs is reported as a conflict and not touched (exit status 1).",
    )
    _database(load)
    load.add_argument("dump", metavar="DUMP", help="the dump file ('-': stdin)")
    _formats(load)


def _check_command(commands: _Commands) -> None:
    check = _add(
        commands,
        "check",
        "Check a store read-only: the backend's integrity (SQLite's integrity check, a "
        "JSONL store's files read whole; PostgreSQL keeps its own), format version, "
        "every fork's stored lineage, the leases held (and by whom), orphaned run "
        "checkpoints. Exit status 1 if anything is wrong, with what to do.",
    )
    _database(check)
    check.add_argument(
        "--quick", action="store_true", help="skip the integrity check (SQLite, JSONL)"
    )
    _formats(check)


def _backup_command(commands: _Commands) -> None:
    backup = _add(
        commands,
        "backup",
        "Copy DB to DEST while writers go on, then run `check` on the copy. SQLite to a "
        "SQLite file: SQLite's online backup, one consistent snapshot. Any other pair (a "
        "JSONL directory, a PostgreSQL schema, or --dest-kind): an export and import, "
        "each session from one snapshot of it, forks still sharing their prefix.",
    )
    _database(backup)
    backup.add_argument(
        "dest",
        metavar="DEST",
        help="a new path (must not exist), or a postgresql:// URL whose schema holds no "
        "sessions yet",
    )
    backup.add_argument(
        "--dest-kind",
        choices=("sqlite", "jsonl"),
        help="what a DEST path becomes: a SQLite file or a JSONL store directory (default: "
        "what DB is; a SQLite file for a PostgreSQL DB)",
    )
    _formats(backup)


def _stats_command(commands: _Commands) -> None:
    stats = _add(
        commands,
        "stats",
        "Sessions, events, bytes, WAL size, the largest sessions, the leases of live "
        "writers, and the statistics that live runtimes publish (open_runtime(..., "
        "publish_statistics=SECONDS); 'none' when no live runtime publishes).",
    )
    _database(stats)
    stats.add_argument(
        "--top", type=count, default=10, metavar="N", help="largest sessions shown (default 10)"
    )
    _formats(stats)


def _prune_command(commands: _Commands) -> None:
    prune = _add(
        commands,
        "prune",
        "Delete what a retention policy no longer keeps. Never touches a session a live "
        "writer holds, nor one a fork still borrows events from. --dry-run prints what "
        "would go.",
    )
    _database(prune)
    prune.add_argument(
        "--older-than",
        type=duration,
        metavar="AGE",
        help="conversations not updated for AGE (30d, 12h...), with their checkpoints",
    )
    prune.add_argument(
        "--keep-last-runs",
        type=count,
        metavar="N",
        help="keep only the N most recent run checkpoints of each conversation",
    )
    prune.add_argument(
        "--completed-checkpoints",
        action="store_true",
        help="checkpoints of completed runs (their entries are in the history)",
    )
    prune.add_argument(
        "--orphaned-checkpoints",
        action="store_true",
        help="checkpoints whose conversation no longer exists",
    )
    prune.add_argument("--dry-run", action="store_true", help="print what would go; change nothing")
    _formats(prune)


def _delete_command(commands: _Commands) -> None:
    delete = _add(commands, "delete", "")
    _database(delete)
    delete.add_argument("sessions", metavar="ID", nargs="+", help="sessions to delete")
    _formats(delete)


def _fork_command(commands: _Commands) -> None:
    fork = _add(
        commands,
        "fork",
        "Create NEW holding SOURCE's first SEQ events (default: all); independent from "
        "then on. Refused inside a run whose tool calls have no result yet.",
    )
    _database(fork)
    fork.add_argument("source", metavar="SOURCE", help="the session to fork")
    fork.add_argument("new", metavar="NEW", help="the new session's id")
    fork.add_argument("--at", type=seq, metavar="SEQ", help="fork point (default: the head)")
    fork.add_argument(
        "--allow-open-run",
        action="store_true",
        help="fork even inside a run whose tool calls have no result yet",
    )
    _formats(fork)


def _rewind_command(commands: _Commands) -> None:
    rewind = _add(
        commands,
        "rewind",
        "Cut a conversation back to exactly its first N entries, counted in the flat "
        "history (messages, tool calls, tool results and sidecar entries of every "
        "completed run, in order -- what `show` prints minus the run markers). A cut that "
        "would separate a tool call from its result, or leave a tool's sidecar record "
        "without its call, is refused with the nearest valid N.",
    )
    _database(rewind)
    rewind.add_argument("session", metavar="ID", help="session id")
    rewind.add_argument(
        "--keep", type=count, required=True, metavar="N", help="entries kept (see above)"
    )
    _formats(rewind)


def _serve_command(commands: _Commands) -> None:
    serve = _add(
        commands,
        "serve",
        "Serve the web inspector (sessions, transcripts, events, runs, live, any seq) on "
        "DB until Ctrl-C or SIGTERM (exit status 0). The store is opened read-only unless "
        "--writes. Binding an address other than 127.0.0.1 needs a token (generated and "
        "printed unless --token). Needs the inspector extra: pip install "
        "'tidelog[inspector]'. docs/inspector.md has the page and the HTTP API.",
    )
    _database(serve)
    serve.add_argument(
        "--host", default="127.0.0.1", metavar="ADDR", help="address to bind (default 127.0.0.1)"
    )
    serve.add_argument(
        "--port", type=port, default=8765, metavar="PORT", help="port (default 8765; 0: any)"
    )
    serve.add_argument(
        "--token", metavar="TOKEN", help="the token requests need (default: generated when needed)"
    )
    serve.add_argument(
        "--writes",
        action="store_true",
        help="enable the write routes (fork); opens the store writable; they need the token",
    )


def _runs_command(commands: _Commands) -> None:
    runs = _add(
        commands,
        "runs",
        "`tidelog runs DB` lists the agent runs (status: running, awaiting_approval, "
        "interrupted, completed, failed; conversation; last update; calls awaiting "
        "approval; calls whose outcome is unknown). `tidelog runs approve|reject DB RUN "
        "CALL` records a decision on a call awaiting approval, once; `tidelog runs stop DB "
        "RUN` asks a live run to stop at its next safe point.",
    )
    runs.add_argument(
        "words", nargs="+", metavar="[approve|reject|stop] DB [RUN [CALL]]", help="see above"
    )
    runs.add_argument(
        "--status",
        choices=("running", "awaiting_approval", "interrupted", "completed", "failed"),
        help="list only runs with this status",
    )
    runs.add_argument("--by", metavar="NAME", help="who decides or stops (default: your login)")
    runs.add_argument("--message", metavar="TEXT", help="for reject: what the model is told")
    runs.add_argument("--reason", metavar="TEXT", help="for stop: why (recorded on the run)")
    _formats(runs)


#: Each command's arguments, added to the parser by :func:`build_parser`.
_ARGUMENTS: dict[str, Callable[[_Commands], None]] = {
    "demo": _demo_command,
    "ls": _ls_command,
    "show": _show_command,
    "tail": _tail_command,
    "export": _export_command,
    "import": _import_command,
    "check": _check_command,
    "backup": _backup_command,
    "stats": _stats_command,
    "prune": _prune_command,
    "delete": _delete_command,
    "fork": _fork_command,
    "rewind": _rewind_command,
    "serve": _serve_command,
    "runs": _runs_command,
}


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The ``tidelog`` argument parser.

    Given the ``argv`` it will parse, and when that starts with a command's name, only that
    command's arguments are added (building all fifteen costs a command's start-up about
    5 ms); anything else (``--help``, ``--version``, a mistyped command) gets them all."""
    parser = argparse.ArgumentParser(
        prog="tidelog",
        description="Inspect, export, check and maintain tidelog stores (durable agent "
        "sessions): wherever a command takes DB, give a SQLite file, a JSONL store "
        "directory or a postgresql:// URL (?schema=S chooses the schema). Read commands "
        "open the store read-only and create no file.",
        epilog="Run `tidelog COMMAND --help` for a command's options; docs/cli.md has "
        "the JSON schemas and the dump format.",
    )
    parser.add_argument("--version", action=_Version, help="print the version and exit")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    if argv and argv[0] in _ARGUMENTS:
        _ARGUMENTS[argv[0]](commands)
    else:
        for add_arguments in _ARGUMENTS.values():
            add_arguments(commands)
    return parser
