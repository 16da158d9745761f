"""The JSONL store's own rules: file names, the file format, torn tails versus
corruption, rollback of failed writes and fsyncs, durability barriers, format refusal,
forks by reference and index-served reads (the contract itself: the conformance suite)."""

from __future__ import annotations

import errno
import json
import os
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from stores import (
    AppendOp,
    ConflictError,
    GroupOp,
    JsonlStore,
    NewEvent,
    StoreCorruptError,
    StoreIOError,
    UnsupportedFormatError,
    prepare_events,
)
from stores.jsonl import _files as jsonl_files
from stores.jsonl import _index as jsonl_index
from stores.jsonl import _writers as jsonl_writers
from stores.jsonl._format import file_stem, stem_id


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def store(root: Path) -> Iterator[JsonlStore]:
    handle = JsonlStore(root)
    yield handle
    handle.close()


def session_file(root: Path, session_id: str) -> Path:
    return root / "sessions" / f"{file_stem(session_id)}.jsonl"


def batches(store: JsonlStore, session_id: str, sizes: list[int]) -> None:
    for n, size in enumerate(sizes):
        store.append(session_id, [NewEvent("k", {"batch": n, "k": k}) for k in range(size)])


@pytest.fixture
def io_seam() -> Iterator[type[jsonl_files._IO]]:
    """Restores the I/O seam after a test replaced its calls."""
    saved = (jsonl_files.IO.write, jsonl_files.IO.fsync, jsonl_files.IO.truncate)
    yield jsonl_files._IO
    jsonl_files.IO.write, jsonl_files.IO.fsync, jsonl_files.IO.truncate = saved


# -- names and format ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "session_id",
    ["../etc/passwd", ".", "..", "A", "a", "ünï/🎉", "con", "a%41", "x" * 256, "中" * 256],
)
def test_file_names_are_safe_and_reversible(session_id: str) -> None:
    """A stem is lower-case ASCII without separators or dots; short ones decode back, long
    ones end with a hash (their id is read from the header)."""
    stem = file_stem(session_id)
    assert stem.isascii()
    assert "/" not in stem
    assert "\\" not in stem
    assert "." not in stem
    assert stem.lower() == stem.replace("%", "%").lower()
    assert len(stem) <= 120
    if "~" in stem:
        assert stem_id(stem) is None
    else:
        assert stem_id(stem) == session_id


def test_ids_differing_in_case_or_long_prefix_get_distinct_names() -> None:
    """ "A" and "a" map to names that differ in more than case; long ids with one prefix
    stay apart (the hash)."""
    assert file_stem("A").lower() != file_stem("a").lower()
    assert file_stem("x" * 255 + "1") != file_stem("x" * 255 + "2")


def test_header_record_comes_first(store: JsonlStore, root: Path) -> None:
    """The first line names the session, format 4 and its lineage; events follow, one line
    each with its own CRC-32, the last of a batch with its commit mark."""
    store.create("s", {"title": "t"})
    store.append("s", [NewEvent("k", 1, run_id="r"), NewEvent("k", 2)])
    lines = session_file(root, "s").read_bytes().split(b"\n")
    header = json.loads(lines[0])
    assert (header["tidelog"], header["format"], header["id"]) == ("session", 4, "s")
    assert header["header"] == {"title": "t"}
    assert header["parent"] is None
    first, second = json.loads(lines[1]), json.loads(lines[2])
    assert (first["seq"], first["run_id"], "end" in first) == (1, "r", False)
    assert (second["seq"], second["end"]) == (2, 2)
    for line in lines[1:3]:
        checked = line[: line.rindex(b',"crc":')]
        assert json.loads(line)["crc"] == zlib.crc32(checked)
    assert lines[3] == b""


# -- torn tails and corruption -------------------------------------------------------------


def test_partial_last_line_is_not_served_and_next_writer_truncates_it(
    store: JsonlStore, root: Path
) -> None:
    """A torn tail (an unfinished batch: whole lines without a commit mark, then a cut
    line) is never served; the next writer truncates it, durably, and writes after it."""
    batches(store, "s", [2, 1])
    path = session_file(root, "s")
    good = path.stat().st_size
    with path.open("ab") as f:
        f.write(b'{"seq":4,"ts":1.0,"kind":"k","data":1}\n{"seq":5,"ts":1.0,"ki')
    reader = JsonlStore(root)
    try:
        assert reader.head("s") == 3
        assert [e.seq for e in reader.read("s")] == [1, 2, 3]
        writer = JsonlStore(root)  # another process's view: a fresh registry would re-read
        writer.close()
        store.close()
        again = JsonlStore(root)
        try:
            assert again.append("s", [NewEvent("k", "after")]) == 4
            assert path.read_bytes()[good:].count(b"\n") == 1
            assert [e.data for e in reader.read("s", since_seq=3)] == ["after"]
        finally:
            again.close()
    finally:
        reader.close()


def test_damaged_last_batch_counts_as_torn(store: JsonlStore, root: Path) -> None:
    """A last batch whose checksum fails cannot be told from a torn write: it is not served."""
    batches(store, "s", [1, 2])
    path = session_file(root, "s")
    data = bytearray(path.read_bytes())
    data[-12] ^= 0x01  # inside the last line
    path.write_bytes(bytes(data))
    reader = JsonlStore(root)
    try:
        assert reader.head("s") == 1
    finally:
        reader.close()


@pytest.mark.parametrize("damage", ["flip", "gap", "garbage"])
def test_damage_inside_committed_region_is_corruption(root: Path, damage: str) -> None:
    """A damaged, missing or unparsable record of a synced batch followed by a later
    commit mark raises StoreCorruptError naming the file and the byte offset, on reads and
    writes alike."""
    store = JsonlStore(root, synchronous="full")
    batches(store, "s", [2, 1, 3])
    store.close()
    path = session_file(root, "s")
    lines = path.read_bytes().split(b"\n")
    offset = len(lines[0]) + 1 + len(lines[1]) + 1 + len(lines[2]) + 1  # batch 2's line
    if damage == "flip":
        lines[3] = lines[3].replace(b'"batch":1', b'"batch":7')
    elif damage == "gap":
        del lines[3]
    else:
        lines[3] = b"\x00\x00\x00 not json"
    path.write_bytes(b"\n".join(lines))
    store = JsonlStore(root)
    try:
        for call in (
            lambda: store.read("s"),
            lambda: store.head("s"),
            lambda: store.append("s", [NewEvent("k")]),
        ):
            with pytest.raises(StoreCorruptError) as info:
                call()
            assert str(path) in str(info.value)
            assert f"byte {offset}" in str(info.value)
    finally:
        store.close()


def test_damage_past_the_last_flush_is_a_torn_tail(root: Path) -> None:
    """synchronous="normal": a record damaged after the last flush barrier, with later
    whole batches, was never durable: the session reads up to the barrier, and the next
    writer drops the rest and continues there."""
    store = JsonlStore(root)
    batches(store, "s", [2])
    store.sync()
    batches(store, "s", [1, 3])
    store.close()
    path = session_file(root, "s")
    lines = path.read_bytes().split(b"\n")
    lines[3] = lines[3].replace(b'"batch":0', b'"batch":7')  # the first unsynced batch
    path.write_bytes(b"\n".join(lines))
    store = JsonlStore(root)
    try:
        assert store.head("s") == 2
        assert store.append("s", [NewEvent("k")]) == 3
        assert store.check_integrity() == (True, "ok")
    finally:
        store.close()


# -- failed writes and fsyncs ---------------------------------------------------------------


def _failing(error: int, after: Callable[..., object] | None = None) -> Callable[..., Any]:
    def call(*args: Any) -> Any:
        if after is not None:
            after(*args)
        raise OSError(error, os.strerror(error))

    return call


@pytest.mark.usefixtures("io_seam")
def test_failed_write_is_truncated_back_and_retry_leaves_no_gap(
    store: JsonlStore, root: Path
) -> None:
    """A write that fails half way (ENOSPC) raises StoreIOError, the file is truncated
    back, and the retry gets the next seq."""
    store.append("s", [NewEvent("k", 0)])
    size = session_file(root, "s").stat().st_size
    jsonl_files.IO.write = _failing(errno.ENOSPC, lambda fd, data: os.write(fd, bytes(data)[:10]))
    with pytest.raises(StoreIOError):
        store.append("s", [NewEvent("k", 1), NewEvent("k", 2)])
    assert session_file(root, "s").stat().st_size == size
    jsonl_files.IO.write = os.write
    assert store.append("s", [NewEvent("k", 1)]) == 2
    assert [e.data for e in store.read("s")] == [0, 1]


@pytest.mark.usefixtures("io_seam")
@pytest.mark.parametrize("leased", [False, True], ids=["unleased", "leased"])
def test_short_writes_continue_and_a_failing_rest_is_cut_back(
    store: JsonlStore, root: Path, leased: bool
) -> None:
    """A write that takes only part of a batch is continued to the end (the batch lands
    whole, read back exact); if the rest then fails, the file is cut back to before the
    batch and a retry lands once. Leased or not (the usual append's own path)."""
    owner = "me" if leased else None
    if owner is not None:
        store.acquire_lease("s", owner, ttl=60, holder="test")
    one = tuple(prepare_events([NewEvent("k", 0)]))
    assert store.write_batch([AppendOp("s", one, owner=owner)]) == [1]
    sizes: list[int] = []

    def short(fd: int, data: bytes) -> int:
        sizes.append(len(data))
        return os.write(fd, bytes(data)[:7])

    jsonl_files.IO.write = short
    two = tuple(prepare_events([NewEvent("k", {"n": 1})]))
    assert store.write_batch([AppendOp("s", two, expected_head=1, owner=owner)]) == [2]
    assert len(sizes) > 2  # it took several writes
    size = session_file(root, "s").stat().st_size
    calls = iter([True])
    jsonl_files.IO.write = lambda fd, data: (
        os.write(fd, bytes(data)[:7]) if next(calls, False) else _failing(errno.ENOSPC)()
    )
    three = tuple(prepare_events([NewEvent("k", 3)]))
    with pytest.raises(StoreIOError):
        store.write_batch([AppendOp("s", three, expected_head=2, owner=owner)])
    assert session_file(root, "s").stat().st_size == size
    jsonl_files.IO.write = os.write
    assert store.write_batch([AppendOp("s", three, expected_head=2, owner=owner)]) == [3]
    assert [e.data for e in store.read("s")] == [0, {"n": 1}, 3]
    assert store.check_integrity() == (True, "ok")


@pytest.mark.usefixtures("io_seam")
def test_a_leased_session_created_by_a_failed_batch_is_created_again(
    store: JsonlStore, root: Path
) -> None:
    """A batch that created a leased session and then failed removes the file and
    forgets its index: the resend creates the session again, in a file that stays (not
    in the removed one), and it reads back from another handle."""
    store.acquire_lease("s", "me", ttl=60, holder="test")
    one = tuple(prepare_events([NewEvent("k", 1)]))
    calls = iter(range(100))
    jsonl_files.IO.write = lambda fd, data: (
        os.write(fd, data) if next(calls) != 1 else _failing(errno.ENOSPC)()
    )
    ops = [AppendOp("s", one, expected_head=0, owner="me"), AppendOp("t", one)]
    with pytest.raises(StoreIOError):  # s created, then t's write fails: undone whole
        store.write_batch(ops)
    assert not session_file(root, "s").exists()
    jsonl_files.IO.write = os.write
    resend = [AppendOp("s", one, expected_head=0, owner="me", retry=True)]
    assert store.write_batch(resend) == [1]
    assert store.write_batch([AppendOp("s", one, expected_head=1, owner="me")]) == [2]
    other = JsonlStore(root)
    try:
        assert [e.data for e in other.read("s")] == [1, 1]
    finally:
        other.close()


def test_a_leased_session_created_by_a_failed_group_is_created_again(
    store: JsonlStore, root: Path
) -> None:
    """A group that created a leased session and failed on a later member is undone with
    the file: the next append creates the session again, readable from another handle."""
    store.acquire_lease("s", "me", ttl=60, holder="test")
    one = tuple(prepare_events([NewEvent("k", 1)]))
    group = GroupOp((AppendOp("s", one, owner="me"), AppendOp("s", one, expected_head=0)))
    [failed] = store.write_batch([group])
    assert isinstance(failed, ConflictError)
    assert not session_file(root, "s").exists()
    assert store.write_batch([AppendOp("s", one, expected_head=0, owner="me")]) == [1]
    other = JsonlStore(root)
    try:
        assert [e.data for e in other.read("s")] == [1]
    finally:
        other.close()


@pytest.mark.usefixtures("io_seam")
def test_failed_fsync_in_full_mode_rolls_the_batch_back(root: Path) -> None:
    """synchronous="full": an fsync failure fails the batch whole (every session of it
    truncated back) and a retry lands once."""
    store = JsonlStore(root, synchronous="full")
    try:
        store.append("a", [NewEvent("k", 0)])
        store.append("b", [NewEvent("k", 0)])
        sizes = {s: session_file(root, s).stat().st_size for s in "ab"}
        jsonl_files.IO.fsync = _failing(errno.EIO)
        ops = [
            AppendOp(s, tuple(prepare_events([NewEvent("k", 1)])), expected_head=1) for s in "ab"
        ]
        with pytest.raises(StoreIOError):
            store.write_batch(ops)
        assert {s: session_file(root, s).stat().st_size for s in "ab"} == sizes
        jsonl_files.IO.fsync = os.fsync
        assert store.write_batch(ops) == [2, 2]
    finally:
        store.close()


@pytest.mark.usefixtures("io_seam")
def test_failed_rollback_reports_both_errors(root: Path) -> None:
    """When the truncate that undoes a failed fsync fails too, both are reported, and the
    next write reads the file again (the batch stands: a resend with retry lands once)."""
    store = JsonlStore(root, synchronous="full")
    try:
        store.append("s", [NewEvent("k", 0)])
        jsonl_files.IO.fsync = _failing(errno.EIO)
        jsonl_files.IO.truncate = _failing(errno.EROFS)
        events = tuple(prepare_events([NewEvent("k", 1)]))
        with pytest.raises(StoreIOError) as info:
            store.write_batch([AppendOp("s", events, expected_head=1)])
        text = str(info.value) + " ".join(getattr(info.value, "__notes__", []))
        assert "Input/output error" in text
        assert "Read-only file system" in text
        jsonl_files.IO.fsync, jsonl_files.IO.truncate = os.fsync, os.ftruncate
        assert store.write_batch([AppendOp("s", events, expected_head=1, retry=True)]) == [2]
        assert store.head("s") == 2
    finally:
        store.close()


@pytest.mark.usefixtures("io_seam")
def test_fsyncs_per_level(root: Path) -> None:
    """normal: a commit does not fsync, the barrier fsyncs what was written since the last
    one (and the directory of a new file); full: every commit fsyncs."""
    normal = JsonlStore(root)
    calls: list[int] = []

    def counted(fd: int) -> None:
        calls.append(fd)

    jsonl_files.IO.fsync = counted
    normal.append("s", [NewEvent("k")])
    assert len(calls) == 1  # a new file is fsynced before its name is published
    calls.clear()
    normal.append("s", [NewEvent("k")])
    normal.append("s", [NewEvent("k")])
    assert calls == []
    normal.sync()
    assert len(calls) == 2  # the file, the sessions directory (a name was added)
    normal.sync()
    assert len(calls) == 2  # nothing new: no fsync
    normal.close()
    full = JsonlStore(root, synchronous="full")
    full.append("s", [NewEvent("k")])
    full.append("s", [NewEvent("k")])
    assert len(calls) == 4
    full.close()


# -- formats ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content", [b'{"tidelog":"session","format":99}\n', b"hello\n", b"\x00\x01"]
)
def test_newer_or_foreign_session_file_refused_untouched(
    store: JsonlStore, root: Path, content: bytes
) -> None:
    """A session file of a newer format, or not a tidelog file, raises
    UnsupportedFormatError and is left byte for byte as it was, writes included."""
    path = session_file(root, "s")
    path.write_bytes(content)
    with pytest.raises(UnsupportedFormatError):
        store.read("s")
    with pytest.raises(UnsupportedFormatError):
        store.append("s", [NewEvent("k")])
    assert path.read_bytes() == content


def test_foreign_directory_and_newer_store_refused_untouched(tmp_path: Path) -> None:
    """A non-empty directory without the marker, or a marker of a newer format, is refused
    and nothing in it changes."""
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(UnsupportedFormatError):
        JsonlStore(foreign)
    assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt"]
    newer = tmp_path / "newer"
    newer.mkdir()
    (newer / "tidelog-jsonl.json").write_text('{"tidelog":"jsonl-store","format":2}')
    with pytest.raises(UnsupportedFormatError):
        JsonlStore(newer)
    assert sorted(p.name for p in newer.iterdir()) == ["tidelog-jsonl.json"]


# -- forks and reads ---------------------------------------------------------------------------


def test_fork_links_the_parent_file_instead_of_copying(store: JsonlStore, root: Path) -> None:
    """A fork's file holds only its header: it reads its prefix through a hard link to the
    parent's file, which survives the parent's truncate and delete."""
    batches(store, "p", [50] * 4)
    store.fork("p", "c", at_seq=120)
    parent = session_file(root, "p")
    assert parent.stat().st_nlink == 2
    assert session_file(root, "c").stat().st_size < 1024
    before = store.read("c")
    store.truncate("p", 10)
    store.delete("p")
    assert store.read("c") == before
    assert len(before) == 120
    store.delete("c")
    assert list((root / "bases").iterdir()) == []


def test_read_of_the_newest_events_reads_only_their_lines(
    store: JsonlStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once a handle has indexed a long session, reading its last 50 events reads those
    lines and the new ones only, never the whole file."""
    for n in range(20):
        store.append("s", [NewEvent("k", {"n": n, "i": i, "pad": "x" * 100}) for i in range(1000)])
    assert store.head("s") == 20_000
    read_bytes: list[int] = []
    real = jsonl_index.read_exact

    def counting(fd: int, size: int, offset: int, path: str) -> bytes:
        read_bytes.append(size)
        return real(fd, size, offset, path)

    monkeypatch.setattr(jsonl_index, "read_exact", counting)
    store.append("s", [NewEvent("k", "new")])
    read_bytes.clear()
    events = store.read("s", limit=50, from_end=True)
    assert [e.seq for e in events] == list(range(19_952, 20_002))
    assert sum(read_bytes) < 50 * 250


def test_group_of_unknown_sessions_creates_them_together(store: JsonlStore, root: Path) -> None:
    """A group creating sessions leaves no intent or backup behind once committed."""
    ops = tuple(AppendOp(s, tuple(prepare_events([NewEvent("k")]))) for s in ("x", "y"))
    assert store.write_batch([GroupOp(ops)]) == [2]
    assert store.head("x") == store.head("y") == 1
    assert list((root / "intents").iterdir()) == []


def test_group_then_failing_op_commits_the_group(store: JsonlStore, root: Path) -> None:
    """A group followed in its batch by an op that fails alone still reaches its commit
    point: no intent stays behind for a later writer (any process) to roll back."""
    one = tuple(prepare_events([NewEvent("k")]))
    store.write_batch([AppendOp(s, one) for s in ("x", "y", "z")])
    group = GroupOp((AppendOp("x", one), AppendOp("y", one)))
    results = store.write_batch([group, AppendOp("z", one, expected_head=9)])
    assert results[0] == 2
    assert isinstance(results[1], ConflictError)
    assert list((root / "intents").iterdir()) == []
    other = JsonlStore(root)
    try:
        assert other.write_batch([AppendOp(s, one) for s in ("x", "y")]) == [3, 3]
    finally:
        other.close()


def test_writer_indexes_of_recent_sessions_are_kept(
    store: JsonlStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without leases, a session written again is not read again while its writer index
    is kept: up to KEEP_WRITERS of them, the least recently written closed first."""
    monkeypatch.setattr(jsonl_writers, "KEEP_WRITERS", 8)
    one = tuple(prepare_events([NewEvent("k")]))
    names = [f"s{i}" for i in range(8)]
    store.write_batch([AppendOp(s, one) for s in names])
    opened: list[str] = []
    real = jsonl_index.FileIndex.open.__func__  # type: ignore[attr-defined]

    def counting(cls: type[jsonl_index.FileIndex], /, path: str, **kwargs: Any) -> Any:
        opened.append(Path(path).stem)
        return real(cls, path, **kwargs)

    monkeypatch.setattr(jsonl_index.FileIndex, "open", classmethod(counting))
    assert store.write_batch([AppendOp(s, one) for s in names]) == [2] * 8
    assert opened == []  # all kept: none read again
    store.write_batch([AppendOp("s0", one)])  # s0 is now the most recently written
    store.write_batch([AppendOp("t0", one)])  # past the bound: the least recent are closed
    opened.clear()
    assert store.write_batch([AppendOp("s0", one), AppendOp("s7", one)]) == [4, 3]
    assert opened == []
    assert store.write_batch([AppendOp("s1", one)]) == [3]
    assert opened == ["s1"]
    assert store.check_integrity() == (True, "ok")


def test_keep_writers_follows_the_descriptor_limit() -> None:
    """The bound on kept writer indexes is an eighth of the descriptor limit, 64..1024."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    expected = 1024 if soft == resource.RLIM_INFINITY else max(64, min(1024, soft // 8))
    assert jsonl_writers._keep_writers() == expected
