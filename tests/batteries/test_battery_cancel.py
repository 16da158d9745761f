"""Battery 2: cancellation at every scheduler step.

Each operation is cancelled after 1, 2, 3... scheduler steps (of any task: the caller's
and the runtime's writer), until it completes uncancelled. After every round the outcome
must be all or nothing -- exactly the state before, or exactly the state after an
uncancelled run of the operation -- and the runtime must keep serving (an uncancelled
operation right after succeeds). Operations: ``append``, ``append_nowait`` + ``flush``,
``truncate`` (of committed events, and behind queued ``append_nowait`` events), fork,
checkpoint save (``checkpoints(rt).append``), history append (``history(rt).append``, then
its idempotent retry), history ``rewind`` and ``trim_tool_results``, ``rt.delete`` and the
runtime-wide ``rt.flush``; plus a few single cases (a cancelled write open, cancelling a
queued and an in-flight append on a locked database, a scope cancelled before the call).

Both backends (memory, SQLite). The soak version (``TIDELOG_SOAK=1``) repeats every sweep
with a background task appending to another session, which shifts every interleaving.
"""

from __future__ import annotations

import contextlib
import pathlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import apsw
import pytest
import trio
import trio.testing
from battery_support import record, run_cancelled_at, size
from helpers import RuntimeFactory

from runtime import (
    JSON,
    ClosedError,
    NewEvent,
    Runtime,
    SessionWriter,
    open_runtime,
)
from runtime.agents import (
    AssistantMessage,
    Entry,
    RunHead,
    ToolCall,
    ToolResult,
    UserMessage,
    checkpoints,
    history,
)

#: A sweep that has not completed after this many steps is a hang.
MAX_STEPS = 400
#: Sweep repetitions: the first without, the others with background load.
REPEATS = size(1, 4)


@contextlib.asynccontextmanager
async def background(rt: Runtime, load: int) -> AsyncIterator[None]:
    """With ``load > 0``, a task keeps appending to session ``noise`` meanwhile (an
    awaited append, then ``load`` scheduler passes), so that the cancellation points fall
    elsewhere and the writer's batches mix sessions."""
    if load == 0:
        yield
        return
    running = trio.Event()
    async with trio.open_nursery() as nursery:

        async def noise() -> None:
            async with rt.open_session("noise") as w:
                while True:
                    await w.append([NewEvent("noise", None)])
                    running.set()
                    if await w.head() > 200:
                        await w.truncate(0)
                    for _ in range(load):
                        await trio.lowlevel.checkpoint()

        nursery.start_soon(noise)
        await running.wait()
        try:
            yield
        finally:
            nursery.cancel_scope.cancel()


async def sweep(round_: Callable[[int], Awaitable[bool]]) -> int:
    """Run ``round_(1)``, ``round_(2)``... until a round was not cancelled; return the
    number of rounds."""
    step = 0
    while True:
        step += 1
        if not await round_(step):
            return step
        assert step < MAX_STEPS, "the operation never completed"


async def values(rt: Runtime, session_id: str) -> list[JSON]:
    """The data of the session's committed events, in seq order."""
    return [e.data async for e in rt.iter_events(session_id)]


STATS: dict[str, int] = {"rounds": 0}


@pytest.fixture(scope="module", autouse=True)
def _record_counts() -> Iterator[None]:
    yield
    record("cancel", rounds=STATS["rounds"], repeats=REPEATS)


@pytest.fixture(params=range(REPEATS), ids=lambda r: f"load{r}")
def load(request: pytest.FixtureRequest) -> int:
    """0: no background load; n > 0: a background appender every n scheduler passes."""
    return int(request.param)


# -- append, append_nowait + flush --------------------------------------------------------


async def _sweep_writes(
    rt: Runtime, session_id: str, make_op: Callable[[SessionWriter, int], Awaitable[object]]
) -> int:
    """Sweep ``make_op(w, n)`` (which writes ``{"n": n}``): a round whose head did not
    move stored nothing, one whose head moved stored exactly its event."""
    async with rt.open_session(session_id) as w:
        expected: list[JSON] = []

        async def round_(step: int) -> bool:
            before = await w.head()
            cancelled = await run_cancelled_at(step, lambda: make_op(w, step))
            await w.flush()
            if await w.head() != before:
                expected.append({"n": step})
            assert await values(rt, session_id) == expected, f"step {step}: not all or nothing"
            # The runtime keeps serving after every cancellation.
            assert await w.append([NewEvent("k", {"n": -step})]) == await w.head()
            expected.append({"n": -step})
            STATS["rounds"] += 1
            return cancelled

        return await sweep(round_)


async def test_cancel_append_at_every_step(make_runtime: RuntimeFactory, load: int) -> None:
    """A cancelled await append() is all-or-nothing at every step; the head says which."""
    async with make_runtime() as rt, background(rt, load):
        steps = await _sweep_writes(rt, "s", lambda w, n: w.append([NewEvent("k", {"n": n})]))
        assert steps >= 2


async def test_cancel_flush_at_every_step(make_runtime: RuntimeFactory, load: int) -> None:
    """append_nowait then a cancelled flush(): the accepted events always land."""

    async def op(w: SessionWriter, n: int) -> None:
        w.append_nowait([NewEvent("k", {"n": n})])
        await w.flush()

    async with make_runtime() as rt, background(rt, load):
        await _sweep_writes(rt, "s", op)  # each round checks its own outcome


# -- truncate ------------------------------------------------------------------------------


@pytest.mark.parametrize(("queued", "cut"), [(0, 2), (2, 1)])
async def test_cancel_truncate(
    make_runtime: RuntimeFactory, load: int, queued: int, cut: int
) -> None:
    """A cancelled truncate of ``cut`` committed events (and of ``queued`` nowait events
    behind them) is all or nothing; queued events land."""
    async with make_runtime() as rt, background(rt, load), rt.open_session("t") as w:
        expected: list[JSON] = []

        async def round_(step: int) -> bool:
            await w.append([NewEvent("k", {"n": step, "i": i}) for i in range(3)])
            expected.extend({"n": step, "i": i} for i in range(3))
            pending: list[JSON] = [{"n": step, "q": i} for i in range(queued)]
            w.append_nowait([NewEvent("k", q) for q in pending])
            before = await w.head()
            to_seq = before - queued - cut
            cancelled = await run_cancelled_at(step, lambda: w.truncate(to_seq))
            expected.extend(pending)
            if await w.head() == to_seq:
                del expected[to_seq:]
            else:
                assert await w.head() == before, (step, await w.head(), before)
            await w.flush()
            got = await values(rt, "t")
            assert got == expected, f"step {step}: {got} != {expected}, head {await w.head()}"
            assert await w.append([NewEvent("k", {"after": step})]) == len(expected) + 1
            expected.append({"after": step})
            STATS["rounds"] += 1
            return cancelled

        assert await sweep(round_) >= 2


# -- fork ----------------------------------------------------------------------------------


async def test_cancel_fork_at_every_step(make_runtime: RuntimeFactory, load: int) -> None:
    """A cancelled fork either created the whole child or nothing; the runtime serves on."""
    async with make_runtime() as rt, background(rt, load):
        async with rt.open_session("src") as w:
            await w.append([NewEvent("k", {"n": i}) for i in range(5)])

        async def round_(step: int) -> bool:
            child = f"child-{step}"
            cancelled = await run_cancelled_at(step, lambda: rt.fork("src", child))
            info = await rt.stat(child)
            if info is not None:
                assert info.head == 5
                assert info.parent == ("src", 5)
                assert len(await rt.read(child)) == 5
            else:
                assert cancelled, f"step {step}: an uncancelled fork created nothing"
            STATS["rounds"] += 1
            return cancelled

        assert await sweep(round_) >= 2
        async with rt.open_session("src") as w:
            assert await w.append([NewEvent("k", {"n": 99})]) == 6


# -- checkpoint save ---------------------------------------------------------------------


def _turn(step: int) -> tuple[list[Entry], RunHead]:
    entries: list[Entry] = [
        AssistantMessage("", agent="a"),
        ToolCall(f"c{step}", "note", {"step": step}),
        ToolResult(f"c{step}", f"noted {step}"),
    ]
    return entries, RunHead("a", turns=step, usage={"step": step})


async def test_cancel_checkpoint_save(make_runtime: RuntimeFactory, load: int) -> None:
    """A cancelled checkpoint save stores its entries and its head together or not at all."""
    async with make_runtime() as rt, background(rt, load):
        cp = checkpoints(rt)
        await cp.append("run", [UserMessage("start")], RunHead("a"))

        async def round_(step: int) -> bool:
            before = await cp.load("run")
            assert before is not None
            entries, head = _turn(step)
            cancelled = await run_cancelled_at(step, lambda: cp.append("run", entries, head))
            after = await cp.load("run")
            assert after is not None
            if after.entries == before.entries:
                assert after.head == before.head, f"step {step}: head saved without entries"
            else:
                assert after.entries == (*before.entries, *entries), f"step {step}"
                assert after.head == head, f"step {step}: entries saved without the head"
            # Keeps serving: an uncancelled save lands.
            more, more_head = _turn(10_000 + step)
            await cp.append("run", more, more_head)
            again = await cp.load("run")
            assert again is not None
            assert again.entries[-3:] == tuple(more)
            assert again.head == more_head
            STATS["rounds"] += 1
            return cancelled

        assert await sweep(round_) >= 2


# -- history append ----------------------------------------------------------------------


async def test_cancel_history_append(make_runtime: RuntimeFactory, load: int) -> None:
    """A cancelled history append stores the segment whole or not at all; a retry stores it once."""
    async with make_runtime() as rt, background(rt, load):
        conv = history(rt)
        await conv.append("h", [UserMessage("hello")], run_id="r0")

        async def round_(step: int) -> bool:
            before = await conv.segments("h")
            entries: list[Entry] = [
                UserMessage(f"q{step}"),
                ToolCall(f"c{step}", "look", {"q": step}),
                ToolResult(f"c{step}", "x" * step),
                AssistantMessage(f"a{step}"),
            ]
            run_id = f"r{step}"
            meta: dict[str, JSON] = {"step": step}
            cancelled = await run_cancelled_at(
                step, lambda: conv.append("h", entries, run_id=run_id, meta=meta)
            )
            after = await conv.segments("h")
            if len(after) == len(before):
                assert after == before, f"step {step}"
            else:
                assert after[:-1] == before, f"step {step}"
                last = after[-1]
                assert (last.run_id, list(last.entries), last.meta) == (run_id, entries, meta)
            # The retry (a replay re-applies its append) stores it exactly once.
            assert await conv.append("h", entries, run_id=run_id, meta=meta) == run_id
            final = await conv.segments("h")
            assert [s.run_id for s in final] == [s.run_id for s in before] + [run_id]
            assert list(final[-1].entries) == entries
            STATS["rounds"] += 1
            return cancelled

        assert await sweep(round_) >= 2


# -- history maintenance (rewind, trim) --------------------------------------------------


async def _seed_history(rt: Runtime, session_id: str, runs: int) -> None:
    for r in range(runs):
        await history(rt).append(
            session_id,
            [
                UserMessage(f"u{r}"),
                ToolCall(f"c{r}", "fetch", {"r": r}),
                ToolResult(f"c{r}", f"output {r} " + "y" * 600),
                AssistantMessage(f"a{r}"),
            ],
            run_id=f"run{r}",
            meta={"r": r},
        )


@pytest.mark.parametrize("operation", ["rewind", "trim"])
async def test_cancel_history_maintenance(
    make_runtime: RuntimeFactory, load: int, operation: str
) -> None:
    """A cancelled rewind or trim leaves the history exactly as before or exactly as after."""
    async with make_runtime() as rt, background(rt, load):
        conv = history(rt)

        def op(session_id: str) -> Callable[[], Awaitable[int]]:
            if operation == "rewind":
                return lambda: conv.rewind(session_id, 6)
            return lambda: conv.trim_tool_results(session_id, keep_chars=20, keep_runs=1)

        async def round_(step: int) -> bool:
            subject, twin = f"subject{step}", f"twin{step}"
            for session_id in (subject, twin):
                await _seed_history(rt, session_id, 3)
            before = await conv.segments(subject)
            assert await op(twin)() > 0
            expected = await conv.segments(twin)
            cancelled = await run_cancelled_at(step, op(subject))
            after = await conv.segments(subject)
            assert after in (before, expected), f"step {step}: a half-done {operation}"
            # Keeps serving: maintenance and appends on the same session still work.
            await op(subject)()
            assert await conv.segments(subject) == expected
            await conv.append(subject, [UserMessage("more")], run_id="more")
            assert (await conv.segments(subject))[-1].run_id == "more"
            STATS["rounds"] += 1
            return cancelled

        assert await sweep(round_) >= 2


# -- delete ------------------------------------------------------------------------------


async def test_cancel_delete(make_runtime: RuntimeFactory, load: int) -> None:
    """A cancelled rt.delete removes the session whole or leaves it whole; the id stays usable."""
    async with make_runtime() as rt, background(rt, load):

        async def round_(step: int) -> bool:
            session_id = f"d{step}"
            async with rt.open_session(session_id) as w:
                await w.append([NewEvent("k", {"i": i}) for i in range(5)])
            cancelled = await run_cancelled_at(step, lambda: rt.delete(session_id))
            info = await rt.stat(session_id)
            data = await values(rt, session_id)
            if info is None:
                assert data == [], f"step {step}: events outlived their session"
            else:
                assert info.head == 5, f"step {step}"
                assert data == [{"i": i} for i in range(5)], f"step {step}"
            async with rt.open_session(session_id) as w:
                head = await w.head()
                assert await w.append([NewEvent("k", {"again": step})]) == head + 1
            STATS["rounds"] += 1
            return cancelled

        assert await sweep(round_) >= 2


# -- runtime-wide flush ------------------------------------------------------------------


async def test_cancel_runtime_flush(make_runtime: RuntimeFactory, load: int) -> None:
    """A cancelled rt.flush() only stops the waiting: every accepted event lands once, in order."""
    async with (
        make_runtime() as rt,
        background(rt, load),
        rt.open_session("f1") as w1,
        rt.open_session("f2") as w2,
    ):
        expected: dict[str, list[JSON]] = {"f1": [], "f2": []}

        async def round_(step: int) -> bool:
            for w in (w1, w2):
                batch: list[JSON] = [{"step": step, "i": i} for i in range(step % 3 + 1)]
                w.append_nowait([NewEvent("k", d) for d in batch])
                expected[w.session_id].extend(batch)
            cancelled = await run_cancelled_at(step, rt.flush)
            await rt.flush()
            for sid, want in expected.items():
                assert await values(rt, sid) == want, f"step {step}: {sid}"
            STATS["rounds"] += 1
            return cancelled

        assert await sweep(round_) >= 2


async def test_runtime_flush_right_after_delete(make_runtime: RuntimeFactory) -> None:
    """rt.flush() right after rt.delete() or a checkpoint delete returns, raising nothing."""
    async with make_runtime() as rt, rt.open_session("kept") as w:
        failures = []
        for i in range(20):  # trio shuffles its run queue: repeat to meet the race
            w.append_nowait([NewEvent("k", {"i": i})])
            for delete in (rt.delete, lambda sid: checkpoints(rt).delete(sid)):
                await delete(f"gone-{i}")
                try:
                    await rt.flush()  # "kept" has a live writer; "gone-*" is nobody's
                except ClosedError as exc:
                    failures.append(repr(exc))
        assert await values(rt, "kept") == [{"i": i} for i in range(20)]
        assert not failures, f"{len(failures)} of 40 flushes failed: {failures[:2]}"


# -- single cases --------------------------------------------------------------------------


@pytest.mark.parametrize("steps", [1, 2, 3])
async def test_cancel_open_session(make_runtime: RuntimeFactory, steps: int) -> None:
    """Cancelling a write open (or the write in its block) leaves the session free for the
    next open, with the cancelled write stored whole or not at all."""
    async with make_runtime() as rt:

        async def op() -> None:
            async with rt.open_session("o") as w:
                await w.append([NewEvent("k", {"n": 1})])

        await run_cancelled_at(steps, op)
        async with rt.open_session("o") as w:
            head = await w.head()
            assert await values(rt, "o") == [{"n": 1}] * head
            assert await w.append([NewEvent("k", {"n": 2})]) == head + 1


async def test_cancel_queued_append_withdraws_in_flight_append_lands(
    tmp_path: pathlib.Path,
) -> None:
    """While the writer is stuck on a locked database: a cancelled append still queued is
    withdrawn (head goes back), a cancelled append already in the commit lands."""
    path = tmp_path / "db"
    async with open_runtime(path, busy_timeout_ms=20_000) as rt, rt.open_session("s") as w:
        blocker = apsw.Connection(str(path))
        blocker.execute("BEGIN IMMEDIATE")
        released = False
        try:
            async with trio.open_nursery() as nursery:
                in_flight = trio.CancelScope()
                queued = trio.CancelScope()

                async def append_in(scope: trio.CancelScope, n: int) -> None:
                    with scope:
                        await w.append([NewEvent("k", {"n": n})])

                nursery.start_soon(append_in, in_flight, 1)
                await trio.testing.wait_all_tasks_blocked(0.05)
                nursery.start_soon(append_in, queued, 2)
                await trio.testing.wait_all_tasks_blocked(0.05)
                assert await w.head() == 2
                queued.cancel()
                in_flight.cancel()
                await trio.testing.wait_all_tasks_blocked(0.05)
                assert await w.head() == 1  # the queued one was withdrawn
                blocker.execute("ROLLBACK")
                released = True
            assert await values(rt, "s") == [{"n": 1}]
            assert await w.append([NewEvent("k", {"n": 3})]) == 2
        finally:
            if not released:
                blocker.execute("ROLLBACK")
            blocker.close()


async def test_append_cancelled_before_it_starts_is_withdrawn(
    make_runtime: RuntimeFactory,
) -> None:
    """An append whose scope was cancelled before the call writes nothing and leaves no
    parked waiter behind."""
    async with make_runtime() as rt, rt.open_session("s") as w:
        await w.append([NewEvent("k", {"n": 1})])
        with trio.CancelScope() as scope:
            scope.cancel()
            await w.append([NewEvent("k", {"n": 2})])
        assert scope.cancelled_caught
        assert await w.head() == 1
        assert not w._actor._parked
        await w.flush()
        assert await values(rt, "s") == [{"n": 1}]
        assert await w.append([NewEvent("k", {"n": 3})]) == 2
