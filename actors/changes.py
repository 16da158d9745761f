"""ChangeHub: wakes tailers when a session's committed data changes.

In-process commits are announced by the group-commit writer right after they land. Commits
by other processes are found by polling ``PRAGMA data_version`` on a reader connection --
only while at least one tailer is waiting, every ``poll_interval`` seconds.
"""

from __future__ import annotations

from collections.abc import Iterable

import trio

from .lane import StoreLane

__all__ = ["ChangeHub"]


class ChangeHub:
    """Per-session change notifications plus a cross-process poller."""

    def __init__(self, lane: StoreLane, *, poll_interval: float) -> None:
        self._lane = lane
        self.poll_interval = poll_interval
        self._events: dict[str, trio.Event] = {}
        self._waiters = 0
        self._have_waiters = trio.Event()
        self.notifications = 0

    def notify(self, session_ids: Iterable[str]) -> None:
        """Wake every waiter on any of ``session_ids``."""
        if not self._events:
            return  # nobody watches anything (the usual case while appending)
        for session_id in session_ids:
            event = self._events.pop(session_id, None)
            if event is not None:
                self.notifications += 1
                event.set()

    def notify_all(self) -> None:
        """Wake every waiter (another process committed something)."""
        self.notify(list(self._events))

    async def wait(self, event: trio.Event) -> None:
        """Wait for ``event`` (from :meth:`watch`), polling other processes meanwhile.

        Take the event with :meth:`watch` *before* reading the store, so that a commit
        landing between the read and this wait is not missed; re-read after waking (a
        notification may be spurious).
        """
        self._waiters += 1
        self._have_waiters.set()
        try:
            await event.wait()
        finally:
            self._waiters -= 1

    def watch(self, session_id: str) -> trio.Event:
        """The event the next notification for ``session_id`` will set."""
        event = self._events.get(session_id)
        if event is None:
            event = self._events[session_id] = trio.Event()
        return event

    async def run_poller(self) -> None:
        """Poll ``data_version`` while tailers wait; runs until cancelled."""
        last = await self._lane.run(self._lane.store.data_version)
        while True:
            if self._waiters == 0:
                self._have_waiters = trio.Event()
                await self._have_waiters.wait()
            await trio.sleep(self.poll_interval)
            version = await self._lane.run(self._lane.store.data_version)
            if version != last:
                last = version
                self.notify_all()
