"""The write contract: whatever batch fails, a caller that resends after a refusal never
duplicates, and a caller that never resends never loses an accepted event.

Every write call is driven through a scenario on a real MemoryStore whose ``write_batch``
fails once -- at the scenario's first batch, a middle one or its last one (the drain at
exit) -- either before writing anything or after committing (an ambiguous failure).
The caller follows the contract: ``CommitPendingError`` means accepted (never resent),
``UnwrittenError`` means dropped (its events are resent by the resending caller), any
other exception means refused (resent by the resending caller). The log must then equal
exactly what the caller was told was accepted, once each.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any

import pytest
import trio
import trio.testing
from write_contract import Caller, OneFailure, ev

from runtime import (
    MemoryStore,
    NewEvent,
    Runtime,
    SessionWriter,
    StoreIOError,
    open_runtime,
)

Scenario = Callable[[Caller, AsyncExitStack], Awaitable[None]]


async def _writer(stack: AsyncExitStack, rt: Runtime, session_id: str) -> SessionWriter:
    return await stack.enter_async_context(rt.open_session(session_id))


async def _append(c: Caller, w: SessionWriter, tags: list[str]) -> None:
    """One awaited append of ``tags`` through the contract-following caller."""
    sid = w.session_id

    async def attempt() -> int:
        return await w.append([ev(t) for t in tags])

    await c.call(attempt, lambda: c.log(sid).extend(tags), lambda: [(sid, t) for t in tags])


async def scenario_append(c: Caller, stack: AsyncExitStack) -> None:
    w = await _writer(stack, c.rt, "s")
    for i in range(6):
        await _append(c, w, [f"a{i}.0", f"a{i}.1"])


async def scenario_append_nowait(c: Caller, stack: AsyncExitStack) -> None:
    w = await _writer(stack, c.rt, "s")
    for i in range(6):
        tags = [f"n{i}.0", f"n{i}.1"]

        async def attempt(tags: list[str] = tags) -> None:
            w.append_nowait([ev(t) for t in tags])
            await trio.sleep(0.01)  # let the background commit run (and maybe fail)

        await c.call(attempt, functools.partial(c.log("s").extend, tags))


async def scenario_nowait_stream(c: Caller, stack: AsyncExitStack) -> None:
    # One-event appends join one queued write; an awaited append and a flush sit between.
    w = await _writer(stack, c.rt, "s")
    for i in range(4):
        for j in range(3):
            w.append_nowait([ev(f"s{i}.{j}")])
            c.log("s").append(f"s{i}.{j}")
        await _append(c, w, [f"s{i}.a"])
        await c.call(w.flush, list)


async def scenario_flush(c: Caller, stack: AsyncExitStack) -> None:
    w = await _writer(stack, c.rt, "s")
    for i in range(4):
        w.append_nowait([ev(f"f{i}")])
        c.log("s").append(f"f{i}")
        await c.call(w.flush, list)


async def scenario_truncate(c: Caller, stack: AsyncExitStack) -> None:
    w = await _writer(stack, c.rt, "s")
    for i in range(3):
        await _append(c, w, [f"t{i}.{j}" for j in range(3)])
        head = len(c.log("s"))
        await c.call(functools.partial(w.truncate, head - 1), c.log("s").pop)


async def scenario_replace(c: Caller, stack: AsyncExitStack) -> None:
    w = await _writer(stack, c.rt, "s")
    for i in range(3):
        await _append(c, w, [f"r{i}.{j}" for j in range(3)])
        log = c.log("s")
        swapped = [*log[:-2], f"x{i}"]

        def swap(swapped: list[str] = swapped) -> None:
            c.model["s"] = swapped

        await c.call(functools.partial(w.replace, len(log) - 2, [ev(f"x{i}")]), swap)


async def scenario_close(c: Caller, _stack: AsyncExitStack) -> None:
    for i in range(3):
        tags = [f"c{i}.0", f"c{i}.1"]

        async def attempt(tags: list[str] = tags) -> None:
            async with c.rt.open_session("s") as w:
                w.append_nowait([ev(t) for t in tags])
            # leaving the block closes the writer: it commits what it accepted, or says

        await c.call(
            attempt,
            functools.partial(c.log("s").extend, tags),
            functools.partial(lambda tags: [("s", t) for t in tags], tags),
        )


async def scenario_append_atomic(c: Caller, stack: AsyncExitStack) -> None:
    a = await _writer(stack, c.rt, "a")
    b = await _writer(stack, c.rt, "b")
    for i in range(4):
        parts = {a: [ev(f"ga{i}")], b: [ev(f"gb{i}")]}
        pairs = [("a", f"ga{i}"), ("b", f"gb{i}")]

        def accept(pairs: list[tuple[str, str]] = pairs) -> None:
            for sid, tag in pairs:
                c.log(sid).append(tag)

        await c.call(
            functools.partial(c.rt.append_atomic, parts), accept, functools.partial(list, pairs)
        )


async def scenario_runtime_flush(c: Caller, stack: AsyncExitStack) -> None:
    a = await _writer(stack, c.rt, "a")
    b = await _writer(stack, c.rt, "b")
    for i in range(3):
        a.append_nowait([ev(f"ra{i}")])
        b.append_nowait([ev(f"rb{i}")])
        c.log("a").append(f"ra{i}")
        c.log("b").append(f"rb{i}")
        await c.call(c.rt.flush, list)


SCENARIOS: dict[str, Scenario] = {
    "append": scenario_append,
    "append_nowait": scenario_append_nowait,
    "nowait_stream": scenario_nowait_stream,
    "flush": scenario_flush,
    "truncate": scenario_truncate,
    "replace": scenario_replace,
    "close": scenario_close,
    "append_atomic": scenario_append_atomic,
    "runtime_flush": scenario_runtime_flush,
}


async def run_scenario(
    scenario: Scenario, store: OneFailure, *, resend: bool
) -> tuple[Caller, BaseException | None]:
    """Run ``scenario`` on a runtime over ``store``; return the caller and what leaving
    the runtime raised (only a failed final barrier may be raised: nothing accepted is
    lost)."""
    caller: Caller | None = None
    exit_error: BaseException | None = None
    try:
        async with open_runtime(store) as rt, AsyncExitStack() as stack:
            caller = Caller(rt, resend)
            await scenario(caller, stack)
    except StoreIOError as exc:
        exit_error = exc
    assert caller is not None
    return caller, exit_error


def stored(store: MemoryStore, session_id: str) -> list[str]:
    tags = []
    for event in store.read(session_id):
        assert isinstance(event.data, dict)
        tag = event.data["tag"]
        assert isinstance(tag, str)
        tags.append(tag)
    return tags


@pytest.mark.parametrize("resend", [False, True], ids=["keep", "resend"])
@pytest.mark.parametrize("ambiguous", [False, True], ids=["before", "after-commit"])
@pytest.mark.parametrize("where", ["first", "middle", "last"])
@pytest.mark.parametrize("call", list(SCENARIOS))
async def test_a_failed_batch_leaves_exactly_the_accepted_events(
    autojump_clock: trio.testing.MockClock,  # noqa: ARG001 (pytest-trio runs the test on it)
    call: str,
    where: str,
    ambiguous: bool,
    resend: bool,
) -> None:
    """A store failure at the first, a middle or the last batch of any write call leaves
    the log equal to exactly the events the caller was told were accepted, once each --
    whether the caller resends refused writes or not."""
    scenario = SCENARIOS[call]
    clean = OneFailure(None, after_commit=False)
    reference, _ = await run_scenario(scenario, clean, resend=resend)
    batches = clean.calls
    index = {"first": 0, "middle": batches // 2, "last": batches - 1}[where]
    store = OneFailure(index, after_commit=ambiguous)
    caller, exit_error = await run_scenario(scenario, store, resend=resend)
    assert store.calls > index, "the failure was injected"
    for session_id, expected in caller.model.items():
        assert stored(store, session_id) == expected, (session_id, caller)
    # With a single failure nothing is dropped for good, and a resending caller ends
    # with the same log as a run without any failure.
    assert caller.dropped == 0
    if resend:
        assert caller.model == reference.model
    if exit_error is not None:  # only the final barrier may fail: every event is stored
        assert where == "last"


async def test_a_refused_write_leaves_the_model_unchanged(
    autojump_clock: trio.testing.MockClock,  # noqa: ARG001 (pytest-trio runs the test on it)
) -> None:
    """The harness is honest: a write refused for bad input is not in the log, and the
    caller that does not resend reports it as refused."""
    store = OneFailure(None, after_commit=False)
    async with open_runtime(store) as rt, rt.open_session("s") as w:
        caller = Caller(rt, resend=False)
        bad: Any = NewEvent("k", {"x": float("nan")})
        await caller.call(lambda: w.append([bad]), lambda: caller.log("s").append("nan"))
        await caller.call(lambda: w.append([ev("ok")]), lambda: caller.log("s").append("ok"))
    assert caller.refused == 1
    assert stored(store, "s") == ["ok"] == caller.model["s"]
