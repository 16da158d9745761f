"""JSONL store: what an undone batch or op leaves in the writer's index of a session.

A batch that fails after some of its appends landed (an fsync failing at FULL), or a
group whose later member fails after an earlier member appended, cuts the files back.
The writer index the process keeps for each session must then be exactly what a fresh
scan of the file finds -- head, end, line offsets, batch ends, runs, last time -- or the
next write, a resend's comparison or the sidecar saved for the next process would work
from lines that are not there.
"""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings

from stores import (
    AppendOp,
    DeleteOp,
    GroupOp,
    JsonlStore,
    NewEvent,
    OwnershipLostError,
    PreparedEvent,
    StoreIOError,
    prepare_events,
)
from stores.conformance.model import Handle, model_steps, replay
from stores.jsonl import _files as jsonl_files
from stores.jsonl._format import file_stem
from stores.jsonl._index import FileIndex


@pytest.fixture
def io_seam() -> Iterator[None]:
    saved = jsonl_files.IO.fsync
    yield
    jsonl_files.IO.fsync = saved


@pytest.fixture
def truncate_seam() -> Iterator[None]:
    saved = jsonl_files.IO.truncate
    yield
    jsonl_files.IO.truncate = saved


def _fail(*_: object) -> None:
    raise OSError(errno.EIO, os.strerror(errno.EIO))


def _known(index: FileIndex) -> tuple[object, ...]:
    return (
        index.head,
        index.end,
        list(index.offsets),
        list(index.batch_ends),
        dict(index.runs),
        index.last_ts,
        index.damage,
    )


def _assert_as_scanned(store: JsonlStore, root: Path, *session_ids: str) -> None:
    """Each session's writer index knows what a fresh scan of its file finds."""
    _assert_stems_as_scanned(store, root, [file_stem(s) for s in session_ids])


def _assert_stems_as_scanned(store: JsonlStore, root: Path, stems: list[str]) -> None:
    shared = store._shared
    assert shared is not None
    for stem in stems:
        kept = shared.writers[stem]
        assert kept is not None
        scanned = FileIndex.open(str(root / "sessions" / f"{stem}.jsonl"))
        assert scanned is not None
        try:
            assert _known(kept) == _known(scanned), stem
        finally:
            scanned.close()


def _events(*data: int, run_id: str | None = None) -> tuple[PreparedEvent, ...]:
    return tuple(prepare_events([NewEvent("k", d, run_id=run_id) for d in data]))


@pytest.mark.usefixtures("io_seam")
def test_a_batch_undone_after_its_appends_landed_leaves_indexes_as_scanned(
    tmp_path: Path,
) -> None:
    """synchronous="full", leases held: a batch of one-event appends (twice to one
    session) and a run's appends undone by a failed fsync leaves every writer index as a
    fresh scan; the resend lands once and a new handle reads it all."""
    root = tmp_path / "store"
    store = JsonlStore(root, synchronous="full")
    try:
        for s in "ab":
            store.acquire_lease(s, "me", ttl=60, holder="test")
        store.write_batch([AppendOp("a", _events(0), owner="me")])
        store.write_batch([AppendOp("b", _events(0, 1, run_id="r"), owner="me")])
        ops = [
            AppendOp("a", _events(1), expected_head=1, owner="me"),
            AppendOp("b", _events(2, 3, run_id="r"), expected_head=2, owner="me"),
            AppendOp("a", _events(2), expected_head=2, owner="me"),
            AppendOp("b", _events(4, run_id="q"), expected_head=4, owner="me"),
        ]
        jsonl_files.IO.fsync = _fail
        with pytest.raises(StoreIOError):
            store.write_batch(ops)
        _assert_as_scanned(store, root, "a", "b")
        jsonl_files.IO.fsync = os.fsync
        resent = [
            AppendOp(op.session_id, op.events, op.expected_head, "me", retry=True) for op in ops
        ]
        assert store.write_batch(resent) == [2, 4, 3, 5]
        _assert_as_scanned(store, root, "a", "b")
    finally:
        store.close()
    other = JsonlStore(root)
    try:
        assert [e.data for e in other.read("a")] == [0, 1, 2]
        assert [e.data for e in other.read("b")] == [0, 1, 2, 3, 4]
        assert other.find_run("b", "r") == (1, 4)
    finally:
        other.close()


def test_a_group_undone_by_its_later_member_leaves_indexes_as_scanned(
    tmp_path: Path,
) -> None:
    """A group whose second member's lease token is stale undoes the first member's
    one-event append: the session's writer index is as a fresh scan, and the next append
    lands right after the events that stood."""
    root = tmp_path / "store"
    store = JsonlStore(root)
    try:
        store.acquire_lease("a", "me", ttl=60, holder="test")
        store.write_batch([AppendOp("a", _events(0), owner="me")])
        group = GroupOp(
            (
                AppendOp("a", _events(1), expected_head=1, owner="me"),
                AppendOp("b", _events(1), owner="stale"),
            )
        )
        [result] = store.write_batch([group])
        assert isinstance(result, OwnershipLostError)
        _assert_as_scanned(store, root, "a")
        assert store.write_batch([AppendOp("a", _events(2), expected_head=1, owner="me")]) == [2]
        _assert_as_scanned(store, root, "a")
        assert [e.data for e in store.read("a")] == [0, 2]
    finally:
        store.close()


@settings(max_examples=200, deadline=None, database=None)
@given(steps=model_steps())
def test_random_batches_leave_writer_indexes_as_scanned(steps: list[Any]) -> None:
    """The conformance model's random batches (appends, groups, truncates, replaces,
    deletes, restores, failing and not, through two handles): after each step every
    writer index the process keeps is as a fresh scan of its file."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "store"
        store = JsonlStore(root)

        def check(handle: Handle) -> None:
            assert handle is store
            shared = store._shared
            assert shared is not None
            kept = [stem for stem, index in shared.writers.items() if index is not None]
            _assert_stems_as_scanned(store, root, kept)

        try:
            replay(store, steps, "m", check=check)
        finally:
            store.close()


@pytest.mark.usefixtures("truncate_seam")
@pytest.mark.parametrize("leased", [False, True])
def test_a_group_whose_undo_fails_is_rolled_back_before_the_next_write(
    tmp_path: Path, leased: bool
) -> None:
    """A group undone because its last member conflicts, where cutting one member's file
    back fails: the error says part of the batch may stand; the group's intent stays, so
    the next write to a member (leased or not, in this process) rolls the group back
    first, and a new handle reads every member as before the group."""
    root = tmp_path / "store"
    store = JsonlStore(root)
    try:
        for s in "acb":
            if leased:
                store.acquire_lease(s, "me", ttl=60, holder="test")
            store.write_batch([AppendOp(s, _events(0), owner="me" if leased else None)])
        owner = "me" if leased else None
        group = GroupOp(
            (
                AppendOp("a", _events(1), expected_head=1, owner=owner),
                AppendOp("c", _events(1), expected_head=1, owner=owner),
                AppendOp("b", _events(1), expected_head=5, owner=owner),
            )
        )
        real = jsonl_files.IO.truncate
        calls: list[int] = []

        def fail_first(fd: int, size: int) -> None:
            calls.append(fd)
            if len(calls) == 1:
                raise OSError(errno.EIO, os.strerror(errno.EIO))
            real(fd, size)

        jsonl_files.IO.truncate = fail_first
        with pytest.raises(StoreIOError) as info:
            store.write_batch([group])
        jsonl_files.IO.truncate = real
        text = str(info.value) + " ".join(getattr(info.value, "__notes__", []))
        assert "may stand" in text
        assert "retry=True" in text
        # The next writes, through this handle (on its leases, if it holds them): each
        # member is as before the group, the half-undone one included.
        assert store.write_batch([AppendOp("c", _events(7), expected_head=1, owner=owner)]) == [2]
        resent = AppendOp("a", _events(1), expected_head=1, owner=owner, retry=True)
        assert store.write_batch([resent]) == [2]
        assert [[e.data for e in store.read(s)] for s in "acb"] == [[0, 1], [0, 7], [0]]
        _assert_as_scanned(store, root, "a", "c")
    finally:
        store.close()
    fresh = JsonlStore(root)
    try:
        assert [[e.data for e in fresh.read(s)] for s in "acb"] == [[0, 1], [0, 7], [0]]
    finally:
        fresh.close()


def test_a_group_that_deletes_then_recreates_a_session_is_not_its_own_unfinished_group(
    tmp_path: Path,
) -> None:
    """A group that deletes a session and appends to it again looks the session up a
    second time while its own intent is held: that intent is not an unfinished group to
    roll back first (the write lands, no StoreBusyError)."""
    root = tmp_path / "store"
    store = JsonlStore(root)
    try:
        store.write_batch([AppendOp("x", _events(0, 1))])
        group = GroupOp((DeleteOp("x"), AppendOp("x", _events(5))))
        assert store.write_batch([group]) == [2]
        assert [e.data for e in store.read("x")] == [5]
        _assert_as_scanned(store, root, "x")
    finally:
        store.close()
