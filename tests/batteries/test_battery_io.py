"""Battery 3: I/O faults. An apsw VFS shim (``battery_vfs.py``), registered as the
default VFS, fails ``xWrite`` / ``xSync`` / ``xRead`` on demand with EIO or ENOSPC.

Checked for the store and for the runtime: the operation that meets the fault raises
:class:`StoreIOError` naming the cause (the driver error chained as ``__cause__``); data
committed before is intact; nothing of the failed operation is visible (a commit whose
fsync failed may reappear *whole* after a crash -- the documented ambiguous case -- and a
retry with ``retry=True`` then lands it exactly once); once the fault clears the session
continues -- the runtime retries its queued events and each lands exactly once, in order,
without a gap. The intermittent-fault test runs 6 rounds in CI, 60 in the soak run.
"""

from __future__ import annotations

import contextlib
import random
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import apsw
import pytest
import trio
from battery_support import record, size
from battery_vfs import Call, Fault, FaultyVFS, Kind, faulty_default_vfs
from helpers import num, text

from runtime import (
    JSON,
    CommitPendingError,
    NewEvent,
    SessionWriter,
    SqliteStore,
    StoreError,
    StoreIOError,
    UnwrittenError,
    open_runtime,
)
from stores import AppendOp, prepare_events

KINDS: list[Kind] = ["eio", "enospc"]
#: The calls the intermittent-fault test draws from (writes twice as often as syncs).
CALLS: list[Call] = ["write", "sync", "write"]
CAUSE = {"eio": ("Input/output error", apsw.IOError), "enospc": ("No space left", apsw.FullError)}
TOTAL = {"faults": 0, "checks": 0, "ambiguous_reappeared": 0}


@pytest.fixture
def vfs() -> Iterator[FaultyVFS]:
    """The fault-injecting VFS, default for the test's duration.

    Where SQLite itself tolerates a failed call (a sync while switching to WAL, a write of
    an automatic checkpoint), apsw still has the shim's Python exception pending; it
    raises it from the statement that was running, or -- when it cannot -- reports it as
    "unraisable". Those reports of *injected* errors are expected here and dropped."""
    previous = sys.unraisablehook

    def hook(unraisable: sys.UnraisableHookArgs) -> None:
        if isinstance(unraisable.exc_value, apsw.Error) and "(injected)" in str(
            unraisable.exc_value
        ):
            return
        previous(unraisable)

    sys.unraisablehook = hook
    try:
        with faulty_default_vfs() as shim:
            yield shim
            TOTAL["faults"] += sum(shim.injected.values())
    finally:
        sys.unraisablehook = previous


@pytest.fixture(scope="module", autouse=True)
def _record_counts() -> Iterator[None]:
    yield
    record(
        "io",
        faults_injected=TOTAL["faults"],
        checks=TOTAL["checks"],
        ambiguous_commits_reappeared=TOTAL["ambiguous_reappeared"],
    )


def evs(tag: str, n: int, start: int = 0) -> list[NewEvent]:
    return [NewEvent("k", {"tag": tag, "i": i}) for i in range(start, start + n)]


def data(store: SqliteStore, session_id: str = "s") -> list[JSON]:
    return [e.data for e in store.read(session_id)]


def assert_names_cause(exc: BaseException, kind: Kind) -> None:
    """A StoreIOError whose message names the OS error, with the driver error chained."""
    text, driver = CAUSE[kind]
    assert type(exc) is StoreIOError, repr(exc)
    assert text in str(exc), str(exc)
    assert isinstance(exc.__cause__, driver), repr(exc.__cause__)
    TOTAL["checks"] += 1


def assert_pending(exc: BaseException, kind: Kind) -> None:
    """A CommitPendingError (the writes were accepted and stay queued) caused by a
    StoreIOError that names the OS error."""
    assert type(exc) is CommitPendingError, repr(exc)
    assert exc.__cause__ is not None
    assert_names_cause(exc.__cause__, kind)


def assert_unwritten(exc: BaseException, kind: Kind) -> None:
    """An UnwrittenError (accepted writes given up) caused by a StoreIOError that names
    the OS error."""
    assert type(exc) is UnwrittenError, repr(exc)
    assert exc.__cause__ is not None
    assert_names_cause(exc.__cause__, kind)


def sync_append(store: SqliteStore, events: list[NewEvent]) -> None:
    """An append committed with a durability barrier (what a flush does)."""
    [result] = store.write_batch([AppendOp("s", tuple(prepare_events(events)))], sync=True)
    assert isinstance(result, int)


# -- the store -----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("call", ["write", "sync"])
def test_store_write_fault_fails_whole_and_store_continues(
    tmp_path: Path, vfs: FaultyVFS, call: Call, kind: Kind
) -> None:
    """A write or sync fault fails the append whole with StoreIOError; the store continues."""
    store = SqliteStore(tmp_path / "io.db")
    try:
        store.append("s", evs("before", 10))
        vfs.arm(Fault(call, kind))
        with pytest.raises(StoreError) as info:
            sync_append(store, evs("failed", 3))
        assert_names_cause(info.value, kind)
        assert data(store) == [{"tag": "before", "i": i} for i in range(10)]
        vfs.disarm()
        assert store.head("s") == 10
        assert store.append("s", evs("after", 2)) == 12
        assert store.check_integrity() == (True, "ok")
    finally:
        store.close()
    reopened = SqliteStore(tmp_path / "io.db")
    try:
        assert [text(e, "tag") for e in reopened.read("s")] == ["before"] * 10 + ["after"] * 2
    finally:
        reopened.close()


@pytest.mark.parametrize("kind", KINDS)
def test_store_read_fault_fails_read_only(tmp_path: Path, vfs: FaultyVFS, kind: Kind) -> None:
    """A read fault fails the read with StoreIOError naming the cause and changes nothing."""
    store = SqliteStore(tmp_path / "io.db")
    reader = store.clone()  # a cold page cache: its reads reach the file
    try:
        store.append("s", evs("before", 50))
        vfs.arm(Fault("read", kind))
        with pytest.raises(StoreError) as info:
            reader.read("s")
        assert_names_cause(info.value, kind)
        vfs.disarm()
        assert data(reader) == [{"tag": "before", "i": i} for i in range(50)]
        assert reader.append("s", evs("after", 1)) == 51
        assert store.head("s") == 51
    finally:
        reader.close()
        store.close()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("call", ["write", "sync"])
def test_store_open_fault_leaves_no_half_made_file(
    tmp_path: Path, vfs: FaultyVFS, call: Call, kind: Kind
) -> None:
    """A fault while a new file is created raises StoreIOError and leaves no half-made file."""
    path = tmp_path / "new.db"
    vfs.arm(Fault(call, kind))
    with pytest.raises(StoreError) as info:
        SqliteStore(path, synchronous="full")
    assert_names_cause(info.value, kind)
    vfs.disarm()
    store = SqliteStore(path, integrity_check_on_open=True)
    try:
        assert store.list_sessions() == []
        assert store.append("s", evs("x", 1)) == 1
    finally:
        store.close()


@pytest.mark.parametrize("kind", KINDS)
def test_failed_fsync_commit_is_whole_after_crash_and_retry_lands_once(
    tmp_path: Path, vfs: FaultyVFS, kind: Kind
) -> None:
    """A commit whose fsync failed is hidden now, whole or absent after a crash; retried once."""
    path, crashed = tmp_path / "ghost.db", tmp_path / "crashed.db"
    before = [{"tag": "before", "i": i} for i in range(3)]
    failed = [{"tag": "failed", "i": i} for i in range(2)]
    store = SqliteStore(path)
    try:
        store.append("s", evs("before", 3))
        vfs.arm(Fault("sync", kind))
        with pytest.raises(StoreError) as info:
            sync_append(store, evs("failed", 2))
        assert_names_cause(info.value, kind)
        vfs.disarm()
        assert data(store) == before  # not visible to anyone now
        shutil.copyfile(path, crashed)  # the process dies here: its files stay as they are
        shutil.copyfile(f"{path}-wal", f"{crashed}-wal")
    finally:
        store.close()
    reopened = SqliteStore(crashed)
    try:
        after_crash = data(reopened)
        assert after_crash in (before, before + failed), after_crash  # whole or absent
        # The documented remedy: resend with the expected head and retry=True.
        op = AppendOp("s", tuple(prepare_events(evs("failed", 2))), expected_head=3, retry=True)
        assert reopened.write_batch([op]) == [5]
        assert data(reopened) == before + failed
    finally:
        reopened.close()
    TOTAL["ambiguous_reappeared"] = TOTAL.get("ambiguous_reappeared", 0) + (after_crash != before)


# -- the runtime ---------------------------------------------------------------------------


def _values(path: Path) -> list[JSON]:
    store = SqliteStore(path)
    try:
        return data(store)
    finally:
        store.close()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("call", "synchronous"), [("write", "normal"), ("sync", "normal"), ("sync", "full")]
)
async def test_runtime_retries_queued_events_exactly_once(
    tmp_path: Path,
    vfs: FaultyVFS,
    call: Call,
    synchronous: Literal["normal", "full"],
    kind: Kind,
) -> None:
    """After write or sync faults clear, the runtime's queued events land once, in order."""
    path = tmp_path / "rt.db"
    expected: list[object] = []
    with trio.fail_after(30):
        async with (
            open_runtime(path, synchronous=synchronous) as rt,
            rt.open_session("s") as w,
        ):
            await w.append(evs("before", 5))
            await w.flush()
            expected += [{"tag": "before", "i": i} for i in range(5)]
            vfs.arm(Fault(call, kind))
            if call == "write" or synchronous == "full":
                with pytest.raises(CommitPendingError) as info:
                    await w.append(evs("awaited", 2))  # fails, stays queued
                assert_pending(info.value, kind)
                assert (info.value.first, info.value.last) == (6, 7)
                expected += [{"tag": "awaited", "i": i} for i in range(2)]
            for b in range(3):
                w.append_nowait(evs(f"nowait{b}", 2))
                expected += [{"tag": f"nowait{b}", "i": i} for i in range(2)]
            with pytest.raises(CommitPendingError) as info:
                await w.flush()  # the queued appends ride the failing (sync) batch
            assert_pending(info.value, kind)
            assert (info.value.first, info.value.last) == (6, len(expected))
            async with rt.snapshot("s") as snap:  # committed data is intact
                assert [e.data for e in await snap.read()] == expected[: snap.as_of_seq]
                assert snap.as_of_seq >= 5
            assert await w.head() == len(expected)
            vfs.disarm()
            await w.flush()  # retried after the backoff: now it lands
            assert w.committed_head == await w.head() == len(expected)
            assert [e.data for e in await w.read()] == expected
            assert await w.append(evs("after", 1)) == len(expected) + 1
            expected.append({"tag": "after", "i": 0})
    assert _values(path) == expected


@pytest.mark.parametrize("kind", KINDS)
async def test_runtime_failed_barrier_after_commits(
    tmp_path: Path, vfs: FaultyVFS, kind: Kind
) -> None:
    """A flush whose writes are all committed and whose fsync barrier fails raises the
    store error's class (not CommitPendingError: nothing is queued), saying to call flush
    again, with the store's error chained; the next flush, once the disk is back, makes
    them durable."""
    path = tmp_path / "rt.db"
    with trio.fail_after(30):
        async with open_runtime(path) as rt, rt.open_session("s") as w:
            assert await w.append(evs("x", 3)) == 3  # committed, not yet fsynced
            vfs.arm(Fault("sync", kind))
            with pytest.raises(StoreIOError, match="call flush again") as info:
                await w.flush()
            assert type(info.value) is StoreIOError
            assert info.value.__cause__ is not None
            assert_names_cause(info.value.__cause__, kind)
            vfs.disarm()
            await w.flush()
            assert w.committed_head == 3
    assert len(_values(path)) == 3


@pytest.mark.parametrize("kind", KINDS)
async def test_runtime_read_fault_surfaces_and_runtime_keeps_serving(
    tmp_path: Path, vfs: FaultyVFS, kind: Kind
) -> None:
    """Read faults fail reads, snapshots and tails with StoreIOError naming the cause."""
    path = tmp_path / "rt.db"
    with trio.fail_after(30):
        async with open_runtime(path) as rt, rt.open_session("s") as w:
            for i in range(20):
                await w.append(evs("x", 30, start=30 * i))
            async with rt.open_session("s", mode="read") as r:
                vfs.arm(Fault("read", kind, target="wal"))

                async def snapshot_read() -> object:
                    async with rt.snapshot("s") as snap:
                        return await snap.read()

                async def tail_read() -> object:
                    async for event in rt.tail("s"):
                        return event
                    return None

                outcomes: dict[str, BaseException | None] = {}
                for name, attempt in (
                    ("read", r.read),
                    ("snapshot", snapshot_read),
                    ("tail", tail_read),
                ):
                    try:
                        await attempt()
                        outcomes[name] = None
                    except StoreError as exc:
                        outcomes[name] = exc
                vfs.disarm()  # before asserting: a failed assertion must not leave it armed
                assert len(await r.read()) == 600
                for name, error in outcomes.items():
                    assert error is not None, f"{name} read through a failing disk"
                    assert_names_cause(error, kind)
            assert await w.append(evs("y", 1)) == 601


@pytest.mark.parametrize("kind", KINDS)
async def test_runtime_open_session_fault(tmp_path: Path, vfs: FaultyVFS, kind: Kind) -> None:
    """A fault while a write open takes the lease raises StoreIOError; the session stays free."""
    path = tmp_path / "rt.db"
    with trio.fail_after(30):
        async with open_runtime(path) as rt:
            vfs.arm(Fault("write", kind))
            with pytest.raises(StoreError) as info:
                async with rt.open_session("s"):
                    raise AssertionError("opened while every write fails")
            assert_names_cause(info.value, kind)
            vfs.disarm()
            async with rt.open_session("s") as w:
                assert await w.append(evs("x", 1)) == 1


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("call", ["write", "sync"])
async def test_runtime_shutdown_with_persistent_fault(
    tmp_path: Path, vfs: FaultyVFS, call: Call, kind: Kind
) -> None:
    """A fault lasting through shutdown. A write fault: leaving the writer's block raises
    UnwrittenError naming exactly the accepted events that were not written (with those
    events), and the file holds a gapless prefix of what was accepted -- together, all
    of it, once. A sync fault: every commit landed, only the final fsync barrier failed,
    and the exit raises a StoreIOError saying so, the store's chained."""
    path = tmp_path / "rt.db"
    accepted: list[object] = []
    expected = UnwrittenError if call == "write" else StoreIOError

    async def write_then_leave() -> None:
        async with open_runtime(path) as rt, rt.open_session("s") as w:
            await w.append(evs("before", 4))
            accepted.extend({"tag": "before", "i": i} for i in range(4))
            vfs.arm(Fault(call, kind))
            for b in range(3):
                w.append_nowait(evs(f"b{b}", 3))
                accepted.extend({"tag": f"b{b}", "i": i} for i in range(3))
            # Until the writer tried them: committed (a sync fault fails only the final
            # barrier) or failed at least once (a write fault).
            with trio.fail_after(10):
                while (  # noqa: ASYNC110 (the writer's thread decides)
                    w.committed_head < len(accepted) and rt.statistics().writer.failed_batches == 0
                ):
                    await trio.sleep(0.005)

    with trio.fail_after(30):
        with pytest.raises(expected) as info:
            await write_then_leave()
    vfs.disarm()
    stored = _values(path)
    if isinstance(info.value, UnwrittenError):
        assert_unwritten(info.value, kind)
        unwritten = [event.data for event in info.value.events]
        assert stored + unwritten == accepted
        assert (info.value.first, info.value.last) == (len(stored) + 1, len(accepted))
        assert len(stored) >= 4, stored
        assert (len(stored) - 4) % 3 == 0, stored
    else:
        assert str(info.value).startswith("closing the runtime: the durability barrier")
        assert info.value.__cause__ is not None
        assert_names_cause(info.value.__cause__, kind)
        assert stored == accepted


@pytest.mark.parametrize("rounds", [size(6, 60)])
async def test_runtime_intermittent_faults(tmp_path: Path, vfs: FaultyVFS, rounds: int) -> None:
    """Faults that come and go never lose, repeat or reorder an event, nor wedge the runtime."""
    rng = random.Random(8)
    path = tmp_path / "rt.db"
    expected: list[object] = []
    with trio.fail_after(60 + 5 * rounds):
        async with open_runtime(path) as rt, rt.open_session("s") as w:
            for r in range(rounds):
                call = rng.choice(CALLS)
                vfs.arm(Fault(call, rng.choice(KINDS), times=rng.randint(1, 4)))
                for b in range(rng.randint(1, 6)):
                    batch = evs(f"r{r}b{b}", rng.randint(1, 4))
                    expected += [e.data for e in batch]
                    if rng.random() < 0.5:
                        w.append_nowait(batch)
                        continue
                    with contextlib.suppress(CommitPendingError):  # accepted: retried later
                        await w.append(batch)
                for _ in range(20):  # flush until the fault's budget is spent
                    try:
                        await w.flush()
                        break
                    except (CommitPendingError, StoreIOError):
                        await trio.sleep(0.01)
                else:
                    raise AssertionError("flush never succeeded after the faults ended")
                vfs.disarm()
                assert [e.data for e in await w.read()] == expected, f"round {r}"
    assert _values(path) == expected


async def _append(w: SessionWriter, batch: list[NewEvent]) -> list[NewEvent]:
    await w.append(batch)
    return batch


def _padded_batch(i: int) -> list[NewEvent]:
    """Two ~60 KB events: enough WAL pages per append to reach checkpoints quickly."""
    return [NewEvent("k", {"i": i, "j": j, "pad": "p" * 60_000}) for j in range(2)]


async def test_runtime_error_after_commit_lands_once(tmp_path: Path, vfs: FaultyVFS) -> None:
    """An error reported after the commit landed is retried without writing anything twice.

    The store checkpoints inside its commits (``checkpoints="auto"``), so a failing
    database write fails a checkpoint that runs after the COMMIT of the same call."""
    path = tmp_path / "ambiguous.db"
    expected: list[NewEvent] = []
    ambiguous = 0
    store = SqliteStore(path, checkpoints="auto")
    with trio.fail_after(60), contextlib.closing(store):
        async with open_runtime(store) as rt, rt.open_session("s") as w:
            vfs.arm(Fault("write", "eio", target="db"))
            for i in range(120):  # > 1000 WAL pages: checkpoints are attempted and fail
                batch = _padded_batch(i)
                expected += batch
                try:
                    await w.append(batch)
                except CommitPendingError:  # accepted: the retry must not write it twice
                    ambiguous += 1
                    vfs.disarm()
                    await w.flush()
                    vfs.arm(Fault("write", "eio", target="db"))
            vfs.disarm()
            await w.flush()
            assert ambiguous >= 1, "no checkpoint was attempted"
            stored = await w.read()
            assert [(num(e, "i"), num(e, "j")) for e in stored] == [
                (num(e, "i"), num(e, "j")) for e in expected
            ]
    assert len(_values(path)) == len(expected)


async def test_runtime_checkpoint_failures_never_reach_appends(
    tmp_path: Path, vfs: FaultyVFS
) -> None:
    """With the runtime's own store (checkpoints deferred to a background task), failing
    database-file writes fail only checkpoints: every append succeeds, the failures are
    counted, and once the disk recovers a checkpoint succeeds and nothing is lost."""
    path = tmp_path / "deferred.db"
    expected: list[object] = []
    with trio.fail_after(60):
        async with open_runtime(path) as rt, rt.open_session("s") as w:
            vfs.arm(Fault("write", "eio", target="db"))
            for i in range(120):  # > 1000 WAL frames: checkpoints are attempted and fail
                expected += [e.data for e in await _append(w, _padded_batch(i))]
            while rt.statistics().failed_wal_checkpoints == 0:  # noqa: ASYNC110 (a background task's counter)
                await trio.sleep(0.01)
            vfs.disarm()
            before = rt.statistics().wal_checkpoints
            for i in range(120, 240):
                expected += [e.data for e in await _append(w, _padded_batch(i))]
            while rt.statistics().wal_checkpoints == before:  # noqa: ASYNC110 (a background task's counter)
                await trio.sleep(0.01)
            await w.flush()
            stored = [e.data for e in await w.read()]
            assert stored == expected
    assert _values(path) == expected
