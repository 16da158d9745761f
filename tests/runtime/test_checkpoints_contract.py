"""trio's checkpoint rule on the public runtime, as the docstrings of ``Runtime``,
``SessionWriter`` and ``SessionReader`` promise it: every async method is a checkpoint (a
cancel point and a schedule point) -- also on its fast paths, where nothing waits -- and
``append_nowait`` is not one. Pinned with ``trio.testing.assert_checkpoints`` /
``assert_no_checkpoints`` on both backends (memory: the store is called inline on the
trio thread; SQLite: through a lane thread)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
from trio.testing import assert_checkpoints, assert_no_checkpoints

from runtime import NewEvent, Runtime, SessionWriter


def ev(i: int) -> NewEvent:
    return NewEvent("k", {"i": i})


async def checkpoints(call: Callable[[], Awaitable[object]]) -> None:
    """Assert that awaiting ``call()`` executes a checkpoint."""
    with assert_checkpoints():
        await call()


# -- SessionWriter -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "append",
        "append_empty",
        "head",
        "flush_idle",
        "flush_pending",
        "wait_committed_idle",
        "wait_committed_pending",
        "truncate",
        "truncate_nothing",
        "replace",
        "read",
        "aclose",
    ],
)
async def test_writer_async_methods_are_checkpoints(rt: Runtime, name: str) -> None:
    """Each async method of SessionWriter checkpoints, on its fast path too (an empty
    append, a flush or wait with nothing pending, a truncate that removes nothing)."""
    async with rt.open_session("s") as w:
        await w.append([ev(1), ev(2), ev(3)])
        calls: dict[str, Callable[[], Awaitable[object]]] = {
            "append": lambda: w.append([ev(4)]),
            "append_empty": lambda: w.append([]),
            "head": w.head,
            "flush_idle": w.flush,
            "flush_pending": lambda: _nowait_then(w, w.flush),
            "wait_committed_idle": w.wait_committed,
            "wait_committed_pending": lambda: _nowait_then(w, w.wait_committed),
            "truncate": lambda: w.truncate(2),
            "truncate_nothing": lambda: w.truncate(3),
            "replace": lambda: w.replace(1, [ev(9)]),
            "read": w.read,
            "aclose": w.aclose,
        }
        await checkpoints(calls[name])


async def _nowait_then(w: SessionWriter, wait: Callable[[], Awaitable[None]]) -> None:
    w.append_nowait([ev(10)])
    await wait()


async def test_closed_writer_aclose_is_a_checkpoint(rt: Runtime) -> None:
    """aclose of an already closed writer (a no-op) still checkpoints."""
    async with rt.open_session("s") as w:
        await w.aclose()
        await checkpoints(w.aclose)


async def test_append_nowait_is_not_a_checkpoint(rt: Runtime) -> None:
    """append_nowait accepts the events without a checkpoint (its docstring says so),
    empty batches included."""
    async with rt.open_session("s") as w:
        with assert_no_checkpoints():
            assert w.append_nowait([ev(1), ev(2)]) == (1, 2)
            assert w.append_nowait([]) == (3, 2)
        await w.flush()
        assert w.committed_head == 2


# -- SessionReader -------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["read", "head", "aclose"])
async def test_reader_async_methods_are_checkpoints(rt: Runtime, name: str) -> None:
    """Each async method of SessionReader checkpoints."""
    async with rt.open_session("s") as w:
        await w.append([ev(1)])
    async with rt.open_session("s", mode="read") as r:
        calls: dict[str, Callable[[], Awaitable[object]]] = {
            "read": r.read,
            "head": r.head,
            "aclose": r.aclose,
        }
        await checkpoints(calls[name])


# -- Runtime -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "stat",
        "stat_missing",
        "read",
        "read_missing",
        "flush_idle",
        "flush_pending",
        "flush_sessions_idle",
        "flush_sessions_unknown",
        "list_sessions",
        "find_run_missing",
        "fork",
        "delete",
        "delete_missing",
    ],
)
async def test_runtime_async_methods_are_checkpoints(rt: Runtime, name: str) -> None:
    """The async methods of Runtime checkpoint ("Async methods are checkpoints"), also
    for a missing session and with nothing to flush."""
    async with rt.open_session("s") as w:
        await w.append([ev(1)])
        async with rt.open_session("gone") as g:
            await g.append([ev(1)])
        calls: dict[str, Callable[[], Awaitable[object]]] = {
            "stat": lambda: rt.stat("s"),
            "stat_missing": lambda: rt.stat("missing"),
            "read": lambda: rt.read("s"),
            "read_missing": lambda: rt.read("missing"),
            "flush_idle": rt.flush,
            "flush_pending": lambda: _nowait_then(w, rt.flush),
            "flush_sessions_idle": lambda: rt.flush_sessions(["s"]),
            "flush_sessions_unknown": lambda: rt.flush_sessions(["missing"]),
            "list_sessions": rt.list_sessions,
            "find_run_missing": lambda: rt.find_run("s", "no-such-run"),
            "fork": lambda: rt.fork("s", "child"),
            "delete": lambda: rt.delete("gone"),
            "delete_missing": lambda: rt.delete("missing"),
        }
        await checkpoints(calls[name])
