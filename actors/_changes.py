"""ChangeHub: wakes tailers when a session's committed data changes.

In-process commits are announced by the group-commit writer right after they land.
Commits by other processes -- other hosts, with PostgreSQL -- are found two ways:

* **the store's change feed**, if it has one (:mod:`stores._listening`: PostgreSQL's
  ``LISTEN``/``NOTIFY``). A thread of the hub's own blocks in the feed's ``wait`` and
  hands each notification to the trio thread, which wakes the waiters of the sessions it
  names -- or every waiter when it says "anything may have changed" (after the feed
  reconnected: notifications sent meanwhile are lost, so everything is re-read -- and
  once when it first listens, for the commits announced before it did);
* **polling** ``data_version`` on a reader connection, only while at least one tailer
  waits: every ``poll_interval`` seconds, or every :data:`LISTENING_POLL_INTERVAL` while
  the feed is connected -- then polling is only the safety net for commits that announce
  nothing (a store opened with ``notify=False``, another program writing the tables).

A poll or a feed that fails (the server is away) is retried later; it never stops the
hub. A spurious wake-up only costs the tailer a re-read.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable

import trio

from stores import ChangeListener, TidelogError, listener_factory

from ._lane import StoreLane

__all__ = ["FEED_PAUSE_AFTER", "LISTENING_POLL_INTERVAL", "ChangeHub"]

#: Seconds between polls while the store's change feed is connected.
LISTENING_POLL_INTERVAL = 1.0
#: Seconds one wait of the feed's thread blocks before it looks at its stop flag.
FEED_WAIT = 1.0
#: Seconds between attempts to open a feed that could not be opened (server away).
FEED_RETRY = 2.0
#: Seconds with no session watched after which the feed's thread pauses the feed: the
#: runtime's own commits would otherwise wake it for nothing (on PostgreSQL ~150 us of
#: every awaited append of a lone writer, ``bench/HISTORY.md``). A tailer's next watch
#: comes within a round trip of its wake-up, so a tailed runtime never pauses.
FEED_PAUSE_AFTER = 0.25


class ChangeHub:
    """Per-session change notifications plus the cross-process feed and poller."""

    def __init__(self, lane: StoreLane, *, poll_interval: float) -> None:
        self._lane = lane
        self.poll_interval = poll_interval
        self._events: dict[str, trio.Event] = {}
        self._waiters = 0
        self._have_waiters = trio.Event()
        self._feed: ChangeListener | None = None
        self.notifications = 0
        #: Notifications received from the store's change feed.
        self.feed_notifications = 0

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
        """The event the next notification for ``session_id`` will set. A paused feed is
        woken to listen again: it then says "anything may have changed", so a commit
        announced before it listened wakes this watcher's re-read too."""
        event = self._events.get(session_id)
        if event is None:
            event = self._events[session_id] = trio.Event()
            feed = self._feed
            if feed is not None and feed.paused:  # (after the event is in place: see
                feed.wake()  # _serve_feed, which pauses and then looks at the events)
        return event

    @property
    def listening(self) -> bool:
        """True while the store's change feed is connected."""
        feed = self._feed
        return feed is not None and feed.connected

    async def run_poller(self) -> None:
        """Watch for other processes' commits until cancelled: the store's change feed
        if it has one, and ``data_version`` polling while tailers wait."""
        open_feed = listener_factory(self._lane.store)
        async with trio.open_nursery() as nursery:
            if open_feed is not None:
                nursery.start_soon(self._run_feed, open_feed)
            await self._poll()

    async def _poll(self) -> None:
        last = await self._version()
        while True:
            if self._waiters == 0:
                self._have_waiters = trio.Event()
                await self._have_waiters.wait()
            interval = self.poll_interval
            if self.listening:
                interval = max(interval, LISTENING_POLL_INTERVAL)
            await trio.sleep(interval)
            version = await self._version()
            if version is not None and version != last:
                last = version
                self.notify_all()

    async def _version(self) -> int | None:
        """The store's ``data_version``, or ``None`` while the store fails (retried)."""
        try:
            return await self._lane.run(self._lane.store.data_version)
        except TidelogError:
            return None

    def _watched(self) -> bool:
        """True while some session is watched (read from the feed's thread: a plain
        attribute read)."""
        return bool(self._events)

    def _from_feed(self, ids: set[str] | None) -> None:
        """A notification of the feed, on the trio thread."""
        self.feed_notifications += 1
        if ids is None:
            self.notify_all()
        else:
            self.notify(ids)

    async def _run_feed(self, open_feed: Callable[[], ChangeListener]) -> None:
        """Open the feed (retried while the server is away) and serve it from a thread of
        its own until cancelled; the thread closes it when it stops."""
        while True:
            try:
                feed = await trio.to_thread.run_sync(open_feed)
                break
            except TidelogError:
                await trio.sleep(FEED_RETRY)
        token = trio.lowlevel.current_trio_token()
        stop = threading.Event()
        self._feed = feed
        # Commits announced before the feed listened were heard by no one, and a tailer
        # waiting now may have read before them: every waiter re-reads (from here on, the
        # feed hears each commit its re-read does not see).
        self.notify_all()
        threading.Thread(
            target=_serve_feed,
            args=(feed, stop, token, self._from_feed, self._watched),
            name="tidelog change feed",
            daemon=True,
        ).start()
        try:
            await trio.sleep_forever()
        finally:
            self._feed = None
            stop.set()
            feed.wake()
            self.notify_all()  # anything announced from now on would not be heard


def _serve_feed(
    feed: ChangeListener,
    stop: threading.Event,
    token: trio.lowlevel.TrioToken,
    deliver: Callable[[set[str] | None], None],
    watched: Callable[[], bool],
) -> None:
    """The feed's thread: hand every notification to the trio thread until ``stop`` --
    only while some session is watched (most notifications announce this runtime's own
    commits, which nobody tails). Skipping one then is safe: a tailer takes its watch
    *before* it reads the store, so a commit announced before the watch existed is one
    its read already sees. After :data:`FEED_PAUSE_AFTER` seconds with nothing watched it
    pauses the feed, and resumes it at the next watch; the resumed feed's first wait says
    "anything may have changed", which re-reads every waiter, so a commit announced while
    it was paused is found too."""
    last_watched = time.monotonic()
    try:
        while not stop.is_set():
            if watched():
                last_watched = time.monotonic()
                if feed.paused:
                    feed.resume()  # its next wait says "anything": every waiter re-reads
            elif not feed.paused and time.monotonic() - last_watched >= FEED_PAUSE_AFTER:
                # Nobody tails: stop hearing this runtime's own commits. The pause is
                # visible before the events are looked at again, so a watch taken
                # meanwhile is either seen here or wakes the paused wait (ChangeHub.watch).
                feed.pause()
                if watched():
                    continue
            ids = feed.wait(FEED_WAIT)
            if stop.is_set():
                return
            if (ids is None or ids) and watched():
                try:
                    token.run_sync_soon(deliver, ids)
                except trio.RunFinishedError:
                    return
    finally:
        feed.close()
