"""The command itself: --help and --version, the console script, errors as one line
with a status, read commands that create and change nothing (also as a user who may
only read), and progress bars on a terminal only."""

from __future__ import annotations

import argparse
import os
import pty
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest
from cli_support import TIMEOUT, big_db, db_state, files, make_db, tidelog, tidelog_unprivileged

from runtime.cli._errors import in_flags
from runtime.cli._parsing import COMMANDS, build_parser

# -- help, version, the console script ----------------------------------------------------


def test_help_lists_every_command_with_a_summary(tmp_path: Path) -> None:
    """`tidelog --help` names every command with its one-line summary; `--version`
    prints the installed version."""
    proc = tidelog("--help", cwd=tmp_path)
    assert proc.returncode == 0
    for name, (_, _, summary) in COMMANDS.items():
        assert f"    {name}" in proc.stdout, name
        assert summary in proc.stdout, name
    version = tidelog("--version", cwd=tmp_path)
    assert version.returncode == 0
    assert version.stdout.strip() == "tidelog 0.1.0"


def test_a_command_parses_alike_with_only_its_own_arguments_built() -> None:
    """The parser built for a command's argv (only that command's arguments) parses it
    exactly as the full parser does, and gives the same help for it."""
    argvs = [
        ["ls", "db.sqlite", "--limit", "5", "--after", "s1", "--json"],
        ["show", "db.sqlite", "s1", "--since", "3", "--jsonl"],
        ["runs", "approve", "db.sqlite", "r1", "c1", "--by", "ann"],
        ["prune", "db.sqlite", "--older-than", "7d", "--dry-run"],
    ]
    for argv in argvs:
        assert build_parser(argv).parse_args(argv) == build_parser().parse_args(argv), argv
        only = build_parser(argv)._subparsers
        assert only is not None
        (action,) = [a for a in only._group_actions if isinstance(a, argparse._SubParsersAction)]
        assert list(action.choices) == [argv[0]]
    for name in COMMANDS:
        full = build_parser()._subparsers
        assert full is not None
        (action,) = [a for a in full._group_actions if isinstance(a, argparse._SubParsersAction)]
        assert set(action.choices) == set(COMMANDS)
        one = build_parser([name, "--help"])._subparsers
        assert one is not None
        (own,) = [a for a in one._group_actions if isinstance(a, argparse._SubParsersAction)]
        assert own.choices[name].format_help() == action.choices[name].format_help(), name


def test_console_script_is_installed(tmp_path: Path) -> None:
    """The `tidelog` console script next to the interpreter runs the same command line."""
    script = Path(sys.executable).parent / "tidelog"
    proc = subprocess.run(
        [str(script), "ls", "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT
    )
    assert proc.returncode == 0, proc.stderr
    assert "--limit N" in proc.stdout
    assert "--since-updated WHEN" in proc.stdout


# -- errors -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["ls"],
        ["show", "chat"],
        ["tail", "chat"],
        ["check"],
        ["stats"],
        ["export"],
        ["fork", "a", "b"],
    ],
)
def test_missing_file_is_reported_and_not_created(tmp_path: Path, args: list[str]) -> None:
    """A missing database file: a message, exit 2, and the file is still missing."""
    db = tmp_path / "missing.db"
    proc = tidelog(args[0], str(db), *args[1:], cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"tidelog: no such database file or store directory: {db}"
    assert files(tmp_path) == []


@pytest.mark.parametrize("command", ["show", "tail", "export", "rewind"])
def test_missing_session_is_reported(tmp_path: Path, command: str) -> None:
    """A session that does not exist: a message naming it, exit 2, no traceback."""
    db = make_db(tmp_path)
    extra = ["--keep", "1"] if command == "rewind" else []
    proc = tidelog(command, str(db), "nobody", *extra, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"tidelog: no session 'nobody' in {db}"


def test_foreign_random_and_empty_files_are_refused_untouched(tmp_path: Path) -> None:
    """A SQLite file of another application, random bytes, an empty file: exit 2, a
    message saying what it is, never a traceback, the bytes unchanged."""
    foreign = tmp_path / "other.db"
    with closing(sqlite3.connect(foreign)) as conn:
        conn.execute("CREATE TABLE t(x)")
        conn.commit()
    noise = tmp_path / "noise.db"
    noise.write_bytes(random.Random(5).randbytes(8192))
    empty = tmp_path / "empty.db"
    empty.touch()
    for db, message in [
        (foreign, "not a tidelog database"),
        (noise, "corrupt file, or not a database at all"),
        (empty, "not a tidelog database"),
    ]:
        before = db.read_bytes()
        for args in (["ls"], ["show", "x"], ["check"], ["export"]):
            proc = tidelog(args[0], str(db), *args[1:], cwd=tmp_path)
            assert proc.returncode == 2, (db, args)
            assert message in proc.stderr, (db, args)
            assert "Traceback" not in proc.stderr, (db, args)
        assert db.read_bytes() == before


def test_bad_arguments_name_the_flags(tmp_path: Path) -> None:
    """Bad values are refused by the parser with the flag's name and status 2."""
    db = make_db(tmp_path)
    for args, flag in [
        (["ls", str(db), "--limit", "-1"], "--limit"),
        (["tail", str(db), "chat", "-n", "x"], "-n/--lines"),
        (["prune", str(db), "--older-than", "soon"], "--older-than"),
        (["ls", str(db), "--since-updated", "tuesday"], "--since-updated"),
        (["ls", str(db), "--prefix", "p" * 300], "--prefix is longer than 256 characters"),
    ]:
        proc = tidelog(*args, cwd=tmp_path)
        assert proc.returncode == 2, args
        assert flag in proc.stderr, args


def test_library_keywords_are_said_as_flags() -> None:
    """Messages that come from the library name its keyword arguments; the command says
    its flags instead."""
    library = "seq 3 is inside a run with unanswered tool calls; pass allow_open_run=True"
    assert in_flags(library).endswith("pass --allow-open-run")
    assert in_flags("at_seq 9 is past the head 6") == "--at 9 is past the head 6"
    assert in_flags("keep_entries must be an int >= 0") == "--keep must be an int >= 0"
    assert in_flags("prefix is longer than 256 characters").startswith("--prefix ")
    assert in_flags("a length limit of 5") == "a length limit of 5"


# -- read commands write nothing ---------------------------------------------------------

READ_COMMANDS = [
    ["ls"],
    ["ls", "--internal", "--json"],
    ["show", "chat"],
    ["show", "chat", "--json"],
    ["tail", "chat", "--jsonl"],
    ["check"],
    ["stats"],
    ["export"],
    ["prune", "--older-than", "0s", "--dry-run"],
]


def test_read_commands_create_and_change_nothing(tmp_path: Path) -> None:
    """Every read command leaves the database's tables as they were, takes no lease and
    creates no file beside it (no -wal, no -shm: the bug was files owned by whoever
    inspected a service's database)."""
    db = make_db(tmp_path)
    before = db_state(db)
    for args in READ_COMMANDS:
        proc = tidelog(args[0], str(db), *args[1:], cwd=tmp_path)
        assert proc.returncode == 0, (args, proc.stderr)
        assert files(tmp_path) == ["app.db"], args
    assert db_state(db) == before


@pytest.fixture
def read_only_dir() -> Iterator[Path]:
    """A directory outside pytest's (root-only) tmp tree holding a database, made
    read-only (0555); restored and removed afterwards."""
    directory = Path(tempfile.mkdtemp(prefix="tidelog-cli-ro-"))
    directory.chmod(0o755)
    make_db(directory)
    directory.chmod(0o555)
    yield directory
    directory.chmod(0o755)
    shutil.rmtree(directory)


def test_a_user_who_may_only_read_can_inspect(read_only_dir: Path) -> None:
    """As a user who may not write the directory (nor the file), the read commands work
    -- they used to fail with 'attempt to write a readonly database' -- and create
    nothing; where the WAL index cannot be made beside an existing -wal, the file is
    read as immutable and the command says so."""
    db = str(read_only_dir / "app.db")
    for args in READ_COMMANDS:
        status, output = tidelog_unprivileged(args[0], db, *args[1:])
        assert status == 0, (args, output)
    status, output = tidelog_unprivileged("show", db, "chat", "--jsonl")
    assert status == 0
    assert output.count("\n") == 3
    assert files(read_only_dir) == ["app.db"]
    read_only_dir.chmod(0o755)
    (read_only_dir / "app.db-wal").touch()  # a writer's empty WAL, without its index
    read_only_dir.chmod(0o555)
    status, output = tidelog_unprivileged("ls", db)
    assert status == 0, output
    assert "is read as an immutable file: its WAL index cannot be created here" in output
    assert files(read_only_dir) == ["app.db", "app.db-wal"]


# -- progress bars ------------------------------------------------------------------------


@pytest.mark.slow
def test_progress_on_a_terminal_quiet_when_piped(tmp_path: Path) -> None:
    """On a terminal, a long export draws a progress bar with its rate and time left;
    piped, stderr stays empty."""
    db = big_db(tmp_path / "p.db", 60_000)
    main, secondary = pty.openpty()
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "120"}
    with subprocess.Popen(
        [sys.executable, "-m", "runtime.cli", "export", str(db), "-o", str(tmp_path / "d")],
        stderr=secondary,
        env=env,
    ) as proc:
        os.close(secondary)
        drawn = b""
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # the terminal closed: the command ended
                break
            if not chunk:
                break
            drawn += chunk
        assert proc.wait(timeout=TIMEOUT) == 0
    os.close(main)
    text = drawn.decode(errors="replace")
    assert "export" in text
    assert "events/s" in text
    assert "ETA" in text
    piped = tidelog("export", str(db), "-o", str(tmp_path / "e"), cwd=tmp_path)
    assert piped.returncode == 0
    assert piped.stderr == ""
