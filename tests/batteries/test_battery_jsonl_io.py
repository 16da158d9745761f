"""Battery 3 on a JSONL store: I/O faults under the runtime, damaged and cut files, a full
file system.

* fsyncs and writes fail intermittently (through the store's I/O seam,
  ``stores.jsonl._files.IO``) while a runtime appends with ``synchronous="full"``: every
  accepted event is committed exactly once, gapless, once the faults stop;
* a failed flush barrier raises, commits nothing new, and the next flush succeeds;
* a session file cut or damaged at random places reads as a whole-batch prefix of what
  was written, or raises ``StoreCorruptError`` / ``UnsupportedFormatError`` -- never
  other data, never another error -- and a file cut short is continued without a gap;
* a real, small file system (tmpfs, 1 MiB) filled up: appends fail with a store error and
  write nothing partial; once space is freed the same runtime goes on without a gap.

CI: 6 fault rounds and 40 damaged files per mode; soak: 60 and 400.
"""

from __future__ import annotations

import contextlib
import errno
import os
import random
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
from battery_support import contiguous, record, size

from runtime import JSON, CommitPendingError, NewEvent, SessionWriter, StoreError, open_runtime
from stores import JsonlStore, StoreCorruptError, UnsupportedFormatError
from stores.jsonl import _files as jsonl_files
from stores.jsonl._format import file_stem

ROUNDS = size(6, 60)
TRIALS = size(40, 400)


@pytest.fixture
def seam() -> Iterator[None]:
    saved = (jsonl_files.IO.write, jsonl_files.IO.fsync, jsonl_files.IO.truncate)
    yield
    jsonl_files.IO.write, jsonl_files.IO.fsync, jsonl_files.IO.truncate = saved


class Flaky:
    """Fails a call with ``error`` while ``on`` is set, every ``every``-th call."""

    def __init__(self, real: object, error: int, every: int) -> None:
        self.real = real
        self.error = error
        self.every = every
        self.on = False
        self.calls = 0
        self.failed = 0

    def __call__(self, *args: object) -> object:
        self.calls += 1
        if self.on and self.calls % self.every == 0:
            self.failed += 1
            raise OSError(self.error, os.strerror(self.error))
        return self.real(*args)  # type: ignore[operator]


@pytest.mark.parametrize("rounds", [ROUNDS])
@pytest.mark.usefixtures("seam")
async def test_intermittent_faults_commit_everything_exactly_once(
    tmp_path: Path, rounds: int
) -> None:
    """Failing fsyncs and writes while a runtime appends (FULL): accepted events are
    retried in the background and each lands exactly once, in order, without a gap."""
    root = tmp_path / "io.jsonl"
    root.mkdir()
    fsync = Flaky(os.fsync, errno.EIO, 2)
    write = Flaky(os.write, errno.ENOSPC, 3)
    jsonl_files.IO.fsync, jsonl_files.IO.write = fsync, write  # type: ignore[assignment]
    sent = 0
    async with (
        open_runtime(root, synchronous="full") as rt,
        rt.open_session("s", mode="write") as w,
    ):
        assert isinstance(w, SessionWriter)
        for _ in range(rounds):
            fsync.on = write.on = True
            for _ in range(5):
                w.append_nowait([NewEvent("k", {"n": sent + k}) for k in range(3)])
                sent += 3
                await trio.sleep(0.005)
            with contextlib.suppress(CommitPendingError):
                await w.flush()
            fsync.on = write.on = False
            with trio.fail_after(30):
                await w.wait_committed()
        await w.flush()
    store = JsonlStore(root, read_only=True)
    try:
        events = store.read("s")
        assert contiguous([e.seq for e in events])
        assert [e.data for e in events] == [{"n": n} for n in range(sent)]
        assert store.check_integrity() == (True, "ok")
    finally:
        store.close()
    assert fsync.failed
    assert write.failed
    record(
        "io-jsonl",
        rounds=rounds,
        events=sent,
        failed_fsyncs=fsync.failed,
        failed_writes=write.failed,
    )


@pytest.mark.parametrize("failing", [1, 2, 3])
@pytest.mark.usefixtures("seam")
async def test_a_failed_creation_at_open_leaves_exactly_what_was_accepted(
    tmp_path: Path, failing: int
) -> None:
    """The ``failing``-th fsync of a new session's life fails (FULL): publishing its
    file, the commit of its creation, or its first append's commit. The log then holds
    exactly the accepted events, once each: a failed open accepted nothing and the next
    open creates the session again; a failed append's commit is retried."""
    root = tmp_path / "first.jsonl"
    root.mkdir()
    calls = 0

    def fsync(fd: int) -> None:
        nonlocal calls
        calls += 1
        if calls == failing:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        os.fsync(fd)

    accepted: list[JSON] = []
    async with open_runtime(root, synchronous="full") as rt:
        jsonl_files.IO.fsync = fsync
        try:
            async with rt.open_session("s", mode="write") as w:
                assert isinstance(w, SessionWriter)
                try:
                    await w.append([NewEvent("k", 0)])
                finally:
                    accepted.append(0)  # accepted (committed, or retried: not resent)
        except CommitPendingError:
            assert failing == 3
        except StoreError:
            assert failing in (1, 2)  # the open failed: nothing accepted
        async with rt.open_session("s", mode="write") as w:
            assert isinstance(w, SessionWriter)
            await w.append([NewEvent("k", 1)])
            accepted.append(1)
    assert calls > failing
    store = JsonlStore(root, read_only=True)
    try:
        assert [e.data for e in store.read("s")] == accepted
        assert store.check_integrity() == (True, "ok")
    finally:
        store.close()


@pytest.mark.usefixtures("seam")
async def test_failed_barrier_raises_and_the_next_one_syncs(tmp_path: Path) -> None:
    """A flush whose fsync fails raises a store error; the events stay committed and the
    next flush makes them durable."""
    root = tmp_path / "barrier.jsonl"
    root.mkdir()
    async with open_runtime(root) as rt, rt.open_session("s", mode="write") as w:
        assert isinstance(w, SessionWriter)
        await w.append([NewEvent("k", 1)])
        jsonl_files.IO.fsync = Flaky(os.fsync, errno.EIO, 1)  # type: ignore[assignment]
        jsonl_files.IO.fsync.on = True  # type: ignore[attr-defined]
        with pytest.raises(StoreError):
            await rt.flush()
        jsonl_files.IO.fsync = os.fsync
        await rt.flush()
        assert [e.data for e in await rt.read("s")] == [1]


def _written(root: Path) -> list[dict[str, JSON]]:
    store = JsonlStore(root)
    try:
        rng = random.Random(5)
        data = []
        for b in range(30):
            batch: list[dict[str, JSON]] = [{"b": b, "k": k} for k in range(rng.randint(1, 4))]
            store.append("s", [NewEvent("k", d) for d in batch])
            data += batch
        return data
    finally:
        store.close()


@pytest.mark.parametrize("mode", ["cuts", "flips"])
@pytest.mark.parametrize("trials", [TRIALS])
def test_damaged_files_read_as_a_prefix_or_are_refused(
    tmp_path: Path, mode: str, trials: int
) -> None:
    """A session file cut or bit-flipped anywhere reads as a whole-batch prefix of what was
    written, or raises StoreCorruptError / UnsupportedFormatError; a cut file is then
    written on without a gap."""
    pristine = tmp_path / "pristine"
    written = _written(pristine)
    name = f"{file_stem('s')}.jsonl"
    content = (pristine / "sessions" / name).read_bytes()
    rng = random.Random(11 if mode == "cuts" else 12)
    outcomes = {"prefix": 0, "refused": 0}
    for trial in range(trials):
        root = tmp_path / f"t{trial}"
        shutil.copytree(pristine, root)
        damaged = bytearray(content)
        if mode == "cuts":
            del damaged[rng.randrange(len(content)) :]
        else:
            for _ in range(rng.randint(1, 3)):
                damaged[rng.randrange(len(content))] ^= 1 << rng.randrange(8)
        (root / "sessions" / name).write_bytes(bytes(damaged))
        store = JsonlStore(root)
        try:
            try:
                events = store.read("s")
            except (StoreCorruptError, UnsupportedFormatError):
                outcomes["refused"] += 1
                continue
            got = [e.data for e in events]
            assert got == written[: len(got)], trial
            assert len(got) == len(written) or written[len(got)]["k"] == 0, "a batch was cut"
            outcomes["prefix"] += 1
            if mode == "cuts":
                assert store.append("s", [NewEvent("k", "after")]) == len(got) + 1
                assert [e.seq for e in store.read("s")] == list(range(1, len(got) + 2))
        finally:
            store.close()
    assert outcomes["prefix"] if mode == "cuts" else outcomes["refused"]
    record("files-jsonl", mode=mode, trials=trials, **outcomes)


@contextlib.contextmanager
def small_file_system(path: Path) -> Iterator[bool]:
    """A 1 MiB tmpfs at ``path`` (True), or a plain directory where mounting is not allowed
    (False: the full disk is then simulated through the I/O seam)."""
    path.mkdir()
    mounted = (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(path)], capture_output=True
        ).returncode
        == 0
    )
    try:
        yield mounted
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)


@pytest.mark.usefixtures("seam")
async def test_full_file_system_fails_appends_whole_and_recovers(tmp_path: Path) -> None:
    """Appends into a full file system fail with a store error and leave no partial batch;
    after space is freed the same runtime goes on from the last committed seq."""
    with small_file_system(tmp_path / "small") as real:
        root = tmp_path / "small" / "store"
        root.mkdir()
        filler = tmp_path / "small" / "filler"
        if not real:
            jsonl_files.IO.write = Flaky(os.write, errno.ENOSPC, 1)  # type: ignore[assignment]
        async with (
            open_runtime(root, synchronous="full") as rt,
            rt.open_session("s", mode="write") as w,
        ):
            assert isinstance(w, SessionWriter)
            await w.append([NewEvent("k", {"n": 0})])
            if real:
                with filler.open("wb") as f, contextlib.suppress(OSError):
                    while True:
                        f.write(b"\0" * 65536)
                        f.flush()
            else:
                jsonl_files.IO.write.on = True  # type: ignore[attr-defined]
            failed = 0
            for n in range(1, 4):
                with pytest.raises((CommitPendingError, StoreError)):
                    await w.append([NewEvent("k", {"n": n, "pad": "x" * 20000})])
                failed += 1
            if real:
                filler.unlink()
            else:
                jsonl_files.IO.write = os.write
            with trio.fail_after(30):
                await w.wait_committed()
            events = await rt.read("s")
            assert contiguous([e.seq for e in events])
            assert [e.data["n"] for e in events if isinstance(e.data, dict)] == [
                0,
                1,
                2,
                3,
            ]
            assert failed == 3
