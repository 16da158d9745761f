"""The runtime on PostgreSQL: opened by URL, tails woken across runtimes by NOTIFY (with
polling out of the way), and recovery when the server drops the runtime's connections.

Two runtimes in one trio run stand for two hosts: each has its own connections. The real
server, a schema per test; no mocks.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import pytest
import trio

pytest.importorskip("psycopg", reason="psycopg is not installed (pip install -e '.[postgres]')")

import psycopg

from actors._changes import FEED_PAUSE_AFTER, FEED_WAIT
from runtime import (
    CommitPendingError,
    InvalidArgumentError,
    NewEvent,
    Runtime,
    SessionWriter,
    StoreBusyError,
    StoreIOError,
    open_runtime,
)
from stores import PostgresStore, StoredEvent

#: Tails must not be woken by polling in these tests: only the change feed can.
NO_POLLING = 600.0


def ev(i: int) -> NewEvent:
    return NewEvent("k", {"i": i})


@pytest.fixture
def url(pg_schema: tuple[str, str]) -> str:
    from pgtest import url_of

    return url_of(*pg_schema)


Opener = Callable[..., AbstractAsyncContextManager[Runtime]]


@pytest.fixture
def host(url: str) -> Opener:
    """Open a runtime ("a host") on the test's store by URL."""

    @asynccontextmanager
    async def open_host(**options: Any) -> AsyncIterator[Runtime]:
        async with open_runtime(url, **options) as rt:
            yield rt

    return open_host


def _terminate(dsn: str, pid: int | None) -> None:
    assert pid is not None
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))


async def test_open_runtime_by_url_uses_the_urls_schema(
    url: str, pg_schema: tuple[str, str]
) -> None:
    """open_runtime("postgresql://...?schema=x") keeps the runtime's sessions in schema
    x, and "postgres://" names the same store."""
    async with open_runtime(url) as rt, rt.open_session("s") as w:
        await w.append([ev(0), ev(1)])
    async with open_runtime(url.replace("postgresql://", "postgres://", 1)) as rt:
        assert [e.data for e in await rt.read("s")] == [{"i": 0}, {"i": 1}]
    store = PostgresStore(pg_schema[0], schema=pg_schema[1])
    try:
        assert store.head("s") == 2
    finally:
        store.close()


@pytest.mark.parametrize(
    ("target", "error"),
    [
        ("postgresql://?dbname=test&schema=Not-A-Schema", InvalidArgumentError),
        ("postgresql://?dbname=test&schema=a&schema=b", InvalidArgumentError),
        ("postgresql://?no_such_option=1", InvalidArgumentError),
        ("postgresql://127.0.0.1:1/test?connect_timeout=5", StoreIOError),
    ],
    ids=["bad_schema", "two_schemas", "bad_option", "refused"],
)
async def test_bad_url_fails_the_open_cleanly(target: str, error: type[Exception]) -> None:
    """A bad URL, or a server that refuses, raises the documented error from
    open_runtime itself (no runtime starts)."""
    with pytest.raises(error):
        async with open_runtime(target):
            pytest.fail("the runtime must not start")


async def test_tail_on_another_host_is_woken_by_notify(host: Opener) -> None:
    """A tail in one runtime sees every event another runtime commits, in order and
    once, each within a second, though its runtime never polls."""
    received: list[tuple[int, float]] = []
    sent: dict[int, float] = {}
    async with (
        host(poll_interval=NO_POLLING) as reader,
        host() as writer,
        writer.open_session("s") as w,
    ):
        await w.append([ev(0)])

        async def follow() -> None:
            async for event in reader.tail("s", since_seq=1):
                received.append((event.seq, trio.current_time()))
                if event.seq == 21:
                    return

        async with trio.open_nursery() as nursery:
            nursery.start_soon(follow)
            await trio.sleep(0.3)  # the tail waits (its feed is connected)
            for i in range(1, 21):
                await w.append([ev(i)])
                sent[i + 1] = trio.current_time()
                await trio.sleep(0.01)
    assert [seq for seq, _ in received] == list(range(2, 22))
    assert max(at - sent[seq] for seq, at in received) < 1.0


async def test_a_feed_paused_while_nothing_is_watched_wakes_the_next_tail(
    host: Opener,
) -> None:
    """A runtime in which nothing is watched pauses its feed (its own commits no longer
    wake the feed's thread); the next tail's watch resumes it at once (not at the feed
    thread's next timeout), and the tail sees every commit of another runtime -- one
    made while the feed was paused, by its first read -- within a second each, though
    its runtime never polls."""
    async with (
        host(poll_interval=NO_POLLING) as reader,
        host() as writer,
        writer.open_session("s") as w,
    ):
        await w.append([ev(0)])
        hub = reader._engine.hub
        with trio.fail_after(10):
            while hub._feed is None or not hub._feed.paused:  # noqa: ASYNC110
                await trio.sleep(FEED_PAUSE_AFTER / 5)
        await w.append([ev(1)])  # announced to nobody: the reader's feed is paused
        received: list[tuple[int, float]] = []
        sent: dict[int, float] = {}

        async def follow() -> None:
            async for event in reader.tail("s", since_seq=0):
                received.append((event.seq, trio.current_time()))
                if event.seq == 7:
                    return

        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(follow)
                started = trio.current_time()
                while hub._feed.paused:  # noqa: ASYNC110 (the tail's watch resumes it)
                    await trio.sleep(0.01)
                assert trio.current_time() - started < FEED_WAIT / 2
                await _send(w, sent)
    assert [seq for seq, _ in received] == list(range(1, 8))
    assert max(at - sent[seq] for seq, at in received if seq in sent) < 1.0


async def _send(w: SessionWriter, sent: dict[int, float]) -> None:
    """Append events 2..6, noting when each was sent (by its seq)."""
    for i in range(2, 7):
        await w.append([ev(i)])
        sent[i + 1] = trio.current_time()
        await trio.sleep(0.05)


class LateFeed(PostgresStore):
    """A PostgresStore (and its clones: the runtime's reader) whose change feed starts
    listening only once ``listening`` is set, and that reports each read to the trio
    thread (``reads``: how many events it returned)."""

    def __init__(
        self,
        dsn: str,
        *,
        schema: str,
        listening: threading.Event,
        reads: trio.MemorySendChannel[int],
        token: trio.lowlevel.TrioToken | None = None,
    ) -> None:
        super().__init__(dsn, schema=schema)
        self.listening = listening
        self.reads = reads
        self.token = token or trio.lowlevel.current_trio_token()

    def clone(self, *, read_only: bool | None = None) -> LateFeed:  # noqa: ARG002
        return LateFeed(
            self.options.dsn,
            schema=self.schema,
            listening=self.listening,
            reads=self.reads,
            token=self.token,
        )

    def listen(self) -> Any:  # a PgListener (not public)
        self.listening.wait()
        return super().listen()

    def read(self, session_id: str, **options: Any) -> list[StoredEvent]:
        events = super().read(session_id, **options)
        self.token.run_sync_soon(self.reads.send_nowait, len(events))
        return events


async def test_a_commit_before_the_feed_listens_still_wakes_a_waiting_tail(
    host: Opener, pg_schema: tuple[str, str]
) -> None:
    """A tail that read before its runtime's feed listened, and a commit by another host
    in between (its NOTIFY unheard): once the feed listens the tail re-reads and gets
    it, though its runtime never polls."""
    listening = threading.Event()
    reads_in, reads = trio.open_memory_channel[int](100)
    late = LateFeed(pg_schema[0], schema=pg_schema[1], listening=listening, reads=reads_in)
    got = trio.Event()
    try:
        async with (
            host() as writer,
            writer.open_session("s") as w,
            open_runtime(late, poll_interval=NO_POLLING) as reader,
        ):
            await w.append([ev(0)])

            async def follow() -> None:
                async for event in reader.tail("s", since_seq=1):
                    assert event.seq == 2
                    got.set()
                    return

            async with trio.open_nursery() as nursery:
                nursery.start_soon(follow)
                with trio.fail_after(10):
                    assert await reads.receive() == 0  # the tail read: nothing yet
                await w.append([ev(1)])  # announced to no one: the feed does not listen
                listening.set()
                with trio.fail_after(10):
                    await got.wait()
    finally:
        listening.set()  # the feed's open, in a thread, must end for the runtime to close
        late.close()


async def test_tail_survives_the_feed_losing_its_connection(
    host: Opener, pg_schema: tuple[str, str]
) -> None:
    """When the server ends the listening connection, the feed reconnects and the tail
    re-reads: events committed meanwhile still arrive, none twice."""
    received: list[int] = []
    arrived = {2: trio.Event(), 3: trio.Event()}
    async with (
        host(poll_interval=NO_POLLING) as reader,
        host() as writer,
        writer.open_session("s") as w,
    ):
        await w.append([ev(0)])

        async def follow() -> None:
            async for event in reader.tail("s", since_seq=1):
                received.append(event.seq)
                if event.seq in arrived:
                    arrived[event.seq].set()
                if event.seq == 4:
                    return

        async with trio.open_nursery() as nursery:
            nursery.start_soon(follow)
            await trio.sleep(0.3)
            await w.append([ev(1)])
            with trio.fail_after(10):
                await arrived[2].wait()
            with psycopg.connect(pg_schema[0], autocommit=True) as admin:
                admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE application_name = 'tidelog listener' AND query = %s",
                    (f'LISTEN "tidelog_{pg_schema[1]}"',),
                )
            await w.append([ev(2)])  # announced while the feed is down
            with trio.fail_after(10):
                await arrived[3].wait()
            await w.append([ev(3)])
    assert received == [2, 3, 4]


async def test_runtime_recovers_when_its_writer_connection_is_killed(
    host: Opener, pg_schema: tuple[str, str]
) -> None:
    """The server ends the writer's connection mid-run (pg_terminate_backend): appends
    meeting it are kept and retried (CommitPendingError at worst), the runtime
    reconnects, and every accepted event is stored once, in order."""
    accepted: list[int] = []
    async with host(batch_window=0) as rt, rt.open_session("s") as w:
        for i in range(60):
            if i in (20, 40):
                _terminate(pg_schema[0], rt._engine.write_store.backend_pid)  # type: ignore[attr-defined]
            try:
                accepted.append(await w.append([ev(i)]))
            except CommitPendingError as exc:
                accepted.append(exc.last)
        assert rt.statistics().writer.failed_batches >= 2  # each kill was met
        with trio.fail_after(30):
            while True:
                try:
                    await w.flush()
                    break
                except CommitPendingError:
                    await trio.sleep(0.1)
        events = await rt.read("s")
    assert accepted == list(range(1, 61))
    assert [e.data for e in events] == [{"i": i} for i in range(60)]


async def test_hosts_recover_when_the_server_drops_every_connection(
    host: Opener, pg_schema: tuple[str, str]
) -> None:
    """Every connection of a writing host and of a tailing host is ended by the server
    at once, twice: the writer's accepted events are all stored once, in order, and the
    tail sees each of them once -- nobody restarts anything."""
    received: list[int] = []
    done = trio.Event()
    async with (
        host(poll_interval=NO_POLLING) as reader,
        host(batch_window=0) as writer,
        writer.open_session("s") as w,
    ):

        async def follow() -> None:
            async for event in reader.tail("s"):
                received.append(event.seq)
                if event.seq == 40:
                    done.set()
                    return

        def pids() -> list[int | None]:
            return [
                rt._engine.write_store.backend_pid  # type: ignore[attr-defined]
                for rt in (reader, writer)
            ] + [rt._engine.read_store.backend_pid for rt in (reader, writer)]  # type: ignore[attr-defined]

        async with trio.open_nursery() as nursery:
            nursery.start_soon(follow)
            await trio.sleep(0.3)
            for i in range(40):
                if i in (15, 30):
                    with psycopg.connect(pg_schema[0], autocommit=True) as admin:
                        admin.execute(
                            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                            " WHERE pid = ANY(%s) OR (application_name = 'tidelog listener'"
                            " AND query = %s)",
                            (
                                [p for p in pids() if p is not None],
                                f'LISTEN "tidelog_{pg_schema[1]}"',
                            ),
                        )
                with contextlib.suppress(CommitPendingError):  # kept, retried: flushed below
                    await w.append([ev(i)])
            with trio.fail_after(30):
                while True:
                    try:
                        await w.flush()
                        break
                    except CommitPendingError:
                        await trio.sleep(0.1)
                await done.wait()
        assert [e.data for e in await writer.read("s")] == [{"i": i} for i in range(40)]
    assert received == list(range(1, 41))


async def test_statement_timeout_keeps_writes_pending_until_the_lock_is_gone(
    pg_schema: tuple[str, str],
) -> None:
    """Appends blocked by another connection's lock past statement_timeout fail their
    commit (CommitPendingError caused by StoreBusyError) and stay queued; once the lock is
    gone they are committed, once each, in order."""
    dsn, schema = pg_schema
    store = PostgresStore(dsn, schema=schema, statement_timeout_ms=200, busy_timeout_ms=60_000)
    try:
        async with open_runtime(store, batch_window=0) as rt, rt.open_session("s") as w:
            await w.append([ev(0)])
            blocker = psycopg.connect(dsn)
            try:
                blocker.execute(f"SELECT 1 FROM {schema}.sessions WHERE id = 's' FOR UPDATE")
                with pytest.raises(CommitPendingError) as info:
                    await w.append([ev(1)])
                assert isinstance(info.value.__cause__, StoreBusyError)
                w.append_nowait([ev(2)])
            finally:
                blocker.close()
            with trio.fail_after(30):
                while True:
                    try:
                        await w.flush()
                        break
                    except CommitPendingError:
                        await trio.sleep(0.1)
            assert [e.data for e in await rt.read("s")] == [{"i": i} for i in range(3)]
    finally:
        store.close()
