"""The libraries users would pick on PostgreSQL, driven through their documented APIs, for
W1 and W2 on PostgreSQL (``bench/workloads/pg_w1_w2_w9.py``).

Like :mod:`bench.references.alternatives` (optional extra ``bench``; imported only inside the
functions that use them):

* **LangGraph** ``PostgresSaver(conn)`` (``langgraph-checkpoint-postgres``) on one psycopg
  connection (autocommit, ``dict_row``, as its documentation sets it up): a checkpoint per
  append holding **one new item**, ``put`` serializes it and commits.
* **eventsourcing** ``PostgresAggregateRecorder(PostgresDatastore(...))``: one stored
  event per append (``insert_events``), ``originator_version`` as the sequence number; its
  datastore keeps a pool of connections (10 for W2's concurrent clients).

Both run in the benchmark's schema (``search_path``), with PostgreSQL's default
``synchronous_commit = on``: each commit waits for its WAL flush, like tidelog with
``synchronous="full"``. Synchronous APIs: called directly for one session (W1), from trio
worker threads for W2's 100 concurrent clients.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from .alternatives import EventsourcingLog, LangGraphLog, quiet
from .raw_pg import create_schema

__all__ = ["ALL_PG", "PgAlternative"]


class _LangGraphPg(LangGraphLog):
    """One ``PostgresSaver`` on one connection; ``put`` one checkpoint per appended item
    (``append`` is the SQLite case's)."""

    def __init__(self, dsn: str, schema: str, pool: int) -> None:  # noqa: ARG002 (shared signature)
        import psycopg
        from langgraph.checkpoint.postgres import PostgresSaver
        from psycopg.conninfo import make_conninfo
        from psycopg.rows import dict_row

        self.conn = psycopg.connect(  # type: ignore[assignment]
            make_conninfo(dsn, options=f"-c search_path={schema}"),
            autocommit=True,
            prepare_threshold=0,
            row_factory=dict_row,
        )
        self.saver = PostgresSaver(self.conn)
        self.saver.setup()
        self.configs: dict[str, Any] = {}


class _EventsourcingPg(EventsourcingLog):
    """One ``PostgresAggregateRecorder``; one stored event per append (``append`` is the
    SQLite case's)."""

    def __init__(self, dsn: str, schema: str, pool: int) -> None:
        from eventsourcing.postgres import PostgresAggregateRecorder, PostgresDatastore
        from psycopg.conninfo import conninfo_to_dict

        params = conninfo_to_dict(dsn)
        self.datastore = PostgresDatastore(
            str(params.get("dbname", "test")),
            str(params.get("host", "/var/run/postgresql")),
            str(params.get("port", "5432")),
            str(params.get("user", "")),
            str(params.get("password", "")),
            schema=schema,
            pool_size=pool,
            originator_id_type="text",
        )
        self.recorder = PostgresAggregateRecorder(self.datastore)
        self.recorder.create_table()


Opener = Callable[[str, str, int], Any]


class PgAlternative:
    """One alternative on PostgreSQL: what it needs and how it runs W1 and W2."""

    def __init__(self, key: str, system: str, requires: tuple[str, ...], opener: Opener) -> None:
        self.key = key
        self.system = system
        self.requires = requires
        self._opener = opener

    def one_session(self, dsn: str, schema: str, count: int) -> dict[str, float]:
        """W1: ``count`` appends to one session, each returning once committed."""
        create_schema(dsn, schema)
        with quiet():
            log = self._opener(dsn, schema, 1)
            try:
                start = time.perf_counter()
                for step in range(1, count + 1):
                    log.append("s", step)
                elapsed = time.perf_counter() - start
            finally:
                log.close()
        return {"appends_per_s": count / elapsed, "events_per_s": count / elapsed}

    def one_session_threaded(self, dsn: str, schema: str, count: int) -> dict[str, float]:
        """W1 off the event loop, as a trio service must run a synchronous library: the
        same appends, each in a trio worker thread (one at a time, as W1's raw loop)."""
        import trio

        create_schema(dsn, schema)
        with quiet():
            log = self._opener(dsn, schema, 1)

            async def main() -> float:
                limiter = trio.CapacityLimiter(1)
                start = time.perf_counter()
                for step in range(1, count + 1):
                    await trio.to_thread.run_sync(log.append, "s", step, limiter=limiter)
                return time.perf_counter() - start

            try:
                elapsed = trio.run(main)
            finally:
                log.close()
        return {"appends_per_s": count / elapsed, "events_per_s": count / elapsed}

    def many_sessions(self, dsn: str, schema: str, sessions: int, appends: int) -> dict[str, float]:
        """W2: ``sessions`` concurrent trio clients, each ``appends`` awaited appends run
        in worker threads."""
        import trio

        from ..workloads.w2_group_commit import Gate, timed_clients

        create_schema(dsn, schema)
        with quiet():
            log = self._opener(dsn, schema, 10)

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
                elapsed = trio.run(main)
            finally:
                log.close()
        return {"events_per_s": sessions * appends / elapsed, "elapsed_s": elapsed}


#: The PostgreSQL alternatives, in table order.
ALL_PG: tuple[PgAlternative, ...] = (
    PgAlternative(
        "langgraph",
        "LangGraph PostgresSaver (1 new item/checkpoint)",
        ("langgraph.checkpoint.postgres",),
        _LangGraphPg,
    ),
    PgAlternative(
        "eventsourcing",
        "eventsourcing PostgreSQL recorder",
        ("eventsourcing.postgres",),
        _EventsourcingPg,
    ),
)
