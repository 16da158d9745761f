"""The JSONL store's format generations and encodings: format 2's per-record checksums,
format 1 files read as they are and migrated by their first writer (the source left
byte-identical), and zstd-compressed files (one checksummed frame per batch, a torn last
frame repaired like a torn line, a damaged earlier frame refused as corruption)."""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import zstandard

from stores import (
    JsonlStore,
    NewEvent,
    StoreCorruptError,
    StoredEvent,
    UnsupportedFormatError,
)
from stores.jsonl import _index as jsonl_index
from stores.jsonl._format import file_stem
from stores.jsonl._zstd import MAGIC, frame_size

FIXTURE = Path(__file__).with_name("fixtures") / "jsonl-format1"
ROOT = Path(__file__).resolve().parents[2]


def session_file(root: Path, session_id: str) -> Path:
    return root / "sessions" / f"{file_stem(session_id)}.jsonl"


def frames(path: Path) -> list[tuple[int, int]]:
    """``(offset, size)`` of every whole zstd frame of a file."""
    data = path.read_bytes()
    found, pos = [], 0
    while pos < len(data):
        n = frame_size(data, pos)
        if n <= 0:
            break
        found.append((pos, n))
        pos += n
    return found


def unzstd(path: Path) -> bytes:
    """A compressed file's content, decompressed frame after frame (what zstdcat prints)."""
    reader = zstandard.ZstdDecompressor().stream_reader(
        io.BytesIO(path.read_bytes()), read_across_frames=True
    )
    return bytes(reader.read())


def shape(events: list[StoredEvent]) -> list[tuple[object, ...]]:
    return [(e.seq, e.ts, e.kind, e.data, e.run_id) for e in events]


@pytest.fixture
def legacy(tmp_path: Path) -> Path:
    """A copy of a store written by tidelog's format 1 writer (a torn tail on "chat")."""
    root = tmp_path / "legacy"
    shutil.copytree(FIXTURE, root)
    return root


@pytest.fixture
def zroot(tmp_path: Path) -> Path:
    root = tmp_path / "z"
    JsonlStore(root, compress=True).close()
    return root


# -- format 2 ----------------------------------------------------------------------------------


def test_record_damaged_after_indexing_is_caught_on_the_read(tmp_path: Path) -> None:
    """A record that changes after a handle indexed its file (so the read is served from the
    index, without a scan) fails its own checksum: StoreCorruptError with file and offset."""
    store = JsonlStore(tmp_path / "s")
    try:
        for n in range(3):
            store.append("s", [NewEvent("k", {"n": n, "v": 1}) for _ in range(2)])
        assert len(store.read("s")) == 6
        path = session_file(tmp_path / "s", "s")
        data = path.read_bytes()
        offset = data.index(b'{"seq":3,')  # batch 1's first line
        path.write_bytes(data.replace(b'"n":1,"v":1}', b'"n":1,"v":7}', 1))
        with pytest.raises(StoreCorruptError) as info:
            store.read("s", since_seq=2)
        assert str(path) in str(info.value)
        assert f"byte {offset}" in str(info.value)
    finally:
        store.close()


# -- format 1 ----------------------------------------------------------------------------------


def test_format1_files_are_read_as_written(legacy: Path) -> None:
    """A format 1 store written by tidelog's first JSONL writer reads back whole (its torn
    tail not served), read-only and without a byte of it changing."""
    before = {p: p.read_bytes() for p in legacy.rglob("*") if p.is_file()}
    store = JsonlStore(legacy, read_only=True)
    try:
        events = store.read("chat")
        assert [(e.seq, e.kind, e.run_id) for e in events] == [
            (1, "user", "r1"),
            (2, "assistant", "r1"),
            (3, "tool", None),
            (4, "user", None),
            (5, "assistant", None),
            (6, "note", None),
        ]
        assert events[1].data == {"text": "héllo 🎉"}
        assert events[4].data == {"end": [1, 2], "crc": 5}
        assert store.find_run("chat", "r1") == (1, 2)
        assert store.stat("chat").header == {"title": "format 1"}  # type: ignore[union-attr]
        assert [e.data for e in store.read("Other/ID")] == [{"n": 1}]
    finally:
        store.close()
    assert {p: p.read_bytes() for p in legacy.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "zstd"])
def test_first_write_migrates_format1_leaving_the_source_byte_identical(
    legacy: Path, compress: bool
) -> None:
    """The first write to a format 1 session publishes a format 2 successor (same events,
    seqs, times and header; the store's encoding) and keeps the source, byte for byte, in
    migrated/; sessions nobody wrote stay format 1, untouched."""
    path = session_file(legacy, "chat")
    source = path.read_bytes()
    other = session_file(legacy, "Other/ID").read_bytes()
    reader = JsonlStore(legacy, read_only=True)
    old = shape(reader.read("chat"))
    reader.close()
    store = JsonlStore(legacy, compress=compress)
    try:
        assert store.append("chat", [NewEvent("after", "migration")]) == 7
        events = store.read("chat")
        assert shape(events[:6]) == old
        assert (events[6].kind, events[6].data) == ("after", "migration")
        assert store.stat("chat").header == {"title": "format 1"}  # type: ignore[union-attr]
        assert store.find_run("chat", "r1") == (1, 2)
    finally:
        store.close()
    [kept] = (legacy / "migrated").iterdir()
    assert kept.read_bytes() == source
    text = unzstd(path) if compress else path.read_bytes()
    assert path.read_bytes().startswith(MAGIC) == compress
    assert text.startswith(b'{"tidelog":"session","format":4,"id":"chat"')
    assert b"torn" not in text
    assert session_file(legacy, "Other/ID").read_bytes() == other


def test_damaged_format1_file_is_refused_not_migrated(legacy: Path) -> None:
    """A format 1 file damaged inside its committed region is not migrated: the write raises
    StoreCorruptError naming file and offset, and nothing changes."""
    path = session_file(legacy, "chat")
    data = path.read_bytes()
    offset = data.index(b'{"seq":3,')
    damaged = data.replace(b'"data":[1,2.5,null,true]', b'"data":[1,2.5,null,true ', 1)
    path.write_bytes(damaged)
    store = JsonlStore(legacy)
    try:
        with pytest.raises(StoreCorruptError) as info:
            store.append("chat", [NewEvent("k")])
        assert f"{path}: byte {offset}" in str(info.value)
    finally:
        store.close()
    assert path.read_bytes() == damaged
    assert list((legacy / "migrated").iterdir()) == []


def test_fork_of_a_format1_session_keeps_its_prefix_after_the_parent_migrates(
    legacy: Path,
) -> None:
    """A fork made from a format 1 parent reads its prefix from the format 1 file it links,
    before and after the parent's first write migrated the parent."""
    store = JsonlStore(legacy)
    try:
        store.fork("chat", "child", at_seq=4)
        before = shape(store.read("child"))
        assert [s for s, *_ in before] == [1, 2, 3, 4]
        store.append("chat", [NewEvent("k")])
        store.truncate("chat", 1)
        assert shape(store.read("child")) == before
        assert store.append("child", [NewEvent("c")]) == 5
        assert shape(store.read("child"))[:4] == before
    finally:
        store.close()


# -- compressed files --------------------------------------------------------------------------


def test_compressed_file_is_one_frame_per_batch_of_format2_lines(
    zroot: Path, tmp_path: Path
) -> None:
    """compress=True: a header frame, then one checksummed frame per batch; decompressed,
    the file is the plain format 2 file, which a plain store reads the same."""
    store = JsonlStore(zroot, compress=True)
    try:
        for n in range(3):
            store.append("s", [NewEvent("k", {"n": n, "i": i}, run_id="r") for i in range(4)])
        events = store.read("s")
    finally:
        store.close()
    path = session_file(zroot, "s")
    assert len(frames(path)) == 4
    assert sum(n for _, n in frames(path)) == path.stat().st_size
    for offset, _ in frames(path):
        assert zstandard.get_frame_parameters(path.read_bytes()[offset:]).has_checksum
    plain = tmp_path / "plain"
    JsonlStore(plain).close()
    session_file(plain, "s").write_bytes(unzstd(path))
    copy = JsonlStore(plain, read_only=True)
    try:
        assert copy.read("s") == events
    finally:
        copy.close()


def test_a_file_keeps_its_encoding(tmp_path: Path) -> None:
    """Appends keep a file's encoding whatever the handle's compress says; the files a
    compressing handle creates are compressed, and every handle reads both."""
    root = tmp_path / "mixed"
    plain = JsonlStore(root)
    plain.append("p", [NewEvent("k", 1)])
    packed = JsonlStore(root, compress=True)
    try:
        packed.append("p", [NewEvent("k", 2)])
        packed.append("z", [NewEvent("k", 1)])
        plain.append("z", [NewEvent("k", 2)])
        packed.truncate("p", 1)
        assert not session_file(root, "p").read_bytes().startswith(MAGIC)
        assert session_file(root, "z").read_bytes().startswith(MAGIC)
        assert [e.data for e in plain.read("p")] == [1]
        assert [e.data for e in plain.read("z")] == [1, 2]
    finally:
        packed.close()
        plain.close()


def test_torn_last_frame_is_not_served_and_next_writer_truncates_it(zroot: Path) -> None:
    """A last frame cut short (a crash mid-write) is never served; the next writer truncates
    it durably and writes after the last whole frame."""
    store = JsonlStore(zroot, compress=True)
    store.append("s", [NewEvent("k", 1)])
    store.append("s", [NewEvent("k", 2), NewEvent("k", 3)])
    store.close()
    path = session_file(zroot, "s")
    data = path.read_bytes()
    good = len(data)
    last, size = frames(path)[-1]
    for cut in (3, size // 2, size - 1):  # inside the magic, the blocks, the checksum
        path.write_bytes(data + data[last : last + cut])
        reader = JsonlStore(zroot, read_only=True)
        try:
            assert [e.data for e in reader.read("s")] == [1, 2, 3]
        finally:
            reader.close()
    writer = JsonlStore(zroot, compress=True)
    try:
        assert writer.append("s", [NewEvent("k", 4)]) == 4
        assert frames(path)[-1][0] == good
        assert [e.data for e in writer.read("s")] == [1, 2, 3, 4]
    finally:
        writer.close()


@pytest.mark.parametrize("where", ["block", "checksum"])
def test_damaged_frame_before_a_whole_one_is_corruption(zroot: Path, where: str) -> None:
    """A frame that does not decode, followed by a whole frame written after it was synced,
    is damage inside the committed region: StoreCorruptError names the file and the
    frame's offset; a damaged last frame counts as torn."""
    store = JsonlStore(zroot, compress=True, synchronous="full")
    for n in range(3):
        store.append("s", [NewEvent("k", {"n": n, "pad": "x" * 50}) for _ in range(3)])
    store.close()
    path = session_file(zroot, "s")
    data = bytearray(path.read_bytes())
    (second, size), (third, third_size) = frames(path)[2:4]
    pos = second + (size // 2 if where == "block" else size - 2)
    data[pos] ^= 0x40
    path.write_bytes(bytes(data))
    store = JsonlStore(zroot, compress=True)
    try:
        for call in (lambda: store.read("s"), lambda: store.append("s", [NewEvent("k")])):
            with pytest.raises(StoreCorruptError) as info:
                call()
            assert f"{path}: byte {second}" in str(info.value)
    finally:
        store.close()
    data[pos] ^= 0x40
    data[third + third_size - 2] ^= 0x40  # now only the last frame is damaged: torn
    path.write_bytes(bytes(data))
    store = JsonlStore(zroot, compress=True)
    try:
        assert store.head("s") == 6
    finally:
        store.close()


def test_frame_claiming_an_absurd_size_is_damage_not_an_allocation(zroot: Path) -> None:
    """A frame whose header claims 4 GiB of content is damaged: torn if last, else (a
    synced frame) corrupt."""
    store = JsonlStore(zroot, compress=True, synchronous="full")
    for n in range(3):
        store.append("s", [NewEvent("k", {"n": n, "i": i, "p": "x" * 400}) for i in range(200)])
    store.close()
    path = session_file(zroot, "s")
    clean = path.read_bytes()
    for which, expected in ((-1, 400), (-2, None)):
        offset, _ = frames(path)[which]
        data = bytearray(clean)
        assert data[offset + 4] >> 6 == 2  # a 4-byte content size, right after the descriptor
        data[offset + 5 : offset + 9] = b"\xff\xff\xff\xff"
        path.write_bytes(bytes(data))
        reader = JsonlStore(zroot, read_only=True)
        try:
            if expected is not None:
                assert reader.head("s") == expected
            else:
                with pytest.raises(StoreCorruptError, match=f"byte {offset}"):
                    reader.head("s")
        finally:
            reader.close()


@pytest.mark.parametrize(
    "content",
    [
        b"hello, zstd\n",
        b'{"tidelog":"session","format":5,"id":"s"}\n',
        b'{"tidelog":"session","format":1,"id":"s","incarnation":1,"epoch":0,"cuts":[],'
        b'"created_at":1.0,"updated_at":1.0,"header":{},"parent":null,"base_seq":0,'
        b'"bases":[]}\n',
    ],
    ids=["foreign", "newer", "format-1-compressed"],
)
@pytest.mark.parametrize("checksum", [True, False])
def test_foreign_or_newer_compressed_file_is_refused_untouched(
    zroot: Path, content: bytes, checksum: bool
) -> None:
    """A zstd stream that is not a tidelog file, or holds a header of a format tidelog
    never compressed, is refused with UnsupportedFormatError, reads and writes alike, and
    left byte for byte as it was."""
    path = session_file(zroot, "s")
    data = zstandard.ZstdCompressor(write_checksum=checksum).compress(content)
    path.write_bytes(data)
    store = JsonlStore(zroot, compress=True)
    try:
        with pytest.raises(UnsupportedFormatError):
            store.read("s")
        with pytest.raises(UnsupportedFormatError):
            store.append("s", [NewEvent("k")])
    finally:
        store.close()
    assert path.read_bytes() == data


def test_read_of_the_newest_events_decompresses_only_their_frames(
    zroot: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading the last events of a long compressed session reads the frames that hold
    them, not the file."""
    store = JsonlStore(zroot, compress=True)
    try:
        for n in range(200):
            store.append("s", [NewEvent("k", {"n": n, "i": i, "t": "x" * 80}) for i in range(50)])
        store.read("s", limit=1, from_end=True)
        read_bytes: list[int] = []
        real = jsonl_index.read_exact

        def counting(fd: int, size: int, offset: int, path: str) -> bytes:
            read_bytes.append(size)
            return real(fd, size, offset, path)

        monkeypatch.setattr(jsonl_index, "read_exact", counting)
        events = store.read("s", limit=50, from_end=True)
        assert [e.seq for e in events] == list(range(9_951, 10_001))
        assert sum(read_bytes) <= frames(session_file(zroot, "s"))[-1][1]
    finally:
        store.close()


def test_compress_without_zstandard_is_refused_saying_what_to_install(zroot: Path) -> None:
    """Where the zstandard package is missing, compress=True raises InvalidArgumentError and
    a compressed file UnsupportedFormatError, both naming the jsonl-zstd extra."""
    JsonlStore(zroot, compress=True).append("s", [NewEvent("k")])
    code = f"""
import sys
sys.modules["zstandard"] = None  # the package is not installed
from stores import InvalidArgumentError, JsonlStore, UnsupportedFormatError
try:
    JsonlStore({str(zroot)!r}, compress=True)
except InvalidArgumentError as exc:
    print("open:", exc)
store = JsonlStore({str(zroot)!r})
try:
    store.read("s")
except UnsupportedFormatError as exc:
    print("read:", exc)
store.close()
"""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("open: compress=True: it needs the zstandard package")
    assert lines[1].startswith("read: a zstd-compressed session file: it needs")
    assert all("tidelog[jsonl-zstd]" in line for line in lines)
