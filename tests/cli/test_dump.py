"""``tidelog export`` and ``import``: lossless round trips (also as a hypothesis
property, between backends), idempotence, per-session conflicts, resuming after a
SIGKILL, Ctrl-C, and refusing damaged, foreign or newer dumps."""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
import trio
from cli_support import ODD_DATA, TIMEOUT, big_db, db_state, files, make_db, tidelog
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime import (
    JSON,
    MemoryStore,
    NewEvent,
    SessionInfo,
    SqliteStore,
    Store,
    StoredEvent,
    TidelogError,
    open_runtime,
)
from runtime.agents import (
    Entry,
    RunHead,
    ToolCall,
    ToolResult,
    UserMessage,
    checkpoints,
    history,
)
from runtime.cli._dump import export_runtime
from runtime.cli._load import ImportResult, import_dump
from runtime.cli._opening import StopFlag
from stores._leases import local_holder

Contents = dict[str, tuple[SessionInfo, tuple[StoredEvent, ...]]]


def contents(store: Store) -> Contents:
    """Everything a store holds, as its API shows it: each session's info and events."""
    return {info.id: (info, tuple(store.read(info.id))) for info in store.list_sessions()}


def file_contents(db: Path) -> Contents:
    store = SqliteStore(db, read_only=True)
    try:
        return contents(store)
    finally:
        store.close()


async def _agent_data(db: Path) -> None:
    """Conversations with runs, a checkpoint, a trimmed (archived) output, a fork, a
    rewound session and an empty one."""
    async with open_runtime(db) as rt:
        talk = history(rt)
        for n in range(3):
            entries: list[Entry] = [
                UserMessage(f"question {n} ünï"),
                ToolCall(f"c{n}", "read", {"path": "a" * 50}),
                ToolResult(f"c{n}", "x" * 900),
            ]
            await talk.append("chat", entries, run_id=f"run-{n}")
        await talk.trim_tool_results("chat", keep_chars=10)
        await checkpoints(rt).append(
            "run-9", [UserMessage("again")], RunHead("assistant", session_id="chat")
        )
        await rt.fork("chat", "chat-alt", at_seq=4)
        async with rt.open_session("cut") as w:
            await w.append([NewEvent("k", ODD_DATA), NewEvent("k", [1, 2.5, None])])
        await talk.append("cut", [UserMessage("kept")], run_id="r")
        async with rt.open_session("empty", header={"note": "nothing yet"}):
            pass


def test_round_trip_is_lossless_and_import_is_idempotent(tmp_path: Path) -> None:
    """export, import into a new file, export again: the same sessions (headers,
    times, lineage, internal ones) and events (with their commit times), the same dump
    record for record; a second import writes nothing at all."""
    source = tmp_path / "a.db"
    trio.run(_agent_data, source)
    dump = tmp_path / "a.jsonl"
    proc = tidelog("export", str(source), "-o", str(dump), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    target = tmp_path / "b.db"
    proc = tidelog("import", str(target), str(dump), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "conflicts" in proc.stdout
    assert ", 0 conflicts;" in proc.stdout
    original = file_contents(source)
    assert file_contents(target) == original
    assert any(sid.startswith("tidelog/run/") for sid in original)
    assert any(sid.startswith("tidelog/archive/") for sid in original)
    assert original["chat-alt"][0].parent == ("chat", 4)
    again = tidelog("export", str(target), cwd=tmp_path).stdout.splitlines()
    assert again[1:] == dump.read_text().splitlines()[1:]

    before = db_state(target)
    proc = tidelog("import", str(target), str(dump), "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["unchanged"] == len(original)
    assert report["events"] == 0
    assert {s["status"] for s in report["sessions"]} == {"unchanged"}
    assert db_state(target) == before


def test_conflicts_are_reported_per_session(tmp_path: Path) -> None:
    """Into a database that holds a different `chat`, a prefix of `notes` (an import cut
    short) and a session a live writer holds: `chat` and the held one are reported as
    conflicts and left untouched, `notes` is completed, the rest created; exit 1."""
    source = make_db(tmp_path)
    dump = tidelog("export", str(source), cwd=tmp_path).stdout
    target = tmp_path / "b.db"
    proc = tidelog("import", str(target), "-", cwd=tmp_path, stdin=dump)
    assert proc.returncode == 0
    store = SqliteStore(target)
    store.delete("chat")
    store.append("chat", [NewEvent("other", 1)])
    store.truncate("notes", 0)  # the prefix an interrupted import leaves
    store.acquire_lease("alt", "owner", ttl=60.0, holder=local_holder())  # this pid: alive
    store.close()
    proc = tidelog("import", str(target), "-", "--jsonl", cwd=tmp_path, stdin=dump)
    assert proc.returncode == 1
    results = {r["session_id"]: r for r in map(json.loads, proc.stdout.splitlines())}
    assert results["chat"]["status"] == "conflict"
    assert "another header" in results["chat"]["message"]
    assert results["alt"]["status"] == "conflict"
    assert "live writer" in results["alt"]["message"]
    assert (results["notes"]["status"], results["notes"]["events"]) == ("resumed", 1)
    assert results["tidelog/archive/a1"]["status"] == "unchanged"
    after = file_contents(target)
    assert [e.kind for e in after["chat"][1]] == ["other"]
    assert after["notes"] == file_contents(source)["notes"]


@attrs.frozen
class Big:
    """Five sessions of 20k events (``big``, ``big-1``...), their dump and contents."""

    db: Path
    dump: Path
    contents: Contents
    export_seconds: float


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Big:
    """The 100k-event source of the interruption tests, exported once (each test only
    reads the file and the dump)."""
    directory = tmp_path_factory.mktemp("big")
    source = big_db(directory / "a.db", 20_000, sessions=5)
    dump = directory / "a.jsonl"
    started = time.monotonic()
    assert tidelog("export", str(source), "-o", str(dump), cwd=directory).returncode == 0
    return Big(source, dump, file_contents(source), time.monotonic() - started)


@pytest.mark.slow
def test_sigkill_mid_import_then_a_rerun_completes_it(big: Big, tmp_path: Path) -> None:
    """An import of 100k events killed with SIGKILL part-way, then run again: the second
    run resumes the session it was in, creates the rest, and the result is exactly the
    source. (Prints the export and import times.)"""
    dump, exported = big.dump, big.export_seconds
    target = tmp_path / "b.db"
    with _import_under_way(target, dump) as proc:
        proc.send_signal(signal.SIGKILL)
    partial = file_contents(target)
    assert 0 < sum(len(events) for _, events in partial.values()) < 100_000
    started = time.monotonic()
    proc2 = tidelog("import", str(target), str(dump), "--json", cwd=tmp_path)
    imported = time.monotonic() - started
    assert proc2.returncode == 0, proc2.stderr
    statuses = {s["session_id"]: s["status"] for s in json.loads(proc2.stdout)["sessions"]}
    assert "resumed" in statuses.values()
    assert "created" in statuses.values()
    assert file_contents(target) == big.contents
    print(f"100k events: export {exported:.2f}s, import of the rest {imported:.2f}s")


@contextlib.contextmanager
def _import_under_way(target: Path, dump: Path) -> Iterator[subprocess.Popen[str]]:
    """`tidelog import TARGET DUMP` started in a subprocess, once its second session
    has events (so it is part-way)."""
    with subprocess.Popen(
        [sys.executable, "-m", "runtime.cli", "import", str(target), str(dump)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        deadline = time.monotonic() + TIMEOUT
        while not _has_events(target, "big-1"):
            assert time.monotonic() < deadline
            assert proc.poll() is None
            time.sleep(0.02)
        yield proc


def _has_events(db: Path, session_id: str) -> bool:
    """True once the import's writer has the file open and ``session_id`` has events."""
    if not db.exists() or not Path(f"{db}-wal").exists():
        return False
    try:
        store = SqliteStore(db, read_only=True)
    except TidelogError:  # caught while the importer creates the file
        return False
    try:
        return store.head(session_id) > 0
    finally:
        store.close()


@pytest.mark.slow
def test_ctrl_c_mid_import_leaves_no_session_half_imported(big: Big, tmp_path: Path) -> None:
    """SIGINT during an import: exit status 130, a message saying how far it got, and
    every session in the database is complete (the one in progress was removed); the
    same import run again completes it."""
    dump = big.dump
    target = tmp_path / "b.db"
    with _import_under_way(target, dump) as proc:
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 130, stderr
    assert "interrupted" in stderr
    assert "run the same import again" in stderr
    expected = big.contents
    for sid, (info, events) in file_contents(target).items():
        assert (info, events) == expected[sid], sid
    assert tidelog("import", str(target), str(dump), cwd=tmp_path).returncode == 0
    assert file_contents(target) == expected


@pytest.mark.slow
def test_ctrl_c_mid_export_leaves_no_file(big: Big, tmp_path: Path) -> None:
    """SIGINT during `export -o FILE`: exit 130 and neither FILE nor a partial file."""
    source = big.db
    out = tmp_path / "d.jsonl"
    with subprocess.Popen(
        [sys.executable, "-m", "runtime.cli", "export", str(source), "-o", str(out)],
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        deadline = time.monotonic() + TIMEOUT
        while not Path(f"{out}.partial").exists() or Path(f"{out}.partial").stat().st_size == 0:
            assert time.monotonic() < deadline
            assert proc.poll() is None
            time.sleep(0.01)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 130, stderr
    assert files(tmp_path) == []


def test_export_of_given_sessions_takes_their_checkpoints(tmp_path: Path) -> None:
    """`export DB chat` writes chat with its run checkpoints and archive, not the other
    conversations; a missing id is refused before anything is written."""
    source = tmp_path / "a.db"
    trio.run(_agent_data, source)
    proc = tidelog("export", str(source), "chat", cwd=tmp_path)
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    ids = [r["id"] for r in records if r.get("type") == "session"]
    assert ids[0] == "chat"
    assert "chat-alt" not in ids
    assert "cut" not in ids
    assert "tidelog/run/run-9" in ids
    assert any(i.startswith("tidelog/archive/") for i in ids)
    assert records[-1] == {"type": "end-of-dump", "sessions": len(ids)}
    missing = tidelog("export", str(source), "chat", "nobody", cwd=tmp_path)
    assert missing.returncode == 2
    assert missing.stdout == ""
    assert "no session 'nobody'" in missing.stderr


@pytest.mark.parametrize(
    ("dump", "message"),
    [
        ('{"format":"tidelog-dump","version":2}\n', "newer than this tidelog reads (1)"),
        ('{"hello":1}\n', "not a tidelog dump"),
        ("not json\n", "not JSON"),
        ('{"format":"tidelog-dump","version":NaN}\n', "NaN is not JSON"),
        ("", "the dump is empty"),
    ],
    ids=["newer", "foreign", "not-json", "nan", "empty"],
)
def test_unreadable_dumps_are_refused_creating_nothing(
    tmp_path: Path, dump: str, message: str
) -> None:
    """A newer, foreign, non-JSON or empty dump: exit 2, a message, no database made."""
    proc = tidelog("import", str(tmp_path / "new.db"), "-", cwd=tmp_path, stdin=dump)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert files(tmp_path) == []


def test_cut_dump_imports_the_whole_sessions_before_the_cut(tmp_path: Path) -> None:
    """A dump cut inside its third session: the two sessions before the cut are
    imported whole, nothing of the third; exit 2 with 'cut'."""
    source = make_db(tmp_path)
    lines = tidelog("export", str(source), cwd=tmp_path).stdout.splitlines()
    starts = [i for i, line in enumerate(lines) if '"type":"session"' in line]
    whole = [json.loads(lines[i])["id"] for i in starts[:2]]
    cut = "\n".join(lines[: starts[2] + 2]) + "\n"
    target = tmp_path / "b.db"
    proc = tidelog("import", str(target), "-", cwd=tmp_path, stdin=cut)
    assert proc.returncode == 2
    assert "cut" in proc.stderr
    imported = file_contents(target)
    assert sorted(imported) == sorted(whole)
    assert imported == {sid: file_contents(source)[sid] for sid in whole}


# -- the hypothesis property ------------------------------------------------------------

_IDS = st.text(st.sampled_from("ab/é🎉-"), min_size=1, max_size=4)
_DATA: st.SearchStrategy[JSON] = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=6),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
#: A session to make: id, header, events (kind, data, run_id), a seq to fork it at into
#: "<id>/fork", then a seq to truncate it to.
Spec = tuple[str, dict[str, JSON], list[tuple[str, JSON, str | None]], int | None, int | None]
_SESSION: st.SearchStrategy[Spec] = st.tuples(
    _IDS,
    st.dictionaries(st.text(max_size=3), _DATA, max_size=2),
    st.lists(st.tuples(st.sampled_from(["k", "tool"]), _DATA, st.none() | _IDS), max_size=6),
    st.none() | st.integers(0, 6),
    st.none() | st.integers(0, 6),
)
_unique = itertools.count()


async def _populate(store: Store, sessions: list[Spec]) -> None:
    async with open_runtime(store) as rt:
        for sid, header, events, fork_at, _ in sessions:
            async with rt.open_session(sid, header=header) as w:
                for kind, data, run_id in events:
                    await w.append([NewEvent(kind, data, run_id=run_id)])
            if fork_at is not None and fork_at <= len(events):
                await rt.fork(sid, sid + "/fork", at_seq=fork_at)
        for sid, _, events, _, cut in sessions:
            if cut is not None and cut < len(events):
                async with rt.open_session(sid) as w:
                    await w.truncate(cut)


def _round_trip(source: Store, target: Store) -> list[ImportResult]:
    out = io.StringIO()

    async def export() -> None:
        async with open_runtime(source) as rt:
            await export_runtime(rt, [], out)

    trio.run(export)
    lines = enumerate(out.getvalue().splitlines(keepends=True), start=1)
    next(lines)  # the header, checked by the command before it opens the database
    results: list[ImportResult] = []
    import_dump(target, lines, StopFlag(), results.append)
    return results


@settings(
    max_examples=25,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.lists(_SESSION, max_size=4, unique_by=lambda s: s[0]))
def test_round_trip_property_between_backends(tmp_path: Path, sessions: list[Spec]) -> None:
    """Property: any sessions -- odd ids, headers and data, run ids, forks, truncations
    -- exported from a MemoryStore and imported into a SQLite file, then exported from
    it into another MemoryStore, read back identical each time; importing again changes
    nothing."""
    memory = MemoryStore()
    trio.run(_populate, memory, sessions)
    path = tmp_path / f"p{next(_unique)}.db"
    sqlite = SqliteStore(path)
    try:
        assert {r.status for r in _round_trip(memory, sqlite)} <= {"created"}
        assert contents(sqlite) == contents(memory)
        again = MemoryStore()
        _round_trip(sqlite, again)
        assert contents(again) == contents(memory)
        assert {r.status for r in _round_trip(memory, sqlite)} <= {"unchanged"}
        assert contents(sqlite) == contents(memory)
    finally:
        sqlite.close()
        os.remove(path)
