"""``tidelog ls``, ``show`` and ``tail`` as real subprocesses: the three output formats,
paging with the cursor, the windows of show and tail, and following another process."""

from __future__ import annotations

import functools
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from cli_support import ODD_DATA, TIMEOUT, big_db, make_db, tidelog

from runtime import NewEvent, SqliteStore, StoredEvent
from stores import AppendOp, prepare_events


def _stored(db: Path, session_id: str) -> list[StoredEvent]:
    store = SqliteStore(db, read_only=True)
    try:
        return store.read(session_id)
    finally:
        store.close()


def _event_json(e: StoredEvent) -> dict[str, object]:
    return {
        "session_id": e.session_id,
        "seq": e.seq,
        "ts": e.ts,
        "kind": e.kind,
        "run_id": e.run_id,
        "data": e.data,
    }


# -- ls -----------------------------------------------------------------------------------


def test_ls_lists_sessions_by_id_in_three_formats(tmp_path: Path) -> None:
    """`ls` prints a table by id (a fork shows its parent), `--json` one document that
    json.loads reads whole, `--jsonl` one session per line; internal sessions only with
    --internal."""
    db = make_db(tmp_path)
    proc = tidelog("ls", str(db), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["ID", "HEAD", "UPDATED", "PARENT", "HEADER"]
    assert [line.split()[0] for line in lines[1:]] == ["alt", "chat", "notes"]
    assert lines[1].split()[4] == "chat@2"

    document = json.loads(tidelog("ls", str(db), "--json", cwd=tmp_path).stdout)
    assert document["next"] is None
    assert [(s["id"], s["head"], s["parent"]) for s in document["sessions"]] == [
        ("alt", 2, {"id": "chat", "seq": 2}),
        ("chat", 3, None),
        ("notes", 1, None),
    ]
    assert document["sessions"][1]["header"] == {"user": "ada"}

    proc = tidelog("ls", str(db), "--jsonl", "--internal", cwd=tmp_path)
    ids = [json.loads(line)["id"] for line in proc.stdout.splitlines()]
    assert ids == ["alt", "chat", "notes", "tidelog/archive/a1"]


def test_ls_pages_through_20k_sessions(tmp_path: Path) -> None:
    """On 20,000 sessions, `ls --limit N --after ID` pages through every session exactly
    once (the JSON document gives the next cursor); --prefix and --since-updated
    filter; the text form says how to go on."""
    db = tmp_path / "many.db"
    store = SqliteStore(db)
    one = tuple(prepare_events([NewEvent("k", 1)]))
    store.write_batch([AppendOp(f"s{n:05d}", one) for n in range(20_000)])
    store.close()
    seen: list[str] = []
    cursor: list[str] = []
    for _ in range(5):
        proc = tidelog("ls", str(db), "--limit", "5000", "--json", *cursor, cwd=tmp_path)
        document = json.loads(proc.stdout)
        seen += [s["id"] for s in document["sessions"]]
        if document["next"] is None:
            break
        cursor = ["--after", document["next"]]
    assert seen == [f"s{n:05d}" for n in range(20_000)]
    proc = tidelog("ls", str(db), "--prefix", "s1999", "--jsonl", cwd=tmp_path)
    assert [json.loads(x)["id"] for x in proc.stdout.splitlines()] == [
        f"s1999{n}" for n in range(10)
    ]
    proc = tidelog("ls", str(db), "--limit", "2", cwd=tmp_path)
    assert len(proc.stdout.splitlines()) == 3
    assert "go on with --after s00001" in proc.stderr
    assert tidelog("ls", str(db), "--since-updated", "2000-01-01", "--limit", "0", cwd=tmp_path)
    later = tidelog("ls", str(db), "--since-updated", "2999-01-01", cwd=tmp_path)
    assert later.returncode == 0
    assert later.stdout.strip() == f"no sessions in {db}"


def test_ls_sort_updated(tmp_path: Path) -> None:
    """`ls --sort updated` lists the most recently updated first; --after needs the id
    order and says so."""
    db = make_db(tmp_path)
    store = SqliteStore(db)
    store.append("chat", [NewEvent("late", None)])
    store.close()
    proc = tidelog("ls", str(db), "--sort", "updated", "--jsonl", cwd=tmp_path)
    assert next(json.loads(x)["id"] for x in proc.stdout.splitlines()) == "chat"
    refused = tidelog("ls", str(db), "--sort", "updated", "--after", "a", cwd=tmp_path)
    assert refused.returncode == 2
    assert "--after pages in id order only" in refused.stderr


# -- show ---------------------------------------------------------------------------------


def test_show_prints_a_table_of_events(tmp_path: Path) -> None:
    """`show` prints a header and one line per event: seq, time, kind, run_id, data."""
    db = make_db(tmp_path)
    proc = tidelog("show", str(db), "chat", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["SEQ", "TIME", "KIND", "RUN_ID", "DATA"]
    assert len(lines) == 4
    seq, _date, _time, kind, run_id, data = lines[1].split(maxsplit=5)
    assert (seq, kind, run_id, data) == ("1", "user", "r1", '{"text":"hi"}')
    assert lines[3].split()[3:5] == ["odd", "-"]
    assert "\\u2028" in lines[3]  # a line separator in the data stays on its line


def test_show_json_and_jsonl_are_exact(tmp_path: Path) -> None:
    """`show --jsonl` prints the exact events, one per line; `show --json` one document
    with the session, the snapshot's seq and the events; --since, --until and -n select
    the window."""
    db = make_db(tmp_path)
    stored = _stored(db, "chat")
    proc = tidelog("show", str(db), "chat", "--jsonl", cwd=tmp_path)
    assert [json.loads(line) for line in proc.stdout.splitlines()] == [
        _event_json(e) for e in stored
    ]
    document = json.loads(tidelog("show", str(db), "chat", "--json", cwd=tmp_path).stdout)
    assert document["session"]["id"] == "chat"
    assert document["as_of_seq"] == 3
    assert document["events"] == [_event_json(e) for e in stored]
    assert document["events"][2]["data"] == ODD_DATA
    for window, seqs in [
        (["--since", "1", "-n", "1"], [2]),
        (["--until", "2"], [1, 2]),
        (["--since", "1", "--until", "3"], [2, 3]),
        (["-n", "0"], []),
        (["--since", "9"], []),
    ]:
        proc = tidelog("show", str(db), "chat", "--jsonl", *window, cwd=tmp_path)
        assert [json.loads(line)["seq"] for line in proc.stdout.splitlines()] == seqs, window


# -- tail ---------------------------------------------------------------------------------


def test_tail_shows_the_last_events(tmp_path: Path) -> None:
    """`tail` prints the last 10 events by default, `-n N` the last N, `-n all` all of
    the window; --since and --until bound the window; no header line."""
    db = big_db(tmp_path / "t.db", 25)

    def seqs(*args: str) -> list[int]:
        proc = tidelog("tail", str(db), "big", *args, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        return [int(line.split()[0]) for line in proc.stdout.splitlines()]

    assert seqs() == list(range(16, 26))
    assert seqs("-n", "3") == [23, 24, 25]
    assert seqs("-n", "all", "--since", "20") == [21, 22, 23, 24, 25]
    assert seqs("--until", "12", "-n", "2") == [11, 12]
    assert seqs("--since", "22", "-n", "10") == [23, 24, 25]
    assert seqs("-n", "0") == []
    document = json.loads(tidelog("tail", str(db), "big", "-n", "2", "--json", cwd=tmp_path).stdout)
    assert [e["seq"] for e in document["events"]] == [24, 25]


def test_tail_refuses_what_it_cannot_do(tmp_path: Path) -> None:
    """-f with --until, and -f with --json (a document -f never finishes), are refused
    with the flags named."""
    db = make_db(tmp_path)
    proc = tidelog("tail", str(db), "chat", "-f", "--until", "2", cwd=tmp_path)
    assert proc.returncode == 2
    assert "drop --until or -f" in proc.stderr
    proc = tidelog("tail", str(db), "chat", "-f", "--json", cwd=tmp_path)
    assert proc.returncode == 2
    assert "use --jsonl" in proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
async def test_tail_follow_sees_other_process_commits(tmp_path: Path, signum: int) -> None:
    """`tail -f --jsonl` prints the last events, then an event committed later by
    another process, then exits 0 on a signal."""
    db = make_db(tmp_path)
    command = [sys.executable, "-m", "runtime.cli", "tail", str(db), "chat", "-f", "--jsonl"]
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

    stderr_path = tmp_path.parent / f"{tmp_path.name}-stderr.txt"
    with trio.fail_after(TIMEOUT), stderr_path.open("wb") as stderr:
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
    assert "Traceback" not in stderr_path.read_text()
