"""The JSONL store across real processes: racing creators, kernel-lock leases and their
takeover after SIGKILL, files read by one process while another writes them, group
writes killed at every step (all or nothing after recovery), and format 1 migrations
killed at every step."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stores import (
    AppendOp,
    JsonlStore,
    NewEvent,
    OwnershipLostError,
    SessionOwnedError,
    prepare_events,
)

pytestmark = pytest.mark.slow

WORKER = str(Path(__file__).with_name("jsonl_worker.py"))
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).parent))
from jsonl_worker import GROUP_STEPS  # noqa: E402

from stores.jsonl._format1 import MIGRATION_STEPS  # noqa: E402

FIXTURE = Path(__file__).with_name("fixtures") / "jsonl-format1"


def spawn(*args: str) -> subprocess.Popen[str]:
    paths = [str(ROOT), os.environ.get("PYTHONPATH", "")]  # the caller's too (extras)
    env = {"PYTHONPATH": os.pathsep.join(p for p in paths if p), "PATH": "/usr/bin:/bin"}
    return subprocess.Popen(
        [sys.executable, WORKER, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def reap(child: subprocess.Popen[str]) -> None:
    """Kill (if still running) and reap a child, closing its pipes."""
    child.kill()
    child.communicate()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "store"
    JsonlStore(path).close()
    return path


def test_racing_creators_exactly_one_wins(root: Path, tmp_path: Path) -> None:
    """Two processes creating one id at the same moment: one wins, the other gets
    SessionExistsError; the file holds the winner's header."""
    for round_ in range(5):
        go = tmp_path / f"go{round_}"
        children = [spawn("create", str(root), f"id{round_}", str(go)) for _ in range(2)]
        time.sleep(0.3)
        go.touch()
        outs = sorted(child.communicate(timeout=30)[0].strip() for child in children)
        assert outs == ["exists", "won"], outs
        store = JsonlStore(root)
        try:
            stat = store.stat(f"id{round_}")
            assert stat is not None
            assert stat.head == 0
            assert "by" in stat.header
        finally:
            store.close()


def test_lease_is_a_kernel_lock_that_dies_with_its_process(root: Path) -> None:
    """While another process holds a session, this one can neither take its lease nor
    write it (even after the holder's ttl passed: a live holder keeps it); once the
    holder is SIGKILLed, the lease is taken at once."""
    child = spawn("hold", str(root), "s")
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "held"
        store = JsonlStore(root)
        prepared = tuple(prepare_events([NewEvent("k")]))
        try:
            time.sleep(0.05)  # the child's ttl (0.01 s) has passed
            with pytest.raises(SessionOwnedError) as info:
                store.acquire_lease("s", "me", ttl=10.0, holder="me")
            assert "child" in str(info.value)
            with pytest.raises(SessionOwnedError):
                store.append("s", [NewEvent("k")])
            [lost] = store.write_batch([AppendOp("s", prepared, owner="me")])
            assert isinstance(lost, OwnershipLostError)
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=10)
            started = time.monotonic()
            store.acquire_lease("s", "me", ttl=10.0, holder="me")
            assert time.monotonic() - started < 1.0
            assert store.append("s", [NewEvent("k")]) == 2
        finally:
            store.close()
    finally:
        reap(child)


@pytest.mark.parametrize("encoding", ["plain", "zstd"])
def test_reader_process_sees_whole_batches_while_another_writes(root: Path, encoding: str) -> None:
    """Reading a file (plain or zstd frames) while another process appends to it returns
    contiguous seqs made of whole batches, never an error; data_version changes as the
    writer commits (the child waits halfway until the reader has seen events, so a loaded
    machine still shows a version before, during and after)."""
    go = root.parent / f"go-{encoding}"
    store = JsonlStore(root)
    versions = {store.data_version()}
    child = spawn("append", str(root), "s", "400", encoding, str(go))
    try:
        last = 0
        while child.poll() is None or last == 0:
            versions.add(store.data_version())
            events = store.read("s")
            assert [e.seq for e in events] == list(range(1, len(events) + 1))
            assert len(events) >= last
            last = len(events)
            k = 0
            for event in events:
                data = event.data
                assert isinstance(data, dict)
                assert data["k"] == k
                k = 0 if k + 1 == data["of"] else k + 1
            assert k == 0, "a batch was served in part"
            tail = [e.seq for e in store.read("s", limit=3, from_end=True)]
            assert tail == list(range(tail[0], tail[0] + len(tail))) if tail else last == 0
            assert not tail or tail[-1] >= last
            if last:
                go.touch()
        assert child.wait(timeout=60) == 0
        versions.add(store.data_version())
        assert len(versions) > 2
        first = (root / "sessions" / "s.jsonl").read_bytes()[:4]
        assert first == (b"\x28\xb5\x2f\xfd" if encoding == "zstd" else b'{"ti')
    finally:
        store.close()
        reap(child)


def _seed(root: Path) -> None:
    store = JsonlStore(root)
    try:
        for session_id in ("a", "b", "c"):
            store.append(session_id, [NewEvent("g", {"tag": "old", "i": i}) for i in range(3)])
    finally:
        store.close()


def _state(store: JsonlStore) -> dict[str, list[object]]:
    return {s: [e.data for e in store.read(s)] for s in ("a", "b", "c", "d")}


@pytest.mark.parametrize("step", [*GROUP_STEPS, "never"])
def test_group_write_killed_at_every_step_is_all_or_nothing(tmp_path: Path, step: str) -> None:
    """A group write (append a, replace b's tail, delete c, create d) SIGKILLed at each of
    its steps is, once the store is opened again, either wholly applied (killed after its
    commit point) or not at all; nothing of the intent is left behind."""
    root = tmp_path / "store"
    _seed(root)
    before = _state(JsonlStore(root))
    child = spawn("group", str(root), step)
    out, err = child.communicate(timeout=60)
    if step == "never":
        assert child.returncode == 0, err
        assert out.strip() == "result 4", err
    else:
        assert child.returncode == -signal.SIGKILL, err
    store = JsonlStore(root)  # recovers unfinished groups
    try:
        after = _state(store)
        old = [{"tag": "old", "i": i} for i in range(3)]
        new = [{"tag": "new", "i": i} for i in range(3)]
        applied = {"a": old + new[:2], "b": old[:1] + new, "c": [], "d": new[:1]}
        committed = step in ("intent removed", "backups removed", "never")
        assert after == (applied if committed else before), (step, after)
        assert list((root / "intents").iterdir()) == []
        assert store.append("a", [NewEvent("k")]) == len(after["a"]) + 1
    finally:
        store.close()


@pytest.mark.parametrize("encoding", ["plain", "zstd"])
@pytest.mark.parametrize("step", [*MIGRATION_STEPS, "never"])
def test_migration_killed_at_every_step_loses_nothing(
    tmp_path: Path, step: str, encoding: str
) -> None:
    """A writer migrating a format 1 file, SIGKILLed at each step, leaves the source or its
    successor under the name (the same events either way) and the source byte-identical in
    migrated/; the next writer finishes the job and appends."""
    root = tmp_path / "legacy"
    shutil.copytree(FIXTURE, root)
    path = root / "sessions" / "chat.jsonl"
    source = path.read_bytes()
    reader = JsonlStore(root, read_only=True)
    old = [(e.seq, e.ts, e.kind, e.data, e.run_id) for e in reader.read("chat")]
    reader.close()
    child = spawn("migrate", str(root), "chat", step, encoding)
    out, err = child.communicate(timeout=60)
    if step == "never":
        assert (child.returncode, out.strip()) == (0, "head 7"), err
    else:
        assert child.returncode == -signal.SIGKILL, err
    store = JsonlStore(root)
    try:
        events = [(e.seq, e.ts, e.kind, e.data, e.run_id) for e in store.read("chat")]
        assert events[:6] == old
        assert len(events) == (7 if step == "never" else 6)
        assert store.append("chat", [NewEvent("k")]) == len(events) + 1
        assert path.read_bytes() != source
    finally:
        store.close()
    assert [p.read_bytes() for p in (root / "migrated").iterdir()] == [source]
