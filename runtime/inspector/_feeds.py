"""Shared live feeds: one ``rt.tail`` per session, fanned out to every event stream of it.

Each stream would otherwise run a tail of its own, and every commit would cost one read
per open stream on the runtime's one reader lane. A :class:`Feed` keeps the newest events
it has seen for its subscribers, each already encoded as its whole SSE message (encoded
once, the bytes shared by every stream); a subscriber behind that buffer -- a new one
resuming from an old seq, or a slow one that fell behind -- catches up with a tail of its
own (gap-free, and truncation-checked like any tail), then joins the shared one.

A feed reads its tail at most once per :data:`TICK`, and a stream sends what the feed got
since its last send as one write (:func:`follow` yields the messages of every event it
has not sent, concatenated): each event stays its own SSE message with ``id`` = its seq,
so ``Last-Event-ID`` resumes exactly, but a burst of commits costs the feed one read and
each stream one trip through the server per tick, not one per event.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager

import attrs
import trio

from runtime import Runtime, StoredEvent, Tail, TidelogError

from ._reads import event_obj

__all__ = ["Feed", "Feeds", "encode_event", "follow", "message_of"]

#: Events a feed keeps for its subscribers (older ones are read again by a subscriber's
#: own tail).
KEEP = 1024
#: The shortest time between two reads of a feed's tail (seconds): commits closer together
#: are read, and sent by every stream, in one piece. What the feeds cost the writer's
#: process is then bounded per second, not per commit; an event waits at most this long.
TICK = 0.025
#: A page of at least this many events may not be the last one committed: the feed reads
#: on at once instead of waiting a tick (so a fast writer is never outrun: the runtime's
#: tail reads 256 events per page).
FULL_PAGE = 128


def encode_event(event: StoredEvent) -> str:
    """The ``data`` of an event's SSE message: its JSON form, ASCII only."""
    return json.dumps(event_obj(event), ensure_ascii=True, allow_nan=False)


def message_of(event: StoredEvent) -> bytes:
    """The event's whole SSE message -- ``id: SEQ``, ``event: event``, ``data: JSON`` --
    as sse-starlette's ``ServerSentEvent`` encodes it (the JSON is one ASCII line, so no
    field needs splitting or escaping), without its per-message work."""
    return b"id: %d\r\nevent: event\r\ndata: %s\r\n\r\n" % (event.seq, encode_event(event).encode())


@attrs.define(eq=False)
class Feed:
    """One session's shared tail: the newest events (``(seq, SSE message)``, contiguous),
    ``cursor`` (the last seq seen), ``changed`` (set, then replaced, at each new event)
    and ``error`` once the tail ended (the session was cut or deleted below it, the
    runtime closed, the store failed)."""

    session_id: str
    cursor: int
    events: deque[tuple[int, bytes]] = attrs.field(factory=deque)
    changed: trio.Event = attrs.field(factory=trio.Event)
    error: TidelogError | None = None
    subscribers: int = 0
    scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)


class Feeds:
    """The shared feeds of one inspector: a feed runs in ``nursery`` while a stream of
    its session is open."""

    def __init__(self, rt: Runtime, nursery: trio.Nursery) -> None:
        self._rt = rt
        self._nursery = nursery
        self._feeds: dict[str, Feed] = {}

    @asynccontextmanager
    async def subscribe(self, session_id: str, head: int) -> AsyncIterator[Feed]:
        """The session's feed for the block (started after ``head`` if none runs)."""
        feed = self._feeds.get(session_id)
        if feed is None:
            feed = self._feeds[session_id] = Feed(session_id, head)
            self._nursery.start_soon(self._run, feed)
        feed.subscribers += 1
        try:
            yield feed
        finally:
            feed.subscribers -= 1
            if feed.subscribers == 0:
                feed.scope.cancel()
                if self._feeds.get(session_id) is feed:
                    del self._feeds[session_id]

    async def _run(self, feed: Feed) -> None:
        with feed.scope:
            try:
                tail = self._rt.tail(feed.session_id, since_seq=feed.cursor)
                page = 0
                async for event in tail:
                    page += 1
                    feed.events.append((event.seq, message_of(event)))
                    if len(feed.events) > KEEP:
                        feed.events.popleft()
                    feed.cursor = event.seq
                    if event.seq == tail.cursor:  # the page read is all here: wake them
                        feed.changed.set()
                        feed.changed = trio.Event()
                        if page < FULL_PAGE:
                            await trio.sleep(TICK)  # at the live edge: let commits gather
                        page = 0
            except TidelogError as exc:  # cut or deleted below it, closed, a store error
                feed.error = exc
            finally:
                if self._feeds.get(feed.session_id) is feed:
                    del self._feeds[feed.session_id]  # the next stream starts a new one
                feed.changed.set()


async def follow(rt: Runtime, feed: Feed, since: int) -> AsyncGenerator[tuple[int, bytes], None]:
    """The SSE messages of every committed event after ``since``, in order, no gaps, no
    duplicates, as ``(last seq, messages)``: every event the feed holds that was not sent
    yet in one piece, or one event at a time from a tail of its own while behind the
    feed's buffer. Raises the feed's error (after the events before it)."""
    position = since
    own: Tail | None = None
    while True:
        oldest = feed.events[0][0] if feed.events else feed.cursor + 1
        if position + 1 < oldest:  # behind the buffer: catch up on a tail of its own
            if own is None:
                own = rt.tail(feed.session_id, since_seq=position)
            event = await own.__anext__()
            position = event.seq
            yield event.seq, message_of(event)
            continue
        own = None
        if position < feed.cursor:
            # Contiguous seqs: the events after ``position`` are the buffer's last ones.
            events, count = feed.events, feed.cursor - position
            fresh = b"".join(events[-k][1] for k in range(count, 0, -1))
            position = feed.cursor
            yield position, fresh
            continue
        if feed.error is not None:
            raise feed.error
        await feed.changed.wait()
