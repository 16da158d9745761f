"""The JSONL store's safety at its edges: damaged headers say they are damaged, leases of
long (hashed-name) session ids are listed, and ``tidelog check`` runs while another
process writes the store."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from stores import JsonlStore, NewEvent, StoreCorruptError, UnsupportedFormatError
from stores.jsonl._format import file_stem

WORKER = str(Path(__file__).with_name("jsonl_worker.py"))
ROOT = Path(__file__).resolve().parents[2]


def spawn(*args: str) -> subprocess.Popen[str]:
    paths = [str(ROOT), os.environ.get("PYTHONPATH", "")]
    env = {"PYTHONPATH": os.pathsep.join(p for p in paths if p), "PATH": "/usr/bin:/bin"}
    return subprocess.Popen(
        [sys.executable, WORKER, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


@pytest.fixture
def holder(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[Path, str]]:
    """A store whose session (``request.param``, else a 200-character id) another process
    holds the lease of."""
    root = tmp_path / "store"
    JsonlStore(root).close()
    long_id = getattr(request, "param", "x" * 200)
    child = spawn("hold", str(root), long_id)
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "held"
        yield root, long_id
    finally:
        child.kill()
        child.communicate()


# -- damaged headers --------------------------------------------------------------------------


@pytest.mark.parametrize("size", [1, 10, 40, -1])
def test_cut_header_is_corrupt_not_foreign(tmp_path: Path, size: int) -> None:
    """A session file cut inside its header record (``truncate -s 40``) is
    StoreCorruptError naming the file, for reads and writes, and left as it is."""
    root = tmp_path / "s"
    store = JsonlStore(root)
    store.append("s", [NewEvent("k", {"i": 1})])
    store.close()
    path = root / "sessions" / "s.jsonl"
    data = path.read_bytes()
    cut = data[: data.index(b"\n") + size] if size < 0 else data[:size]
    path.write_bytes(cut)
    store = JsonlStore(root)
    try:
        with pytest.raises(StoreCorruptError, match=r"s\.jsonl"):
            store.read("s")
        with pytest.raises(StoreCorruptError, match=r"s\.jsonl"):
            store.append("s", [NewEvent("k")])
        ok, why = store.check_integrity()
        assert not ok
        assert "s.jsonl" in why
    finally:
        store.close()
    assert path.read_bytes() == cut


@pytest.mark.parametrize("at", [3, 25, 60])
def test_damaged_header_is_corrupt_not_foreign(tmp_path: Path, at: int) -> None:
    """A byte of the header record overwritten makes it StoreCorruptError."""
    root = tmp_path / "s"
    store = JsonlStore(root)
    store.append("s", [NewEvent("k", {"i": 1})])
    store.close()
    path = root / "sessions" / "s.jsonl"
    data = bytearray(path.read_bytes())
    data[at] = ord("#")
    path.write_bytes(bytes(data))
    store = JsonlStore(root)
    try:
        with pytest.raises(StoreCorruptError, match="header"):
            store.read("s")
    finally:
        store.close()


def test_damaged_compressed_header_frame_is_corrupt(tmp_path: Path) -> None:
    """A compressed file whose header frame fails its checksum is StoreCorruptError."""
    pytest.importorskip("zstandard")
    root = tmp_path / "z"
    store = JsonlStore(root, compress=True)
    store.append("s", [NewEvent("k", {"i": 1})])
    store.close()
    path = root / "sessions" / "s.jsonl"
    data = bytearray(path.read_bytes())
    data[12] ^= 0xFF
    path.write_bytes(bytes(data))
    store = JsonlStore(root)
    try:
        with pytest.raises(StoreCorruptError):
            store.read("s")
    finally:
        store.close()


def test_foreign_file_stays_unsupported(tmp_path: Path) -> None:
    """A file that never was a tidelog session file stays UnsupportedFormatError."""
    root = tmp_path / "s"
    store = JsonlStore(root)
    try:
        (root / "sessions" / "s.jsonl").write_bytes(b'{"name":"mine"}\n')
        with pytest.raises(UnsupportedFormatError):
            store.read("s")
    finally:
        store.close()


# -- leases of long ids ---------------------------------------------------------------------


@pytest.mark.slow
def test_list_leases_lists_long_ids_of_this_and_another_process(
    holder: tuple[Path, str],
) -> None:
    """A 200-character id (a hashed file name) held by another process, and one held by
    this process (before its file exists), are both listed."""
    root, theirs = holder
    assert "~" in file_stem(theirs)
    mine = "y" * 200
    store = JsonlStore(root)
    try:
        store.acquire_lease(mine, "me", ttl=60.0, holder="me")
        leases = {lease.session_id: lease for lease in store.list_leases()}
        assert set(leases) == {theirs, mine}
        assert leases[mine].owner == "me"
        assert "child" in leases[theirs].holder
        assert [lease.session_id for lease in store.list_leases(prefix="x")] == [theirs]
    finally:
        store.close()


# -- tidelog check while another process writes ------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("holder", ["s", "x" * 200], indirect=True)
def test_check_runs_while_another_process_holds_a_session(holder: tuple[Path, str]) -> None:
    """``tidelog check DIR`` while another process holds a session's kernel lock (an
    infinite lease expiry) reports the live writer instead of crashing."""
    root, theirs = holder
    done = subprocess.run(
        [sys.executable, "-m", "runtime.cli", "check", str(root)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=root.parent,
    )
    assert "Traceback" not in done.stderr, done.stderr
    assert "OverflowError" not in done.stderr
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert "held while that process runs" in done.stdout
    assert theirs in done.stdout


# -- creation killed before the marker -----------------------------------------------------------


@pytest.mark.slow
def test_creation_killed_before_its_marker_is_completed(tmp_path: Path) -> None:
    """A store creation SIGKILLed after its sub-directories, before its marker, leaves a
    directory that the next open completes (a crashed ``tidelog import`` can be re-run);
    a directory holding anything else stays foreign."""
    root = tmp_path / "store"
    child = spawn("create-store", str(root), "store directories made")
    _, err = child.communicate(timeout=60)
    assert child.returncode == -signal.SIGKILL, err
    assert not (root / "tidelog-jsonl.json").exists()
    assert (root / "sessions").is_dir()
    store = JsonlStore(root)
    try:
        assert store.append("s", [NewEvent("k")]) == 1
    finally:
        store.close()
    assert (root / "tidelog-jsonl.json").exists()
    other = tmp_path / "other"
    (other / "sessions").mkdir(parents=True)
    (other / "sessions" / "notes.txt").write_text("mine")
    with pytest.raises(UnsupportedFormatError):
        JsonlStore(other)
    assert not (other / "tidelog-jsonl.json").exists()
    assert sorted(p.name for p in other.iterdir()) == ["sessions"]


def test_directory_of_empty_store_subdirectories_is_completed(tmp_path: Path) -> None:
    """What a creation killed before its marker leaves (the sub-directories, empty, and the
    marker's temporary file) opens as a new store."""
    root = tmp_path / "store"
    for sub in ("sessions", "locks", "bases", "projections", "intents", "tmp"):
        (root / sub).mkdir(parents=True)
    (root / "tmp" / "0123abcd.tmp").write_bytes(b'{"tidelog":')
    store = JsonlStore(root)
    try:
        assert store.append("s", [NewEvent("k")]) == 1
        assert store.check_integrity() == (True, "ok")
    finally:
        store.close()


# -- read-only readers and groups killed before their commit point ----------------------------

#: The group steps of ``jsonl_worker.py group`` (an append to a, a replace of b's tail, a
#: delete of c, the creation of d), and whether a kill there leaves the group committed.
GROUP_KILLS = {
    "member applied: a": False,
    "member applied: c": False,
    "members synced": False,
    "intent removed": True,
}


def _group_state(store: JsonlStore) -> tuple[list[str], dict[str, list[object]]]:
    ids = [info.id for info in store.list_sessions()]
    return ids, {s: [e.data for e in store.read(s)] for s in ("a", "b", "c", "d")}


@pytest.mark.slow
@pytest.mark.parametrize("step", list(GROUP_KILLS))
def test_read_only_reader_applies_the_group_commit_rule(tmp_path: Path, step: str) -> None:
    """A group write SIGKILLed before its commit point is not seen by a read-only handle
    (reads, heads, the listing, check_integrity: the state before the group, what the next
    writer rolls back to); killed after it, the group is seen whole."""
    root = tmp_path / "store"
    store = JsonlStore(root)
    for session_id in ("a", "b", "c"):
        store.append(session_id, [NewEvent("g", {"tag": "old", "i": i}) for i in range(3)])
    before = _group_state(store)
    store.close()
    child = spawn("group", str(root), step)
    _, err = child.communicate(timeout=60)
    assert child.returncode == -signal.SIGKILL, err
    reader = JsonlStore(root, read_only=True)
    try:
        seen = _group_state(reader)
        heads = {s: reader.head(s) for s in ("a", "b", "c", "d")}
        assert reader.check_integrity() == (True, "ok")
    finally:
        reader.close()
    writer = JsonlStore(root)  # the writer's rule: rolls an uncommitted group back
    try:
        after = _group_state(writer)
    finally:
        writer.close()
    assert seen == after, (step, seen, after)
    assert heads == {s: len(events) for s, events in after[1].items()}
    assert (after == before) is not GROUP_KILLS[step]


@pytest.mark.slow
def test_export_of_a_killed_group_copies_what_committed(tmp_path: Path) -> None:
    """``tidelog export`` of a store whose group write was SIGKILLed before its commit
    point dumps the sessions as they were before the group."""
    root = tmp_path / "store"
    store = JsonlStore(root)
    for session_id in ("a", "b", "c"):
        store.append(session_id, [NewEvent("g", {"tag": "old", "i": i}) for i in range(3)])
    store.close()
    child = spawn("group", str(root), "members synced")
    _, err = child.communicate(timeout=60)
    assert child.returncode == -signal.SIGKILL, err
    done = subprocess.run(
        [sys.executable, "-m", "runtime.cli", "export", str(root)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert '"new"' not in done.stdout
    assert done.stdout.count('"old"') == 9
