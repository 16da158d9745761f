"""Every command takes a store address wherever it takes a database: a SQLite file, a
JSONL store directory, a ``postgresql://...?schema=S`` URL -- run as subprocesses against
real files, a real directory and the real PostgreSQL server (a schema per test)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import trio
from cli_support import ODD_DATA, TIMEOUT, big_db, contents, new_address, tidelog

from runtime import NewEvent, open_runtime
from runtime.agents import RunHead, UserMessage, checkpoints, history
from stores._urls import open_store

KINDS = ["sqlite", "jsonl", "postgres"]


def seed(address: str) -> None:
    """`chat` (two runs of history, a checkpoint of each), `notes` (odd data) and `alt`, a
    fork of chat at 2 with an event of its own."""

    async def write() -> None:
        async with open_runtime(address) as rt:
            for n in range(2):
                await history(rt).append("chat", [UserMessage(f"m{n}")], run_id=f"r{n}")
                head = RunHead("assistant", status="completed", session_id="chat")
                await checkpoints(rt).append(f"r{n}", [UserMessage(f"m{n}")], head)
            async with rt.open_session("notes", header={"who": "ada"}) as w:
                await w.append([NewEvent("note", ODD_DATA)])
            await rt.fork("chat", "alt", at_seq=2)
            async with rt.open_session("alt") as w:
                await w.append([NewEvent("own", 1)])

    trio.run(write)


def tree(directory: Path) -> list[tuple[str, int, int]]:
    """Every file and directory under ``directory``: path, size, modification time."""
    found = []
    for root, dirs, names in os.walk(directory):
        for name in dirs + names:
            info = os.lstat(os.path.join(root, name))
            found.append((os.path.join(root, name), info.st_size, info.st_mtime_ns))
    return sorted(found)


def ok(*args: str, cwd: Path) -> str:
    """Run ``tidelog ARGS``; it must succeed; its stdout."""
    proc = tidelog(*args, cwd=cwd)
    assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    return proc.stdout


@pytest.mark.parametrize("kind", KINDS)
def test_every_command_takes_the_store_address(tmp_path: Path, kind: str) -> None:
    """ls, show, tail, export, check, stats, fork, rewind, delete and prune run on a
    SQLite file, a JSONL directory and a PostgreSQL URL alike, and say what they did;
    the read commands change nothing and create no file."""
    with new_address(kind, tmp_path) as db:
        seed(db)
        before = contents(db)
        files_before = tree(tmp_path)
        listed = json.loads(ok("ls", db, "--json", cwd=tmp_path))
        assert [s["id"] for s in listed["sessions"]] == ["alt", "chat", "notes"]
        shown = [json.loads(x) for x in ok("show", db, "alt", "--jsonl", cwd=tmp_path).split()]
        assert [e["seq"] for e in shown] == [1, 2, 3]
        assert [e["data"] for e in shown] == [e.data for e in before["alt"][1]]
        last = ok("tail", db, "notes", "-n", "1", "--jsonl", cwd=tmp_path)
        assert json.loads(last)["data"] == ODD_DATA
        dump = ok("export", db, cwd=tmp_path).splitlines()
        assert json.loads(dump[-1]) == {"type": "end-of-dump", "sessions": len(before)}
        check = json.loads(ok("check", db, "--json", cwd=tmp_path))
        assert (check["ok"], check["backend"], check["sessions"]) == (True, kind, len(before))
        stats = json.loads(ok("stats", db, "--json", cwd=tmp_path))
        assert stats["backend"] == kind
        assert stats["events"] == sum(info.head for info, _ in before.values())
        assert stats["conversations"] == 3
        assert (stats["wal_bytes"] is None) == (kind != "sqlite")
        assert contents(db) == before  # the read commands changed nothing
        assert tree(tmp_path) == files_before

        fork = json.loads(ok("fork", db, "chat", "alt2", "--at", "2", "--json", cwd=tmp_path))
        assert fork["parent"] == {"id": "chat", "seq": 2}
        rewound = json.loads(ok("rewind", db, "chat", "--keep", "1", "--json", cwd=tmp_path))
        assert rewound["kept"] == 1
        deleted = json.loads(ok("delete", db, "alt2", "--json", cwd=tmp_path))
        assert deleted["sessions"][0]["deleted"] == ["alt2"]
        runs = [sid for sid in contents(db) if sid.startswith("tidelog/run/")]
        assert runs
        dry = ok("prune", db, "--completed-checkpoints", "--dry-run", cwd=tmp_path)
        assert "would delete" in dry
        pruned = json.loads(ok("prune", db, "--completed-checkpoints", "--json", cwd=tmp_path))
        assert pruned["deleted"] == len(runs)
        after = contents(db)
        assert "alt2" not in after
        assert not any(sid.startswith("tidelog/run/") for sid in after)
        assert len(after["chat"][1]) < len(before["chat"][1])


@pytest.mark.parametrize(
    ("source", "dest", "flags"),
    [
        ("sqlite", "jsonl", ["--dest-kind", "jsonl"]),
        ("jsonl", "jsonl", []),
        ("jsonl", "postgres", []),
        ("postgres", "sqlite", []),
    ],
)
def test_backup_and_import_between_backends_are_lossless(
    tmp_path: Path, source: str, dest: str, flags: list[str]
) -> None:
    """backup from one backend into a new store of another (an export and import under
    the hood) and export | import between them: the copy holds exactly the source's
    sessions, headers, times, lineage and events, and `check` passed on it."""
    with (
        new_address(source, tmp_path, "source") as db,
        new_address(dest, tmp_path, "copy") as copy,
        new_address(dest, tmp_path, "imported") as imported,
    ):
        seed(db)
        if dest == "jsonl":
            os.rmdir(copy)  # backup makes DEST itself
        report = json.loads(ok("backup", db, copy, *flags, "--json", cwd=tmp_path))
        assert report["ok"] is True
        assert report["sessions"] == len(contents(db))
        assert contents(copy) == contents(db)
        dump = tmp_path / "dump.jsonl"
        ok("export", db, "-o", str(dump), cwd=tmp_path)
        ok("import", imported, str(dump), cwd=tmp_path)
        assert contents(imported) == contents(db)
        again = json.loads(ok("import", imported, str(dump), "--json", cwd=tmp_path))
        assert again["unchanged"] == len(contents(db))


def test_addresses_that_name_no_store_are_refused_untouched(tmp_path: Path) -> None:
    """A directory that is not a JSONL store, a PostgreSQL schema that holds no store
    (read and write commands alike: none creates it), a server that refuses the
    connection (its password never printed), a backup into a schema that holds sessions
    already: exit 2, one line naming what is wrong, nothing created or changed."""
    foreign = tmp_path / "photos"
    foreign.mkdir()
    (foreign / "cat.jpg").write_bytes(b"\xff\xd8")
    for args in (["ls"], ["show", "x"], ["check"], ["stats"], ["delete", "x"]):
        proc = tidelog(args[0], str(foreign), *args[1:], cwd=tmp_path)
        assert proc.returncode == 2, args
        assert "is a directory but not a tidelog JSONL store" in proc.stderr, args
    assert sorted(os.listdir(foreign)) == ["cat.jpg"]

    refused = tidelog("ls", "postgresql://ada:hunter2@127.0.0.1:1/x", cwd=tmp_path)
    assert refused.returncode == 2
    assert "hunter2" not in refused.stderr
    assert "ada:***@127.0.0.1:1" in refused.stderr
    assert "connection" in refused.stderr

    with new_address("postgres", tmp_path) as empty, new_address("postgres", tmp_path) as full:
        for args in (["ls"], ["delete", "x"], ["fork", "a", "b"], ["prune", "--older-than", "1d"]):
            proc = tidelog(args[0], empty, *args[1:], cwd=tmp_path)
            assert proc.returncode == 2, args
            assert "holds no tidelog store" in proc.stderr, args
        import psycopg

        from stores.postgres._connection import split_url

        dsn, schema = split_url(empty)
        with psycopg.connect(dsn) as conn:
            found = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,))
            assert found.fetchone() is None  # not created by the write commands
        source = str(tmp_path / "a.db")
        seed(source)
        seed(full)
        before = contents(full)
        proc = tidelog("backup", source, full, cwd=tmp_path)
        assert proc.returncode == 2
        assert "already holds sessions (give a new schema)" in proc.stderr
        assert contents(full) == before
        proc = tidelog("backup", source, full, "--dest-kind", "jsonl", cwd=tmp_path)
        assert proc.returncode == 2
        assert "--dest-kind is for a DEST path" in proc.stderr


def test_ctrl_c_mid_backup_into_a_jsonl_directory_leaves_nothing(tmp_path: Path) -> None:
    """SIGINT while a backup copies 100k events into a new JSONL directory: exit 130, a
    message saying no backup was written, and neither DEST nor anything else is left."""
    source = big_db(tmp_path / "a.db", 20_000, sessions=5)
    dest = tmp_path / "copy.d"
    command = ["backup", str(source), str(dest), "--dest-kind", "jsonl"]
    with subprocess.Popen(
        [sys.executable, "-m", "runtime.cli", *command],
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        deadline = time.monotonic() + TIMEOUT
        while not dest.exists():
            assert time.monotonic() < deadline
            assert proc.poll() is None
            time.sleep(0.01)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 130, stderr
    assert f"no backup was written ({dest} removed)" in stderr
    assert sorted(os.listdir(tmp_path)) == ["a.db"]


@pytest.mark.parametrize("kind", KINDS)
def test_tail_follow_on_each_backend_sees_another_process(tmp_path: Path, kind: str) -> None:
    """`tail -f --jsonl` on a file, a directory or a URL prints the last event, then one
    committed afterwards by another process (this one, through its own store), and exits
    0 on SIGTERM."""
    with new_address(kind, tmp_path) as db:
        seed(db)
        command = [sys.executable, "-m", "runtime.cli", "tail", db, "notes", "-f", "--jsonl"]
        with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as proc:
            watchdog = threading.Timer(TIMEOUT, proc.kill)
            watchdog.start()
            try:
                assert proc.stdout is not None
                assert json.loads(proc.stdout.readline())["data"] == ODD_DATA
                store = open_store(db)
                try:
                    store.append("notes", [NewEvent("late", {"from": "elsewhere"})])
                finally:
                    store.close()
                late = json.loads(proc.stdout.readline())
                assert (late["seq"], late["data"]) == (2, {"from": "elsewhere"})
                proc.send_signal(signal.SIGTERM)
                assert proc.wait(timeout=TIMEOUT) == 0
            finally:
                watchdog.cancel()


def test_check_finds_a_damaged_jsonl_file(tmp_path: Path) -> None:
    """A JSONL session file whose first batch was changed on disk: `check` reports an
    integrity error naming the file and byte and what to do (exit 1), not a failure to
    run; the file is left as it was."""
    with new_address("jsonl", tmp_path) as db:
        store = open_store(db)
        try:
            store.append("c", [NewEvent("a", "hello")])
            store.append("c", [NewEvent("b", "world")])
        finally:
            store.close()
        path = Path(db) / "sessions" / "c.jsonl"
        damaged = path.read_bytes().replace(b"hello", b"HELLO")
        path.write_bytes(damaged)
        proc = tidelog("check", db, "--json", cwd=tmp_path)
        assert proc.returncode == 1, proc.stderr
        report = json.loads(proc.stdout)
        assert report["ok"] is False
        errors = [f for f in report["findings"] if f["level"] == "error"]
        assert [f["check"] for f in errors] == ["integrity"]
        assert f"{path}: byte " in errors[0]["message"]
        assert "checksum mismatch" in errors[0]["message"]
        assert "tidelog backup" in errors[0]["hint"]
        assert path.read_bytes() == damaged
