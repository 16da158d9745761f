"""A power cut that keeps the last page of an unsynced batch but loses an earlier one.

The kernel may write the pages of an unsynced write back in any order, so after a power
loss the page holding a batch's commit line can be on disk while an earlier page of the
same batch is not (zeros there). That batch was never acknowledged (a FULL commit that
returned was fsynced), so it must read as a torn last batch -- dropped whole, every
earlier batch served -- never as damage inside the committed region. The same damage
followed by a later whole batch *is* corruption (``StoreCorruptError``).

With ``synchronous="normal"`` several unsynced batches can reach the disk out of order
(an earlier one's page lost, a later one whole): a commit line says how far its file was
known durable when it was written (format 4's ``"s"``), so damage past that point is a torn
tail -- the unsynced batches dropped whole, every flushed event served."""

from __future__ import annotations

import base64
import random
from pathlib import Path

import pytest
from power_disk import recording

from stores import JsonlStore, NewEvent, StoreCorruptError

PAGE = 4096


def _incompressible(rng: random.Random, n: int) -> str:
    return base64.b64encode(rng.randbytes(n * 3 // 4)).decode()[:n]


def _write(root: Path, compress: bool, extra_batch: bool) -> tuple[Path, int]:
    """A FULL store: one small event, then a batch of four 1,500-byte events (and, with
    ``extra_batch``, one more small batch); the session file and the first batch's end."""
    rng = random.Random(33)
    store = JsonlStore(root, synchronous="full", compress=compress)
    try:
        store.append("s", [NewEvent("small", {"n": 0})])
        path = root / "sessions" / "s.jsonl"
        first_end = path.stat().st_size
        store.append("s", [NewEvent("big", {"pad": _incompressible(rng, 1500)}) for _ in range(4)])
        if extra_batch:
            store.append("s", [NewEvent("small", {"n": 5})])
    finally:
        store.close()
    return path, first_end


def _lose_page(path: Path, start: int) -> None:
    """Zero the file from ``start`` to the next page boundary (a page never written)."""
    stop = min(path.stat().st_size, (start // PAGE + 1) * PAGE)
    with open(path, "r+b") as f:
        f.seek(start)
        f.write(bytes(stop - start))


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "zstd"])
def test_lost_early_page_of_the_last_batch_drops_it_as_torn(tmp_path: Path, compress: bool) -> None:
    """The last batch's commit line survives, an earlier page of it is lost: the batch
    is dropped as torn, the acknowledged first batch is read, and a writer continues."""
    path, first_end = _write(tmp_path, compress, extra_batch=False)
    assert path.stat().st_size > (first_end // PAGE + 1) * PAGE  # the commit line survives
    _lose_page(path, first_end)
    store = JsonlStore(tmp_path, synchronous="full", compress=compress)
    try:
        assert [(e.seq, e.data) for e in store.read("s")] == [(1, {"n": 0})]
        assert store.head("s") == 1
        assert store.append("s", [NewEvent("small", {"n": 2})]) == 2  # truncates the tail
        assert [e.data for e in store.read("s")] == [{"n": 0}, {"n": 2}]
        assert store.check_integrity() == (True, "ok")
    finally:
        store.close()


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "zstd"])
def test_the_same_damage_before_a_later_batch_is_corruption(tmp_path: Path, compress: bool) -> None:
    """The same lost page with a whole batch after the damaged one: committed data is
    damaged, and the session is refused with StoreCorruptError."""
    path, first_end = _write(tmp_path, compress, extra_batch=True)
    _lose_page(path, first_end)
    store = JsonlStore(tmp_path, synchronous="full", compress=compress)
    try:
        with pytest.raises(StoreCorruptError, match="inside the committed region"):
            store.read("s")
    finally:
        store.close()


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "zstd"])
def test_unsynced_batches_out_of_order_drop_back_to_the_flush(
    tmp_path: Path, compress: bool
) -> None:
    """synchronous="normal", two unsynced batches after a flush, the first one's early page
    lost and the second one whole: the session reads as exactly the flushed event (the
    unsynced batches dropped whole), and the next writer continues after it."""
    rng = random.Random(34)
    store = JsonlStore(tmp_path, compress=compress)
    try:
        store.append("s", [NewEvent("small", {"n": 0})])
        store.sync()  # the flush barrier: event 1 is acknowledged
        path = tmp_path / "sessions" / "s.jsonl"
        synced = path.stat().st_size
        store.append("s", [NewEvent("big", {"pad": _incompressible(rng, 1500)}) for _ in range(4)])
        store.append("s", [NewEvent("small", {"n": 5})])  # unsynced too, and it survives
    finally:
        store.close()
    assert path.stat().st_size > (synced // PAGE + 1) * PAGE  # the second batch is whole
    _lose_page(path, synced)
    store = JsonlStore(tmp_path, compress=compress)
    try:
        assert [(e.seq, e.data) for e in store.read("s")] == [(1, {"n": 0})]
        assert store.head("s") == 1
        assert store.append("s", [NewEvent("small", {"n": 2})]) == 2  # truncates the tail
        assert [e.data for e in store.read("s")] == [{"n": 0}, {"n": 2}]
        assert store.check_integrity() == (True, "ok")
    finally:
        store.close()
    assert path.stat().st_size < synced + PAGE  # the dropped batches are gone from the file


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "zstd"])
def test_damage_before_a_later_flush_is_corruption_in_normal_mode(
    tmp_path: Path, compress: bool
) -> None:
    """synchronous="normal": a batch flushed and then followed by a batch written after the
    flush, the flushed one damaged: that batch was durable, so the session is refused with
    StoreCorruptError, not cut back."""
    rng = random.Random(35)
    store = JsonlStore(tmp_path, compress=compress)
    try:
        store.append("s", [NewEvent("small", {"n": 0})])
        path = tmp_path / "sessions" / "s.jsonl"
        first_end = path.stat().st_size
        store.append("s", [NewEvent("big", {"pad": _incompressible(rng, 1500)}) for _ in range(4)])
        store.sync()
        store.append("s", [NewEvent("small", {"n": 5})])
    finally:
        store.close()
    _lose_page(path, first_end)
    store = JsonlStore(tmp_path, compress=compress)
    try:
        with pytest.raises(StoreCorruptError, match=f"byte {first_end}: .* committed region"):
            store.read("s")
    finally:
        store.close()


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "zstd"])
def test_fork_of_unsynced_batches_survives_a_cut_that_keeps_its_name(
    tmp_path: Path, compress: bool
) -> None:
    """A fork (synchronous="normal") of a session whose last batch is not synced yet: a
    cut that keeps every name but only synced bytes leaves the fork readable in full --
    the fork fsyncs the seqs it links before publishing its name."""
    root = tmp_path / "store"
    store = JsonlStore(root, compress=compress)
    store.close()
    with recording(str(root)) as disk:
        store = JsonlStore(root, compress=compress)
        try:
            store.append("s", [NewEvent("small", {"n": 1})])
            store.sync()
            store.append("s", [NewEvent("small", {"n": 2}), NewEvent("small", {"n": 3})])
            store.fork("s", "f", at_seq=3)
            with disk.lock:
                disk.cut(str(tmp_path / "cut"), random.Random(0), "none", names_mode="all")
        finally:
            store.close()
    store = JsonlStore(tmp_path / "cut", compress=compress)
    try:
        assert [e.data for e in store.read("f")] == [{"n": 1}, {"n": 2}, {"n": 3}]
        assert store.check_integrity() == (True, "ok")
    finally:
        store.close()


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "zstd"])
def test_a_sidecar_saved_over_unsynced_batches_does_not_hide_the_torn_tail(
    tmp_path: Path, compress: bool
) -> None:
    """synchronous="normal": a lease holder appends, flushes, writes two more batches and
    releases (the sidecar is saved over them); a cut keeps the sidecar and the last page
    but loses the page after the flush: a new handle reads exactly the flushed events
    (the sidecar's unproven chunks are not used), and the next writer cuts the tail."""
    rng = random.Random(36)
    store = JsonlStore(tmp_path, compress=compress)
    try:
        store.acquire_lease("s", "me", ttl=60, holder="test")
        store.append("s", [NewEvent("small", {"n": 0})])
        store.append("s", [NewEvent("small", {"n": 1})])
        store.sync()  # events 1 and 2 are acknowledged
        path = tmp_path / "sessions" / "s.jsonl"
        synced = path.stat().st_size
        store.append("s", [NewEvent("big", {"pad": _incompressible(rng, 1500)}) for _ in range(4)])
        store.append("s", [NewEvent("small", {"n": 5})])
        store.release_lease("s", "me")  # saves the sidecar, over the unsynced batches
    finally:
        store.close()
    assert (tmp_path / "index" / "s.idx").stat().st_size > 0
    assert path.stat().st_size > (synced // PAGE + 1) * PAGE  # the last batch is whole
    _lose_page(path, synced)
    reader = JsonlStore(tmp_path, read_only=True, compress=compress)
    try:
        assert [(e.seq, e.data) for e in reader.read("s")] == [(1, {"n": 0}), (2, {"n": 1})]
    finally:
        reader.close()
    store = JsonlStore(tmp_path, compress=compress)
    try:
        assert [(e.seq, e.data) for e in store.read("s")] == [(1, {"n": 0}), (2, {"n": 1})]
        assert store.head("s") == 2
        assert store.append("s", [NewEvent("small", {"n": 2})]) == 3  # truncates the tail
        assert [e.data for e in store.read("s")] == [{"n": 0}, {"n": 1}, {"n": 2}]
        assert store.check_integrity() == (True, "ok")
    finally:
        store.close()
    assert path.stat().st_size < synced + PAGE  # the dropped batches are gone from the file
    reader = JsonlStore(tmp_path, read_only=True, compress=compress)  # the sidecar now
    try:
        assert [e.data for e in reader.read("s")] == [{"n": 0}, {"n": 1}, {"n": 2}]
    finally:
        reader.close()


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "zstd"])
def test_a_flush_syncs_the_file_of_a_writer_that_left_before_it(
    tmp_path: Path, compress: bool
) -> None:
    """synchronous="normal": a lease holder appends and releases (its file closed, its
    batch unsynced), other sessions are written (the closed fd's number is reused), then a
    flush: a cut that keeps only synced bytes keeps the left writer's event -- the flush
    fsyncs its file, not whatever file now has that fd number (found by the soak)."""
    root = tmp_path / "store"
    JsonlStore(root, compress=compress).close()
    with recording(str(root)) as disk:
        store = JsonlStore(root, compress=compress)
        try:
            store.acquire_lease("a", "me", ttl=60, holder="test")
            store.append("a", [NewEvent("small", {"n": 0})])  # creates the file: synced
            store.append("a", [NewEvent("small", {"n": 1})])
            store.release_lease("a", "me")  # closes a's file, its last batch unsynced
            for sid in ("b", "c"):  # b's file stays open: it may take a's old fd number
                store.acquire_lease(sid, "me", ttl=60, holder="test")
                store.append(sid, [NewEvent("small", {"n": 2})])
            store.sync()  # acknowledges every event above
            with disk.lock:
                disk.cut(str(tmp_path / "cut"), random.Random(0), "none")
        finally:
            store.close()
    store = JsonlStore(tmp_path / "cut", compress=compress)
    try:
        assert [e.data for e in store.read("a")] == [{"n": 0}, {"n": 1}]
        assert [e.data for e in store.read("b")] == [{"n": 2}]
        assert [e.data for e in store.read("c")] == [{"n": 2}]
    finally:
        store.close()
