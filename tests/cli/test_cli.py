"""The ``tidelog`` command, run as a real subprocess: demo, ls, show, tail, and its errors."""

from __future__ import annotations

import functools
import json
import random
import signal
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import apsw
import pytest
import trio

from runtime import NewEvent, SqliteStore
from runtime.demo import CRASH_SUBJECT, CRASH_TO, OUTBOX

TIMEOUT = 30  # seconds, for any one subprocess

#: Data that must survive ``show --json`` exactly: unicode, floats, nesting, null.
ODD_DATA = {"text": 'héllo \u2028 "quoted"\n', "n": 0.1, "big": 2**53, "list": [None, True]}


def tidelog(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``python -m runtime ARGS`` to completion and capture its output."""
    return subprocess.run(
        [sys.executable, "-m", "runtime", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def make_db(tmp_path: Path) -> Path:
    """A small tidelog database: session ``chat`` (3 events) then ``notes`` (1 event)."""
    db = tmp_path / "app.db"
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
    finally:
        store.close()
    return db


def db_state(db: Path) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]], int]:
    """Sessions, events and leases as stored (read with apsw, read-only)."""
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        sessions = list(conn.execute("SELECT * FROM sessions ORDER BY id"))
        events = list(conn.execute("SELECT * FROM events ORDER BY sid, seq"))
        leases = conn.execute("SELECT count(*) FROM leases").fetchone()
        assert leases is not None
        return sessions, events, int(leases[0])
    finally:
        conn.close()


# -- demo --------------------------------------------------------------------------------


@pytest.mark.slow
def test_demo_runs_crash_recovery_snapshot_and_tail(tmp_path: Path) -> None:
    """`tidelog demo` exits 0 and reports re-ran, unknown, replay, snapshot, tail, sent once."""
    db = tmp_path / "demo.db"
    proc = tidelog("demo", "--db", str(db), cwd=tmp_path)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    out = proc.stdout
    for text in [
        "finished support-ada",
        "finished billing-bob",
        "finished docs-cy",
        "host died: return code -9 (SIGKILL)",
        "checkpoint of nightly-1: status=running",
        "run nightly-1 resumed",
        "re-ran  (idempotent, started before the crash): write_file",
        "unknown (not idempotent, started before the crash): send_email",
        "TOOL_OUTCOME_UNKNOWN",
        "I will check the outbox before resending",
        "ran     (fresh call): check_outbox",
        "summary: re-ran write_file; unknown send_email; ran fresh check_outbox",
        "replay: running nightly-1 again",
        "finish_reason=None, model requests=0",
        "the snapshot still reads as_of_seq=",
        "tail seq=",
        "tidelog.segment",
        f"the crashed run's email {CRASH_SUBJECT!r} was sent exactly once",
        "demo finished: every step checked",
    ]:
        assert text in out, f"missing {text!r} in:\n{out}"
    outbox = (tmp_path / "demo-workspace" / OUTBOX).read_text().splitlines()
    assert outbox.count(f"{CRASH_TO}\t{CRASH_SUBJECT}") == 1
    assert "Traceback" not in proc.stderr


def test_demo_refuses_an_existing_database(tmp_path: Path) -> None:
    """`tidelog demo --db` on an existing file exits 2 and leaves the file alone."""
    db = make_db(tmp_path)
    before = db.read_bytes()
    proc = tidelog("demo", "--db", str(db), cwd=tmp_path)
    assert proc.returncode == 2
    assert "already exists" in proc.stderr
    assert db.read_bytes() == before


# -- ls, show, tail ----------------------------------------------------------------------


def test_ls_lists_sessions_most_recent_first(tmp_path: Path) -> None:
    """`ls` prints a table of sessions (most recent first); `--json` gives the exact infos."""
    db = make_db(tmp_path)
    proc = tidelog("ls", str(db), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["ID", "HEAD", "UPDATED", "HEADER"]
    assert [line.split()[0] for line in lines[1:]] == ["notes", "chat"]
    assert '{"user":"ada"}' in lines[2]

    proc = tidelog("ls", str(db), "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    infos = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [(i["id"], i["head"], i["header"]) for i in infos] == [
        ("notes", 1, {}),
        ("chat", 3, {"user": "ada"}),
    ]


def test_show_prints_a_table_of_events(tmp_path: Path) -> None:
    """`show` prints one row per event: seq, time, kind, run_id and short data."""
    db = make_db(tmp_path)
    proc = tidelog("show", str(db), "chat", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["SEQ", "TIME", "KIND", "RUN_ID", "DATA"]
    assert len(lines) == 4
    seq, _date, _time, kind, run_id, data = lines[1].split(maxsplit=5)
    assert (seq, kind, run_id, data) == ("1", "user", "r1", '{"text":"hi"}')
    assert lines[3].split()[3:5] == ["odd", "-"]


def test_show_json_round_trips_the_data(tmp_path: Path) -> None:
    """`show --json` prints exact events, one per line; --since and --limit select them."""
    db = make_db(tmp_path)
    proc = tidelog("show", str(db), "chat", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    store = SqliteStore(db)
    try:
        stored = store.read("chat")
    finally:
        store.close()
    assert events == [
        {
            "session_id": e.session_id,
            "seq": e.seq,
            "ts": e.ts,
            "kind": e.kind,
            "run_id": e.run_id,
            "data": e.data,
        }
        for e in stored
    ]
    assert events[2]["data"] == ODD_DATA

    proc = tidelog("show", str(db), "chat", "--json", "--since", "1", "--limit", "1", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert [json.loads(line)["seq"] for line in proc.stdout.splitlines()] == [2]


def test_tail_without_follow_prints_and_exits(tmp_path: Path) -> None:
    """`tail` without -f prints the events after --since and exits 0."""
    db = make_db(tmp_path)
    proc = tidelog("tail", str(db), "chat", "--since", "1", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["2", "3"]
    assert "assistant" in lines[0]


def test_read_commands_change_nothing_and_leave_no_lease(tmp_path: Path) -> None:
    """ls, show and tail write nothing: sessions, events and the lease table are unchanged."""
    db = make_db(tmp_path)
    before = db_state(db)
    for args in (["ls"], ["show", "chat"], ["show", "chat", "--json"], ["tail", "chat"]):
        proc = tidelog(args[0], str(db), *args[1:], cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
    assert db_state(db) == before
    assert before[2] == 0


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
async def test_tail_follow_sees_other_process_commits(tmp_path: Path, signum: int) -> None:
    """`tail -f` prints an event committed later by another process, then exits 0 on a signal."""
    db = make_db(tmp_path)
    command = [sys.executable, "-m", "runtime", "tail", str(db), "chat", "-f", "--json"]
    seen: list[dict[str, object]] = []
    buffer = b""

    async def read_until(proc: trio.Process, seq: int) -> None:
        nonlocal buffer
        assert proc.stdout is not None
        while not any(e["seq"] == seq for e in seen):
            chunk = await proc.stdout.receive_some()
            assert chunk, f"tail -f ended early; saw {seen}"
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            seen.extend(json.loads(line) for line in lines)

    def append_elsewhere() -> None:
        store = SqliteStore(db)
        try:
            store.append("chat", [NewEvent("late", {"from": "another process"})])
        finally:
            store.close()

    with trio.fail_after(TIMEOUT), (tmp_path / "stderr.txt").open("wb") as stderr:
        async with trio.open_nursery() as nursery:
            run = functools.partial(
                trio.run_process, command, stdout=subprocess.PIPE, stderr=stderr, check=False
            )
            proc: trio.Process = await nursery.start(run)
            await read_until(proc, 3)
            await trio.to_thread.run_sync(append_elsewhere)
            await read_until(proc, 4)
            proc.send_signal(signum)
            returncode = await proc.wait()
    assert [e["seq"] for e in seen] == [1, 2, 3, 4]
    assert seen[3]["data"] == {"from": "another process"}
    assert returncode == 0
    assert "Traceback" not in (tmp_path / "stderr.txt").read_text()


# -- errors ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args", [["ls"], ["show", "chat"], ["tail", "chat"], ["tail", "chat", "-f"]]
)
def test_missing_file_is_reported_and_not_created(tmp_path: Path, args: list[str]) -> None:
    """A missing database file: a message, exit 2, and the file is still missing."""
    db = tmp_path / "missing.db"
    proc = tidelog(args[0], str(db), *args[1:], cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"tidelog: no such database file: {db}"
    assert not db.exists()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["show", "tail"])
def test_missing_session_is_reported(tmp_path: Path, command: str) -> None:
    """A session that does not exist: a message naming it, exit 2, no traceback."""
    db = make_db(tmp_path)
    proc = tidelog(command, str(db), "nobody", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"tidelog: no session 'nobody' in {db}"


def test_foreign_sqlite_file_is_refused_untouched(tmp_path: Path) -> None:
    """A SQLite file of another application: 'not a tidelog database', exit 2, bytes unchanged."""
    db = tmp_path / "other.db"
    with closing(sqlite3.connect(db)) as conn:
        conn.execute("CREATE TABLE t(x)")
        conn.commit()
    before = db.read_bytes()
    for args in (["ls"], ["show", "x"]):
        proc = tidelog(args[0], str(db), *args[1:], cwd=tmp_path)
        assert proc.returncode == 2
        assert "not a tidelog database" in proc.stderr
        assert "Traceback" not in proc.stderr
    assert db.read_bytes() == before


def test_random_bytes_file_is_refused(tmp_path: Path) -> None:
    """A file of random bytes: 'corrupt ... not a database', exit 2, bytes unchanged."""
    db = tmp_path / "noise.db"
    db.write_bytes(random.Random(5).randbytes(8192))
    before = db.read_bytes()
    proc = tidelog("show", str(db), "chat", cwd=tmp_path)
    assert proc.returncode == 2
    assert "corrupt file, or not a database at all" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert db.read_bytes() == before


def test_empty_file_is_refused_and_stays_empty(tmp_path: Path) -> None:
    """An empty file is not turned into a database by a read command: exit 2, still empty."""
    db = tmp_path / "empty.db"
    db.touch()
    proc = tidelog("ls", str(db), cwd=tmp_path)
    assert proc.returncode == 2
    assert "not a tidelog database" in proc.stderr
    assert db.stat().st_size == 0


def test_console_script_is_installed(tmp_path: Path) -> None:
    """The `tidelog` console script next to the interpreter runs the same command line."""
    script = Path(sys.executable).parent / "tidelog"
    proc = subprocess.run(
        [str(script), "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT
    )
    assert proc.returncode == 0, proc.stderr
    assert "{demo,ls,show,tail,fork,rewind}" in proc.stdout


def test_fork_and_rewind_commands(tmp_path: Path) -> None:
    """`tidelog fork` makes an independent child; `tidelog rewind` cuts a conversation;
    a taken target and a missing source give a clear message and status 2."""
    import trio

    from runtime import UserMessage, open_runtime

    db = tmp_path / "f.db"

    async def seed() -> None:
        async with open_runtime(db) as rt:
            for n in range(3):
                await rt.history.append("chat", [UserMessage(f"m{n}")], run_id=f"r{n}")

    trio.run(seed)
    forked = tidelog("fork", str(db), "chat", "alt", "--at", "4", cwd=tmp_path)
    assert forked.returncode == 0, forked.stderr
    assert "forked 'alt' from 'chat' at seq 4" in forked.stdout
    again = tidelog("fork", str(db), "chat", "alt", cwd=tmp_path)
    assert again.returncode == 2 and "already exists" in again.stderr
    missing = tidelog("fork", str(db), "nope", "other", cwd=tmp_path)
    assert missing.returncode == 2 and "no session 'nope'" in missing.stderr
    rewound = tidelog("rewind", str(db), "chat", "--keep", "1", cwd=tmp_path)
    assert rewound.returncode == 0 and "2 entries removed" in rewound.stdout

    async def check() -> None:
        async with open_runtime(db) as rt:
            assert await rt.history.load("chat") == [UserMessage("m0")]
            assert await rt.history.load("alt") == [UserMessage("m0"), UserMessage("m1")]

    trio.run(check)
