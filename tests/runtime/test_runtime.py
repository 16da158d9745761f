"""The session runtime: handles, ownership, group commit, durability, snapshots, errors."""

from __future__ import annotations

import pathlib
from collections.abc import Sequence
from contextlib import AsyncExitStack

import pytest
import trio
import trio.testing
from helpers import FlakyMemoryStore, RuntimeFactory, num, share_state, stat_head

from actors._writer import DELIVERY_SLICE
from runtime import (
    BrokenError,
    ClosedError,
    CommitPendingError,
    ConflictError,
    InvalidArgumentError,
    InvalidEventError,
    InvalidSessionIdError,
    MemoryStore,
    NewEvent,
    OwnershipLostError,
    Runtime,
    SessionNotFoundError,
    SessionOwnedError,
    SessionReader,
    SessionWriter,
    SnapshotExpiredError,
    SqliteStore,
    StoreIOError,
    UnwrittenError,
    open_runtime,
)
from stores import BatchResult, WriteOp, prepare_events
from stores.sqlite._store import CHECKPOINT_FALLBACK_PAGES


def ev(i: int, kind: str = "k") -> NewEvent:
    return NewEvent(kind, {"i": i})


async def writer(stack: AsyncExitStack, rt: Runtime, session_id: str) -> SessionWriter:
    """Open a writer whose ``async with`` is held by ``stack``."""
    handle = await stack.enter_async_context(rt.open_session(session_id, mode="write"))
    return handle


# -- appends and heads --------------------------------------------------------------------


async def test_open_session_mode_picks_the_handle(rt: Runtime) -> None:
    """open_session returns the handle its overloads promise: a SessionWriter for the
    default and "write" modes, a SessionReader for "read"."""
    async with rt.open_session("s") as w, rt.open_session("t", mode="write") as w2:
        assert type(w) is SessionWriter
        assert type(w2) is SessionWriter
    async with rt.open_session("s", mode="read") as r:
        assert type(r) is SessionReader


async def test_append_returns_committed_head(rt: Runtime) -> None:
    """await append returns the new head after commit; readers see it at once."""
    async with rt.open_session("s") as w:
        assert await w.append([ev(1), ev(2)]) == 2
        assert await w.append([ev(3)]) == 3
        assert await w.head() == w.committed_head == 3
        async with rt.open_session("s", mode="read") as r:
            assert [e.seq for e in await r.read()] == [1, 2, 3]
            assert await r.head() == 3


async def test_append_nowait_returns_range_and_commits_soon(rt: Runtime) -> None:
    """append_nowait assigns seq ranges at once and the writer commits them in order."""
    async with rt.open_session("s") as w:
        assert w.append_nowait([ev(1), ev(2)]) == (1, 2)
        assert w.append_nowait([ev(3)]) == (3, 3)
        assert w.append_nowait([]) == (4, 3)
        assert await w.head() == 3
        await w.flush()
        assert w.committed_head == 3
        assert [e.data for e in await w.read()] == [{"i": 1}, {"i": 2}, {"i": 3}]


async def test_one_event_nowait_appends_share_one_queued_write(rt: Runtime) -> None:
    """A stream of one-event append_nowait calls is queued as one write (no per-call
    bookkeeping), each call still gets its own seq, and they commit once, in order, with
    a multi-event call and an awaited append between them."""
    async with rt.open_session("s") as w:
        actor = w._actor
        assert [w.append_nowait([ev(i)]) for i in range(1, 6)] == [(i, i) for i in range(1, 6)]
        assert len(actor._pending) == 1
        assert w.append_nowait([ev(6), ev(7)]) == (6, 7)  # a multi-event call: its own write
        assert w.append_nowait([ev(8)]) == (8, 8)
        assert len(actor._pending) == 2
        async with trio.open_nursery() as nursery:
            nursery.start_soon(w.append, [ev(9)])
            await trio.testing.wait_all_tasks_blocked()
            assert w.append_nowait([ev(10)]) == (10, 10)
        await w.flush()
        assert [num(e, "i") for e in await w.read()] == list(range(1, 11))
        assert [e.seq for e in await w.read()] == list(range(1, 11))


async def test_expected_head_checked_against_accepted_head(rt: Runtime) -> None:
    """expected_head is compared with the last accepted seq; a mismatch queues nothing."""
    async with rt.open_session("s") as w:
        w.append_nowait([ev(1)])
        assert await w.append([ev(2)], expected_head=1) == 2
        with pytest.raises(ConflictError) as info:
            await w.append([ev(3)], expected_head=1)
        assert (info.value.session_id, info.value.expected, info.value.actual) == ("s", 1, 2)
        with pytest.raises(ConflictError):
            w.append_nowait([ev(3)], expected_head=5)
        assert await w.head() == 2


async def test_write_open_creates_with_header(rt: Runtime) -> None:
    """A write open creates a missing session with its header; stat shows it."""
    async with rt.open_session("s", header={"title": "t"}):
        info = await rt.stat("s")
        assert info is not None
        assert info.header == {"title": "t"}
        assert info.head == 0
    assert await rt.stat("missing") is None


async def test_read_open_of_missing_session_raises(rt: Runtime) -> None:
    """A read open of a missing session raises SessionNotFoundError (also a KeyError)."""
    with pytest.raises(SessionNotFoundError):
        async with rt.open_session("missing", mode="read"):
            pass  # pragma: no cover
    with pytest.raises(KeyError):
        async with rt.snapshot("missing"):
            pass  # pragma: no cover


async def test_bad_input_refused_and_actor_keeps_serving(rt: Runtime) -> None:
    """Invalid ids, payloads, modes and seq types raise the documented error, queue
    nothing, and the session goes on working."""
    with pytest.raises(InvalidSessionIdError):
        async with rt.open_session(""):
            pass  # pragma: no cover
    with pytest.raises(InvalidArgumentError):
        async with rt.open_session("s", mode="append"):  # type: ignore[call-overload]  # bad input under test
            pass  # pragma: no cover
    with pytest.raises(InvalidArgumentError):
        async with rt.open_session("s", header=["x"]):  # type: ignore[call-overload]  # bad input under test
            pass  # pragma: no cover
    async with rt.open_session("s") as w:
        with pytest.raises(InvalidEventError) as info:
            await w.append([ev(1), NewEvent("bad", {"x": float("nan")})])
        assert info.value.index == 1
        with pytest.raises(InvalidEventError):
            w.append_nowait([NewEvent("bad", (1, 2))])  # type: ignore[arg-type]  # bad input under test
        with pytest.raises(InvalidArgumentError):
            await w.append([ev(1)], expected_head="0")  # type: ignore[arg-type]  # bad input under test
        with pytest.raises(InvalidArgumentError):
            await w.truncate(-1)
        with pytest.raises(InvalidArgumentError):
            await w.read(since_seq=-1)
        assert await w.head() == 0
        assert await w.append([ev(1)]) == 1
    with pytest.raises(InvalidArgumentError):
        rt.tail("s", since_seq=-5)
    with pytest.raises(InvalidArgumentError):
        await rt.list_sessions(limit=-1)


# -- ownership ----------------------------------------------------------------------------


async def test_second_writer_in_process_refused_until_close(rt: Runtime) -> None:
    """A second write open raises SessionOwnedError until the first closes."""
    async with rt.open_session("s") as w:
        await w.append([ev(1)])
        with pytest.raises(SessionOwnedError):
            async with rt.open_session("s"):
                pass  # pragma: no cover
    async with rt.open_session("s") as w2:
        assert await w2.head() == 1


async def test_second_runtime_on_same_store_refused(make_runtime: RuntimeFactory) -> None:
    """Two runtimes on one database: the lease makes the second writer fail."""
    async with make_runtime() as a, make_runtime() as b, a.open_session("s"):
        with pytest.raises(SessionOwnedError):
            async with b.open_session("s"):
                pass  # pragma: no cover
    async with make_runtime() as c, c.open_session("s") as w:
        await w.append([ev(1)])


async def test_lost_lease_fences_writer(rt: Runtime) -> None:
    """A writer whose lease was taken over gets OwnershipLostError and writes nothing."""
    store = rt._engine.read_store
    async with rt.open_session("s") as w:
        await w.append([ev(1)])
        owner = rt._engine.supervisor.owner
        await trio.to_thread.run_sync(store.release_lease, "s", owner)
        await trio.to_thread.run_sync(
            lambda: store.acquire_lease("s", "thief", ttl=60.0, holder="thief")
        )
        with pytest.raises(OwnershipLostError):
            await w.append([ev(2)])
        with pytest.raises(OwnershipLostError):
            w.append_nowait([ev(3)])
        with pytest.raises(OwnershipLostError):
            await w.flush()
    assert [e.seq for e in await rt.read("s")] == [1]


async def test_closed_handle_raises_and_close_is_idempotent(rt: Runtime) -> None:
    """Calls on a closed writer raise ClosedError; close twice is fine."""
    async with rt.open_session("s") as w:
        await w.append([ev(1)])
    await w.aclose()
    await w.aclose()
    with pytest.raises(ClosedError):
        await w.append([ev(2)])
    with pytest.raises(ClosedError):
        w.append_nowait([ev(2)])
    with pytest.raises(ClosedError):
        await w.head()


async def test_close_commits_queue_even_when_cancelled(rt: Runtime) -> None:
    """close() cannot be cancelled: queued appends are committed and ownership released."""
    async with rt.open_session("s") as w:
        w.append_nowait([ev(1), ev(2)])
        with trio.CancelScope() as scope:
            scope.cancel()
            await w.aclose()
    assert await stat_head(rt, "s") == 2
    async with rt.open_session("s") as again:
        assert await again.head() == 2


async def test_runtime_closed_after_exit(make_runtime: RuntimeFactory) -> None:
    """Every Runtime call raises ClosedError after open_runtime's block."""
    async with make_runtime() as rt:
        pass
    with pytest.raises(ClosedError):
        await rt.stat("s")
    with pytest.raises(ClosedError):
        async with rt.open_session("s"):
            pass  # pragma: no cover


async def test_errors_are_plain_not_groups(make_runtime: RuntimeFactory) -> None:
    """An error raised in open_runtime's body leaves it as itself, not a group."""
    with pytest.raises(SessionOwnedError):
        async with make_runtime() as rt, rt.open_session("s"), rt.open_session("s"):
            pass  # pragma: no cover


# -- group commit -------------------------------------------------------------------------


async def test_group_commit_shares_transactions(rt: Runtime) -> None:
    """Concurrent appends from many sessions are committed in shared batches."""

    async def work(i: int) -> None:
        async with rt.open_session(f"s{i}") as w:
            for n in range(10):
                assert await w.append([ev(n)]) == n + 1

    async with trio.open_nursery() as nursery:
        for i in range(30):
            nursery.start_soon(work, i)
    stats = rt.statistics()
    assert stats.writer.events_committed >= 300
    assert stats.writer.batches_committed < stats.writer.events_committed
    assert stats.writer.mean_batch_size > 1.0
    for i in range(30):
        assert await stat_head(rt, f"s{i}") == 10


async def test_memory_appends_of_one_round_share_the_leaders_batch() -> None:
    """On a non-blocking store the first awaited append of a scheduler round makes the
    batch in its own task; the appends of the other tasks of that round join it, and a
    flush of one of those sessions asked for meanwhile returns once it is committed."""
    async with open_runtime(MemoryStore()) as rt, AsyncExitStack() as stack:
        writers = [await writer(stack, rt, f"s{i}") for i in range(10)]
        before = rt.statistics().writer

        async def flush_soon() -> None:
            await rt.flush_sessions(["s0"])

        async with trio.open_nursery() as nursery:
            for i, w in enumerate(writers):
                nursery.start_soon(w.append, [ev(i)])
            nursery.start_soon(flush_soon)
        after = rt.statistics().writer
        assert after.events_committed - before.events_committed == 10
        assert after.batches_committed - before.batches_committed <= 2
        for i, w in enumerate(writers):
            assert w.committed_head == 1
            assert await stat_head(rt, f"s{i}") == 1


async def test_memory_leader_cancelled_withdraws_only_its_own_append() -> None:
    """A leading append cancelled at its yield is withdrawn (nothing accepted); a write
    queued while it led is committed all the same, by the writer task. (Trio runs the
    tasks of one round in a random order, so the cancel lands in the yield in about half
    of the rounds; in the others the append commits first.)"""
    withdrawn = 0
    async with open_runtime(MemoryStore()) as rt, AsyncExitStack() as stack:
        lead, other = await writer(stack, rt, "lead"), await writer(stack, rt, "other")
        queued: list[tuple[int, int]] = []

        async def queue_then_cancel(scope: trio.CancelScope, n: int) -> None:
            queued.append(other.append_nowait([ev(n)]))  # runs while lead.append leads
            scope.cancel()

        for n in range(1, 41):
            before = await lead.head()
            queued.clear()
            with trio.CancelScope() as scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(queue_then_cancel, scope, n)
                    await lead.append([ev(n)])
            assert queued == [(n, n)]
            with trio.fail_after(10):
                await other.wait_committed()
            assert await stat_head(rt, "other") == n
            head = await lead.head()
            assert head in (before, before + 1)  # all or nothing
            assert await stat_head(rt, "lead") == head
            withdrawn += head == before
    assert withdrawn > 0


async def test_memory_leader_refused_after_its_yield_accepts_nothing() -> None:
    """A leading append checks ``expected_head`` again after its yield: when a write of
    another task moved the head meanwhile, it is refused with ConflictError and nothing
    of it is accepted, and that other write is committed all the same. (Trio runs the
    tasks of one round in a random order, so the other write lands in the yield in about
    half of the rounds; in the others the append commits first.)"""
    refused = 0
    async with open_runtime(MemoryStore()) as rt, rt.open_session("s") as w:
        accepted: list[int] = []
        for n in range(40):
            head = await w.head()

            async def move_head(n: int = n) -> None:
                w.append_nowait([ev(1000 + n)])

            async with trio.open_nursery() as nursery:
                nursery.start_soon(move_head)
                try:
                    await w.append([ev(n)], expected_head=head)
                except ConflictError:
                    refused += 1
                    assert await w.head() == head + 1  # only the other write
                    accepted.append(1000 + n)
                else:
                    accepted.append(n)  # ...and the other write after it
                    accepted.append(1000 + n)
            with trio.fail_after(10):
                await w.wait_committed()
        assert [e.data for e in await w.read()] == [{"i": i} for i in accepted]
    assert refused > 0


async def test_memory_leader_failing_commit_lands_once() -> None:
    """A leading append whose own batch fails raises CommitPendingError (accepted); the
    writer task's retry lands it, and the log holds every accepted event exactly once
    (also when the failed attempt had committed, and when the first retry fails too)."""
    store = FlakyMemoryStore()
    async with open_runtime(store) as rt, rt.open_session("s") as w:
        await w.append([ev(0)])
        for i, (fail_next, fail_after) in enumerate([(1, 0), (0, 1), (2, 0)], start=1):
            store.fail_next, store.fail_after_commit = fail_next, fail_after
            with pytest.raises(CommitPendingError):
                await w.append([ev(i)])
            with trio.fail_after(10):
                while True:
                    try:
                        await w.wait_committed()
                        break
                    except CommitPendingError:
                        continue  # a retry failed too: still queued
        assert [e.data for e in await w.read()] == [{"i": i} for i in range(4)]
        assert await w.head() == 4


async def test_big_batch_wakes_its_waiters_in_slices(rt: Runtime) -> None:
    """A batch of more than DELIVERY_SLICE awaited appends wakes its waiters a slice at
    a time (other tasks run in between), and the next batch still takes every waiter."""
    sessions = 3 * DELIVERY_SLICE + 5
    writers = []
    async with AsyncExitStack() as stack:
        for i in range(sessions):
            writers.append(await stack.enter_async_context(rt.open_session(f"s{i}")))
        done = 0
        most_between_steps = 0
        running = True

        async def observer() -> None:
            nonlocal done, most_between_steps
            while running:
                seen = done
                await trio.lowlevel.checkpoint()
                most_between_steps = max(most_between_steps, done - seen)

        async def work(w: SessionWriter) -> None:
            nonlocal done
            for n in range(3):
                await w.append([ev(n)])
                done += 1

        before = rt.statistics().writer.batches_committed
        async with trio.open_nursery() as nursery:
            nursery.start_soon(observer)
            async with trio.open_nursery() as clients:
                for w in writers:
                    clients.start_soon(work, w)
            running = False
    assert done == 3 * sessions
    assert 0 < most_between_steps <= 2 * DELIVERY_SLICE
    assert rt.statistics().writer.batches_committed - before == 3


async def test_one_bad_append_fails_alone() -> None:
    """A session whose op fails inside a shared batch fails alone; the others commit."""
    store = MemoryStore()
    async with open_runtime(store, batch_window=0.05) as rt, AsyncExitStack() as stack:
        a = await writer(stack, rt, "a")
        b = await writer(stack, rt, "b")
        store.append("a", [ev(99)])  # a foreign write behind the runtime's back
        a.append_nowait([ev(1)])
        b.append_nowait([ev(1)])
        with pytest.raises(UnwrittenError) as dropped:
            await a.flush()
        assert isinstance(dropped.value.__cause__, ConflictError)
        assert (dropped.value.first, dropped.value.last) == (1, 1)
        await b.flush()
        assert store.head("b") == 1
        assert [e.data for e in store.read("a")] == [{"i": 99}]
        with pytest.raises(BrokenError) as broken:
            await a.append([ev(2)])
        assert isinstance(broken.value.__cause__, ConflictError)
        assert await b.append([ev(2)]) == 2


# -- durability and failures --------------------------------------------------------------


async def test_concurrent_flushes_share_one_barrier(tmp_path: pathlib.Path) -> None:
    """Many concurrent flushes are served by one fsync barrier."""
    async with open_runtime(tmp_path / "db") as rt, AsyncExitStack() as stack:
        writers = [await writer(stack, rt, f"s{i}") for i in range(10)]
        for w in writers:
            w.append_nowait([ev(1)])
        before = rt.statistics().writer.fsyncs
        async with trio.open_nursery() as nursery:
            for w in writers:
                nursery.start_soon(w.flush)
        after = rt.statistics()
        assert after.writer.fsyncs - before <= 2  # one barrier (two if a batch was mid-flight)
        assert after.writer.flushes >= 10
        await rt.flush()


async def test_flush_with_nothing_pending_is_cheap(rt: Runtime) -> None:
    """flush() with nothing to make durable returns without a barrier."""
    async with rt.open_session("s") as w:
        await w.append([ev(1)])
        await w.flush()
        fsyncs = rt.statistics().writer.fsyncs
        await w.flush()
        assert rt.statistics().writer.fsyncs == fsyncs


async def test_background_failure_retries_exactly_once(
    autojump_clock: trio.testing.MockClock,  # noqa: ARG001 (pytest-trio runs the test on it)
) -> None:
    """A failed background commit keeps the events queued in order and retries them: a
    flush after the store recovered just succeeds, and each event lands exactly once."""
    store = FlakyMemoryStore()
    async with open_runtime(store) as rt, AsyncExitStack() as stack:
        w = await writer(stack, rt, "s")
        store.fail_next = 1
        assert w.append_nowait([ev(1), ev(2)]) == (1, 2)
        await trio.sleep(0.01)  # the background commit fails
        assert store.head("s") == 0
        await w.flush()  # the retry after the backoff commits them
        assert w.append_nowait([ev(3)]) == (3, 3)
        await w.flush()
        assert [num(e, "i") for e in store.read("s")] == [1, 2, 3]


async def test_flush_reports_a_failing_commit_as_pending(
    autojump_clock: trio.testing.MockClock,  # noqa: ARG001 (pytest-trio runs the test on it)
) -> None:
    """A flush whose writes keep failing raises CommitPendingError naming them; they stay
    queued, and a later flush returns once they landed (exactly once)."""
    store = FlakyMemoryStore()
    async with open_runtime(store) as rt, AsyncExitStack() as stack:
        w = await writer(stack, rt, "s")
        store.fail_next = 2
        w.append_nowait([ev(1), ev(2)])
        with pytest.raises(CommitPendingError) as pending:
            await w.flush()
        assert (pending.value.first, pending.value.last) == (1, 2)
        assert isinstance(pending.value.__cause__, StoreIOError)
        assert await w.head() == 2
        await w.flush()
        assert [e.seq for e in store.read("s")] == [1, 2]


async def test_earlier_failure_never_swallows_the_next_append(
    autojump_clock: trio.testing.MockClock,  # noqa: ARG001 (pytest-trio runs the test on it)
) -> None:
    """After a background commit failure, the next append is queued behind the earlier
    events (never dropped): while the store fails it raises CommitPendingError naming its
    own seqs, and after recovery both land once."""
    store = FlakyMemoryStore()
    async with open_runtime(store) as rt, AsyncExitStack() as stack:
        w = await writer(stack, rt, "s")
        store.fail_next = 2
        w.append_nowait([ev(1)])
        await trio.sleep(0.01)  # the background commit fails
        with pytest.raises(CommitPendingError) as pending:
            await w.append([ev(2)])  # merged with the retry of 1, which fails again
        assert (pending.value.first, pending.value.last) == (2, 2)
        assert await w.head() == 2
        await w.flush()
        assert [num(e, "i") for e in store.read("s")] == [1, 2]


async def test_awaited_append_failure_then_recovery(
    autojump_clock: trio.testing.MockClock,  # noqa: ARG001 (pytest-trio runs the test on it)
) -> None:
    """An awaited append whose commit fails raises CommitPendingError: its events were
    accepted, stay queued and land once."""
    store = FlakyMemoryStore()
    async with open_runtime(store) as rt, AsyncExitStack() as stack:
        w = await writer(stack, rt, "s")
        store.fail_next = 1
        with pytest.raises(CommitPendingError):
            await w.append([ev(1)])
        assert await w.head() == 1
        await w.flush()
        assert [e.seq for e in store.read("s")] == [1]


async def test_commit_that_reported_failure_but_landed_is_not_duplicated(
    autojump_clock: trio.testing.MockClock,  # noqa: ARG001 (pytest-trio runs the test on it)
) -> None:
    """A commit that landed but reported an error is recognised on retry: no duplicate."""
    store = FlakyMemoryStore()
    async with open_runtime(store) as rt, AsyncExitStack() as stack:
        w = await writer(stack, rt, "s")
        store.fail_after_commit = 1
        w.append_nowait([ev(1), ev(2)])
        await trio.sleep(0.01)
        assert w.append_nowait([ev(3)]) == (3, 3)
        await trio.sleep(1.0)  # backoff, then retry
        await w.flush()
        assert [num(e, "i") for e in store.read("s")] == [1, 2, 3]


async def test_exit_drains_queued_writes(tmp_path: pathlib.Path) -> None:
    """Leaving open_runtime commits queued appends and releases every lease."""
    path = tmp_path / "db"
    async with open_runtime(path, batch_window=10.0) as rt, AsyncExitStack() as stack:
        w = await writer(stack, rt, "s")
        w.append_nowait([ev(1), ev(2), ev(3)])
    store = SqliteStore(path)
    try:
        assert store.head("s") == 3
        store.acquire_lease("s", "someone-else", ttl=1.0, holder="test")
    finally:
        store.close()


# -- snapshots ----------------------------------------------------------------------------


async def test_snapshot_reads_are_stable_while_writer_appends(rt: Runtime) -> None:
    """All reads through one snapshot return identical data while a writer appends."""
    async with rt.open_session("s") as w:
        await w.append([ev(i) for i in range(5)])
        async with rt.snapshot("s") as snap:
            first = await snap.read()
            for i in range(5):
                await w.append([ev(10 + i)])
                assert await snap.read() == first
            assert snap.as_of_seq == 5
            assert [e.seq for e in await snap.read(since_seq=3)] == [4, 5]
            assert await snap.read(until_seq=100) == first


async def test_truncate_below_snapshot_expires_it(rt: Runtime) -> None:
    """A truncate that removes events a snapshot covers makes its next read raise;
    one above it does not."""
    async with rt.open_session("s") as w:
        await w.append([ev(i) for i in range(6)])
        async with rt.snapshot("s") as snap:
            await w.append([ev(7)])
            assert await w.truncate(6) == 1
            assert len(await snap.read()) == 6
            assert await w.truncate(3) == 3
            with pytest.raises(SnapshotExpiredError):
                await snap.read()
        assert await w.head() == 3
        assert await w.append([ev(100)]) == 4


async def test_delete_expires_snapshot(rt: Runtime) -> None:
    """Deleting a session expires its snapshots; delete returns False the second time."""
    async with rt.open_session("s") as w:
        await w.append([ev(1)])
    async with rt.snapshot("s") as snap:
        assert await rt.delete("s") is True
        with pytest.raises(SnapshotExpiredError):
            await snap.read()
    assert await rt.delete("s") is False
    assert await rt.stat("s") is None


async def test_delete_refused_while_writer_open(rt: Runtime) -> None:
    """rt.delete raises SessionOwnedError while a writer handle is open on the session."""
    async with rt.open_session("s"):
        with pytest.raises(SessionOwnedError):
            await rt.delete("s")


async def test_a_session_deleted_on_a_retry_opens_again_at_once() -> None:
    """A delete whose first commit failed lands on its retry; opening the session again
    then starts a new actor at once, not after the old one's idle timeout."""
    store = FlakyMemoryStore()
    async with open_runtime(store, idle_timeout=3600.0) as rt:
        async with rt.open_session("s") as w:
            await w.append([ev(1)])
        store.fail_next = 1
        with pytest.raises(CommitPendingError):
            await rt.delete("s")
        await rt.flush()
        assert await rt.stat("s") is None
        with trio.fail_after(60):  # (it waited the whole idle timeout)
            async with rt.open_session("s") as w:
                assert await w.append([ev(2)]) == 1
        assert [num(e, "i") for e in store.read("s")] == [2]


async def test_snapshot_does_not_pin_the_wal(tmp_path: pathlib.Path) -> None:
    """While a snapshot is held, the runtime's background checkpoints still copy the WAL
    back and it restarts (it ends far smaller than what was written, and a checkpoint with
    the snapshot held copies all of it), and the snapshot reads the same."""
    path = tmp_path / "db"
    wal = f"{path}-wal"
    async with open_runtime(path) as rt, rt.open_session("s") as w:
        await w.append([ev(0)])
        async with rt.snapshot("s") as snap:
            await snap.read()
            for i in range(1500):  # ~6 WAL pages per append: ~9000 pages in all
                await w.append([NewEvent("k", {"pad": "x" * 1000, "i": i})])
            largest = (await trio.Path(wal).stat()).st_size  # the file never shrinks
            with trio.fail_after(30):
                # The checkpoints run in the checkpointer's thread: no trio event to wait
                # on, so poll its counter (bounded by the deadline).
                while rt.statistics().wal_checkpoints < 2:  # noqa: ASYNC110
                    await trio.sleep(0.01)
            # A pinned WAL would hold all ~9000 pages; one that restarts holds about the
            # fallback threshold plus what commits while a checkpoint runs (timing: a loaded
            # machine adds hundreds of pages, so the bound leaves room for them).
            assert CHECKPOINT_FALLBACK_PAGES * 4096 < 9000 * 4096 * 2 // 3
            assert largest < 9000 * 4096 * 2 // 3
            assert len(await snap.read()) == 1
            import apsw

            conn = apsw.Connection(str(path))
            try:
                with trio.fail_after(10):
                    while True:  # the runtime's own checkpoint may be running (busy)
                        row = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                        assert row is not None
                        busy, log, done = row
                        if not busy:
                            break
                        await trio.sleep(0.01)
            finally:
                conn.close()
            assert log == done


async def test_exit_during_background_checkpoints_loses_nothing(tmp_path: pathlib.Path) -> None:
    """Leaving open_runtime while its checkpointer may be mid-checkpoint waits for it, closes
    every connection, and the file reopens intact with every event."""
    path = tmp_path / "db"
    for round_ in range(3):
        async with open_runtime(path) as rt, rt.open_session("s") as w:
            for i in range(400):  # ~2400 WAL pages: checkpoints start along the way
                await w.append([NewEvent("k", {"pad": "x" * 1000, "r": round_, "i": i})])
            if round_ == 0:  # one has run (it runs in a thread: wait, bounded, for it)
                with trio.fail_after(30):
                    # The checkpoint runs in the checkpointer's thread: no trio event to
                    # wait on, so poll its counters (bounded by the deadline).
                    while not (  # noqa: ASYNC110
                        rt.statistics().wal_checkpoints + rt.statistics().failed_wal_checkpoints
                    ):
                        await trio.sleep(0.01)
            # ... and the exit may come while later ones are mid-checkpoint.
    store = SqliteStore(path, integrity_check_on_open=True)
    try:
        events = store.read("s")
    finally:
        store.close()
    assert [(num(e, "r"), num(e, "i")) for e in events] == [
        (r, i) for r in range(3) for i in range(400)
    ]


# -- lifecycle ----------------------------------------------------------------------------


async def test_concurrent_first_uses_share_one_actor(rt: Runtime) -> None:
    """Concurrent first uses of a session spawn one actor and take the lease once."""
    sup = rt._engine.supervisor
    got = []

    async def use() -> None:
        actor = await sup.acquire("s", header_json="{}", exclusive=False, create="if_missing")
        got.append(actor)

    async with trio.open_nursery() as nursery:
        for _ in range(5):
            nursery.start_soon(use)
    assert len({id(a) for a in got}) == 1
    for actor in got:
        sup.release(actor, exclusive=False)


async def test_idle_actor_evicted_and_lease_released(
    autojump_clock: trio.testing.MockClock,  # noqa: ARG001 (pytest-trio runs the test on it)
) -> None:
    """An unused actor is evicted after idle_timeout with its queue committed and its
    lease released."""
    store = MemoryStore()
    async with open_runtime(store, idle_timeout=5.0) as rt:
        sup = rt._engine.supervisor
        actor = await sup.acquire("s", header_json="{}", exclusive=False, create="if_missing")
        actor.append_nowait(prepare_events([ev(1)]), None, urgent=False)
        sup.release(actor, exclusive=False)
        await trio.sleep(1.0)
        assert sup.get("s") is not None
        await trio.sleep(10.0)
        assert sup.get("s") is None
        assert store.head("s") == 1
        store.acquire_lease("s", "other", ttl=1.0, holder="test")  # free: no error


async def test_actor_failure_reaches_waiters() -> None:
    """When a lease is lost, every waiter and later caller gets the error."""
    store = MemoryStore()
    async with open_runtime(store, batch_window=0.01) as rt, AsyncExitStack() as stack:
        w = await writer(stack, rt, "s")
        store.release_lease("s", rt._engine.supervisor.owner)
        store.acquire_lease("s", "thief", ttl=60.0, holder="thief")
        results: list[BaseException] = []

        async def waiter(i: int) -> None:
            try:
                await w.append([ev(i)])
            except OwnershipLostError as exc:
                results.append(exc)

        async with trio.open_nursery() as nursery:
            for i in range(3):
                nursery.start_soon(waiter, i)
        assert len(results) == 3
        assert store.head("s") == 0


async def test_runtime_flush_ignores_other_sessions_starting_or_dead(rt: Runtime) -> None:
    """rt.flush() skips actors that are starting, draining or dead: another session's
    start-up or deletion never makes it raise."""
    async with rt.open_session("a") as w:
        await w.append([ev(1)])

        async def opener() -> None:
            async with rt.open_session("b") as wb:
                await wb.append([ev(1)])

        async with trio.open_nursery() as nursery:
            nursery.start_soon(opener)
            while rt._engine.supervisor.get("b") is None:
                await trio.lowlevel.checkpoint()  # catch it while it is starting
            await rt.flush()
        async with rt.open_session("gone") as g:
            await g.append([ev(1)])
        await rt.delete("gone")
        await rt.flush()
        await w.flush()
        assert w.committed_head == 1
        assert await stat_head(rt, "b") == 1
        assert await rt.stat("gone") is None


class _BadCloseStore(MemoryStore):
    """A MemoryStore whose clones fail to close (as a faulty disk might)."""

    def clone(self, *, read_only: bool | None = None) -> MemoryStore:
        return share_state(self, _FailingCloseStore(), read_only=read_only)


class _FailingCloseStore(MemoryStore):
    """A MemoryStore whose close fails."""

    def close(self) -> None:
        raise StoreIOError("injected: close failed")


async def test_close_errors_never_mask_the_body_error() -> None:
    """A failure while closing the runtime's connections is raised only if the body
    raised nothing; it never replaces the body's own error."""
    with pytest.raises(ValueError, match="body"):
        async with open_runtime(_BadCloseStore()):
            raise ValueError("body")
    with pytest.raises(StoreIOError, match="close failed"):
        async with open_runtime(_BadCloseStore()):
            pass


async def test_waiters_are_woken_when_the_writer_dies() -> None:
    """If the group-commit writer dies (here: a store bug), a task outside the runtime that
    awaits an append is woken with UnwrittenError (its accepted write will never be
    written, because the runtime broke) instead of waiting forever."""

    class BrokenStore(MemoryStore):
        broken = False

        def write_batch(self, ops: Sequence[WriteOp], *, sync: bool = False) -> list[BatchResult]:
            if self.broken:
                raise RuntimeError("a bug in the store")
            return super().write_batch(ops, sync=sync)

    store = BrokenStore()
    seen: list[UnwrittenError] = []

    async def waiter(w: SessionWriter) -> None:
        with pytest.raises(UnwrittenError) as info:
            await w.append([NewEvent("k", 2)])
        seen.append(info.value)

    async def break_the_writer(outside: trio.Nursery) -> None:
        async with open_runtime(store) as rt, rt.open_session("s") as w:
            await w.append([NewEvent("k", 1)])
            store.broken = True
            outside.start_soon(waiter, w)
            await trio.sleep_forever()  # the writer's death cancels this

    with trio.fail_after(10):
        async with trio.open_nursery() as outside:
            with pytest.raises(RuntimeError, match="a bug in the store"):
                await break_the_writer(outside)
    assert len(seen) == 1
    assert isinstance(seen[0].__cause__, BrokenError)


@pytest.mark.parametrize("to_seq", [2, 5])
async def test_truncate_removing_nothing_still_waits_for_earlier_writes(to_seq: int) -> None:
    """A truncate that removes nothing returns, like any other, only once the writes
    accepted before it are committed (here they would wait a long batching window)."""
    async with (
        open_runtime(MemoryStore(), batch_window=3600.0) as rt,
        rt.open_session("s") as w,
    ):
        assert w.append_nowait([NewEvent("k", 1), NewEvent("k", 2)]) == (1, 2)
        with trio.fail_after(60):
            assert await w.truncate(to_seq) == 0
        assert w.committed_head == 2
        assert await stat_head(rt, "s") == 2
