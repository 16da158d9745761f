"""Context views and pinned facts: the context projection starts from the latest valid
view, the conversation ignores views, and facts come from raw events only."""

from __future__ import annotations

import io
import pathlib
from collections.abc import AsyncIterator

import pytest
from helpers import runtime_target

from runtime import InvalidArgumentError, MemoryStore, NewEvent, Runtime, open_runtime
from runtime.agents import (
    ContextProjection,
    FactsProjection,
    SidecarEntry,
    UserMessage,
    agent_projections,
    context_view,
    pinned_fact,
    verified_artifact,
)
from runtime.agents._transcript import entry_to_event
from runtime.cli._dump import export_runtime
from runtime.cli._load import import_dump
from runtime.cli._opening import StopFlag


def _register(rt: Runtime) -> None:
    for projection in (*agent_projections(), ContextProjection(), FactsProjection()):
        rt.register_projection(projection)


@pytest.fixture(params=["memory", "sqlite", "jsonl", "postgres"])
async def rt(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> AsyncIterator[Runtime]:
    async with open_runtime(runtime_target(request.param, tmp_path, request)) as runtime:
        _register(runtime)
        yield runtime


def _ev(entry: SidecarEntry | UserMessage) -> NewEvent:
    return entry_to_event(entry)


async def _values(rt: Runtime, sid: str) -> dict[str, object]:
    async with rt.snapshot(sid) as snap:
        return await snap.values(["conversation", "context", "facts"])


async def test_context_starts_from_the_view_and_conversation_ignores_it(rt: Runtime) -> None:
    """The context is the latest view's messages plus the raw events after its
    through_seq (including those logged between through_seq and the view); the raw
    conversation still holds every message."""
    async with rt.open_session("s") as w:
        await w.append([_ev(UserMessage("one")), NewEvent("assistant", {"text": "two"})])
        await w.append([_ev(UserMessage("three"))])  # seq 3, after the view's through_seq
        summary = [{"role": "summary", "content": "one, two"}]
        await w.append([_ev(context_view(2, summary))])  # seq 4
        await w.append([NewEvent("assistant", {"text": "four"})])
    values = await _values(rt, "s")
    assert values["context"] == [
        {"role": "summary", "content": "one, two"},
        {"role": "user", "content": "three"},
        {"role": "assistant", "content": "four", "tool_calls": []},
    ]
    conversation = values["conversation"]
    assert isinstance(conversation, list)
    assert [m["content"] for m in conversation] == ["one", "two", "three", "four"]


async def test_invalid_or_backward_views_are_ignored(rt: Runtime) -> None:
    """A view naming its own seq or later, a malformed one, or one behind the current
    view is ignored; a later valid view replaces the earlier one."""
    async with rt.open_session("s") as w:
        await w.append([_ev(UserMessage("a")), _ev(UserMessage("b"))])
        await w.append([NewEvent("context_view", {"through_seq": 9, "messages": []})])  # 3
        await w.append([NewEvent("context_view", {"through_seq": 1, "messages": "x"})])  # 4
        await w.append([_ev(context_view(2, [{"role": "summary", "content": "ab"}]))])  # 5
        await w.append([_ev(context_view(1, [{"role": "summary", "content": "behind"}]))])
        await w.append([_ev(UserMessage("c"))])
    values = await _values(rt, "s")
    assert values["context"] == [
        {"role": "summary", "content": "ab"},
        {"role": "user", "content": "c"},
    ]
    async with rt.open_session("s") as w:
        await w.append([_ev(context_view(7, [{"role": "summary", "content": "abc"}]))])
    assert (await _values(rt, "s"))["context"] == [{"role": "summary", "content": "abc"}]


async def test_facts_survive_lossy_views_and_summaries(rt: Runtime) -> None:
    """Pinned goals, constraints and verified artifacts come from raw events: a view or
    summary that drops them does not remove them; a re-verification replaces the old."""
    async with rt.open_session("s") as w:
        await w.append(
            [
                _ev(UserMessage("build it")),
                _ev(pinned_fact("goal", "ship the parser")),
                _ev(pinned_fact("constraint", "no new dependencies")),
                _ev(verified_artifact("parser.py", sha="1")),
            ]
        )
        await w.append([NewEvent("summary", {"text": "we talked"})])
        await w.append([_ev(context_view(5, [{"role": "summary", "content": "nothing"}]))])
        await w.append([_ev(verified_artifact("parser.py", sha="2"))])
    facts = (await _values(rt, "s"))["facts"]
    assert facts == {
        "goals": ["ship the parser"],
        "constraints": ["no new dependencies"],
        "artifacts": [{"artifact": "parser.py", "sha": "2", "seq": 7}],
    }


async def test_bad_views_and_facts_are_refused() -> None:
    """Builders name the bad argument; nothing is built."""
    with pytest.raises(InvalidArgumentError, match="through_seq"):
        context_view(-1, [])
    with pytest.raises(InvalidArgumentError, match=r"messages\[0\]"):
        context_view(1, [{"content": "no role"}])
    with pytest.raises(InvalidArgumentError, match="'goal' or 'constraint'"):
        pinned_fact("wish", "x")
    with pytest.raises(InvalidArgumentError, match="non-empty"):
        pinned_fact("goal", "")
    with pytest.raises(InvalidArgumentError, match="artifact"):
        verified_artifact("")


async def test_views_and_facts_survive_export_and_import() -> None:
    """A dump carries views and facts as events: the imported session projects the same."""
    async with open_runtime(MemoryStore()) as rt:
        _register(rt)
        async with rt.open_session("s") as w:
            await w.append([_ev(UserMessage("a")), _ev(pinned_fact("goal", "g"))])
            await w.append([_ev(context_view(2, [{"role": "summary", "content": "A"}]))])
            await w.append([_ev(UserMessage("b"))])
        before = await _values(rt, "s")
        out = io.StringIO()
        await export_runtime(rt, ["s"], out)
    target = MemoryStore()
    lines = enumerate(out.getvalue().splitlines(keepends=True), start=1)
    next(lines)
    import_dump(target, lines, StopFlag(), lambda _: None)
    async with open_runtime(target) as rt2:
        _register(rt2)
        assert await _values(rt2, "s") == before
