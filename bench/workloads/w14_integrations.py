"""W14: the integrations against each framework's own SQLite and PostgreSQL stores,
through the framework's API as an asyncio user calls it (``docs/integrations.md``).

* LangGraph: ``AsyncSqliteSaver`` (aiosqlite, the async saver an asyncio graph uses)
  against ``TidelogSaver.from_target(path, synchronous="full")`` (the built-in store
  commits with sqlite3's default FULL, so tidelog fsyncs each commit too). Each put is
  one checkpoint holding one new item (as ``bench.alternatives`` does).
* OpenAI Agents SDK: ``SQLiteSession`` against ``TidelogSession`` on one bridge (SQLite,
  ``synchronous="full"``), ``add_items([item])``.
* On PostgreSQL (cases ``*-postgres-*`` and ``*-tidelog-pg*``, each in a fresh schema of
  the bench server, :mod:`bench.references.raw_pg`): LangGraph's ``AsyncPostgresSaver``
  (psycopg; ``from_conn_string`` for one thread, a psycopg ``AsyncConnectionPool`` of
  :data:`POOL` connections for many, as LangGraph's docs show) and the SDK's
  ``SQLAlchemySession`` (SQLAlchemy's asyncio engine on asyncpg, its default pool; one
  engine shared by every session), against ``TidelogSaver`` / ``TidelogSession`` on a
  ``postgresql://`` runtime. The built-in stores commit at the server's default
  ``synchronous_commit = on``, which is tidelog's ``synchronous="full"``.

Cases: ``*-one``: one thread/session, :data:`ONE` awaited calls in a row (us per call);
``*-many``: :data:`THREADS` threads/sessions at once, :data:`EACH` awaited calls each
(calls per second). Targets (issue 31): one thread's latency <= the built-in store's;
many at once >= 10x its throughput. The tidelog cases need the built-in store installed
too (the ``bench`` extra): without their reference they would judge nothing; the
PostgreSQL cases need a server too.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from ..harness.core import PAYLOAD, CaseContext, Metrics, Row, Target, case, rows
from ..references.raw_pg import create_schema, pg_schema, unavailable, url_of

__all__ = ["EACH", "ONE", "POOL", "THREADS"]

#: Awaited calls in a row, one thread/session, at scale 1.
ONE = 500
#: Concurrent threads/sessions and awaited calls each, at scale 1.
THREADS = 64
EACH = 20
#: Connections of LangGraph's ``AsyncPostgresSaver`` pool in the many-threads case.
POOL = 8

_LANGGRAPH_SQLITE = ("langgraph.checkpoint.sqlite.aio", "aiosqlite")
_SDK = ("agents",)
_TIDELOG_LANGGRAPH = (*_LANGGRAPH_SQLITE, "langgraph.checkpoint.base")
_LANGGRAPH_PG = ("psycopg", "psycopg_pool", "langgraph.checkpoint.postgres.aio")
_TIDELOG_LANGGRAPH_PG = (*_LANGGRAPH_PG, "langgraph.checkpoint.base")
_SDK_PG = ("psycopg", "agents", "sqlalchemy", "asyncpg")

#: Where a case's store lives: a SQLite file's path, or PostgreSQL's ``(dsn, schema)``.
Where = Any


def _checkpoint(step: int) -> tuple[Any, Any, Any]:
    from langgraph.checkpoint.base import empty_checkpoint

    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"messages": [PAYLOAD]}  # the one new item
    checkpoint["channel_versions"] = {"messages": step}
    return checkpoint, {"source": "loop", "step": step}, {"messages": step}


# A "client" makes ``calls`` awaited calls for one thread/session and returns nothing.
Client = Callable[[Any, str, int], Awaitable[None]]


async def _put_chain(saver: Any, thread: str, calls: int) -> None:
    config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    for step in range(1, calls + 1):
        checkpoint, metadata, versions = _checkpoint(step)
        config = await saver.aput(config, checkpoint, metadata, versions)


async def _add_chain(sessions: Any, name: str, calls: int) -> None:
    session = sessions(name)
    for _ in range(calls):
        await session.add_items([PAYLOAD])


async def _timed(target: Any, client: Client, threads: int, calls: int) -> float:
    start = time.perf_counter()
    await asyncio.gather(*(client(target, f"t-{i}", calls) for i in range(threads)))
    return time.perf_counter() - start


def _run(
    opener: Callable[[Where], Any], client: Client, *, many: bool, pg: bool = False
) -> Callable[[CaseContext], Metrics]:
    """A case: ``opener(where)`` is an async context manager giving the target (``where``:
    a SQLite path, or with ``pg`` a fresh schema's ``(dsn, schema)``)."""

    def run(ctx: CaseContext) -> Metrics:
        threads = ctx.n(THREADS, minimum=4) if many else 1
        calls = ctx.n(EACH, minimum=3) if many else ctx.n(ONE, minimum=20)

        async def main(where: Where) -> float:
            async with opener(where) as target:
                await client(target, "warm-up", 2)
                return await _timed(target, client, threads, calls)

        if pg:
            with pg_schema() as (dsn, schema):
                create_schema(dsn, schema)
                elapsed = asyncio.run(main((dsn, schema)))
        else:
            with ctx.fresh_dir() as directory:
                elapsed = asyncio.run(main(directory / "store.db"))
        if many:
            return {"calls_per_s": threads * calls / elapsed, "calls": float(threads * calls)}
        return {"us_per_call": elapsed / calls * 1e6, "calls": float(calls)}

    return run


def _langgraph_sqlite(path: Path) -> Any:
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    return AsyncSqliteSaver.from_conn_string(str(path))


class _Tidelog:
    """An async context manager over a tidelog integration made on a bridge thread."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make
        self._made: Any = None

    async def __aenter__(self) -> Any:
        self._made = await asyncio.to_thread(self._make)
        return self._made

    async def __aexit__(self, *exc_info: object) -> None:
        await asyncio.to_thread(self._made.close)


def _target(where: Where) -> str | Path:
    """tidelog's ``open_runtime`` target for ``where``."""
    return url_of(*where) if isinstance(where, tuple) else Path(where)


def _langgraph_tidelog(synchronous: str) -> Callable[[Where], Any]:
    def opener(where: Where) -> Any:
        from runtime.integrations.langgraph import TidelogSaver

        target = _target(where)
        return _Tidelog(lambda: TidelogSaver.from_target(target, synchronous=synchronous))

    return opener


def _pg_conninfo(dsn: str, schema: str) -> str:
    """``dsn`` with its ``search_path`` set to ``schema``."""
    from psycopg.conninfo import make_conninfo

    return make_conninfo(dsn, options=f"-c search_path={schema}")


class _LanggraphPg:
    """LangGraph's ``AsyncPostgresSaver`` on one connection, or on a pool of :data:`POOL`
    (``pool=True``); its tables made by ``setup()`` before the timed region."""

    def __init__(self, where: tuple[str, str], *, pool: bool) -> None:
        self._conninfo = _pg_conninfo(*where)
        self._pool = pool
        self._stack: Any = None

    async def __aenter__(self) -> Any:
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
        from psycopg.rows import dict_row
        from psycopg_pool import AsyncConnectionPool

        self._stack = stack = contextlib.AsyncExitStack()
        if self._pool:
            kwargs = {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}
            pool = AsyncConnectionPool(
                self._conninfo, min_size=POOL, max_size=POOL, kwargs=kwargs, open=False
            )
            await stack.enter_async_context(pool)
            saver = AsyncPostgresSaver(pool)
        else:
            saver = await stack.enter_async_context(
                AsyncPostgresSaver.from_conn_string(self._conninfo)
            )
        await saver.setup()
        return saver

    async def __aexit__(self, *exc_info: object) -> None:
        await self._stack.aclose()


class _SdkSqlite:
    def __init__(self, path: Path) -> None:
        self._path = path
        self._open: list[Any] = []

    async def __aenter__(self) -> Callable[[str], Any]:
        from agents import SQLiteSession

        def session(name: str) -> Any:
            made = SQLiteSession(name, str(self._path))
            self._open.append(made)
            return made

        return session

    async def __aexit__(self, *exc_info: object) -> None:
        for made in self._open:
            made.close()


class _SdkPg:
    """The SDK's ``SQLAlchemySession``s on one asyncio engine (asyncpg); the first session
    (the warm-up) creates the tables."""

    def __init__(self, where: tuple[str, str]) -> None:
        self._where = where
        self._engine: Any = None

    async def __aenter__(self) -> Callable[[str], Any]:
        from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession
        from psycopg.conninfo import conninfo_to_dict
        from sqlalchemy.engine import URL
        from sqlalchemy.ext.asyncio import create_async_engine

        dsn, schema = self._where
        params = {key: str(value) for key, value in conninfo_to_dict(dsn).items()}
        port = params.get("port")
        url = URL.create(
            "postgresql+asyncpg",
            username=params.get("user"),
            host=params.get("host"),
            port=int(port) if port else None,
            database=params.get("dbname"),
        )
        settings = {"server_settings": {"search_path": schema}}
        self._engine = engine = create_async_engine(url, connect_args=settings)
        made: list[str] = []

        def session(name: str) -> Any:
            made.append(name)
            return SQLAlchemySession(name, engine=engine, create_tables=len(made) == 1)

        return session

    async def __aexit__(self, *exc_info: object) -> None:
        await self._engine.dispose()


class _SdkTidelog:
    def __init__(self, where: Where, synchronous: str) -> None:
        self._path = _target(where)
        self._synchronous = synchronous
        self._bridge: Any = None

    async def __aenter__(self) -> Callable[[str], Any]:
        from runtime.integrations import Bridge
        from runtime.integrations.openai_agents import TidelogSession

        self._bridge = bridge = await asyncio.to_thread(
            Bridge.start, self._path, synchronous=self._synchronous
        )
        return lambda name: TidelogSession(name, bridge)

    async def __aexit__(self, *exc_info: object) -> None:
        await self._bridge.aclose()


for _many in (False, True):
    _kind = "many" if _many else "one"
    case(
        f"W14/langgraph-sqlite-{_kind}",
        system="LangGraph AsyncSqliteSaver",
        requires=_LANGGRAPH_SQLITE,
    )(_run(_langgraph_sqlite, _put_chain, many=_many))
    case(f"W14/openai-agents-sqlite-{_kind}", system="Agents SDK SQLiteSession", requires=_SDK)(
        _run(_SdkSqlite, _add_chain, many=_many)
    )
    for _sync in ("full", "normal"):
        _suffix = "" if _sync == "full" else "-normal"
        _tidelog_sdk = functools.partial(_SdkTidelog, synchronous=_sync)
        case(
            f"W14/langgraph-tidelog{_suffix}-{_kind}",
            system=f'TidelogSaver (SQLite, synchronous="{_sync}")',
            requires=_TIDELOG_LANGGRAPH,
        )(_run(_langgraph_tidelog(_sync), _put_chain, many=_many))
        case(
            f"W14/openai-agents-tidelog{_suffix}-{_kind}",
            system=f'TidelogSession (SQLite, synchronous="{_sync}")',
            requires=_SDK,
        )(_run(_tidelog_sdk, _add_chain, many=_many))
        case(
            f"W14/langgraph-tidelog-pg{_suffix}-{_kind}",
            system=f'TidelogSaver (PostgreSQL, synchronous="{_sync}")',
            requires=_TIDELOG_LANGGRAPH_PG,
            needs=unavailable,
        )(_run(_langgraph_tidelog(_sync), _put_chain, many=_many, pg=True))
        case(
            f"W14/openai-agents-tidelog-pg{_suffix}-{_kind}",
            system=f'TidelogSession (PostgreSQL, synchronous="{_sync}")',
            requires=_SDK_PG,
            needs=unavailable,
        )(_run(_tidelog_sdk, _add_chain, many=_many, pg=True))
    case(
        f"W14/langgraph-postgres-{_kind}",
        system="LangGraph AsyncPostgresSaver"
        + (f" (a pool of {POOL} connections)" if _many else " (one connection)"),
        requires=_LANGGRAPH_PG,
        needs=unavailable,
    )(_run(functools.partial(_LanggraphPg, pool=_many), _put_chain, many=_many, pg=True))
    case(
        f"W14/openai-agents-postgres-{_kind}",
        system="Agents SDK SQLAlchemySession (asyncpg)",
        requires=_SDK_PG,
        needs=unavailable,
    )(_run(_SdkPg, _add_chain, many=_many, pg=True))

_ONE = "W14 one thread/session, awaited calls in a row (asyncio)"
_MANY = f"W14 {THREADS} threads/sessions at once, {EACH} awaited calls each (asyncio)"


def _rows(framework: str, what: str, store: str = "sqlite") -> list[Row]:
    """The built-in ``store``'s rows (references) and tidelog's on the same backend, at
    FULL (what the built-in store does: each commit durable) and at tidelog's default
    NORMAL (commits survive a process crash; ``flush()`` adds power-loss durability)."""
    one, many = f"W14/{framework}-{store}-one", f"W14/{framework}-{store}-many"
    tidelog = "tidelog" if store == "sqlite" else "tidelog-pg"
    out = [
        Row(
            "W14",
            f"{_ONE}: {what}",
            one,
            "us_per_call",
            "us",
            note="reference",
            higher_is_better=False,
        ),
        Row("W14", f"{_MANY}: {what}", many, "calls_per_s", "calls/s", note="reference"),
    ]
    for suffix in ("", "-normal"):
        out += [
            Row(
                "W14",
                f"{_ONE}: {what}",
                f"W14/{framework}-{tidelog}{suffix}-one",
                "us_per_call",
                "us",
                reference=(one, "us_per_call"),
                target=Target("ratio", "<=", 1.0),
                higher_is_better=False,
            ),
            Row(
                "W14",
                f"{_MANY}: {what}",
                f"W14/{framework}-{tidelog}{suffix}-many",
                "calls_per_s",
                "calls/s",
                reference=(many, "calls_per_s"),
                target=Target("ratio", ">=", 10.0),
            ),
        ]
    return out


rows(
    *_rows("langgraph", "LangGraph put"),
    *_rows("openai-agents", "SDK add_items"),
    *_rows("langgraph", "LangGraph put, PostgreSQL", "postgres"),
    *_rows("openai-agents", "SDK add_items, PostgreSQL", "postgres"),
)
