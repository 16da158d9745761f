"""Tail: a live, ordered iterator over a session's committed events."""

from __future__ import annotations

from collections import deque
from typing import final

from stores import Pin, Store, StoredEvent

from ._constructors import NoPublicConstructor
from ._engine import Engine

__all__ = ["PAGE_SIZE", "Tail", "new_tail"]

#: Events read per page: a slow tailer holds at most one page in memory.
PAGE_SIZE = 256


def _tail_page(
    store: Store, session_id: str, cursor: int, pin: Pin | None, limit: int
) -> tuple[list[StoredEvent], Pin | None]:
    """In the reader lane: the next page after ``cursor`` and a pin proving it consistent
    (no page and no pin while the session does not exist yet).

    The page is read first, then ``refresh_pin`` checks atomically that nothing at or
    below the page's end was truncated since the previous pin -- so a truncate (with or
    without re-appends) below the tail's position is always detected, never yielded.
    """
    if pin is None:
        pin = store.pin(session_id)
        if pin is None:
            return [], None
    page = store.read(session_id, since_seq=cursor, limit=limit)
    end = page[-1].seq if page else cursor
    fresh = store.refresh_pin(Pin(session_id, end, pin.incarnation, pin.epoch))
    return page, fresh


def new_tail(engine: Engine, session_id: str, since_seq: int) -> Tail:
    """A tail of ``session_id`` after ``since_seq`` (``Runtime.tail``, ``Watch``)."""
    return Tail._create(engine, session_id, since_seq)


@final
class Tail(metaclass=NoPublicConstructor):
    """``async for event in rt.tail(id, since_seq=0)``: committed events in seq order,
    no gaps, no duplicates, then new ones as they are committed -- by this process (woken
    at once) or by another (heard from the store's change feed, PostgreSQL's ``NOTIFY``,
    or found by polling the store's ``data_version``).

    A tail of a session that does not exist yet waits for it to be created (subscribers
    usually start before producers).

    Raises (from the iteration): :class:`SnapshotExpiredError` if the session is deleted
    or truncated below the tail's position; :class:`ClosedError` when the runtime closes.
    Cancel it (or break out of the loop) to stop.
    """

    def __init__(self, engine: Engine, session_id: str, since_seq: int) -> None:
        self._engine = engine
        self.session_id = session_id
        self.cursor = since_seq
        self._pin: Pin | None = None
        self._buffer: deque[StoredEvent] = deque()

    def __aiter__(self) -> Tail:
        return self

    async def __anext__(self) -> StoredEvent:
        engine = self._engine
        while not self._buffer:
            engine.check_open()
            changed = engine.hub.watch(self.session_id)
            page, self._pin = await engine.store.reading(
                _tail_page, self.session_id, self.cursor, self._pin, PAGE_SIZE
            )
            if page:
                self._buffer.extend(page)
                self.cursor = page[-1].seq
                break
            await engine.hub.wait(changed)
        return self._buffer.popleft()
