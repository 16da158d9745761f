"""What the CLI tests share: running ``tidelog`` as a real subprocess, small and large
databases, and looking at a database's whole state."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import runpy
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import apsw

from runtime import JSON, NewEvent, SessionInfo, SqliteStore, StoredEvent
from stores import AppendOp, open_store, prepare_events

#: Every session of a store as its API shows it: info and events.
Contents = dict[str, tuple[SessionInfo, tuple[StoredEvent, ...]]]

TIMEOUT = 60  # seconds, for any one subprocess

#: Data that must survive the JSON forms exactly: unicode, floats, nesting, null.
ODD_DATA: dict[str, JSON] = {
    "text": 'héllo \u2028 "quoted"\n',
    "n": 0.1,
    "big": 2**53,
    "list": [None, True],
}

#: Runs ``tidelog ARGS`` and prints its peak memory (``VmHWM``: the peak resident set of
#: this process image, in KiB -- unlike ``ru_maxrss``, not inherited from the forking
#: parent) on stderr as its last line.
MEASURED = (
    "import atexit, re, sys\n"
    "from runtime.cli import main\n"
    "def peak():\n"
    "    text = open('/proc/self/status').read()\n"
    "    print('maxrss', re.search(r'VmHWM:\\s+(\\d+)', text).group(1), file=sys.stderr)\n"
    "atexit.register(peak)\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


#: Fresh processes for the commands, forked from a server process that has imported
#: the command's modules once (multiprocessing's forkserver: a clean interpreter of its
#: own, no thread, no trio run). Each command is still a process of its own, with its
#: own exit status, streams and working directory; it only skips re-importing what
#: ``python -m runtime.cli`` imports (a third of a second each, hundreds of times per
#: run). A fresh interpreter's imports are tested where they matter: ``test_cold_start``,
#: the README's and the demo's commands. msgspec too: the stores import it at their first
#: encode or decode, which nearly every command makes.
_SERVER = multiprocessing.get_context("forkserver")
_SERVER.set_forkserver_preload(["runtime", "runtime.cli", "runtime.agents", "stores", "msgspec"])


def _command_process(
    args: list[str], cwd: str, env: dict[str, str], streams: tuple[str, str, str]
) -> None:
    """The forked child: be ``python -m runtime.cli ARGS`` run in ``cwd`` with ``env``,
    its stdin, stdout and stderr the files ``streams`` names."""
    for fd, (name, flags) in enumerate(
        zip(streams, (os.O_RDONLY, os.O_WRONLY, os.O_WRONLY), strict=True)
    ):
        opened = os.open(name, flags)
        os.dup2(opened, fd)
        os.close(opened)
    sys.stdin = open(0, closefd=False)  # noqa: SIM115 (multiprocessing closed the old one)
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    sys.argv = ["tidelog", *args]
    runpy.run_module("runtime.cli", run_name="__main__", alter_sys=True)


def tidelog(
    *args: str, cwd: Path, stdin: str | None = None, timeout: float = TIMEOUT
) -> subprocess.CompletedProcess[str]:
    """Run ``tidelog ARGS`` (``python -m runtime.cli``) in a fresh process (forked, see
    :data:`_SERVER`) to completion and capture its output."""
    with tempfile.TemporaryDirectory(prefix="tidelog-cli-") as tmp:
        names = tuple(os.path.join(tmp, name) for name in ("in", "out", "err"))
        Path(names[0]).write_text(stdin or "")
        for name in names[1:]:
            Path(name).touch()
        proc = _SERVER.Process(
            target=_command_process, args=(list(args), str(cwd), dict(os.environ), names)
        )
        proc.start()
        proc.join(timeout)
        if proc.exitcode is None:
            proc.kill()
            proc.join()
            raise subprocess.TimeoutExpired(["tidelog", *args], timeout)
        out, err = (Path(name).read_text() for name in names[1:])
    return subprocess.CompletedProcess(["tidelog", *args], proc.exitcode, out, err)


def read_terminal(master: int) -> bytes:
    """Everything a child wrote to the pseudo-terminal whose ``master`` end this is, until
    it closed it; closes ``master``."""
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    return b"".join(chunks)


def make_db(tmp_path: Path, name: str = "app.db") -> Path:
    """A small database: ``chat`` (3 events, a header), ``notes`` (1 event), ``alt`` (a
    fork of chat at 2) and an internal session; closed, so no -wal is beside it."""
    db = tmp_path / name
    store = SqliteStore(db)
    try:
        store.create("chat", header={"user": "ada"})
        store.append(
            "chat",
            [
                NewEvent("user", {"text": "hi"}, run_id="r1"),
                NewEvent("assistant", {"text": "hello"}, run_id="r1"),
            ],
        )
        store.append("chat", [NewEvent("odd", ODD_DATA)])
        store.append("notes", [NewEvent("note", "remember")])
        store.fork("chat", "alt", at_seq=2)
        store.append("tidelog/archive/a1", [NewEvent("k", 1)])
    finally:
        store.close()
    return db


def big_db(path: Path, events: int, *, session: str = "big", sessions: int = 1) -> Path:
    """A database with ``sessions`` sessions of ``events`` events each (ids
    ``session``, ``session-1``...), written fast with the store's own ``write_batch``."""
    store = SqliteStore(path)
    try:
        per_op = 5000
        payload = prepare_events(
            [NewEvent("msg", {"i": i, "text": "lorem ipsum " * 8}) for i in range(per_op)]
        )
        for n in range(sessions):
            sid = session if n == 0 else f"{session}-{n}"
            written = 0
            while written < events:
                chunk = tuple(payload[: min(per_op, events - written)])
                store.write_batch([AppendOp(sid, chunk, expected_head=written)])
                written += len(chunk)
    finally:
        store.close()
    return path


def db_state(db: Path) -> tuple[list[tuple[object, ...]], ...]:
    """Every table of the database, as stored (read with apsw, read-only, immutable)."""
    conn = apsw.Connection(
        f"file:{db}?mode=ro&immutable=1", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
    )
    try:
        return tuple(
            list(conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2"))
            for table in ("sessions", "events", "cuts", "leases", "projections", "meta")
        )
    finally:
        conn.close()


def files(directory: Path) -> list[str]:
    """The names in ``directory``, sorted."""
    return sorted(os.listdir(directory))


def tidelog_unprivileged(*args: str) -> tuple[int, str]:
    """Run ``tidelog ARGS`` in a forked child that gave up root (uid/gid 65534) first, so
    file permissions apply to it as to any user; its exit status and output (stdout and
    stderr together). Forked rather than executed: that user may not read this Python's
    files, so every module the command needs is imported here first."""
    import importlib
    import traceback

    from runtime.cli import main
    from runtime.cli._parsing import COMMANDS, version

    for module, _, _ in COMMANDS.values():
        importlib.import_module(f"runtime.cli.{module}")
    version()  # imports what reading the package metadata needs
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 99
        try:
            os.close(read_end)
            os.dup2(write_end, 1)
            os.dup2(write_end, 2)
            # pytest's capture replaced sys.stdout and sys.stderr: write to the pipe.
            sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
            sys.stderr = open(2, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            code = main(list(args))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end) as got:
        output = got.read()
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), output


@contextlib.contextmanager
def new_address(kind: str, tmp_path: Path, name: str = "store") -> Iterator[str]:
    """The address of a new store of ``kind``: a file path, a new JSONL directory, or a
    URL naming a PostgreSQL schema of this test's own (dropped afterwards)."""
    if kind == "postgres":
        from pgtest import fresh_schema, url_of

        with fresh_schema() as (dsn, schema):
            yield url_of(dsn, schema)
    elif kind == "jsonl":
        directory = tmp_path / f"{name}.d"
        directory.mkdir()
        yield str(directory)
    else:
        yield str(tmp_path / f"{name}.db")


def contents(address: str) -> Contents:
    """Every session of the store, as its API shows it: info and events."""
    store = open_store(address, read_only=True)
    try:
        return {info.id: (info, tuple(store.read(info.id))) for info in store.list_sessions()}
    finally:
        store.close()
