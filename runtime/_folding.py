"""Folding projections at a pin, their caches, and watching a value change.

The fold runs in the reader lane's worker thread, a page of events per hop, so a long
refold never stalls the event loop; it reads through the snapshot's pin, so a destructive
change mid-fold raises :class:`~stores.SnapshotExpiredError` instead of mixing versions.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any, final

from stores import JSON, Pin, SessionNotFoundError, Store, TidelogError, decode_json, encode_json

from ._constructors import NoPublicConstructor
from ._engine import Engine
from ._projections import Projection
from ._tail import Tail, new_tail

__all__ = ["CACHE_EVERY", "Watch", "fold_states", "fold_values", "new_watch"]

logger = logging.getLogger("tidelog")

#: A fold that had to cover at least this many events leaves a cache behind.
CACHE_EVERY = 1000
_PAGE = 5000


def _load(
    store: Store, session_id: str, wanted: Sequence[tuple[str, int]]
) -> dict[str, tuple[int, str] | None]:
    """In the lane: the saved caches of the wanted projections."""
    return {name: store.load_projection(session_id, name, version) for name, version in wanted}


def _fold_page(
    store: Store,
    pin: Pin,
    since: int,
    projections: Sequence[Projection],
    states: list[JSON],
    starts: list[int],
) -> int:
    """In the lane: fold the next page of events after ``since``; return its last seq."""
    events = store.read(pin.session_id, since_seq=since, limit=_PAGE, pin=pin)
    for event in events:
        for i, projection in enumerate(projections):
            if event.seq > starts[i]:
                states[i] = projection.apply(states[i], event)
    return events[-1].seq if events else pin.as_of_seq


async def fold_values(
    engine: Engine, pin: Pin, projections: Sequence[Projection]
) -> dict[str, Any]:
    """``{name: view}`` of every projection folded exactly up to ``pin.as_of_seq``."""
    states = await fold_states(engine, pin, projections)
    return {p.name: p.view(s) for p, s in zip(projections, states, strict=True)}


async def fold_states(engine: Engine, pin: Pin, projections: Sequence[Projection]) -> list[JSON]:
    """The states of ``projections`` folded exactly up to ``pin.as_of_seq``, starting
    from their newest valid caches; leaves new caches behind after long folds."""
    view = engine.store
    wanted = [(p.name, p.version) for p in projections]
    cached = await view.reading(_load, pin.session_id, wanted)
    states: list[JSON] = []
    starts: list[int] = []
    for projection in projections:
        hit = cached.get(projection.name)
        if hit is not None and hit[0] <= pin.as_of_seq:
            states.append(decode_json(hit[1]))
            starts.append(hit[0])
        else:
            states.append(projection.init())
            starts.append(0)
    cursor = min(starts, default=pin.as_of_seq)
    while cursor < pin.as_of_seq:
        cursor = await view.reading(_fold_page, pin, cursor, projections, states, starts)
    stale = [
        (p.name, p.version, s)
        for p, s, start in zip(projections, states, starts, strict=True)
        if pin.as_of_seq - start >= CACHE_EVERY
    ]
    if stale:
        saved = [(name, version, encode_json(state)) for name, version, state in stale]
        engine.background(_save_caches, engine, pin, saved)
    return states


async def _save_caches(engine: Engine, pin: Pin, saved: list[tuple[str, int, str]]) -> None:
    """Write projection caches through the writer lane; a failure is only logged."""

    def save(store: Store) -> None:
        for name, version, state_json in saved:
            store.save_projection(pin, name, version, state_json)

    try:
        await engine.store.writing(save)
    except TidelogError as exc:
        logger.warning("projection cache of %s not saved: %r", pin.session_id, exc)


def new_watch(engine: Engine, session_id: str, projection: Projection) -> Watch:
    """A watch of ``projection`` on ``session_id`` (``Runtime.watch``)."""
    return Watch._create(engine, session_id, projection)


@final
class Watch(metaclass=NoPublicConstructor):
    """``async for value in rt.watch(id, name)``: the projection's value now, then again
    each time a committed event changes it. Raises :class:`SnapshotExpiredError` if the
    session is truncated below what was folded or deleted,
    :class:`SessionNotFoundError` if it does not exist when the watch starts; cancel to
    stop."""

    def __init__(self, engine: Engine, session_id: str, projection: Projection) -> None:
        self._engine = engine
        self.session_id = session_id
        self._projection = projection
        self._state: JSON = None
        self._last: Any = None
        self._tail: Tail | None = None

    def __aiter__(self) -> Watch:
        return self

    async def __anext__(self) -> Any:
        if self._tail is None:
            engine = self._engine
            pin = await engine.store.pin(self.session_id)
            if pin is None:
                raise SessionNotFoundError(self.session_id)
            [self._state] = await fold_states(engine, pin, [self._projection])
            self._last = _copy(self._projection.view(self._state))
            self._tail = new_tail(engine, self.session_id, pin.as_of_seq)
            return _copy(self._last)
        while True:
            event = await self._tail.__anext__()
            self._state = self._projection.apply(self._state, event)
            value = self._projection.view(self._state)
            if value != self._last:
                self._last = _copy(value)
                return _copy(value)


def _copy(value: Any) -> Any:
    """A deep copy of a JSON value (views handed out must not alias state)."""
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError):
        return value
