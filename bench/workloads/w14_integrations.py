"""W14: the integrations against each framework's own SQLite store, through the
framework's API as an asyncio user calls it (``docs/integrations.md``).

* LangGraph: ``AsyncSqliteSaver`` (aiosqlite, the async saver an asyncio graph uses)
  against ``TidelogSaver.from_target(path, synchronous="full")`` (the built-in store
  commits with sqlite3's default FULL, so tidelog fsyncs each commit too). Each put is
  one checkpoint holding one new item (as ``bench.alternatives`` does).
* OpenAI Agents SDK: ``SQLiteSession`` against ``TidelogSession`` on one bridge (SQLite,
  ``synchronous="full"``), ``add_items([item])``.

Cases: ``*-one``: one thread/session, :data:`ONE` awaited calls in a row (us per call);
``*-many``: :data:`THREADS` threads/sessions at once, :data:`EACH` awaited calls each
(calls per second). Targets (issue 31): one thread's latency <= the built-in store's;
many at once >= 10x its throughput. The tidelog cases need the built-in store installed
too (the ``bench`` extra): without their reference they would judge nothing.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from ..harness.core import PAYLOAD, CaseContext, Metrics, Row, Target, case, rows

__all__ = ["EACH", "ONE", "THREADS"]

#: Awaited calls in a row, one thread/session, at scale 1.
ONE = 500
#: Concurrent threads/sessions and awaited calls each, at scale 1.
THREADS = 64
EACH = 20

_LANGGRAPH_SQLITE = ("langgraph.checkpoint.sqlite.aio", "aiosqlite")
_SDK = ("agents",)
_TIDELOG_LANGGRAPH = (*_LANGGRAPH_SQLITE, "langgraph.checkpoint.base")


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
    opener: Callable[[Path], Any], client: Client, *, many: bool
) -> Callable[[CaseContext], Metrics]:
    """A case: ``opener(path)`` is an async context manager giving the target."""

    def run(ctx: CaseContext) -> Metrics:
        threads = ctx.n(THREADS, minimum=4) if many else 1
        calls = ctx.n(EACH, minimum=3) if many else ctx.n(ONE, minimum=20)

        async def main() -> float:
            with ctx.fresh_dir() as where:
                async with opener(where / "store.db") as target:
                    await client(target, "warm-up", 2)
                    return await _timed(target, client, threads, calls)

        elapsed = asyncio.run(main())
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


def _langgraph_tidelog(synchronous: str) -> Callable[[Path], Any]:
    def opener(path: Path) -> Any:
        from runtime.integrations.langgraph import TidelogSaver

        return _Tidelog(lambda: TidelogSaver.from_target(path, synchronous=synchronous))

    return opener


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


class _SdkTidelog:
    def __init__(self, path: Path, synchronous: str) -> None:
        self._path = path
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
        case(
            f"W14/langgraph-tidelog{_suffix}-{_kind}",
            system=f'TidelogSaver (SQLite, synchronous="{_sync}")',
            requires=_TIDELOG_LANGGRAPH,
        )(_run(_langgraph_tidelog(_sync), _put_chain, many=_many))
        case(
            f"W14/openai-agents-tidelog{_suffix}-{_kind}",
            system=f'TidelogSession (SQLite, synchronous="{_sync}")',
            requires=_SDK,
        )(_run(functools.partial(_SdkTidelog, synchronous=_sync), _add_chain, many=_many))

_ONE = "W14 one thread/session, awaited calls in a row (asyncio)"
_MANY = f"W14 {THREADS} threads/sessions at once, {EACH} awaited calls each (asyncio)"


def _rows(framework: str, what: str) -> list[Row]:
    """The built-in store's rows (references) and tidelog's, at FULL (what the built-in
    store does: each commit fsynced) and at tidelog's default NORMAL (commits survive a
    process crash; ``flush()`` adds power-loss durability)."""
    one, many = f"W14/{framework}-sqlite-one", f"W14/{framework}-sqlite-many"
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
                f"W14/{framework}-tidelog{suffix}-one",
                "us_per_call",
                "us",
                reference=(one, "us_per_call"),
                target=Target("ratio", "<=", 1.0),
                higher_is_better=False,
            ),
            Row(
                "W14",
                f"{_MANY}: {what}",
                f"W14/{framework}-tidelog{suffix}-many",
                "calls_per_s",
                "calls/s",
                reference=(many, "calls_per_s"),
                target=Target("ratio", ">=", 10.0),
            ),
        ]
    return out


rows(*_rows("langgraph", "LangGraph put"), *_rows("openai-agents", "SDK add_items"))  # fmt: skip
