"""One-event ``append_nowait`` calls join the queue's last write only when nothing can
tell the difference: no waiter on it, no commit attempt on it, and within the size caps."""

from __future__ import annotations

import pytest

from actors import GroupWrite
from actors._pending import PendingWrite
from actors._session import JOIN_CHARS, JOIN_EVENTS, _joinable
from stores import PreparedEvent

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
