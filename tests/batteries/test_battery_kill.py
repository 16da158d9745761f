"""Battery 1: kill -9. A writer process is SIGKILLed at random moments, over and over.

The child (``battery_writer.py write``) appends to several sessions with awaited
``append`` and with ``append_nowait`` + ``flush``, printing a line per acknowledgement.
After each kill the parent checks the database:

* every event acknowledged (awaited append returned, or flush returned) is present;
* each session's log is the gapless prefix ``1..head`` of what the writer intended (each
  event's data names its session and the seq it was meant to get), without duplicates;
* every batch is whole or absent (batches have several events);
* the integrity check passes;
* the lease is recoverable: a new writer opens every session at once (same host, dead
  pid), or -- for a writer pretending to be on another host -- as soon as its lease
  expired, and not before (on PostgreSQL: at once too, the server having released the
  dead writer's advisory lock).

It runs on a SQLite file, on JSONL directories (plain files, and zstd-compressed ones:
a torn last frame is repaired like a torn line) and on a PostgreSQL schema (when a server
is there).

Then scripted agent runs are killed at random moments and resumed to completion.
CI: 20 kills (+1 agent run); soak (``TIDELOG_SOAK=1``): 200 kills (+10 agent runs).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator
from pathlib import Path

import apsw
import pytest
import trio
from battery_support import child_env, contiguous, python_child, record, size
from helpers import num, text

from runtime import (
    SessionOwnedError,
    SqliteStore,
    Store,
    open_runtime,
)
from runtime.agents import ToolCall, ToolResult
from runtime.agents._history import SEGMENT_KIND
from runtime.agents._transcript import entry_from_stored
from stores import JsonlStore

pytestmark = pytest.mark.slow

SESSIONS = [f"s{i}" for i in range(3)]
#: Every REMOTE_EVERY-th writer pretends to live on another host (TTL takeover only).
REMOTE_EVERY = 10
REMOTE_TTL = 1.5
MASTER_SEED = 20261129


def parse_acks(path: Path) -> dict[str, int]:
    """The highest acknowledged head per session (complete lines only)."""
    acked: dict[str, int] = defaultdict(int)
    text = path.read_text(encoding="utf-8", errors="replace")
    for line in text.split("\n")[:-1]:  # the last element is "" or a torn line
        parts = line.split()
        if parts and parts[0] in ("A", "F"):
            acked[parts[1]] = max(acked[parts[1]], int(parts[2]))
    return acked


#: Where the battery writes: a SQLite file, a JSONL directory, or the URL of a PostgreSQL schema.
Target = Path | str


#: The JSONL directory whose writers compress (one zstd frame per batch).
ZSTD_DIR = "kill-zstd.jsonl"


@pytest.fixture(params=["sqlite", "jsonl", "jsonl-zstd", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Target:
    """The database of the battery, per backend (JSONL with plain or compressed files)."""
    if request.param == "sqlite":
        return tmp_path / "kill.db"
    if request.param.startswith("jsonl"):
        path = tmp_path / (ZSTD_DIR if request.param == "jsonl-zstd" else "kill.jsonl")
        path.mkdir()
        return path
    from pgtest import url_of

    return url_of(*request.getfixturevalue("pg_schema"))


def open_store(db: Target) -> Store:
    """A store on the battery's database (a SQLite file is integrity-checked first)."""
    if isinstance(db, Path) and db.is_dir():
        return JsonlStore(db)
    if isinstance(db, Path):
        store = SqliteStore(db, integrity_check_on_open=True)
        assert store.check_integrity() == (True, "ok")
        return store
    from stores import PostgresStore

    return PostgresStore.from_url(db)


def check_log(store: Store, sid: str, acked: int) -> int:
    """Check one session's log (see the module doc); return its head."""
    events = store.read(sid)
    seqs = [e.seq for e in events]
    assert contiguous(seqs), f"{sid}: seqs are not 1..n: {seqs[:20]}..."
    info = store.stat(sid)
    head = 0 if info is None else info.head
    assert head == len(events), f"{sid}: head {head} but {len(events)} events"
    assert head >= acked, f"{sid}: acknowledged up to {acked}, only {head} present"
    batches: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
    for e in events:
        data = e.data
        assert isinstance(data, dict), e
        assert e.kind == "b", f"{sid}: foreign event {e}"
        assert data["s"] == sid, f"{sid}: foreign event {e}"
        assert data["n"] == e.seq, f"{sid}: event meant for seq {data['n']} stored at {e.seq}"
        batches[text(e, "b")].append((e.seq, num(e, "k"), num(e, "of")))
    for batch, parts in batches.items():
        seq0, _, of = parts[0]
        assert [(s, k) for s, k, _ in parts] == [(seq0 + k, k) for k in range(of)], (
            f"{sid}: batch {batch} is not whole: {parts}"
        )
    return head


def _head(store: Store, sid: str) -> int:
    info = store.stat(sid)
    return 0 if info is None else info.head


def settled_check(store: Store, sid: str, acked: int, *, server: bool) -> int:
    """:func:`check_log`, on a server store checked again while the dead writer's last
    commit is still landing.

    A SIGKILLed client's PostgreSQL backend goes on with a statement it had received (a
    ``COMMIT`` included) until it next talks to the dead socket, so its last transaction
    may commit after the kill, between the check's ``read`` and ``stat``. A failed check
    is therefore retried only if the head moved meanwhile (the late commit landed) and at
    most a few times (one transaction per connection can be in flight); a failure on a
    head that did not move is reported as it is. A file store's writer writes nothing
    once it is reaped."""
    for attempt in range(5):
        before = _head(store, sid)
        try:
            return check_log(store, sid, acked)
        except AssertionError:
            if not server or attempt == 4 or _head(store, sid) == before:
                raise
    raise AssertionError("unreachable")


def verify(db: Target, acked: dict[str, int]) -> dict[str, int]:
    """Check every session after a kill; return the heads."""
    store = open_store(db)
    server = isinstance(db, str)
    try:
        return {
            sid: settled_check(store, sid, acked.get(sid, 0), server=server) for sid in SESSIONS
        }
    finally:
        store.close()


def lease_expiries(db: Path) -> dict[str, float]:
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return {row[0]: row[1] for row in conn.execute("SELECT id, expires FROM leases")}
    finally:
        conn.close()


async def open_all(db: Target) -> None:
    """Open every session for write at once (no retry) and close again: each writer
    starts at the committed head (nothing of the dead writer is pending)."""
    async with open_runtime(db) as rt:
        for sid in SESSIONS:
            async with rt.open_session(sid, mode="write") as w:
                assert await w.head() == w.committed_head


async def check_remote_lease(db: Path, killed_at: float) -> None:
    """A dead writer of 'another host' keeps its sessions until its lease expires."""
    expiries = lease_expiries(db)
    async with open_runtime(db) as rt:
        for sid, expires in expiries.items():
            if expires > time.time() + 0.2:
                with pytest.raises(SessionOwnedError):
                    async with rt.open_session(sid, mode="write"):
                        raise AssertionError(f"took over {sid} before its lease expired")
    latest = max(expiries.values(), default=0.0)
    await trio.sleep(max(0.0, latest - time.time()) + 0.1)
    assert time.time() - killed_at <= REMOTE_TTL + 5.0
    await open_all(db)


def read_text(path: Path) -> str:
    return path.read_text(errors="replace")


def is_started(out: Path) -> bool:
    """Has the agent run started (printed its ``S`` line)?"""
    return out.read_bytes().startswith(b"S")


def is_ready(out: Path) -> bool:
    """Has the writer opened its sessions (printed its ``R`` line)?"""
    return out.read_bytes().startswith(b"R ")


async def wait_ready(out: Path, proc: trio.Process, err: Path) -> None:
    with trio.fail_after(30):
        while not is_ready(out):  # another process's output file: polled
            if proc.returncode is not None:
                raise AssertionError(f"writer exited {proc.returncode}: {read_text(err)}")
            await trio.sleep(0.005)


@contextlib.asynccontextmanager
async def spawned(
    argv: list[str], stdout: Path | None, stderr: Path
) -> AsyncIterator[trio.Process]:
    """Run ``argv`` (stdout/stderr to files) for the block; killed and reaped at exit."""
    with (stdout or Path(os.devnull)).open("wb") as out, stderr.open("wb") as err:
        proc = await trio.lowlevel.open_process(argv, stdout=out, stderr=err, env=child_env())
    try:
        yield proc
    finally:
        with trio.CancelScope(shield=True):
            if proc.returncode is None:
                proc.kill()
            await proc.wait()


async def one_kill(tmp_path: Path, db: Target, cycle: int, rng: random.Random) -> dict[str, int]:
    remote = cycle % REMOTE_EVERY == REMOTE_EVERY - 1
    out, err = tmp_path / f"w{cycle}.out", tmp_path / f"w{cycle}.err"
    argv = python_child("battery_writer.py", "write", str(db), str(rng.randrange(1 << 30)))
    if remote:
        argv += ["--host", "elsewhere.invalid", "--lease-ttl", str(REMOTE_TTL)]
    if isinstance(db, Path) and db.name == ZSTD_DIR:
        argv.append("--compress")
    early = rng.random() < 0.15
    async with spawned(argv, out, err) as proc:
        if early:  # anywhere from interpreter start-up to the first appends
            await trio.sleep(rng.uniform(0.0, 0.8))
        else:
            await wait_ready(out, proc, err)
            await trio.sleep(rng.uniform(0.0, 0.35))
        assert proc.returncode is None, f"writer exited {proc.returncode}: {err.read_text()}"
        proc.send_signal(signal.SIGKILL)
        killed_at = time.time()
        assert await proc.wait() == -signal.SIGKILL
    assert "Traceback" not in err.read_text(), err.read_text()
    acked = parse_acks(out)
    heads = verify(db, acked)
    # A JSONL lock dies with its holder, "remote" or not; PostgreSQL takes any dead holder over.
    if remote and is_ready(out) and isinstance(db, Path) and db.suffix == ".db":
        await check_remote_lease(db, killed_at)
    else:
        await open_all(db)  # the dead holder (local, or on PostgreSQL any) is taken over at once
    out.unlink()
    err.unlink()
    return {"acked": sum(acked.values()), "stored": sum(heads.values())}


def check_agent_run(db: Target, workdir: Path, run_id: str, session: str) -> None:
    store = open_store(db)
    try:
        stored = store.read(session)
    finally:
        store.close()
    assert sum(1 for e in stored if e.kind == SEGMENT_KIND and e.run_id == run_id) == 1
    entries = [entry_from_stored(e) for e in stored if e.kind != SEGMENT_KIND]
    calls = [e.call_id for e in entries if isinstance(e, ToolCall)]
    results = Counter(e.call_id for e in entries if isinstance(e, ToolResult))
    assert sorted(calls) == ["c1", "c2", "c3", "c4", "c5"], calls
    assert all(results[c] == 1 for c in calls), results
    log = workdir / "executions.log"
    lines = log.read_text().splitlines() if log.exists() else []
    executions = Counter(line for line in lines if line.startswith(run_id + " "))
    for amount in (5, 7):  # a side effect never runs twice
        assert executions[f"{run_id} charge {amount}"] <= 1, executions


async def agent_cycle(tmp_path: Path, db: Target, k: int, rng: random.Random) -> bool:
    """Kill a scripted run at a random moment, resume it; True if the kill hit the run."""
    run_id, session = f"run-{k}", f"conversation-{k}"
    argv = python_child(
        "battery_writer.py", "agent", str(db), str(tmp_path), run_id, session,
        "--delay-seed", str(rng.randrange(1 << 30)),
    )  # fmt: skip
    out, err = tmp_path / f"agent{k}.out", tmp_path / f"agent{k}.err"
    async with spawned(argv, out, err) as proc:
        with trio.fail_after(30):
            while not is_started(out):  # another process's output file: polled
                assert proc.returncode is None, read_text(err)
                await trio.sleep(0.005)
        await trio.sleep(rng.uniform(0.0, 0.3))  # a run takes ~0.27 s here
        hit = proc.returncode is None
        proc.send_signal(signal.SIGKILL)
        rc = await proc.wait()
    assert rc in (0, -signal.SIGKILL), err.read_text()
    with trio.fail_after(60):
        resumed = await trio.run_process(
            python_child("battery_writer.py", "agent", str(db), str(tmp_path), run_id, session),
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=child_env(),
        )
    assert resumed.returncode == 0, resumed.stderr.decode()
    summary = json.loads(resumed.stdout.decode().strip().splitlines()[-1])
    assert summary["output"] == "done", summary
    check_agent_run(db, tmp_path, run_id, session)
    return hit


@pytest.mark.parametrize(("kills", "agent_runs"), [(size(20, 200), size(1, 10))])
async def test_sigkill_loses_no_acknowledged_event(
    tmp_path: Path, target: Target, kills: int, agent_runs: int
) -> None:
    """SIGKILL at random moments loses no acknowledged event, tears no batch, strands no lease
    (JSONL: its kernel locks die with the writer, "remote" writers included; PostgreSQL: a
    dead holder is taken over at once)."""
    db = target
    rng = random.Random(MASTER_SEED)
    acked = stored = 0
    for cycle in range(kills):
        counts = await one_kill(tmp_path, db, cycle, rng)
        acked, stored = counts["acked"], counts["stored"]
    before = verify(db, {})
    hits = 0
    for k in range(agent_runs):
        hits += await agent_cycle(tmp_path, db, k, rng)
    assert verify(db, before) == before  # the runs touched none of the writer's sessions
    backend = "postgres" if isinstance(db, str) else "jsonl" if db.is_dir() else "sqlite"
    if isinstance(db, Path) and db.name == ZSTD_DIR:
        backend = "jsonl-zstd"
        magic = b"\x28\xb5\x2f\xfd"
        written = [p for p in (db / "sessions").iterdir() if p.name.startswith("s")]
        assert written
        assert all(p.read_bytes().startswith(magic) for p in written)
    record(
        "kill",
        backend=backend,
        kills=kills,
        agent_runs=agent_runs,
        agent_runs_killed=hits,
        events_stored=stored,
        events_acknowledged_last=acked,
        events_lost=0,
    )
