"""The JSONL store never writes, truncates or deletes outside its directory through a
symbolic link planted in it: for every kind of file it keeps (session files, lock files,
sidecars, the change log, the marker, projections, intents, ``migrated/``, its
sub-directories) a real symlink to a file outside is refused or replaced, and the file
outside is left byte for byte as it was."""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from stores import JsonlStore, NewEvent, StoreError
from stores.jsonl._format import file_stem

FIXTURE = Path(__file__).with_name("fixtures") / "jsonl-format1"
PRECIOUS = b'{"tidelog":"jsonl-store","format":1}\n' + b"precious\n" * 10


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A file outside the store that must never change."""
    path = tmp_path / "outside" / "victim"
    path.parent.mkdir()
    path.write_bytes(PRECIOUS)
    return path


def untouched(victim: Path) -> None:
    assert victim.read_bytes() == PRECIOUS
    assert not victim.is_symlink()


def store_at(tmp_path: Path) -> Path:
    root = tmp_path / "store"
    store = JsonlStore(root)
    store.append("s", [NewEvent("k", {"i": 1})])
    store.close()
    return root


def attempt(action: Callable[[], object]) -> None:
    """Run ``action``; a refusal is a StoreError (never an OSError or a crash)."""
    with contextlib.suppress(StoreError):
        action()


def test_session_file_symlink(tmp_path: Path, victim: Path) -> None:
    """sessions/s.jsonl -> outside: reads, appends, truncates, replaces and deletes of s
    never write the target."""
    root = store_at(tmp_path)
    link = root / "sessions" / "s.jsonl"
    link.unlink()
    link.symlink_to(victim)
    store = JsonlStore(root)
    try:
        attempt(lambda: store.read("s"))
        attempt(lambda: store.append("s", [NewEvent("k")]))
        attempt(lambda: store.truncate("s", 0))
        attempt(lambda: store.delete("s"))
        untouched(victim)
        with pytest.raises(StoreError, match="symbolic link"):
            store.append("s", [NewEvent("k")])
    finally:
        store.close()
    untouched(victim)


def test_lock_file_symlink(tmp_path: Path, victim: Path) -> None:
    """locks/s.lock -> outside: taking the lease, writing and deleting s never write
    (nor truncate) the target: the lock is refused."""
    root = store_at(tmp_path)
    link = root / "locks" / "s.lock"
    link.unlink(missing_ok=True)
    link.symlink_to(victim)
    store = JsonlStore(root)
    try:
        with pytest.raises(StoreError, match="symbolic link"):
            store.acquire_lease("s", "me", ttl=30.0, holder="pid 1 me")
        attempt(lambda: store.append("s", [NewEvent("k")]))
        attempt(lambda: store.delete("s"))
    finally:
        store.close()
    untouched(victim)


def test_sidecar_symlink(tmp_path: Path, victim: Path) -> None:
    """index/s.idx -> outside: saving the session's index replaces the link (a rename),
    never writes through it; loading it never follows it."""
    root = store_at(tmp_path)
    link = root / "index" / f"{file_stem('s')}.idx"
    link.unlink(missing_ok=True)
    link.symlink_to(victim)
    store = JsonlStore(root)
    try:
        store.acquire_lease("s", "me", ttl=30.0, holder="pid 1 me")
        for _ in range(3):
            store.append("s", [NewEvent("k", "x" * 40_000)])
        reader = JsonlStore(root, read_only=True)
        try:
            assert len(reader.read("s")) == 4
        finally:
            reader.close()
        store.release_lease("s", "me")
    finally:
        store.close()
    untouched(victim)


def test_change_log_symlink(tmp_path: Path, victim: Path) -> None:
    """changes -> outside: a store holding one is refused at open; one planted after the
    open is never appended to or cut."""
    root = store_at(tmp_path)
    store = JsonlStore(root)
    try:
        (root / "changes").unlink(missing_ok=True)
        (root / "changes").symlink_to(victim)
        for _ in range(3):
            store.append("s", [NewEvent("k")])
    finally:
        store.close()
    untouched(victim)
    with pytest.raises(StoreError, match="symbolic link"):
        JsonlStore(root)
    untouched(victim)


def test_marker_symlink(tmp_path: Path, victim: Path) -> None:
    """tidelog-jsonl.json -> outside (a valid marker): refused at open, target unread
    and unchanged."""
    root = store_at(tmp_path)
    (root / "tidelog-jsonl.json").unlink()
    (root / "tidelog-jsonl.json").symlink_to(victim)
    with pytest.raises(StoreError, match="symbolic link"):
        JsonlStore(root)
    with pytest.raises(StoreError, match="symbolic link"):
        JsonlStore(root, read_only=True)
    untouched(victim)


@pytest.mark.parametrize("sub", ["sessions", "locks", "index", "intents", "migrated", "tmp"])
def test_sub_directory_symlink(tmp_path: Path, victim: Path, sub: str) -> None:
    """A sub-directory replaced by a link to a directory outside: refused at open, and
    nothing is created in the directory outside."""
    root = store_at(tmp_path)
    shutil.rmtree(root / sub)
    (root / sub).symlink_to(victim.parent)
    with pytest.raises(StoreError, match="symbolic link"):
        JsonlStore(root)
    assert sorted(os.listdir(victim.parent)) == ["victim"]
    untouched(victim)


def test_projection_temporary_file_symlink(tmp_path: Path, victim: Path) -> None:
    """A link planted at the name a projection save writes first (its temporary file) or
    at the projection's own name is never written through."""
    root = store_at(tmp_path)
    store = JsonlStore(root)
    try:
        pin = store.pin("s")
        assert pin is not None
        path = root / "projections" / f"{file_stem('s')}.json"
        guessed = Path(f"{path}.{os.getpid()}.{threading.get_ident()}.tmp")
        guessed.symlink_to(victim)
        path.symlink_to(victim)
        store.save_projection(pin, "p", 1, '{"n":1}')
        assert store.load_projection("s", "p", 1) == (1, '{"n":1}')
    finally:
        store.close()
    untouched(victim)


def test_intent_over_session_symlink(tmp_path: Path, victim: Path) -> None:
    """An unfinished group's intent naming s, while sessions/s.jsonl links outside: the
    roll back at open never truncates the target."""
    root = store_at(tmp_path)
    link = root / "sessions" / "s.jsonl"
    link.unlink()
    link.symlink_to(victim)
    intent = root / "intents" / "0123.intent"
    intent.write_text('{"members":[{"stem":"s","exists":true,"ino":1,"end":3}]}')
    attempt(lambda: JsonlStore(root).close())
    untouched(victim)
    (root / "intents" / "0123.intent").unlink(missing_ok=True)
    intent.symlink_to(victim)
    attempt(lambda: JsonlStore(root).close())
    untouched(victim)


def test_migrated_copy_symlink(tmp_path: Path, victim: Path) -> None:
    """migrated/<stem>.<inode>.v1.jsonl -> outside (where a format 1 file's migration keeps
    the source): the migration refuses, the target and the source are unchanged."""
    root = tmp_path / "legacy"
    shutil.copytree(FIXTURE, root)
    source = root / "sessions" / "chat.jsonl"
    before = source.read_bytes()
    JsonlStore(root, read_only=True).close()
    (root / "migrated").mkdir(exist_ok=True)
    keep = root / "migrated" / f"chat.{source.stat().st_ino}.v1.jsonl"
    keep.symlink_to(source)  # even a link to the source itself is not a kept copy
    store = JsonlStore(root)
    try:
        with pytest.raises(StoreError):
            store.append("chat", [NewEvent("k")])
    finally:
        store.close()
    assert source.read_bytes() == before
    keep.unlink()
    keep.symlink_to(victim)
    store = JsonlStore(root)
    try:
        attempt(lambda: store.append("chat", [NewEvent("k")]))
    finally:
        store.close()
    untouched(victim)
