"""Battery 7: damaged, foreign and newer files, and file permissions.

* Random byte flips in random pages and truncations at random offsets (run in a child,
  ``battery_files_worker.py``, under a timeout, so that a hang fails the test
  instead of blocking it): with ``integrity_check_on_open=True`` the file is refused
  with ``StoreCorruptError`` and left unchanged -- or, when the damage is invisible to
  SQLite's checks, every read answers or raises a tidelog error; the runtime (no
  integrity check) never hangs and never lets anything but a tidelog error out.
* Damage inside a stored JSON text (valid pages, invalid content) is reported as
  ``StoreCorruptError`` when a read meets it.
* A WAL file copied from another database is refused with the integrity check on, and
  the refusal leaves both files as they were (the original stays recoverable).
* A newer or foreign file *with a hot WAL* is refused unchanged
  (``tests/stores/test_sqlite_store.py`` covers files without a WAL).
* Database, ``-wal`` and ``-shm`` files are created without group or world write
  permission, whatever the umask.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import apsw
import pytest
import trio
from battery_support import child_env, python_child, record, size

from runtime import (
    NewEvent,
    SqliteStore,
    StoreCorruptError,
    TidelogError,
    UnsupportedFormatError,
    open_runtime,
)
from stores.sqlite import _schema as sqlite_schema

TRIALS = size(40, 400)
COUNTS: Counter[str] = Counter()


@pytest.fixture(scope="module", autouse=True)
def _record_counts() -> Any:
    yield
    record("files", **COUNTS)


def digest(path: Path | str) -> str | None:
    if not os.path.exists(path):
        return None
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def populate(path: Path, sessions: int = 6, events: int = 120) -> None:
    """A realistic file: several sessions, headers, text, truncations; closed cleanly."""
    store = SqliteStore(path)
    try:
        for s in range(sessions):
            sid = f"session-{s}"
            store.create(sid, {"owner": f"user{s}", "tags": ["a", "b"]})
            for i in range(0, events, 10):
                store.append(
                    sid,
                    [
                        NewEvent("msg", {"i": i + j, "text": f"marker-{s}-{i + j} " * 8})
                        for j in range(10)
                    ],
                )
            store.truncate(sid, events - 5)
    finally:
        store.close()
    assert not os.path.exists(f"{path}-wal")


# -- random damage, in a child under a timeout -------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["flips", "cuts"])
@pytest.mark.parametrize("trials", [TRIALS])
def test_random_damage_is_refused_or_reported(tmp_path: Path, mode: str, trials: int) -> None:
    """Random damage: refused unchanged, or reads raise tidelog errors only; never a hang."""
    pristine = tmp_path / "pristine.db"
    populate(pristine)
    work = tmp_path / "work"
    work.mkdir()
    argv = python_child(
        "battery_files_worker.py", str(pristine), str(work), mode, "1729", str(trials)
    )
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=30 + 3 * trials,
            env=child_env(),
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        raise AssertionError(f"hang: last line {out.strip().splitlines()[-1:]}") from None
    assert done.returncode == 0, done.stderr[-3000:]
    results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(results) == trials
    problems = []
    for r in results:
        outcomes = [r["check_open"], *r.get("check_reads", []), *r["runtime"]]
        others = [o for o in outcomes if o.startswith("OTHER")]
        if others:
            problems.append(f"trial {r['trial']} ({mode} at {r['where']}): {others}")
        if r["check_open"] not in ("ok", "StoreCorruptError"):
            problems.append(f"trial {r['trial']}: refused with {r['check_open']}")
        if r["check_open"] != "ok" and not r.get("refused_unchanged", True):
            problems.append(f"trial {r['trial']}: the refused file was changed")
        if r["check_open"] == "ok" and r.get("integrity") is False:
            problems.append(f"trial {r['trial']}: opened with the check, yet not intact")
        COUNTS[f"{mode}_refused" if r["check_open"] != "ok" else f"{mode}_opened"] += 1
    COUNTS[f"{mode}_trials"] += trials
    assert not problems, f"{len(problems)} of {trials} trials:\n" + "\n".join(problems[:15])


# -- truncations and tiny files, deterministically ------------------------------------------


@pytest.mark.parametrize("cut", [1, 16, 64, 70, 100, 4096, 4097])
def test_truncated_tidelog_file_is_corrupt(tmp_path: Path, cut: int) -> None:
    """A tidelog file truncated anywhere is refused with StoreCorruptError and left as it is."""
    path = tmp_path / "cut.db"
    populate(path)
    path.write_bytes(path.read_bytes()[:cut])
    before = digest(path)
    with pytest.raises(StoreCorruptError):
        SqliteStore(path, integrity_check_on_open=True).close()
    assert digest(path) == before
    COUNTS["truncations_checked"] += 1


@pytest.mark.parametrize(
    "content", [b"x", b"\n", b"hello", b"a" * 200], ids=["x", "newline", "hello", "a200"]
)
def test_small_non_database_file_refused_unchanged(tmp_path: Path, content: bytes) -> None:
    """A small non-database file is refused with a tidelog error, never overwritten."""
    path = tmp_path / "notes.txt"
    path.write_bytes(content)
    with pytest.raises((StoreCorruptError, UnsupportedFormatError)):
        SqliteStore(path).close()
    assert path.read_bytes() == content
    COUNTS["foreign_files_checked"] += 1


# -- damage SQLite cannot see: valid pages, invalid stored text --------------------------


def _damage_text(path: Path, needle: bytes, replacement: bytes) -> None:
    """Overwrite every copy of ``needle`` in the file: the live row's, and stale copies
    that moved rows leave in free space (SQLite does not erase them)."""
    data = path.read_bytes()
    assert needle in data, needle
    path.write_bytes(data.replace(needle, replacement + needle[len(replacement) :]))


@pytest.mark.parametrize(
    ("needle", "replacement"),
    [
        (b':"marker-0-7 ', b":(marker-0-7 "),  # not JSON any more
        (b"marker-0-8 ", b"marker-0-8\xff"),  # not UTF-8 any more
    ],
    ids=["bad-json", "bad-utf8"],
)
async def test_damaged_event_text_is_store_corrupt(
    tmp_path: Path, needle: bytes, replacement: bytes
) -> None:
    """Damaged JSON text of an event (intact pages) makes reads raise StoreCorruptError,
    whole or windowed (a window up to PACKED_READ_MAX events is fetched packed)."""
    path = tmp_path / "text.db"
    populate(path)
    _damage_text(path, needle, replacement)
    store = SqliteStore(path, integrity_check_on_open=True)
    try:
        reads: list[Callable[[], object]] = [
            lambda: store.read("session-0"),
            lambda: store.read("session-0", limit=200),
            lambda: store.read("session-0", limit=200, from_end=True),
        ]
        for read in reads:
            with pytest.raises(StoreCorruptError):
                read()
        assert len(store.read("session-1")) == 115
        assert len(store.read("session-1", limit=200)) == 115
    finally:
        store.close()
    with trio.fail_after(20):
        async with open_runtime(path) as rt:
            async with rt.open_session("session-0", mode="read") as r:
                with pytest.raises(StoreCorruptError):
                    await r.read()
            async with rt.snapshot("session-0") as snap:
                with pytest.raises(StoreCorruptError):
                    await snap.read()
            async with rt.open_session("session-1", mode="read") as r:
                assert len(await r.read()) == 115
    COUNTS["content_damage_checked"] += 1


async def test_damaged_header_text_is_store_corrupt(tmp_path: Path) -> None:
    """Damaged header text makes stat and list_sessions raise StoreCorruptError."""
    path = tmp_path / "header.db"
    populate(path)
    _damage_text(path, b'{"owner":"user3"', b'{"owner":"user3\xff')
    store = SqliteStore(path, integrity_check_on_open=True)
    try:
        with pytest.raises(StoreCorruptError):
            store.list_sessions()
        with pytest.raises(StoreCorruptError):
            store.stat("session-3")
        assert store.stat("session-2") is not None
    finally:
        store.close()
    COUNTS["content_damage_checked"] += 1


# -- a WAL from another database ---------------------------------------------------------


def _wal_of_other_database(tmp_path: Path) -> Path:
    """A -wal file of another tidelog database, holding only *some* of its pages (that
    database was checkpointed, then written again), as a crash leaves it."""
    other = tmp_path / "other.db"
    populate(other, sessions=3, events=60)
    store = SqliteStore(other)
    try:
        store.append("session-0", [NewEvent("late", {"n": n, "pad": "z" * 300}) for n in range(40)])
        wal = tmp_path / "other.wal"
        shutil.copyfile(f"{other}-wal", wal)  # copied while the writer is alive
    finally:
        store.close()
    return wal


def test_wal_from_another_database_is_refused_and_files_kept(tmp_path: Path) -> None:
    """A foreign -wal is refused with StoreCorruptError and the refusal changes neither file."""
    path = tmp_path / "mine.db"
    populate(path)
    original = {sid: len(evs) for sid, evs in _logs(path).items()}
    shutil.copyfile(_wal_of_other_database(tmp_path), f"{path}-wal")
    before = (digest(path), digest(f"{path}-wal"))
    with pytest.raises(StoreCorruptError):
        SqliteStore(path, integrity_check_on_open=True)
    after = (digest(path), digest(f"{path}-wal"))
    with contextlib.suppress(FileNotFoundError):
        os.remove(f"{path}-wal")
    assert after == before, "refusing the file changed it (the foreign WAL was checkpointed)"
    assert {sid: len(evs) for sid, evs in _logs(path).items()} == original
    COUNTS["foreign_wal_checked"] += 1


async def test_wal_from_another_database_never_hangs_the_runtime(tmp_path: Path) -> None:
    """A foreign -wal never hangs the runtime and lets only tidelog errors out. Passes by
    not hanging and not raising anything else: which calls succeed is left open."""
    path = tmp_path / "mine.db"
    populate(path)
    shutil.copyfile(_wal_of_other_database(tmp_path), f"{path}-wal")
    with trio.fail_after(20):
        try:
            async with open_runtime(path) as rt:
                for info in await rt.list_sessions():
                    try:
                        async with rt.snapshot(info.id) as snap:
                            await snap.read()
                    except TidelogError:
                        pass
        except TidelogError:
            pass
    COUNTS["foreign_wal_checked"] += 1


def _logs(path: Path) -> dict[str, list[object]]:
    store = SqliteStore(path)
    try:
        return {i.id: [e.data for e in store.read(i.id)] for i in store.list_sessions()}
    finally:
        store.close()


# -- newer / foreign files with a hot WAL ------------------------------------------------


def _hot_wal_copy(tmp_path: Path, name: str, change: str) -> Path:
    """A file whose last transaction (``change``) is only in its -wal, as a crash leaves
    it: the files are copied while the connection that wrote it is still open."""
    source = tmp_path / f"{name}-source.db"
    populate(source, sessions=2, events=30)
    conn = apsw.Connection(str(source))
    try:
        conn.execute("PRAGMA wal_autocheckpoint=0")
        conn.execute(change)
        target = tmp_path / f"{name}.db"
        shutil.copyfile(source, target)
        shutil.copyfile(f"{source}-wal", f"{target}-wal")
    finally:
        conn.close()
    return target


@pytest.mark.parametrize(
    "change",
    [
        f"PRAGMA user_version={sqlite_schema.SCHEMA_VERSION + 1}",
        "PRAGMA application_id=1234567",
    ],
    ids=["newer", "foreign"],
)
async def test_newer_or_foreign_file_with_hot_wal_refused_unchanged(
    tmp_path: Path, change: str
) -> None:
    """A newer or foreign file with a hot -wal is refused and both files are left unchanged."""
    path = _hot_wal_copy(tmp_path, "hot", change)
    before = (digest(path), digest(f"{path}-wal"))
    with pytest.raises(UnsupportedFormatError):
        SqliteStore(path, integrity_check_on_open=True)
    assert (digest(path), digest(f"{path}-wal")) == before, "the store changed the file"
    with trio.fail_after(20), pytest.raises(UnsupportedFormatError):
        async with open_runtime(path):
            pass
    assert (digest(path), digest(f"{path}-wal")) == before, "the runtime changed the file"
    COUNTS["hot_wal_refusals_checked"] += 1


# -- permissions -------------------------------------------------------------------------


def file_modes(path: Path) -> dict[str, int]:
    modes = {}
    for suffix in ("", "-wal", "-shm"):
        assert os.path.exists(f"{path}{suffix}"), suffix
        modes[suffix or "db"] = os.stat(f"{path}{suffix}").st_mode & 0o777
    return modes


@pytest.mark.parametrize("umask", [0o000, 0o002, 0o022])
async def test_files_created_without_group_or_world_write(tmp_path: Path, umask: int) -> None:
    """Database, -wal and -shm files get no group or world write permission, whatever the umask."""
    path = tmp_path / "perm.db"
    old = os.umask(umask)
    try:
        async with open_runtime(path) as rt, rt.open_session("s") as w:
            await w.append([NewEvent("k", 1)])
            modes = file_modes(path)  # while the runtime holds them: -wal and -shm exist
    finally:
        os.umask(old)
    bad = {name: oct(mode) for name, mode in modes.items() if mode & 0o022}
    assert not bad, f"group/world writable: {bad}"
    COUNTS["permission_checks"] += 3
