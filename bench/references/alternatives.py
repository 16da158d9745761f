"""The libraries users would pick instead of tidelog, driven through their documented APIs.

They come from the optional extra ``bench`` (``pip install -e '.[bench]'``); each is
imported only inside the functions that use it, so a missing one only turns its own rows
into "not installed" (the cases name their modules in ``requires=``).

* **openai-agents** ``SQLiteSession(session_id, db_path)``: one session object per
  conversation, all on one file; ``await session.add_items([item])``. Its API is asyncio
  (each call runs in ``asyncio.to_thread``), so its cases run under ``asyncio.run``.
* **LangGraph** ``SqliteSaver(sqlite3.connect(path, check_same_thread=False))``: a
  checkpoint per append, holding **one new item** in ``channel_values`` (a real graph with
  an ``add_messages`` channel would store the whole list each time: this is the cheap
  case for it). ``put`` serializes the checkpoint (msgpack) and commits. Synchronous API.
* **eventsourcing** ``SQLiteAggregateRecorder(SQLiteDatastore(path))``: one stored event
  per append (``insert_events``), ``originator_version`` as the sequence number, the
  payload encoded to JSON bytes by the caller (as an eventsourcing mapper would).
  Synchronous API.

All three use Python's ``sqlite3`` with WAL and its default ``synchronous`` (FULL on this
build: each commit is fsynced, like tidelog with ``synchronous="full"``); the measured
value is returned as the ``sqlite_synchronous`` metric (2 = FULL).

Synchronous APIs run directly for one session (W1: what a user would do) and in worker
threads for many concurrent sessions (W2: ``trio.to_thread.run_sync``, trio's default 40
threads), as a trio program would have to. W1 also runs them the two ways a trio program
could, for a comparison fair to a trio service: in a worker thread per append (off the
loop), and directly on the trio thread with a lag probe running, which shows how long each
call stalls the event loop.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import trio

from ..harness.core import PAYLOAD, LagProbe, encode_payload

__all__ = [
    "ALL",
    "EVENTSOURCING",
    "LANGGRAPH",
    "OPENAI_AGENTS",
    "Alternative",
    "quiet",
]


@contextmanager
def quiet() -> Iterator[None]:
    """Silence the third-party libraries' own warnings (``-W error`` runs of the harness
    judge tidelog's code, not theirs)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def sqlite3_default_synchronous(path: Path) -> float:
    """``PRAGMA synchronous`` of a fresh ``sqlite3`` connection in WAL mode (2 = FULL)."""
    with closing(sqlite3.connect(str(path))) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        return float(conn.execute("PRAGMA synchronous").fetchone()[0])


class _Gate:
    """Start asyncio clients together; note when the last one finished."""

    def __init__(self, clients: int) -> None:
        self.clients = clients
        self.ready = 0
        self.all_ready = asyncio.Event()
        self.go = asyncio.Event()
        self.finished = 0
        self.end = 0.0

    async def arrive(self) -> None:
        self.ready += 1
        if self.ready == self.clients:
            self.all_ready.set()
        await self.go.wait()

    def done(self) -> None:
        self.finished += 1
        if self.finished == self.clients:
            self.end = time.perf_counter()


# -- openai-agents ----------------------------------------------------------------------


def _openai_one(path: Path, count: int) -> float:
    from agents import SQLiteSession

    async def main() -> float:
        session: Any = SQLiteSession("s", str(path))  # PAYLOAD is a plain JSON item
        try:
            start = time.perf_counter()
            for _ in range(count):
                await session.add_items([PAYLOAD])
            return time.perf_counter() - start
        finally:
            session.close()

    return asyncio.run(main())


def _openai_many(path: Path, sessions: int, appends: int) -> float:
    from agents import SQLiteSession

    async def main() -> float:
        handles = [SQLiteSession(f"session-{i}", str(path)) for i in range(sessions)]
        gate = _Gate(sessions)

        async def client(session: Any) -> None:
            await gate.arrive()
            for _ in range(appends):
                await session.add_items([PAYLOAD])
            gate.done()

        try:
            tasks = [asyncio.ensure_future(client(h)) for h in handles]
            await gate.all_ready.wait()
            start = time.perf_counter()
            gate.go.set()
            await asyncio.gather(*tasks)
            return gate.end - start
        finally:
            for h in handles:
                h.close()

    return asyncio.run(main())


# -- LangGraph ----------------------------------------------------------------------------


class LangGraphLog:
    """One ``SqliteSaver`` on one connection; ``put`` one checkpoint per appended item."""

    def __init__(self, path: Path) -> None:
        from langgraph.checkpoint.sqlite import SqliteSaver

        self.conn = sqlite3.connect(str(path), check_same_thread=False)
        self.saver = SqliteSaver(self.conn)
        self.saver.setup()
        self.configs: dict[str, Any] = {}

    def append(self, thread_id: str, step: int) -> None:
        from langgraph.checkpoint.base import empty_checkpoint

        config = self.configs.get(thread_id) or {
            "configurable": {"thread_id": thread_id, "checkpoint_ns": ""}
        }
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"messages": [PAYLOAD]}  # the one new item
        checkpoint["channel_versions"] = {"messages": step}
        self.configs[thread_id] = self.saver.put(
            config, checkpoint, {"source": "loop", "step": step}, {"messages": step}
        )

    def close(self) -> None:
        self.conn.close()


def _langgraph_one(path: Path, count: int) -> float:
    log = LangGraphLog(path)
    try:
        start = time.perf_counter()
        for step in range(1, count + 1):
            log.append("s", step)
        return time.perf_counter() - start
    finally:
        log.close()


# -- eventsourcing --------------------------------------------------------------------------


class EventsourcingLog:
    """One ``SQLiteAggregateRecorder``; one stored event per append."""

    def __init__(self, path: Path) -> None:
        from eventsourcing.sqlite import SQLiteAggregateRecorder, SQLiteDatastore

        self.datastore = SQLiteDatastore(str(path), originator_id_type="text")
        self.recorder = SQLiteAggregateRecorder(self.datastore)
        self.recorder.create_table()

    def append(self, originator: str, version: int) -> None:
        from eventsourcing.persistence import StoredEvent

        state = encode_payload(PAYLOAD).encode()
        self.recorder.insert_events([StoredEvent(originator, version, "message", state)])

    def close(self) -> None:
        self.datastore.close()


def _eventsourcing_one(path: Path, count: int) -> float:
    log = EventsourcingLog(path)
    try:
        start = time.perf_counter()
        for version in range(1, count + 1):
            log.append("s", version)
        return time.perf_counter() - start
    finally:
        log.close()


# -- one session from trio: off the loop, or directly on it --------------------------------


def _threaded_one(opener: Callable[[Path], Any], path: Path, count: int) -> float:
    """W1 the way a trio service must run a synchronous library: each append in a worker
    thread (``trio.to_thread.run_sync``), so the event loop keeps running meanwhile."""
    log = opener(path)

    async def main() -> float:
        start = time.perf_counter()
        for step in range(1, count + 1):
            await trio.to_thread.run_sync(log.append, "s", step)
        return time.perf_counter() - start

    try:
        return trio.run(main)
    finally:
        log.close()


def _direct_lag(opener: Callable[[Path], Any], path: Path, count: int) -> dict[str, float]:
    """W1 calling a synchronous library directly on the trio thread, with a checkpoint
    between appends (as any other await of the program would be) and a
    :class:`~bench.harness.core.LagProbe`: the loop is stalled for every call, fsync included."""
    log = opener(path)

    async def main() -> dict[str, float]:
        probe = LagProbe()
        async with trio.open_nursery() as nursery:
            await nursery.start(probe.run)
            start = time.perf_counter()
            for step in range(1, count + 1):
                log.append("s", step)
                await trio.lowlevel.checkpoint()
            elapsed = time.perf_counter() - start
            nursery.cancel_scope.cancel()
        return {"appends_per_s": count / elapsed, "elapsed_s": elapsed, **probe.metrics()}

    try:
        return trio.run(main)
    finally:
        log.close()


# -- many sessions through worker threads ---------------------------------------------------


def _threaded_many(opener: Callable[[Path], Any], path: Path, sessions: int, appends: int) -> float:
    """``sessions`` trio tasks, each awaiting ``appends`` sync appends in worker threads."""
    from ..workloads.w2_group_commit import Gate, timed_clients

    log = opener(path)

    async def main() -> float:
        gate = Gate(sessions)

        async def client(session: str) -> None:
            await gate.arrive()
            for seq in range(1, appends + 1):
                await trio.to_thread.run_sync(log.append, session, seq)
            gate.done()

        def spawn(nursery: trio.Nursery) -> None:
            for i in range(sessions):
                nursery.start_soon(client, f"session-{i}")

        elapsed, _probe = await timed_clients(gate, spawn)
        return elapsed

    try:
        return trio.run(main)
    finally:
        log.close()


class Alternative:
    """One alternative library: what it needs and how it runs W1 and W2."""

    def __init__(
        self,
        key: str,
        system: str,
        requires: tuple[str, ...],
        one: Callable[[Path, int], float],
        many: Callable[[Path, int, int], float],
        one_note: str,
        many_note: str,
        opener: Callable[[Path], Any] | None = None,
    ) -> None:
        self.key = key
        self.system = system
        self.requires = requires
        self._one = one
        self._many = many
        self.one_note = one_note
        self.many_note = many_note
        #: A synchronous library's log opener (``None``: an async library, which runs its
        #: calls off the event loop already). W1 calls such a library directly; a trio
        #: service would have to run it in worker threads (:meth:`one_session_threaded`),
        #: and calling it on the trio thread stalls the loop (:meth:`one_session_lag`).
        self.opener = opener

    @property
    def direct(self) -> bool:
        """True for a synchronous library (W1 calls it directly on the calling thread)."""
        return self.opener is not None

    def one_session(self, path: Path, count: int) -> dict[str, float]:
        """W1: ``count`` appends to one session, each returning once committed."""
        with quiet():
            elapsed = self._one(path, count)
        return {
            "appends_per_s": count / elapsed,
            "elapsed_s": elapsed,
            "sqlite_synchronous": sqlite3_default_synchronous(path.with_suffix(".probe")),
        }

    def one_session_threaded(self, path: Path, count: int) -> dict[str, float]:
        """W1 off the event loop, as a trio service must run it: a synchronous library in
        a worker thread per append; an async one as :meth:`one_session` runs it."""
        if self.opener is None:
            return self.one_session(path, count)
        opener = self.opener
        with quiet():
            elapsed = _threaded_one(opener, path, count)
        return {"appends_per_s": count / elapsed, "elapsed_s": elapsed}

    def one_session_lag(self, path: Path, count: int) -> dict[str, float]:
        """W1 called directly on the trio thread, with the loop lag that causes (only for a
        synchronous library: see :attr:`direct`)."""
        if self.opener is None:
            raise ValueError(f"{self.system} is not called directly: it has no lag case")
        with quiet():
            return _direct_lag(self.opener, path, count)

    def many_sessions(self, path: Path, sessions: int, appends: int) -> dict[str, float]:
        """W2: ``sessions`` concurrent clients, each ``appends`` awaited appends."""
        with quiet():
            elapsed = self._many(path, sessions, appends)
        return {
            "events_per_s": sessions * appends / elapsed,
            "elapsed_s": elapsed,
            "events": float(sessions * appends),
        }


OPENAI_AGENTS = Alternative(
    "openai-agents",
    "openai-agents SQLiteSession",
    ("agents",),
    _openai_one,
    _openai_many,
    "asyncio, its own to_thread",
    "asyncio, its own to_thread",
)
LANGGRAPH = Alternative(
    "langgraph",
    "LangGraph SqliteSaver (1 new item/checkpoint)",
    ("langgraph.checkpoint.sqlite",),
    _langgraph_one,
    lambda path, sessions, appends: _threaded_many(LangGraphLog, path, sessions, appends),
    "sync, called directly",
    "sync, in trio threads",
    LangGraphLog,
)
EVENTSOURCING = Alternative(
    "eventsourcing",
    "eventsourcing SQLite recorder",
    ("eventsourcing.sqlite",),
    _eventsourcing_one,
    lambda path, sessions, appends: _threaded_many(EventsourcingLog, path, sessions, appends),
    "sync, called directly",
    "sync, in trio threads",
    EventsourcingLog,
)

#: Every alternative, in table order.
ALL: tuple[Alternative, ...] = (OPENAI_AGENTS, LANGGRAPH, EVENTSOURCING)
