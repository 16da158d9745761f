"""Battery 4: model-based. A hypothesis ``RuleBasedStateMachine`` drives random write
opens, appends (awaited, with and without ``expected_head``), ``append_nowait``, flushes
(per session and runtime-wide), truncates, forks, deletes, snapshots (held across steps,
read later), reads with windows, writer closes and full reopens against runtimes on a
``MemoryStore``, a SQLite file, a JSONL store directory and (when a server is there)
PostgreSQL, and a plain Python model. After every step every runtime must agree with the
model.

Design: hypothesis state machines are synchronous, the runtime is trio. The test task
starts a *host* task that owns every runtime, handle and snapshot (their ``async with``
blocks are entered and left by that one task, runtimes in LIFO order), and runs the state
machine in a worker thread (``trio.to_thread``); each step sends a coroutine function to
the host over a channel and waits for its outcome. Deterministic (``derandomize``) and
bounded: 50 examples of up to 40 steps in CI, 500 of up to 80 in the soak run.

``append_nowait`` commits in the background, so between a nowait append and the next
flush the committed log may be any prefix of the accepted one that is at least as long as
the part known to be committed; the model checks exactly that, and exact equality after
every awaited write, flush, close and reopen.
"""

from __future__ import annotations

import math
import queue
import shutil
import sys
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import attrs
import outcome
import pytest
import trio
from battery_support import record, size
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from pgtest import drop_schema, new_schema, optional_pg, test_dsn, url_of

from runtime import (
    ConflictError,
    InvalidArgumentError,
    MemoryStore,
    NewEvent,
    Runtime,
    SessionExistsError,
    SessionNotFoundError,
    SessionOwnedError,
    SessionWriter,
    Snapshot,
    SnapshotExpiredError,
    StoredEvent,
    open_runtime,
)

EXAMPLES = size(50, 500)
STEPS = size(40, 80)
#: Session ids, including SQL metacharacters and path tricks (ids are data).
SIDS = ["a", "b", "c'; DROP TABLE events; --", "../d%_", "fork-1", "fork-2"]
#: The runtimes compared with the model (PostgreSQL too when a server is there).
SIDES = ("memory", "sqlite", "jsonl")
CALL_TIMEOUT = 60.0
#: Rule arguments recorded in the trace.
TRACED = ("sid", "source", "new_id", "at", "to_seq", "batch", "expect", "head", "back")

Event = tuple[str, Any, str | None]  # kind, data, run_id

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3)
    ),
    max_leaves=6,
)
events = st.tuples(
    st.sampled_from(["msg", "tool_call", "k"]), json_values, st.sampled_from([None, "r1"])
)
batches = st.lists(events, min_size=0, max_size=4)


# -- the bridge between the hypothesis thread and the trio host task ---------------------


class Driver:
    """Runs coroutine functions in the host task, from the state machine's thread."""

    def __init__(self, send: trio.MemorySendChannel[Any]) -> None:
        self._send = send
        self.calls = 0

    def __call__(self, fn: Callable[[], Awaitable[Any]]) -> Any:
        reply: queue.Queue[outcome.Outcome[Any]] = queue.Queue(1)
        trio.from_thread.run_sync(self._send.send_nowait, (fn, reply))
        self.calls += 1
        return reply.get(timeout=CALL_TIMEOUT).unwrap()


async def host(receive: trio.MemoryReceiveChannel[Any]) -> None:
    async for fn, reply in receive:
        reply.put(await outcome.acapture(fn))


# -- the model ---------------------------------------------------------------------------


@attrs.define
class ModelSession:
    accepted: list[Event] = attrs.Factory(list)
    #: How many of ``accepted`` are known to be committed.
    durable: int = 0
    header: dict[str, Any] = attrs.Factory(dict)
    parent: tuple[str, int] | None = None


@attrs.define
class Snap:
    """One snapshot per side, of one session, held across steps."""

    session_id: str
    cms: dict[str, AbstractAsyncContextManager[Snapshot]]
    snaps: dict[str, Snapshot]
    contents: dict[str, list[Event]]
    expired: dict[str, bool]


def window(
    log: Sequence[Event], since: int, until: int | None, limit: int | None, from_end: bool
) -> list[tuple[int, Event]]:
    picked = [
        (seq, e)
        for seq, e in enumerate(log, start=1)
        if seq > since and (until is None or seq <= until)
    ]
    if limit is not None:
        picked = picked[max(0, len(picked) - limit) :] if from_end else picked[:limit]
    return picked


def as_model(stored: Sequence[StoredEvent]) -> list[tuple[int, Event]]:
    return [(e.seq, (e.kind, e.data, e.run_id)) for e in stored]


def new_events(batch: Sequence[Event]) -> list[NewEvent]:
    return [NewEvent(kind, data, run_id=run_id) for kind, data, run_id in batch]


# -- the machine -------------------------------------------------------------------------


def make_machine(
    driver: Driver, stats: dict[str, int], sides: tuple[str, ...] = SIDES
) -> type[RuleBasedStateMachine]:
    class RuntimeMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.dir = Path(tempfile.mkdtemp(prefix="tidelog-model-"))
            self.memory = MemoryStore()
            self.pg_schema = new_schema() if "postgres" in sides else ""
            self.model: dict[str, ModelSession] = {}
            self.writer_cms: dict[str, dict[str, AbstractAsyncContextManager[SessionWriter]]] = {}
            self.writers: dict[str, dict[str, SessionWriter]] = {}
            self.snaps: list[Snap] = []
            self.rt_cms: dict[str, AbstractAsyncContextManager[Runtime]] = {}
            self.rts: dict[str, Runtime] = {}
            #: The operations so far (for the message of a failure hypothesis cannot replay).
            self.trace: list[str] = []
            driver(self._open_runtimes)
            stats["examples"] += 1

        # -- plumbing ------------------------------------------------------------------

        async def _open_runtimes(self) -> None:
            (self.dir / "model.jsonl").mkdir(exist_ok=True)
            targets: dict[str, MemoryStore | Path | str] = {
                "memory": self.memory,
                "sqlite": self.dir / "model.db",
                "jsonl": self.dir / "model.jsonl",  # a directory: the JSONL file store
            }
            if self.pg_schema:
                targets["postgres"] = url_of(test_dsn(), self.pg_schema)
            for side in sides:  # opened in this order, closed in reverse
                cm = open_runtime(targets[side])
                self.rts[side] = await cm.__aenter__()
                self.rt_cms[side] = cm

        async def _close_all(self) -> None:
            for snap in self.snaps:
                for side in sides:
                    await snap.cms[side].__aexit__(None, None, None)
            self.snaps.clear()
            for sid in list(self.writer_cms):
                for side in sides:
                    await self.writer_cms[sid][side].__aexit__(None, None, None)
            self.writer_cms.clear()
            self.writers.clear()
            for side in reversed(sides):
                cm = self.rt_cms.pop(side, None)
                if cm is not None:
                    await cm.__aexit__(None, None, None)
            self.rts.clear()

        def both(self, fn: Callable[[str], Awaitable[Any]]) -> dict[str, outcome.Outcome[Any]]:
            """Run ``fn(side)`` for each side; the outcomes (values or errors)."""

            async def run() -> dict[str, outcome.Outcome[Any]]:
                return {side: await outcome.acapture(fn, side) for side in sides}

            stats["steps"] += 1
            caller = sys._getframe(1)
            if caller.f_code.co_name in ("values", "raises") and caller.f_back is not None:
                caller = caller.f_back
            self.trace.append(
                caller.f_code.co_name
                + repr({k: v for k, v in caller.f_locals.items() if k in TRACED})
            )
            result: dict[str, outcome.Outcome[Any]] = driver(run)
            return result

        def values(self, fn: Callable[[str], Awaitable[Any]]) -> dict[str, Any]:
            return {side: o.unwrap() for side, o in self.both(fn).items()}

        def raises(self, fn: Callable[[str], Awaitable[Any]], error: type[BaseException]) -> None:
            for side, result in self.both(fn).items():
                assert isinstance(result, outcome.Error), f"{side}: no {error.__name__}"
                assert isinstance(result.error, error), f"{side}: {result.error!r}"

        def committed_matches(self, sid: str, got: list[tuple[int, Event]], **win: Any) -> None:
            """``got`` is the window of some committed prefix the model allows."""
            s = self.model[sid]
            options = [window(s.accepted[:c], **win) for c in range(s.durable, len(s.accepted) + 1)]
            assert got in options, f"{sid}: {got} is no allowed window {win} of {s}"

        def teardown(self) -> None:
            try:
                driver(self._close_all)
            finally:
                shutil.rmtree(self.dir, ignore_errors=True)
                if self.pg_schema:
                    drop_schema(test_dsn(), self.pg_schema)

        # -- rules ---------------------------------------------------------------------

        @rule(sid=st.sampled_from(SIDS))
        def open_writer(self, sid: str) -> None:
            if sid in self.writers:
                self.raises(
                    lambda side: self.rts[side].open_session(sid).__aenter__(), SessionOwnedError
                )
                return
            cms: dict[str, AbstractAsyncContextManager[SessionWriter]] = {}

            async def enter(side: str) -> int:
                cms[side] = self.rts[side].open_session(sid, mode="write")
                w = await cms[side].__aenter__()
                self.writers.setdefault(sid, {})[side] = w
                return await w.head()

            heads = self.values(enter)
            self.writer_cms[sid] = cms
            s = self.model.setdefault(sid, ModelSession())
            assert heads == {side: len(s.accepted) for side in sides}

        @precondition(lambda self: self.writers)
        @rule(data=st.data())
        def close_writer(self, data: st.DataObject) -> None:
            sid = data.draw(st.sampled_from(sorted(self.writers)))
            self.values(lambda side: self.writer_cms[sid][side].__aexit__(None, None, None))
            del self.writers[sid], self.writer_cms[sid]
            self.model[sid].durable = len(self.model[sid].accepted)

        @precondition(lambda self: self.writers)
        @rule(data=st.data(), batch=batches, expect=st.sampled_from(["none", "right", "wrong"]))
        def append(self, data: st.DataObject, batch: list[Event], expect: str) -> None:
            sid = data.draw(st.sampled_from(sorted(self.writers)))
            s = self.model[sid]
            head = {"none": None, "right": len(s.accepted), "wrong": len(s.accepted) + 1}[expect]
            call = lambda side: self.writers[sid][side].append(  # noqa: E731
                new_events(batch), expected_head=head
            )
            if expect == "wrong":
                self.raises(call, ConflictError)
                return
            got = self.values(call)
            s.accepted += batch
            if batch:  # an empty batch returns the accepted head at once, waiting for nothing
                s.durable = len(s.accepted)
            assert got == {side: len(s.accepted) for side in sides}

        @precondition(lambda self: self.writers)
        @rule(data=st.data(), batch=batches)
        def append_nowait(self, data: st.DataObject, batch: list[Event]) -> None:
            sid = data.draw(st.sampled_from(sorted(self.writers)))
            s = self.model[sid]

            async def call(side: str) -> tuple[int, int]:
                await trio.lowlevel.checkpoint()
                return self.writers[sid][side].append_nowait(new_events(batch))

            got = self.values(call)
            first = len(s.accepted) + 1
            s.accepted += batch
            assert got == {side: (first, len(s.accepted)) for side in sides}

        @precondition(lambda self: self.writers)
        @rule(data=st.data())
        def flush(self, data: st.DataObject) -> None:
            sid = data.draw(st.sampled_from(sorted(self.writers)))
            self.values(lambda side: self.writers[sid][side].flush())
            self.model[sid].durable = len(self.model[sid].accepted)

        @rule()
        def runtime_flush(self) -> None:
            self.values(lambda side: self.rts[side].flush())
            for s in self.model.values():
                s.durable = len(s.accepted)

        @precondition(lambda self: self.writers)
        @rule(data=st.data(), back=st.integers(-2, 4))
        def truncate(self, data: st.DataObject, back: int) -> None:
            sid = data.draw(st.sampled_from(sorted(self.writers)))
            s = self.model[sid]
            to_seq = max(0, len(s.accepted) - back)
            removed = max(0, len(s.accepted) - to_seq)
            got = self.values(lambda side: self.writers[sid][side].truncate(to_seq))
            assert got == {side: removed for side in sides}
            if removed:
                del s.accepted[to_seq:]
                for snap in self.snaps:
                    if snap.session_id == sid:
                        for side in sides:
                            if to_seq < len(snap.contents[side]):
                                snap.expired[side] = True
            s.durable = len(s.accepted)

        @rule(sid=st.sampled_from(SIDS))
        def delete(self, sid: str) -> None:
            if sid in self.writers:
                self.raises(lambda side: self.rts[side].delete(sid), SessionOwnedError)
                return

            got = self.values(lambda side: self.rts[side].delete(sid))
            assert got == {side: sid in self.model for side in sides}
            self.model.pop(sid, None)
            for snap in self.snaps:
                if snap.session_id == sid:
                    snap.expired = dict.fromkeys(sides, True)

        @rule(data=st.data(), back=st.none() | st.integers(-1, 3), wild=st.integers(0, 3))
        def fork(self, data: st.DataObject, back: int | None, wild: int) -> None:
            existing = sorted(self.model)
            free = [i for i in SIDS if i not in self.model]
            if wild == 0 or not existing or not free:  # also the error paths, now and then
                source = data.draw(st.sampled_from(SIDS))
                new_id = data.draw(st.sampled_from(SIDS))
            else:
                source = data.draw(st.sampled_from(existing))
                new_id = data.draw(st.sampled_from(free))
            s = self.model.get(source)
            at = None if back is None or s is None else len(s.accepted) - back
            call = lambda side: self.rts[side].fork(  # noqa: E731
                source, new_id, at_seq=at
            )
            if new_id in self.model:  # an existing target is reported before anything else
                self.raises(call, SessionExistsError)
                return
            if at is not None and at < 0:
                self.raises(call, InvalidArgumentError)
                return
            if s is None:
                self.raises(call, SessionNotFoundError)
                return
            if at is not None and at > len(s.accepted):
                self.raises(call, InvalidArgumentError)
                return
            infos = self.values(call)
            s.durable = len(s.accepted)  # a fork first commits what the source accepted
            cut = len(s.accepted) if at is None else at
            child = ModelSession(
                list(s.accepted[:cut]),
                cut,
                {**s.header, "forked_from": source, "fork_seq": cut},
                (source, cut),
            )
            self.model[new_id] = child
            for side, info in infos.items():
                assert (info.id, info.head, info.parent) == (new_id, cut, (source, cut)), side
            stats["forks"] += 1

        @precondition(lambda self: len(self.snaps) < 4)
        @rule(sid=st.sampled_from(SIDS))
        def take_snapshot(self, sid: str) -> None:
            if sid not in self.model:
                self.raises(
                    lambda side: self.rts[side].snapshot(sid).__aenter__(), SessionNotFoundError
                )
                return
            cms: dict[str, AbstractAsyncContextManager[Snapshot]] = {}

            async def enter(side: str) -> Snapshot:
                cms[side] = self.rts[side].snapshot(sid)
                return await cms[side].__aenter__()

            snaps = self.values(enter)
            s = self.model[sid]
            contents = {}
            for side, snap in snaps.items():
                assert s.durable <= snap.as_of_seq <= len(s.accepted), (side, snap.as_of_seq, s)
                contents[side] = s.accepted[: snap.as_of_seq]
            self.snaps.append(Snap(sid, cms, snaps, contents, dict.fromkeys(sides, False)))

        @precondition(lambda self: self.snaps)
        @rule(
            data=st.data(),
            since=st.integers(0, 6),
            until=st.none() | st.integers(0, 12),
            limit=st.none() | st.integers(0, 5),
        )
        def read_snapshot(
            self, data: st.DataObject, since: int, until: int | None, limit: int | None
        ) -> None:
            snap = data.draw(st.sampled_from(self.snaps))
            results = self.both(
                lambda side: snap.snaps[side].read(since_seq=since, until_seq=until, limit=limit)
            )
            for side, result in results.items():
                if snap.expired[side]:
                    assert isinstance(result, outcome.Error), f"{side}: expired snapshot read"
                    assert isinstance(result.error, SnapshotExpiredError), result.error
                else:
                    want = window(snap.contents[side], since, until, limit, False)
                    assert as_model(result.unwrap()) == want, side

        @precondition(lambda self: self.snaps)
        @rule(data=st.data())
        def close_snapshot(self, data: st.DataObject) -> None:
            snap = data.draw(st.sampled_from(self.snaps))
            self.values(lambda side: snap.cms[side].__aexit__(None, None, None))
            self.snaps.remove(snap)

        @rule(
            sid=st.sampled_from(SIDS),
            since=st.integers(0, 6),
            until=st.none() | st.integers(0, 12),
            limit=st.none() | st.integers(0, 5),
            from_end=st.booleans(),
        )
        def read(
            self, sid: str, since: int, until: int | None, limit: int | None, from_end: bool
        ) -> None:
            async def call(side: str) -> list[StoredEvent]:
                async with self.rts[side].open_session(sid, mode="read") as r:
                    return await r.read(
                        since_seq=since, until_seq=until, limit=limit, from_end=from_end
                    )

            if sid not in self.model:
                self.raises(call, SessionNotFoundError)
                return
            win = {"since": since, "until": until, "limit": limit, "from_end": from_end}
            for got in self.values(call).values():
                self.committed_matches(sid, as_model(got), **win)

        @rule(roll=st.integers(0, 3))
        def reopen(self, roll: int) -> None:
            if roll:  # a reopen one time in four: it resets so much
                return
            driver(self._close_all)
            driver(self._open_runtimes)
            for s in self.model.values():
                s.durable = len(s.accepted)
            stats["reopens"] += 1

        # -- after every step ----------------------------------------------------------

        @invariant()
        def agree(self) -> None:
            async def observe(side: str) -> tuple[dict[str, Any], list[str], dict[str, int]]:
                rt = self.rts[side]
                infos = {sid: await rt.stat(sid) for sid in SIDS}
                listed = sorted(i.id for i in await rt.list_sessions())
                heads = {sid: await w[side].head() for sid, w in self.writers.items()}
                return infos, listed, heads

            for side, (infos, listed, heads) in self.values(observe).items():
                assert listed == sorted(self.model), (side, listed, sorted(self.model))
                for sid in SIDS:
                    info = infos[sid]
                    if sid not in self.model:
                        assert info is None, (side, sid, info)
                        continue
                    s = self.model[sid]
                    assert info is not None, (side, sid)
                    assert (info.header, info.parent) == (s.header, s.parent), (side, sid, info)
                    assert s.durable <= info.head <= len(s.accepted), (
                        side,
                        sid,
                        info,
                        s,
                        self.trace[-20:],
                    )
                    if sid in heads:
                        assert heads[sid] == len(s.accepted)
            # Where nothing is in flight, both backends hold exactly the model's log.
            settled = [sid for sid, s in self.model.items() if s.durable == len(s.accepted)]

            async def dump(side: str) -> dict[str, list[tuple[int, Event]]]:
                return {
                    sid: as_model([e async for e in self.rts[side].iter_events(sid)])
                    for sid in settled
                }

            for side, logs in self.values(dump).items():
                for sid in settled:
                    assert logs[sid] == window(self.model[sid].accepted, 0, None, None, False), (
                        side,
                        sid,
                    )

    return RuntimeMachine


@pytest.mark.timeout(size(300, 1800))  # the soak version takes ~5 min on these machines
@pytest.mark.parametrize("examples", [EXAMPLES])
async def test_runtimes_agree_with_model(examples: int) -> None:
    """MemoryStore, SQLite, JSONL and PostgreSQL (when a server is there) runtimes and a
    Python model agree after every step."""
    stats = {"examples": 0, "steps": 0, "reopens": 0, "forks": 0}
    send, receive = trio.open_memory_channel[Any](math.inf)
    driver = Driver(send)
    sides = SIDES + (("postgres",) if optional_pg() else ())
    machine = make_machine(driver, stats, sides)
    config = settings(
        max_examples=examples,
        stateful_step_count=STEPS,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=False,
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(host, receive)
        try:
            await trio.to_thread.run_sync(
                lambda: run_state_machine_as_test(machine, settings=config)
            )
        finally:
            nursery.cancel_scope.cancel()
    record("model", **stats)
