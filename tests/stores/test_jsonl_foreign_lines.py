"""Formats 3 and 4 tie every record to its session file: a line (or a zstd frame) copied
from another session's file is StoreCorruptError naming the file and the offset, wherever
it is put; format 2 and 3 files are read as before and migrated by their first writer."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from stores import JsonlStore, NewEvent, StoreCorruptError
from stores.jsonl._format2 import file_key


def two_sessions(root: Path, *, compress: bool = False) -> tuple[Path, Path]:
    """Sessions s and o, three one-event batches each; their files."""
    store = JsonlStore(root, compress=compress)
    try:
        for i in range(3):
            store.append("s", [NewEvent("k", {"s": i})])
            store.append("o", [NewEvent("k", {"o": i})])
    finally:
        store.close()
    return root / "sessions" / "s.jsonl", root / "sessions" / "o.jsonl"


def reopened_read(root: Path) -> StoreCorruptError:
    store = JsonlStore(root)
    try:
        with pytest.raises(StoreCorruptError) as info:
            store.read("s")
        with pytest.raises(StoreCorruptError):
            store.append("s", [NewEvent("k")])
        return info.value
    finally:
        store.close()


@pytest.mark.parametrize("which", [1, 2, 3])
def test_a_line_replaced_by_another_sessions_line_is_corrupt(tmp_path: Path, which: int) -> None:
    """s's line ``which`` replaced by o's line of the same seq (the last one included,
    where a bad line would otherwise be taken for a torn write): StoreCorruptError naming
    s's file and the line's offset."""
    s, o = two_sessions(tmp_path / "r")
    lines = s.read_bytes().split(b"\n")
    theirs = o.read_bytes().split(b"\n")
    offset = sum(len(line) + 1 for line in lines[:which])
    lines[which] = theirs[which]
    s.write_bytes(b"\n".join(lines))
    error = reopened_read(tmp_path / "r")
    assert str(s) in str(error)
    assert f"byte {offset}" in str(error)


def test_another_sessions_next_batch_appended_is_corrupt(tmp_path: Path) -> None:
    """o's batch of seq 4 appended to s (at seq 3): StoreCorruptError at its offset, never
    o's events served as s's."""
    s, o = two_sessions(tmp_path / "a")
    store = JsonlStore(tmp_path / "a")
    store.append("o", [NewEvent("k", {"o": 3})])
    store.close()
    size = s.stat().st_size
    s.write_bytes(s.read_bytes() + o.read_bytes().split(b"\n")[4] + b"\n")
    error = reopened_read(tmp_path / "a")
    assert f"byte {size}" in str(error)
    assert "another session" in str(error)


def test_another_sessions_zstd_frame_appended_is_corrupt(tmp_path: Path) -> None:
    """In compressed files, o's next frame appended to s is StoreCorruptError."""
    pytest.importorskip("zstandard")
    s, o = two_sessions(tmp_path / "z", compress=True)
    store = JsonlStore(tmp_path / "z", compress=True)
    before = o.stat().st_size
    store.append("o", [NewEvent("k", {"o": 3})])
    store.close()
    frame = o.read_bytes()[before:]
    size = s.stat().st_size
    s.write_bytes(s.read_bytes() + frame)
    error = reopened_read(tmp_path / "z")
    assert f"byte {size}" in str(error)


def test_lines_name_their_file(tmp_path: Path) -> None:
    """Every event line carries its file's key, before the checksum that covers it."""
    s, _ = two_sessions(tmp_path / "k")
    store = JsonlStore(tmp_path / "k")
    try:
        [header_line, *events, _] = s.read_bytes().split(b"\n")
        assert json.loads(header_line)["format"] == 4
        view = store._view("s")
        assert view is not None
        tag = file_key(view.header)
        assert all(line.endswith(b'"crc":%d}' % json.loads(line)["crc"]) for line in events)
        assert all(tag + b',"crc":' in line for line in events)
    finally:
        store.close()


#: Stores written by the previous version (format 2 files), plain and compressed.
FIXTURES = Path(__file__).with_name("fixtures")
OLD = [{"text": "hi"}, {"text": "hello"}, {"i": 3}]


@pytest.mark.parametrize(
    "fixture", ["jsonl-format2", "jsonl-format2-zstd", "jsonl-format3", "jsonl-format3-zstd"]
)
def test_older_file_reads_as_before_and_is_migrated(tmp_path: Path, fixture: str) -> None:
    """A format 2 or 3 file (plain or compressed, written by an earlier version) is read as
    it is by a read-only handle; the first writer migrates it to format 4 keeping its
    encoding, the source byte-identical in migrated/."""
    version = 3 if "format3" in fixture else 2
    compress = fixture.endswith("zstd")
    if compress:
        pytest.importorskip("zstandard")
    root = tmp_path / "v2"
    shutil.copytree(FIXTURES / fixture, root)
    path = root / "sessions" / "chat.jsonl"
    source = path.read_bytes()
    reader = JsonlStore(root, read_only=True)
    try:
        assert [e.data for e in reader.read("chat")] == OLD
        assert reader.find_run("chat", "r1") == (1, 2)
    finally:
        reader.close()
    assert path.read_bytes() == source
    writer = JsonlStore(root)  # not compress=True: a compressed file stays compressed
    try:
        assert writer.append("chat", [NewEvent("k", {"i": 4})]) == 4
        assert [e.data for e in writer.read("chat")] == [*OLD, {"i": 4}]
        assert writer.check_integrity() == (True, "ok")
    finally:
        writer.close()
    [kept] = (root / "migrated").iterdir()
    assert kept.name.endswith(f".v{version}.jsonl")
    assert kept.read_bytes() == source
    now = path.read_bytes()
    assert now.startswith(b"\x28\xb5\x2f\xfd") == compress
    if not compress:
        assert now.startswith(b'{"tidelog":"session","format":4,"id":"chat"')
        assert now.count(b',"f":"') == 4
