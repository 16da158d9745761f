"""The write contract through the agent layer's writes: a history or checkpoint write
whose batch fails (first, middle or last batch; before or after the commit) leaves
exactly what the caller was told was accepted, once, whether it resends or not."""

from __future__ import annotations

import functools

import pytest
import trio
import trio.testing
from write_contract import Caller, OneFailure

from runtime import StoreIOError, open_runtime
from runtime.agents import AssistantMessage, RunHead, UserMessage, checkpoints, history


async def _history_scenario(store: OneFailure, *, resend: bool) -> tuple[Caller, list[str]]:
    """Append four runs to a conversation, trim and rewind it; return the caller (its
    model lists the user texts it expects) and what the history holds afterwards."""
    try:
        async with open_runtime(store) as rt:
            caller = Caller(rt, resend)
            conv = history(rt)
            for i in range(4):
                await caller.call(
                    functools.partial(
                        conv.append,
                        "c",
                        [UserMessage(f"q{i}"), AssistantMessage(f"a{i}")],
                        run_id=f"r{i}",
                    ),
                    functools.partial(caller.log("c").append, f"q{i}"),
                )
            await caller.call(functools.partial(conv.rewind, "c", 6), caller.log("c").pop)
    except StoreIOError:
        pass  # the final fsync barrier failed: every commit is in the store
    async with open_runtime(store) as rt:
        got = [e.text for e in await history(rt).load("c") if isinstance(e, UserMessage)]
    return caller, got


async def _checkpoint_scenario(store: OneFailure, *, resend: bool) -> tuple[Caller, list[str]]:
    """Save a run's checkpoint five times; return the caller and the saved entries."""
    try:
        async with open_runtime(store) as rt:
            caller = Caller(rt, resend)
            cp = checkpoints(rt)
            for i in range(5):
                await caller.call(
                    functools.partial(
                        cp.append, "r", [UserMessage(f"e{i}")], RunHead("a", turns=i)
                    ),
                    functools.partial(caller.log("r").append, f"e{i}"),
                )
    except StoreIOError:
        pass
    async with open_runtime(store) as rt:
        snap = await checkpoints(rt).load("r")
        got = [] if snap is None else [e.text for e in snap.entries if isinstance(e, UserMessage)]
    return caller, got


SCENARIOS = {"history": _history_scenario, "checkpoints": _checkpoint_scenario}


@pytest.mark.parametrize("resend", [False, True], ids=["keep", "resend"])
@pytest.mark.parametrize("ambiguous", [False, True], ids=["before", "after-commit"])
@pytest.mark.parametrize("where", ["first", "middle", "last"])
@pytest.mark.parametrize("what", list(SCENARIOS))
async def test_agent_writes_leave_exactly_the_accepted_entries(
    autojump_clock: trio.testing.MockClock,  # noqa: ARG001 (pytest-trio runs the test on it)
    what: str,
    where: str,
    ambiguous: bool,
    resend: bool,
) -> None:
    """History appends and rewinds, and checkpoint saves, through a store that fails one
    batch: the stored entries equal what the caller was told was accepted, once each."""
    scenario = SCENARIOS[what]
    clean = OneFailure(None, after_commit=False)
    reference, _ = await scenario(clean, resend=resend)
    index = {"first": 0, "middle": clean.calls // 2, "last": clean.calls - 1}[where]
    caller, got = await scenario(OneFailure(index, after_commit=ambiguous), resend=resend)
    key = "c" if what == "history" else "r"
    assert got == caller.model.get(key, []), caller
    if resend:
        assert caller.model == reference.model
