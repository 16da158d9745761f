"""The JSONL store's persisted index (index/<stem>.idx): a new handle or process reads the
tail of a long session without scanning its file, and a sidecar that is stale, torn or
garbage is never trusted to serve data (reads return what a scan of the file returns)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from stores import JsonlStore, NewEvent, StoredEvent
from stores.jsonl import _index as jsonl_index
from stores.jsonl._sidecar import STEP

WORKER = str(Path(__file__).with_name("jsonl_worker.py"))
ROOT = Path(__file__).resolve().parents[2]


def fill(store: JsonlStore, batches: int, tag: str = "a", size: int = 100) -> None:
    for b in range(batches):
        store.append(
            "s",
            [NewEvent("k", {"t": tag, "b": b, "i": i, "p": "x" * 60}, run_id=f"{tag}{b % 3}")
             for i in range(size)],
        )  # fmt: skip


def scanned(root: Path) -> list[StoredEvent]:
    """What a scan of the file holds (no sidecar involved)."""
    copy = root.parent / f"{root.name}-scan"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(root, copy)
    shutil.rmtree(copy / "index")
    store = JsonlStore(copy, read_only=True)
    try:
        return store.read("s")
    finally:
        store.close()


def read_counting(root: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[list[StoredEvent], int]:
    """The last 50 events by a new handle, and how many bytes of the file it read."""
    read: list[int] = []
    real = jsonl_index.read_exact

    def counting(fd: int, size: int, offset: int, path: str) -> bytes:
        read.append(size)
        return real(fd, size, offset, path)

    monkeypatch.setattr(jsonl_index, "read_exact", counting)
    store = JsonlStore(root, read_only=True)
    try:
        return store.read("s", limit=50, from_end=True), sum(read)
    finally:
        store.close()
        monkeypatch.undo()


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "zstd"])
def test_new_handle_reads_the_tail_from_the_sidecar_not_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compress: bool
) -> None:
    """The writer keeps index/<stem>.idx: a new handle reading the last 50 events of a long
    session reads the sidecar, the unsaved tail and those lines, not the file."""
    root = tmp_path / "store"
    store = JsonlStore(root, compress=compress)
    fill(store, 300)
    store.sync()  # the sidecar trusts what its writer knew synced (a power cut keeps it)
    fill(store, 5, tag="late")  # and scans what it does not: here, less than a save step
    store.close()
    size = (root / "sessions" / "s.jsonl").stat().st_size
    assert (root / "index" / "s.idx").exists()
    events, read = read_counting(root, monkeypatch)
    assert [e.seq for e in events] == list(range(30_451, 30_501))
    assert events == scanned(root)[-50:]
    assert read < 3 * STEP < size
    reader = JsonlStore(root, read_only=True)
    try:
        assert reader.find_run("s", "a1") == (101, 29_900)
        assert reader.find_run("s", "late1") == (30_101, 30_500)
    finally:
        reader.close()


def test_sidecar_of_a_replaced_file_is_not_used(tmp_path: Path) -> None:
    """A sidecar saved for a file that a truncate since replaced (another inode) is
    ignored: reads return the new file's events."""
    root = tmp_path / "store"
    store = JsonlStore(root)
    fill(store, 50)
    old = (root / "index" / "s.idx").read_bytes()
    store.truncate("s", 10)
    fill(store, 50, tag="b")
    store.close()
    (root / "index" / "s.idx").write_bytes(old)
    reader = JsonlStore(root, read_only=True)
    try:
        assert reader.read("s") == scanned(root)
        assert reader.head("s") == 5_010
    finally:
        reader.close()


def test_sidecar_ahead_of_a_file_that_lost_its_tail_is_not_used(tmp_path: Path) -> None:
    """A file that lost a tail the sidecar had seen (a power loss before the barrier) and
    then got other batches past that point is read as it is, not as the sidecar says."""
    root = tmp_path / "store"
    store = JsonlStore(root)
    fill(store, 20)
    path = root / "sessions" / "s.jsonl"
    kept = path.stat().st_size
    fill(store, 20, tag="lost")
    store.close()
    ahead = (root / "index" / "s.idx").read_bytes()
    with path.open("r+b") as f:
        f.truncate(kept)
    store = JsonlStore(root)
    fill(store, 30, tag="new", size=90)
    store.close()
    (root / "index" / "s.idx").write_bytes(ahead)
    reader = JsonlStore(root, read_only=True)
    try:
        events = reader.read("s")
        assert events == scanned(root)
        assert {str(e.data["t"]) for e in events if isinstance(e.data, dict)} == {"a", "new"}
        assert len(events) == 20 * 100 + 30 * 90
    finally:
        reader.close()


@pytest.mark.parametrize("damage", ["torn", "flipped", "garbage", "empty", "zeros"])
def test_torn_or_damaged_sidecar_is_ignored_or_cut(tmp_path: Path, damage: str) -> None:
    """A sidecar cut short, with a flipped byte, garbage, empty or ending in zeros: reads
    return what the file holds, and the next writer saves a whole sidecar again."""
    root = tmp_path / "store"
    store = JsonlStore(root)
    fill(store, 40)
    store.close()
    side = root / "index" / "s.idx"
    data = bytearray(side.read_bytes())
    if damage == "torn":
        data = data[: len(data) - 100]
    elif damage == "flipped":
        data[len(data) // 2] ^= 0x10
    elif damage == "garbage":
        data = bytearray(b"\x00garbage" * 100)
    elif damage == "zeros":  # a tail of zeros, as a crash can leave
        data += bytes(4096)
    else:
        data = bytearray()
    side.write_bytes(bytes(data))
    reader = JsonlStore(root, read_only=True)
    try:
        assert reader.read("s") == scanned(root)
    finally:
        reader.close()
    writer = JsonlStore(root)
    fill(writer, 1, tag="more")
    writer.close()
    assert side.read_bytes() != bytes(data)
    reader = JsonlStore(root, read_only=True)
    try:
        assert reader.read("s") == scanned(root)
        assert reader.head("s") == 4_100
    finally:
        reader.close()


def test_writers_in_turn_in_two_processes_keep_the_sidecar_true(tmp_path: Path) -> None:
    """This process writes, a child process appends, this process writes again: the
    sidecar each leaves serves a new handle exactly what a scan of the file holds."""
    root = tmp_path / "store"
    store = JsonlStore(root)
    try:
        fill(store, 30)
        child = subprocess.run(
            [sys.executable, WORKER, "append", str(root), "s", "400"],
            capture_output=True,
            text=True,
            timeout=120,
            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        )
        assert child.returncode == 0, child.stderr
        fill(store, 30, tag="again")
    finally:
        store.close()
    reader = JsonlStore(root, read_only=True)
    try:
        assert reader.read("s") == scanned(root)
        assert reader.find_run("s", "again2") is not None
    finally:
        reader.close()


def test_a_never_flushed_session_is_scanned_past_its_synced_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session never flushed (synchronous="normal", no lease): the sidecar's chunks past
    what its writer knew synced are not trusted (a power cut may have lost pages under
    them), so a new handle scans the file from there and reads what a scan reads."""
    root = tmp_path / "store"
    store = JsonlStore(root)
    fill(store, 300)
    store.close()
    assert (root / "index" / "s.idx").exists()
    events, read = read_counting(root, monkeypatch)
    assert [e.seq for e in events] == list(range(29_951, 30_001))
    assert events == scanned(root)[-50:]
    assert read > (root / "sessions" / "s.jsonl").stat().st_size - STEP


@pytest.mark.parametrize("flush", ["flushed", "unflushed"])
@pytest.mark.parametrize("end", ["release", "close"])
def test_a_writer_leaving_saves_the_rest_of_the_index(tmp_path: Path, end: str, flush: str) -> None:
    """A writer releasing its lease, or closing while it holds it, leaves a sidecar that
    covers the whole file if it was flushed (a new handle then scans none of it); if not,
    what is not known synced is less than a save step, scanned by a new handle."""
    root = tmp_path / "store"
    store = JsonlStore(root)
    store.acquire_lease("s", "me", ttl=60, holder="test")
    fill(store, 250, size=1)  # less than one save's worth
    if flush == "flushed":
        store.sync()
    if end == "release":
        store.release_lease("s", "me")
    store.close()
    path = root / "sessions" / "s.jsonl"
    assert path.stat().st_size < STEP
    index = jsonl_index.FileIndex.open(str(path), sidecar=str(root / "index" / "s.idx"))
    assert index is not None
    try:
        covered = path.stat().st_size if flush == "flushed" else index.data_start
        assert (index.saved_end, index.end, index.head) == (covered, path.stat().st_size, 250)
    finally:
        index.close()


def test_a_leaving_writer_fsyncs_more_than_a_step_of_unsynced_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lease holder that wrote more than a save step since its last flush fsyncs the
    file when it releases, so the sidecar it leaves covers the whole file."""
    root = tmp_path / "store"
    store = JsonlStore(root)
    store.acquire_lease("s", "me", ttl=60, holder="test")
    fill(store, 300)
    store.release_lease("s", "me")
    store.close()
    events, read = read_counting(root, monkeypatch)
    assert [e.seq for e in events] == list(range(29_951, 30_001))
    assert events == scanned(root)[-50:]
    assert read < 3 * STEP


def test_a_flush_barrier_records_its_synced_point_in_the_sidecar(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session written without a lease and flushed last: the barrier appends its synced
    point to the sidecar (no line after it could prove it), so a new handle scans none
    of the file."""
    root = tmp_path / "store"
    store = JsonlStore(root)
    fill(store, 300)
    store.sync()
    store.close()
    events, read = read_counting(root, monkeypatch)
    assert [e.seq for e in events] == list(range(29_951, 30_001))
    assert events == scanned(root)[-50:]
    assert read < 3 * STEP
