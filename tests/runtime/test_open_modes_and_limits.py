"""Opening sessions (create modes, the reserved namespace, headers) and the runtime's
input limits: named errors, nothing created or queued."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

from runtime import (
    INTERNAL_PREFIX,
    InvalidArgumentError,
    InvalidEventError,
    InvalidSessionIdError,
    MemoryStore,
    NewEvent,
    Runtime,
    SessionExistsError,
    SessionNotFoundError,
    open_runtime,
)
from stores import MAX_EVENT_BYTES, MAX_SEQ


async def test_create_new_refuses_an_existing_session(rt: Runtime) -> None:
    """create="new" is an exclusive create: SessionExistsError if the session exists
    (whether or not its writer is live here), and nothing changes."""
    async with rt.open_session("s", create="new", header={"v": 1}) as w:
        await w.append([NewEvent("k")])
        with pytest.raises(SessionExistsError):
            async with rt.open_session("s", create="new", shared=True):
                pass  # pragma: no cover
    with pytest.raises(SessionExistsError):
        async with rt.open_session("s", create="new"):
            pass  # pragma: no cover
    info = await rt.stat("s")
    assert info is not None
    assert info.header == {"v": 1}
    assert info.head == 1


async def test_create_never_refuses_a_missing_session(rt: Runtime) -> None:
    """create="never" opens only an existing session: SessionNotFoundError otherwise,
    and nothing is created."""
    with pytest.raises(SessionNotFoundError):
        async with rt.open_session("nobody", create="never"):
            pass  # pragma: no cover
    assert await rt.stat("nobody") is None


async def test_header_of_an_existing_session_is_kept(rt: Runtime) -> None:
    """header is used only when the open creates the session: an existing one keeps its
    own (documented), it is never silently overwritten."""
    async with rt.open_session("s", header={"title": "first"}):
        pass
    async with rt.open_session("s", header={"title": "second"}):
        pass
    info = await rt.stat("s")
    assert info is not None
    assert info.header == {"title": "first"}


async def test_reserved_namespace_needs_internal(rt: Runtime) -> None:
    """A write open of an id in the reserved namespace (where the agent layer keeps run
    checkpoints) is refused with InvalidSessionIdError unless internal=True, and such
    sessions are listed only when asked for."""
    sid = INTERNAL_PREFIX + "run/r1"
    with pytest.raises(InvalidSessionIdError):
        async with rt.open_session(sid):
            pass  # pragma: no cover
    assert await rt.stat(sid) is None
    async with rt.open_session(sid, internal=True) as w:
        await w.append([NewEvent("k")])
    async with rt.open_session("user"):
        pass
    assert [i.id for i in await rt.list_sessions()] == ["user"]
    assert {i.id for i in await rt.list_sessions(include_internal=True)} == {sid, "user"}


@pytest.mark.parametrize("mode", ["append", "nowait"])
async def test_an_event_too_large_is_refused_before_queueing(
    mode: str,
    autojump_clock: trio.testing.MockClock,  # noqa: ARG001 (pytest-trio runs the test on it)
) -> None:
    """An event over MAX_EVENT_BYTES is refused with InvalidEventError before anything is
    queued; another session's writes are unaffected and nothing is lost at exit."""
    store = MemoryStore()
    async with (
        open_runtime(store) as rt,
        rt.open_session("big") as big,
        rt.open_session("ok") as ok,
    ):
        huge = NewEvent("k", "x" * (MAX_EVENT_BYTES + 1))
        if mode == "append":
            with pytest.raises(InvalidEventError):
                await big.append([huge])
        else:
            with pytest.raises(InvalidEventError):
                big.append_nowait([huge])
        assert await big.head() == 0
        assert await ok.append([NewEvent("k", 1)]) == 1
        assert await big.append([NewEvent("k", 2)]) == 1
    assert store.head("ok") == 1
    assert store.head("big") == 1


@pytest.mark.parametrize("value", [MAX_SEQ + 1, 2**64, -1])
async def test_out_of_range_integers_are_named_errors(rt: Runtime, value: int) -> None:
    """Seqs and limits outside 0..2**63-1 raise InvalidArgumentError (never a raw
    OverflowError) everywhere the runtime takes them."""
    async with rt.open_session("s") as w:
        await w.append([NewEvent("k")])
        for call in (
            lambda: rt.read("s", since_seq=value),
            lambda: rt.read("s", until_seq=value),
            lambda: rt.read("s", limit=value),
            lambda: w.read(since_seq=value),
            lambda: w.append([NewEvent("k")], expected_head=value),
            lambda: w.truncate(value),
            lambda: rt.list_sessions(limit=value),
            lambda: rt.fork("s", "c", at_seq=value),
        ):
            with pytest.raises(InvalidArgumentError):
                await call()
        with pytest.raises(InvalidArgumentError):
            rt.tail("s", since_seq=value)
        with pytest.raises(InvalidArgumentError):
            w.append_nowait([NewEvent("k")], expected_head=value)
    assert await rt.stat("c") is None


async def test_flags_must_be_bools(rt: Runtime) -> None:
    """from_end="no" is refused, not taken as true."""
    with pytest.raises(InvalidArgumentError):
        await rt.read("s", from_end="no")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "options",
    [
        {"busy_timeout_ms": 2**31},
        {"busy_timeout_ms": -1},
        {"synchronous": "sometimes"},
        {"lease_ttl": float("inf")},
        {"batch_window": 10**12},
    ],
)
async def test_bad_options_create_nothing(tmp_path: Path, options: dict[str, object]) -> None:
    """open_runtime with a bad option raises InvalidArgumentError and leaves no file."""
    path = tmp_path / "never.db"
    with pytest.raises(InvalidArgumentError):
        async with open_runtime(path, **options):  # type: ignore[arg-type]
            pass  # pragma: no cover
    assert list(await trio.Path(tmp_path).iterdir()) == []


async def test_per_session_state_is_freed_with_the_actor(
    autojump_clock: trio.testing.MockClock,  # noqa: ARG001 (pytest-trio runs the test on it)
) -> None:
    """3000 sessions written through shared writers (as the agent layer's history does)
    leave no per-session state behind once their actors are evicted."""
    async with open_runtime(MemoryStore(), idle_timeout=1.0) as rt:
        for i in range(3000):
            async with rt.open_session(f"s{i}", shared=True) as w:
                await w.append([NewEvent("k")])
        await trio.sleep(5.0)
        assert rt.statistics().sessions == 0


@pytest.mark.parametrize("at_seq", [-1, 99, "1", 0.5, MAX_SEQ + 1])
async def test_fork_reports_an_existing_child_first(rt: Runtime, at_seq: object) -> None:
    """Runtime.fork checks, as documented, that the new id is free before anything else:
    an existing child with an invalid at_seq raises SessionExistsError."""
    async with rt.open_session("p") as w:
        await w.append([NewEvent("k")])
    async with rt.open_session("child"):
        pass
    with pytest.raises(SessionExistsError):
        await rt.fork("p", "child", at_seq=at_seq)  # type: ignore[arg-type]
