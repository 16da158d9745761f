"""``tidelog check``, ``backup`` and ``stats`` on real files: what check finds (and what
it tells to do), backups taken while another process writes, and the figures of stats."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import apsw
import trio
from cli_support import TIMEOUT, big_db, files, make_db, tidelog

from runtime import SqliteStore, open_runtime
from runtime.agents import RunHead, UserMessage, checkpoints, history
from stores._leases import local_holder
from stores.sqlite._schema import SCHEMA_VERSION


def _with_runs(db: Path) -> None:
    """`chat` with two runs and their checkpoints, and `gone`, whose conversation was
    deleted while its checkpoint stayed."""

    async def seed() -> None:
        async with open_runtime(db) as rt:
            for n in range(2):
                await history(rt).append("chat", [UserMessage(f"m{n}")], run_id=f"r{n}")
                head = RunHead("assistant", status="completed", session_id="chat")
                await checkpoints(rt).append(f"r{n}", [UserMessage(f"m{n}")], head)
            await history(rt).append("gone", [UserMessage("x")], run_id="g")
            await checkpoints(rt).append("g", [], RunHead("assistant", session_id="gone"))
            await rt.delete("gone")

    trio.run(seed)


def test_check_passes_a_healthy_database(tmp_path: Path) -> None:
    """A healthy file (forks included): exit 0, `ok`; --json is one document saying so;
    the check creates no file."""
    db = make_db(tmp_path)
    proc = tidelog("check", str(db), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().endswith("4 sessions: ok")
    document = json.loads(tidelog("check", str(db), "--json", cwd=tmp_path).stdout)
    assert document["ok"] is True
    assert document["findings"] == []
    assert document["schema_version"] == SCHEMA_VERSION
    assert document["sessions"] == 4
    assert files(tmp_path) == ["app.db"]


def test_check_finds_broken_lineage_orphans_and_says_what_to_do(tmp_path: Path) -> None:
    """An event a fork borrows, deleted behind the store's back, and a run checkpoint
    whose conversation is gone: exit 1, each finding named with its session and what to
    do; a live writer's lease is a note (who holds it), not a problem."""
    db = make_db(tmp_path)
    _with_runs(db)
    conn = apsw.Connection(str(db))
    conn.execute(
        "DELETE FROM events WHERE seq=1 AND sid=(SELECT sid FROM sessions WHERE id='chat')"
    )
    conn.close()
    store = SqliteStore(db)
    store.acquire_lease("notes", "owner", ttl=60.0, holder=local_holder())
    store.close()
    proc = tidelog("check", str(db), "--jsonl", cwd=tmp_path)
    assert proc.returncode == 1
    found = [json.loads(line) for line in proc.stdout.splitlines()]
    by = {(f["check"], f["session"]): f for f in found}
    assert by[("lineage", "chat")]["level"] == "error"
    assert by[("lineage", "chat")]["message"] == "seqs 1..7: 6 events stored of 7"
    assert "lent by 'chat'" in by[("lineage", "alt")]["message"]
    assert "tidelog backup" in by[("lineage", "alt")]["hint"]
    orphan = by[("checkpoints", "tidelog/run/g")]
    assert orphan["level"] == "warning"
    assert "'gone' is gone" in orphan["message"]
    assert "tidelog prune --orphaned-checkpoints" in orphan["hint"]
    lease = by[("lease", "notes")]
    assert lease["level"] == "note"
    assert local_holder() in lease["message"]
    text = tidelog("check", str(db), cwd=tmp_path)
    assert text.returncode == 1
    assert "problems" in text.stdout


def test_check_finds_a_damaged_file(tmp_path: Path) -> None:
    """Pages overwritten with garbage: SQLite's integrity check fails, exit 1 with what to
    do; --quick skips that check."""
    db = big_db(tmp_path / "d.db", 5000)
    data = bytearray(db.read_bytes())
    page = 4096
    data[-20 * page : -10 * page] = b"\xa5" * (10 * page)
    db.write_bytes(bytes(data))
    proc = tidelog("check", str(db), "--json", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    document = json.loads(proc.stdout)
    assert document["ok"] is False
    [integrity, *_] = [f for f in document["findings"] if f["level"] == "error"]
    assert integrity["check"] == "integrity"
    assert "integrity check failed" in integrity["message"]
    assert "restore the latest good backup" in integrity["hint"]
    quick = json.loads(tidelog("check", str(db), "--json", "--quick", cwd=tmp_path).stdout)
    assert "integrity check failed" not in json.dumps(quick)


_WRITER = textwrap.dedent(
    """
    import sys, time
    from runtime import NewEvent, SqliteStore
    store = SqliteStore(sys.argv[1])
    print("ready", flush=True)
    end = time.monotonic() + 30
    while time.monotonic() < end and not sys.stdin.closed:
        store.append("live", [NewEvent("tick", "x" * 2000)])
    """
)


def test_backup_while_another_process_writes(tmp_path: Path) -> None:
    """`backup` of a file another process keeps appending to: exit 0, the copy checked
    ok and consistent (every session gapless); an existing DEST is refused."""
    db = big_db(tmp_path / "a.db", 20_000)
    with subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(db)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as writer:
        assert writer.stdout is not None
        assert writer.stdout.readline() == "ready\n"
        try:
            proc = tidelog("backup", str(db), str(tmp_path / "copy.db"), cwd=tmp_path)
        finally:
            writer.kill()
    assert proc.returncode == 0, proc.stderr
    assert "checked: ok" in proc.stdout
    copy = SqliteStore(tmp_path / "copy.db", read_only=True)
    try:
        for info in copy.list_sessions():
            assert [e.seq for e in copy.read(info.id)] == list(range(1, info.head + 1))
        assert copy.head("big") == 20_000
    finally:
        copy.close()
    again = tidelog("backup", str(db), str(tmp_path / "copy.db"), cwd=tmp_path)
    assert again.returncode == 2
    assert "already exists" in again.stderr


def test_stats_figures(tmp_path: Path) -> None:
    """`stats` counts sessions (internal ones apart), events (and those stored: a fork
    shares its prefix), bytes and the WAL, ranks the largest sessions, names the live
    writers; --json holds the same."""
    db = make_db(tmp_path)
    store = SqliteStore(db)
    store.acquire_lease("chat", "owner", ttl=60.0, holder=local_holder())
    store.close()
    proc = tidelog("stats", str(db), "--json", cwd=tmp_path, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    stats = json.loads(proc.stdout)
    assert (stats["sessions"], stats["conversations"], stats["internal_sessions"]) == (4, 3, 1)
    assert (stats["events"], stats["stored_events"]) == (7, 5)
    assert stats["file_bytes"] == db.stat().st_size
    assert stats["wal_bytes"] == 0
    assert next(s["session_id"] for s in stats["largest"]) == "chat"
    assert stats["live_writers"] == [{"session": "chat", "holder": local_holder()}]
    text = tidelog("stats", str(db), cwd=tmp_path).stdout
    assert "events:       7 (5 stored" in text
    assert "LARGEST SESSIONS" in text
