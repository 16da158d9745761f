"""Battery: the connection to PostgreSQL cut in the middle of writes (a real network
failure, made by a proxy on 127.0.0.1: ``pg_proxy.py``).

A cut either drops the chunk the client was sending (the server never runs it) or
delivers it and throws the server's answer away (the server ran it, and committed it if
it was a commit: the lost acknowledgement). The client cannot tell the two apart; the
store raises ``StoreIOError`` saying the write may have been committed, and the resend
rule (``retry=True`` with the same ``expected_head``) must land it exactly once either
way. Store-level cases cut every write path of ``PostgresStore.write_batch`` at its
commit, both ways, and a flush's and a close's barrier; the random rounds cut a
runtime's connections (writes, reads, lease renewals, the change feed) once or twice
during a workload of awaited appends, ``append_nowait`` with flushes, groups, truncates
and replaces, tailed from a second runtime, and check that every session's log, and
every tail, is exactly the accepted events, in order, once each.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import AsyncExitStack
from typing import Literal

import pytest
import trio

pytest.importorskip("psycopg", reason="psycopg is not installed (pip install -e '.[postgres]')")

from battery_support import record, size
from pg_proxy import CutProxy, open_cut_proxy
from pgtest import url_of

from runtime import open_runtime
from stores import (
    AppendOp,
    CommitPendingError,
    ConflictError,
    NewEvent,
    PostgresStore,
    PreparedEvent,
    StoredEvent,
    StoreIOError,
    TruncateOp,
    WriteOp,
)

pytestmark = pytest.mark.slow

#: Rounds of the random battery (each a runtime of its own, one or two cuts).
ROUNDS = size(16, 300)
#: What the psycopg connection sends to commit an explicit transaction (a simple query).
COMMIT = b"Q\x00\x00\x00\x0bCOMMIT\x00"
#: The extended protocol's Execute of the unnamed portal, all rows: the message that runs
#: a statement (the chunk before it may only prepare one).
EXECUTE = b"E\x00\x00\x00\x09\x00\x00\x00\x00\x00"
#: What a flush barrier's statement holds (and no connection's setup, which sets
#: ``synchronous_commit`` too): the WAL message that makes PostgreSQL flush its WAL.
BARRIER = b"pg_logical_emit_message"
#: ReadyForQuery, idle: the server's answer says its transaction ended (committed, for a
#: write; a read in autocommit says the same).
IDLE = b"Z\x00\x00\x00\x05I"

TOTAL = {
    "rounds": 0,
    "cuts": 0,
    "delivered": 0,
    "answers_lost_after_commit": 0,
    "failed_commits": 0,
    "pending_errors": 0,
    "barrier_errors": 0,
    "events": 0,
}


@pytest.fixture
def proxy(pg_where: tuple[str, str]) -> Iterator[CutProxy]:
    with open_cut_proxy(pg_where[0]) as running:
        yield running


def ev(value: int) -> PreparedEvent:
    return PreparedEvent("k", str(value))


def data(store: PostgresStore, session_id: str) -> list[object]:
    return [event.data for event in store.read(session_id)]


def resent(ops: list[WriteOp]) -> list[WriteOp]:
    """``ops`` as the resend rule says: every append with ``retry=True``."""
    return [
        AppendOp(op.session_id, op.events, op.expected_head, op.owner, op.header_json, True)
        if isinstance(op, AppendOp)
        else op
        for op in ops
    ]


#: Store-level batches, each ``(ops, the logs it leaves, match)``: the sessions start with
#: events 1 and 2; the cut is at the first chunk holding ``match`` (the one statement of
#: the append paths runs at its Execute).
SHAPES: dict[str, tuple[list[WriteOp], dict[str, list[object]], bytes]] = {
    "lone append": ([AppendOp("a", (ev(3),), 2)], {"a": [1, 2, 3]}, EXECUTE),
    "lone append, two events": ([AppendOp("a", (ev(3), ev(4)), 2)], {"a": [1, 2, 3, 4]}, EXECUTE),
    "one statement for three sessions": (
        [AppendOp("a", (ev(3),), 2), AppendOp("b", (ev(3),), 2), AppendOp("c", (ev(3),), 2)],
        {"a": [1, 2, 3], "b": [1, 2, 3], "c": [1, 2, 3]},
        EXECUTE,
    ),
    "one statement, a new session": (
        [AppendOp("a", (ev(3),), 2), AppendOp("new", (ev(1),), 0)],
        {"a": [1, 2, 3], "new": [1]},
        EXECUTE,
    ),
    "the general path (a truncate and an append), cut at its COMMIT": (
        [TruncateOp("a", 1), AppendOp("a", (ev(5),), 1), AppendOp("b", (ev(3),), 2)],
        {"a": [1, 5], "b": [1, 2, 3]},
        COMMIT,
    ),
}


@pytest.mark.parametrize("deliver", [True, False], ids=["answer-lost", "never-sent"])
@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("sync", [False, True], ids=["commit", "sync"])
def test_a_cut_write_lands_once_when_resent_as_told(
    proxy: CutProxy, pg_where: tuple[str, str], shape: str, deliver: bool, sync: bool
) -> None:
    """A write_batch whose connection is cut (the server ran it and the answer was lost,
    or it never reached the server) raises StoreIOError telling to resend with
    retry=True; the log holds the batch whole or not at all, and the resend leaves it
    exactly once. A resend without retry=True after a lost answer is refused
    (ConflictError), never stored twice."""
    dsn, schema = pg_where
    ops, after, match = SHAPES[shape]
    direct = PostgresStore(dsn, schema=schema)
    store = PostgresStore(proxy.dsn(dsn), schema=schema)
    try:
        for session_id in ("a", "b", "c"):
            direct.append(session_id, [NewEvent("k", 1), NewEvent("k", 2)])
        store.write_batch([AppendOp("a", (ev(9),), 0)])  # its sessions' ids learnt: fails
        before = {session_id: data(direct, session_id) for session_id in after}
        proxy.arm(deliver=deliver, match=match)
        with pytest.raises(StoreIOError, match="retry=True") as info:
            store.write_batch(ops, sync=sync)
        assert proxy.cuts
        assert proxy.cuts[-1][0] is deliver
        assert "may have been committed" in str(info.value)
        landed = {session_id: data(direct, session_id) for session_id in after}
        assert landed == (after if deliver else before)
        if deliver and any(isinstance(op, AppendOp) for op in ops):
            plain = [op for op in ops if isinstance(op, AppendOp) and op.events]
            results = store.write_batch(plain[:1])
            assert isinstance(results[0], ConflictError)
        store.write_batch(resent(ops), sync=sync)
        assert {session_id: data(direct, session_id) for session_id in after} == after
    finally:
        store.close()
        direct.close()


@pytest.mark.parametrize("deliver", [True, False], ids=["answer-lost", "never-sent"])
async def test_a_cut_flush_barrier_says_call_flush_again(
    proxy: CutProxy, pg_where: tuple[str, str], deliver: bool
) -> None:
    """A flush whose barrier's connection is cut raises the store's error class saying
    the writes are committed and to call flush again; the next flush succeeds and the
    log holds each event once."""
    dsn, schema = pg_where
    direct = PostgresStore(dsn, schema=schema)
    try:
        url = url_of(proxy.dsn(dsn), schema)
        async with open_runtime(url) as rt, rt.open_session("s") as w:
            await w.append([NewEvent("k", 1)])
            proxy.arm(deliver=deliver, match=BARRIER)
            with pytest.raises(StoreIOError, match="call flush again") as info:
                await w.flush()
            assert isinstance(info.value.__cause__, StoreIOError)
            assert proxy.cuts
            await w.flush()
            await w.append([NewEvent("k", 2)])
        assert await trio.to_thread.run_sync(data, direct, "s") == [1, 2]
    finally:
        direct.close()


@pytest.mark.parametrize("deliver", [True, False], ids=["answer-lost", "never-sent"])
async def test_a_cut_final_barrier_fails_the_close_and_loses_nothing(
    proxy: CutProxy, pg_where: tuple[str, str], deliver: bool
) -> None:
    """A runtime whose final barrier (at close) is cut raises the store's error class at
    exit, saying every accepted write is committed and to open the store again and flush;
    the log holds each event once."""
    dsn, schema = pg_where
    direct = PostgresStore(dsn, schema=schema)
    try:
        url = url_of(proxy.dsn(dsn), schema)

        async def write_and_close() -> None:
            async with open_runtime(url) as rt, rt.open_session("s") as w:
                await w.append([NewEvent("k", 1)])
                await w.append([NewEvent("k", 2)])  # committed, not yet durable
                proxy.arm(deliver=deliver, match=BARRIER)

        with pytest.raises(StoreIOError, match="open the store again and flush") as info:
            await write_and_close()
        assert str(info.value).startswith("closing the runtime")
        assert isinstance(info.value.__cause__, StoreIOError)
        assert proxy.cuts
        assert await trio.to_thread.run_sync(data, direct, "s") == [1, 2]
    finally:
        direct.close()


async def _round(
    url: str,
    direct: PostgresStore,
    proxy: CutProxy,
    cuts: list[tuple[int, bool, bytes | None]],
    tag: str,
    synchronous: Literal["normal", "full"] = "normal",
) -> None:
    """One runtime, seven sessions written five ways (awaited appends of one and of
    three events, ``append_nowait`` with flushes, groups over two sessions, appends with
    truncates and replaces), two of them tailed by another runtime, and ``cuts``: ``(n,
    deliver, match)`` each (see :meth:`CutProxy.arm`), the first counted once the
    sessions are open, each next one from the cut before, on a runtime with
    ``synchronous``. With no cuts the proxy records what clients send from then on."""
    accepted: dict[str, list[int]] = {f"{tag}-{i}": [] for i in range(7)}
    names = list(accepted)
    try:
        runtime = open_runtime(url, synchronous=synchronous, batch_window=0.001)
        async with runtime as rt, open_runtime(url) as other, AsyncExitStack() as stack:
            writers = [await stack.enter_async_context(rt.open_session(name)) for name in names]
            proxy.record = not cuts
            for n, deliver, match in cuts:
                proxy.arm(n, deliver=deliver, match=match)

            async def awaited(index: int, per_call: int) -> None:
                w, log = writers[index], accepted[names[index]]
                for i in range(0, 12, per_call):
                    values = list(range(i, i + per_call))
                    try:
                        await w.append([NewEvent("k", v) for v in values])
                    except CommitPendingError:
                        TOTAL["pending_errors"] += 1  # accepted: the runtime retries it
                    log.extend(values)

            async def queued(index: int) -> None:
                w, log = writers[index], accepted[names[index]]
                for i in range(12):
                    w.append_nowait([NewEvent("k", i)])
                    log.append(i)
                    if i % 4 == 3:
                        try:
                            await w.flush()
                        except CommitPendingError:
                            TOTAL["pending_errors"] += 1
                        except StoreIOError:  # the barrier failed: committed, not known durable
                            TOTAL["barrier_errors"] += 1

            async def grouped(first: int, second: int) -> None:
                for i in range(0, 8, 2):
                    parts = {writers[first]: [i, i + 1], writers[second]: [100 + i]}
                    try:
                        await rt.append_atomic(
                            {w: [NewEvent("k", v) for v in values] for w, values in parts.items()}
                        )
                    except CommitPendingError:
                        TOTAL["pending_errors"] += 1  # the whole group stays queued
                    accepted[names[first]].extend(parts[writers[first]])
                    accepted[names[second]].extend(parts[writers[second]])

            async def rewritten(index: int) -> None:
                w, log = writers[index], accepted[names[index]]
                for i in range(0, 30, 10):
                    try:
                        await w.append([NewEvent("k", i + k) for k in range(3)])
                    except CommitPendingError:
                        TOTAL["pending_errors"] += 1
                    log.extend([i, i + 1, i + 2])
                    try:
                        await w.truncate(len(log) - 1)
                    except CommitPendingError:
                        TOTAL["pending_errors"] += 1
                    del log[-1:]
                    try:
                        await w.replace(len(log) - 1, [NewEvent("k", i + 5), NewEvent("k", i + 6)])
                    except CommitPendingError:
                        TOTAL["pending_errors"] += 1
                    log[len(log) - 1 :] = [i + 5, i + 6]

            async def tailed(index: int) -> None:
                # Another runtime (another host) hears of the commits through the
                # store's change feed, whose connection the cuts reach too.
                name = names[index]
                seen = tails[name] = []
                async for event in other.tail(name):
                    seen.append(event)
                    if len(seen) == 12:
                        break

            tails: dict[str, list[StoredEvent]] = {}
            with trio.fail_after(60):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(tailed, 0)
                    nursery.start_soon(tailed, 3)
                    nursery.start_soon(awaited, 0, 1)
                    nursery.start_soon(awaited, 1, 1)
                    nursery.start_soon(queued, 2)
                    nursery.start_soon(awaited, 3, 3)
                    nursery.start_soon(grouped, 4, 5)
                    nursery.start_soon(rewritten, 6)
            await stack.aclose()  # every writer drained (or its close raises)
            failed = rt.statistics().writer.failed_batches
        proxy.record = False
    except StoreIOError as exc:  # the final barrier failed: committed, not known durable
        if not str(exc).startswith("closing the runtime"):
            raise
        TOTAL["barrier_errors"] += 1
    proxy.disarm()
    for name, values in accepted.items():
        assert await trio.to_thread.run_sync(data, direct, name) == values, name
    for name, seen in tails.items():  # each committed event once, in order, no gap
        assert [(event.seq, event.data) for event in seen] == list(
            enumerate(accepted[name], start=1)
        ), name
    TOTAL["rounds"] += bool(cuts)
    TOTAL["cuts"] += len(proxy.cuts)
    TOTAL["delivered"] += sum(deliver for deliver, _ in proxy.cuts)
    TOTAL["answers_lost_after_commit"] += sum(IDLE in answer for answer in proxy.lost)
    TOTAL["failed_commits"] += failed
    TOTAL["events"] += sum(len(values) for values in accepted.values())


async def test_random_cuts_keep_every_accepted_event_once(pg_where: tuple[str, str]) -> None:
    """Rounds of a runtime whose connections are cut once at a random chunk (answer lost
    or chunk dropped): every session's log is exactly its accepted events, once each, and
    no write is lost or refused."""
    dsn, schema = pg_where
    direct = PostgresStore(dsn, schema=schema)
    try:
        with open_cut_proxy(dsn) as proxy:  # a round without a cut: what clients send
            await _round(url_of(proxy.dsn(dsn), schema), direct, proxy, [], "dry")
            sent = proxy.sent
        # Where a cut may fall, and how many such chunks a round sends: any chunk; a
        # COMMIT (the general path's commit point); a chunk that runs a statement (the
        # one-statement appends commit there). A delivered cut elsewhere aborts an open
        # transaction; at these two it loses the answer to a commit.
        targets = [
            (match, sum(match is None or match in chunk for chunk in sent))
            for match in (None, COMMIT, EXECUTE)
        ]
        for number in range(ROUNDS):
            rng = random.Random(number)
            with open_cut_proxy(dsn) as proxy:
                # one cut, or two (the second may meet the reconnection itself)
                count = rng.choice((1, 1, 2))
                cuts = []
                for _ in range(count):
                    match, total = rng.choice(targets)
                    cuts.append((rng.randint(1, max(1, total // count)), rng.random() < 0.5, match))
                url = url_of(proxy.dsn(dsn), schema)
                synchronous: Literal["normal", "full"] = rng.choice(("normal", "full"))
                await _round(url, direct, proxy, cuts, f"r{number}", synchronous)
    finally:
        direct.close()
    assert TOTAL["cuts"] >= ROUNDS * 3 // 4, TOTAL
    assert TOTAL["failed_commits"] >= 1, TOTAL  # the cuts reached commits, not only reads
    assert TOTAL["answers_lost_after_commit"] >= 1, TOTAL  # and lost answers to commits
    record("pg_cuts", **TOTAL)
