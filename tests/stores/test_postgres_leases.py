"""PostgresStore across hosts: leases on the server's clock, a dead holder taken over at
once through its advisory lock, the fence inside every write, NOTIFY at commit, and
concurrent writers on several connections.

Another host is played by another connection (a clone, a raw psycopg connection) or a
real subprocess killed with SIGKILL; the real server, a schema per test, no mocks.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("psycopg", reason="psycopg is not installed (pip install -e '.[postgres]')")

import psycopg

from stores import (
    AppendOp,
    ConflictError,
    NewEvent,
    OwnershipLostError,
    PostgresStore,
    SessionOwnedError,
    StoreIOError,
    TruncateOp,
    prepare_events,
)
from stores.postgres._connection import parse_payload

Opener = Callable[..., PostgresStore]
ELSEWHERE = "pid 1 on another-host ns 1"  # a holder on another host: no local pid check


def evs(n: int, tag: str = "") -> list[NewEvent]:
    return [NewEvent("k", {"i": i, "tag": tag}) for i in range(n)]


def op(session_id: str, n: int, tag: str = "", **kwargs: Any) -> AppendOp:
    return AppendOp(session_id, tuple(prepare_events(evs(n, tag))), **kwargs)


def server_now(conn: psycopg.Connection[Any]) -> float:
    row = conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()
    assert row is not None
    return float(row[0])


# -- leases: the server's clock ------------------------------------------------------------


def test_lease_expiry_is_on_the_server_clock(
    pg_open: Opener, pg_raw: psycopg.Connection[Any]
) -> None:
    """A lease expires ttl seconds after acquire by the server's clock."""
    store = pg_open()
    before = server_now(pg_raw)
    store.acquire_lease("s", "A", ttl=30.0, holder=ELSEWHERE)
    after = server_now(pg_raw)
    row = pg_raw.execute("SELECT expires FROM leases WHERE id = 's'").fetchone()
    assert row is not None
    assert before + 30.0 <= row[0] <= after + 30.0


@pytest.mark.parametrize("skew", [3600.0, -3600.0], ids=["host_ahead", "host_behind"])
def test_host_clock_skew_cannot_break_a_lease(
    pg_open: Opener, monkeypatch: pytest.MonkeyPatch, skew: float
) -> None:
    """With this host's clock an hour off, a live lease still cannot be taken and an
    expired one still can: only the server's clock counts."""
    holder, taker = pg_open(), pg_open()
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + skew)
    holder.acquire_lease("live", "A", ttl=30.0, holder=ELSEWHERE)
    with pytest.raises(SessionOwnedError):
        taker.acquire_lease("live", "B", ttl=30.0, holder=ELSEWHERE)
    holder.acquire_lease("short", "A", ttl=0.05, holder=ELSEWHERE)
    time.sleep(0.1)
    assert (holder.backend_pid, taker.backend_pid) != (None, None)
    holder.close()  # its advisory lock goes too: expiry is what is tested next
    taker.acquire_lease("short", "B", ttl=30.0, holder=ELSEWHERE)


# -- leases: a dead holder is taken over at once -------------------------------------------


def test_closed_holder_is_taken_over_at_once(pg_open: Opener) -> None:
    """While the holder's connection lives its lease cannot be taken; once it is gone
    (the advisory lock released by the server) another host takes it at once, and the
    old owner's fenced writes fail."""
    holder, taker, other = pg_open(), pg_open(), pg_open()
    holder.acquire_lease("s", "A", ttl=3600.0, holder=ELSEWHERE)
    with pytest.raises(SessionOwnedError):
        taker.acquire_lease("s", "B", ttl=3600.0, holder=ELSEWHERE)
    holder.close()
    taker.acquire_lease("s", "B", ttl=3600.0, holder=ELSEWHERE)
    [lost] = other.write_batch([op("s", 1, owner="A")])
    assert isinstance(lost, OwnershipLostError)
    assert taker.write_batch([op("s", 1, owner="B")]) == [1]


_HOLDER = textwrap.dedent(
    """
    import sys, time
    from stores import PostgresStore
    store = PostgresStore(sys.argv[1], schema=sys.argv[2])
    store.acquire_lease("s", "dead", ttl=3600.0, holder="pid 1 on another-host ns 1")
    store.append("s", [])
    print("ready", flush=True)
    time.sleep(600)
    """
)


def test_sigkilled_holder_is_taken_over_at_once(pg_open: Opener, pg_where: tuple[str, str]) -> None:
    """A holder process killed with SIGKILL (its lease has an hour left) is taken over
    within a second: the server ends its connection and releases the advisory lock."""
    with subprocess.Popen(
        [sys.executable, "-c", _HOLDER, *pg_where],
        stdout=subprocess.PIPE,
        text=True,
    ) as proc:
        _take_over_after_kill(proc, pg_open())


def _take_over_after_kill(proc: subprocess.Popen[str], taker: PostgresStore) -> None:
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        with pytest.raises(SessionOwnedError):
            taker.acquire_lease("s", "B", ttl=60.0, holder=ELSEWHERE)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        killed = time.monotonic()
        while True:
            try:
                taker.acquire_lease("s", "B", ttl=60.0, holder=ELSEWHERE)
                break
            except SessionOwnedError:
                assert time.monotonic() - killed < 1.0, "not taken over within a second"
                time.sleep(0.01)
    finally:
        proc.kill()
        proc.wait()


def test_lease_taken_after_expiry_gets_its_lock_at_renewal(
    pg_open: Opener, pg_raw: psycopg.Connection[Any]
) -> None:
    """A lease taken over after expiry while the old holder's connection lived starts
    without the advisory lock (not "locked": no early takeover); once the old holder gave
    it up, the new holder's renewal takes it, and its own death is then found at once."""
    old, new, third = pg_open(), pg_open(), pg_open()
    old.acquire_lease("s", "A", ttl=0.05, holder=ELSEWHERE)
    time.sleep(0.1)
    new.acquire_lease("s", "B", ttl=3600.0, holder=ELSEWHERE)
    assert pg_raw.execute("SELECT locked FROM leases WHERE id = 's'").fetchone() == (False,)
    old.close()  # the old holder's connection ends (its lock is released)
    with pytest.raises(SessionOwnedError):
        third.acquire_lease("s", "C", ttl=3600.0, holder=ELSEWHERE)  # B lives, unlocked
    assert new.renew_leases("B", ["s"], ttl=3600.0) == []
    assert pg_raw.execute("SELECT locked FROM leases WHERE id = 's'").fetchone() == (True,)
    new.close()
    third.acquire_lease("s", "C", ttl=3600.0, holder=ELSEWHERE)


def test_reconnected_holder_takes_its_lock_again(
    pg_open: Opener, pg_raw: psycopg.Connection[Any]
) -> None:
    """A holder whose connection was dropped keeps its lease row; its next renewal
    (on a new connection) takes the advisory lock again."""
    holder, other = pg_open(), pg_open()
    holder.acquire_lease("s", "A", ttl=3600.0, holder=ELSEWHERE)
    pg_raw.execute("SELECT pg_terminate_backend(%s)", (holder.backend_pid,))
    with pytest.raises(StoreIOError):  # the call that meets the dead connection
        holder.renew_leases("A", ["s"], ttl=3600.0)
    assert holder.renew_leases("A", ["s"], ttl=3600.0) == []
    with pytest.raises(SessionOwnedError):
        other.acquire_lease("s", "B", ttl=3600.0, holder=ELSEWHERE)


# -- the fence -----------------------------------------------------------------------------


def _wait_for_lock_wait(pg_raw: psycopg.Connection[Any], pid: int | None) -> None:
    for _ in range(500):
        row = pg_raw.execute(
            "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)
        ).fetchone()
        if row is not None and row[0] == "Lock":
            return
        time.sleep(0.01)
    raise AssertionError("the write never waited for the lease row")


@pytest.mark.parametrize("batch", ["append", "truncate"])
def test_fenced_write_waits_for_a_takeover_in_flight(
    pg_open: Opener, pg_raw: psycopg.Connection[Any], pg_where: tuple[str, str], batch: str
) -> None:
    """A fenced write meeting a takeover that has not committed yet waits for it (the
    lease row is the fence), then fails with OwnershipLostError: nothing of the old
    owner lands after the new owner's lease."""
    store = pg_open(busy_timeout_ms=30_000)
    store.append("s", evs(3))
    store.acquire_lease("s", "A", ttl=3600.0, holder=ELSEWHERE)
    takeover = psycopg.connect(pg_where[0])
    takeover.execute(f"UPDATE {pg_where[1]}.leases SET owner = 'B' WHERE id = 's'")
    results: list[object] = []
    write_op = op("s", 1, owner="A") if batch == "append" else TruncateOp("s", 0, owner="A")
    pid = store.backend_pid  # (the store is busy once the write started)
    thread = threading.Thread(target=lambda: results.extend(store.write_batch([write_op])))
    thread.start()
    try:
        _wait_for_lock_wait(pg_raw, pid)
        takeover.commit()
        thread.join(timeout=30)
    finally:
        takeover.close()
    assert len(results) == 1
    assert isinstance(results[0], OwnershipLostError)
    assert store.head("s") == 3


def test_old_owner_writes_never_follow_the_takeover(pg_open: Opener) -> None:
    """An old owner appending in a loop while another host takes its expired lease over:
    every event it got acknowledged precedes the new owner's first event, and none of
    its writes lands after it."""
    writer, taker = pg_open(), pg_open()
    writer.acquire_lease("s", "A", ttl=0.3, holder=ELSEWHERE)
    acked: list[int] = []
    stopped: list[BaseException | object] = []

    def old_owner() -> None:
        while True:
            [result] = writer.write_batch([op("s", 1, "A", owner="A")])
            if not isinstance(result, int):
                stopped.append(result)
                return
            acked.append(result)

    thread = threading.Thread(target=old_owner)
    thread.start()
    time.sleep(0.5)
    taker.acquire_lease("s", "B", ttl=3600.0, holder=ELSEWHERE)
    [first] = taker.write_batch([op("s", 1, "B", owner="B")])
    thread.join(timeout=30)
    assert isinstance(first, int)
    assert acked
    assert max(acked) < first
    assert isinstance(stopped[0], OwnershipLostError)
    tags = [e.data["tag"] for e in taker.read("s") if isinstance(e.data, dict)]
    assert tags == ["A"] * (first - 1) + ["B"]


# -- NOTIFY at commit ------------------------------------------------------------------------


@pytest.fixture
def listener(pg_where: tuple[str, str]) -> Iterator[Callable[[float], list[str]]]:
    """Listen on the test store's channel; the callable returns the payloads received
    within ``timeout`` seconds (stopping at the first quiet 0.2 s after one)."""
    dsn, schema = pg_where
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'LISTEN "tidelog_{schema}"')

        def received(timeout: float) -> list[str]:
            got = [n.payload for n in conn.notifies(timeout=timeout, stop_after=1)]
            if got:
                got += [n.payload for n in conn.notifies(timeout=0.2)]
            return got

        yield received


def test_commits_notify_their_sessions_and_heads(
    pg_open: Opener, listener: Callable[[float], list[str]]
) -> None:
    """Every commit that moves heads notifies the store's channel once with each
    session's new head (every write path, truncate, delete, fork, create); a failed op
    notifies nothing."""
    store = pg_open()
    store.append("a", evs(2))
    assert listener(5.0) == ["2 a"]
    assert store.write_batch([op("a", 1), op("b", 3)]) == [3, 3]
    assert listener(5.0) == ["3 a\n3 b"]
    results = store.write_batch([op("a", 1), TruncateOp("b", 1), op("c", 1, expected_head=9)])
    assert results[:2] == [4, 2]
    assert isinstance(results[2], ConflictError)
    assert listener(5.0) == ["4 a\n1 b"]
    # one event each to existing sessions: the leaner one-statement path
    assert store.write_batch([op("a", 1, expected_head=4), op("b", 1, expected_head=1)]) == [5, 2]
    assert listener(5.0) == ["5 a\n2 b"]
    store.truncate("a", 1)
    store.fork("a", "kid")
    store.create("empty")
    store.delete("b")
    assert listener(5.0) == ["1 a", "1 kid", "0 empty", "0 b"]
    [conflict] = store.write_batch([op("a", 1, expected_head=7)])
    assert isinstance(conflict, ConflictError)
    assert listener(0.3) == []


def test_too_long_a_notification_says_everything(
    pg_open: Opener, listener: Callable[[float], list[str]]
) -> None:
    """A commit whose sessions do not fit in one payload notifies "*" (look at every
    session), which names no session."""
    store = pg_open()
    ids = [f"{i:03d}-" + "x" * 200 for i in range(50)]
    store.write_batch([op(session_id, 1) for session_id in ids])
    assert listener(5.0) == ["*"]
    assert parse_payload("*") is None
    assert parse_payload("3 a b\n1 c") == ["a b", "c"]


def test_notify_can_be_turned_off(pg_open: Opener, listener: Callable[[float], list[str]]) -> None:
    """With notify=False commits notify nothing."""
    store = pg_open(notify=False)
    store.append("a", evs(1))
    store.write_batch([op("a", 1), TruncateOp("a", 0)])
    assert listener(0.3) == []


# -- several connections at once -------------------------------------------------------------


def test_connections_appending_to_one_session_stay_gapless(pg_open: Opener) -> None:
    """Four connections appending to one new session at once (no expected head): every
    append lands once, seqs 1..200 without gaps, no error -- even the race to create it."""
    stores = [pg_open() for _ in range(4)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def work(store: PostgresStore, index: int) -> None:
        try:
            barrier.wait(timeout=10)
            for n in range(50):
                store.append("s", [NewEvent("k", {"who": index, "n": n})])
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(s, i)) for i, s in enumerate(stores)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    events = stores[0].read("s")
    assert [e.seq for e in events] == list(range(1, 201))
    for index in range(4):
        mine = [e.data["n"] for e in events if isinstance(e.data, dict) and e.data["who"] == index]
        assert mine == list(range(50))
