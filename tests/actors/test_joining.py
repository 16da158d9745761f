"""One-event ``append_nowait`` calls join the queue's last write only when nothing can
tell the difference: no waiter on it, no commit attempt on it, and within the size caps;
and a joined write is committed as a submitted one is."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest
import trio
from helpers import RuntimeFactory, num

from actors import GroupWrite, SessionActor
from actors._pending import PendingWrite
from actors._session import JOIN_CHARS, JOIN_EVENTS, _joinable
from runtime import open_runtime
from stores import (
    BatchResult,
    BrokenError,
    Capabilities,
    MemoryStore,
    NewEvent,
    PreparedEvent,
    TidelogError,
    WriteOp,
)

_ONE = (PreparedEvent("k", "{}"),)


def _tail(**changes: object) -> PendingWrite:
    write = PendingWrite("append", 0, 1, 1, _ONE)
    for name, value in changes.items():
        setattr(write, name, value)
    return write


def test_a_plain_queued_append_is_joinable() -> None:
    """An append nobody waits on, never attempted and small, takes a one-event append."""
    assert _joinable(_tail(), _ONE)


@pytest.mark.parametrize(
    ("why", "changes"),
    [
        ("an awaited append or wait_committed waits on it", {"watchers": 1}),
        ("a failed attempt marked it for a resend", {"failed_attempts": 1}),
        ("it is a group's part", {"kind": "group", "group": GroupWrite()}),
        ("it is a truncate", {"kind": "truncate", "events": ()}),
        ("it is a replace", {"kind": "replace"}),
        ("it is full", {"events": _ONE * JOIN_EVENTS}),
    ],
)
def test_a_write_that_could_tell_is_not_joined(why: str, changes: dict[str, object]) -> None:
    """A write with a waiter, an attempt behind it, another kind or a full load takes no
    more events (each would change what its waiter or its resend sees)."""
    assert not _joinable(_tail(**changes), _ONE), why


def test_a_large_event_is_not_joined() -> None:
    """An event over JOIN_CHARS of data starts a write of its own (the caps bound the op
    the writer merges from queued writes)."""
    big = (PreparedEvent("k", '"' + "x" * JOIN_CHARS + '"'),)
    assert not _joinable(_tail(), big)
    assert _joinable(_tail(), (PreparedEvent("k", '"' + "x" * (JOIN_CHARS - 2) + '"'),))


class _Gated(MemoryStore):
    """A MemoryStore run in a thread whose batches wait for :attr:`release` once
    :attr:`entered` is set: a test holds a batch in flight as long as it likes."""

    capabilities = Capabilities(durable=False, blocking=True)

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()
        self.release.set()

    def write_batch(self, ops: Sequence[WriteOp], *, sync: bool = False) -> list[BatchResult]:
        self.entered.set()
        self.release.wait()
        return super().write_batch(ops, sync=sync)


async def test_joined_appends_are_committed_with_nobody_waiting() -> None:
    """A join does not resubmit the actor: events joined while the writer waits out its
    batch window, and while a batch of the session is in flight in the store's thread,
    are committed by the writer alone (nobody waits on them), once each and in order."""
    store = _Gated()
    async with open_runtime(store, batch_window=0.002) as rt, rt.open_session("s") as w:
        actor = w._actor
        store.entered.clear()
        store.release.clear()
        assert [w.append_nowait([NewEvent("k", {"n": n})]) for n in (1, 2, 3)] == [
            (1, 1),
            (2, 2),
            (3, 3),
        ]
        assert len(actor._pending) == 1  # one write, joined twice
        with trio.fail_after(10):
            await trio.to_thread.run_sync(store.entered.wait, abandon_on_cancel=True)
            assert actor.in_flight  # its batch
            for n in range(4, 9):  # a new write, then joins onto it
                w.append_nowait([NewEvent("k", {"n": n})])
            assert len(actor._pending) == 2
            store.release.set()
            while w.committed_head < 8:  # noqa: ASYNC110 (nobody waits on a write)
                await trio.sleep(0.001)
        async with rt.open_session("s", mode="read") as r:
            assert [(e.seq, num(e, "n")) for e in await r.read()] == [(n, n) for n in range(1, 9)]


@pytest.mark.parametrize("backend", ["memory"])
async def test_accepting_says_whether_a_write_would_be_refused(
    make_runtime: RuntimeFactory,
) -> None:
    """The actor's one-attribute test of the hot paths, ``accepting``, is True exactly
    while :meth:`check_writable` raises nothing: not before the start, not after closing,
    not once the actor died."""

    def refused(actor: SessionActor) -> bool:
        try:
            actor.check_writable()
        except TidelogError:
            return True
        return False

    async with make_runtime() as rt:
        async with rt.open_session("s") as w:
            actor = w._actor
            assert actor.accepting
            assert not refused(actor)
        assert not actor.accepting  # stopped with its last handle
        assert refused(actor)
        async with rt.open_session("t") as w:
            actor = w._actor
            actor.die(BrokenError("test: the actor died"))
            assert not actor.accepting
            assert refused(actor)
            with pytest.raises(BrokenError):
                w.append_nowait([NewEvent("k")])
