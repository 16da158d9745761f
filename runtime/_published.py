"""A live runtime's statistics, published in its store for other processes and hosts
(``open_runtime(..., publish_statistics=SECONDS)``; ``tidelog stats`` shows them).

**Where.** The runtime creates the internal session ``tidelog/stats/<host>-<pid>-<tag>``
(one event, ``tidelog.runtime``: who and since when) and holds it as its exclusive
writer for its whole life, so the session's lease says whether the runtime is alive, on
any backend and across hosts. Every ``SECONDS`` it saves its :meth:`Runtime.statistics`
with the time as the session's projection checkpoint ``tidelog.statistics`` (version
1): an upsert in the store's projection table or file, so the log never grows however
long the runtime runs. Leaving ``open_runtime`` deletes the session; a runtime that
crashed leaves it behind, stale (its lease is free, its time old), and the next runtime
that publishes removes it.

**Reading.** :func:`published_statistics` returns every record of a store with
``live``: its lease is held by a live process and the record is at most three
intervals old.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import socket
import time
import uuid
from typing import TYPE_CHECKING

import attrs
import trio

from stores import (
    JSON,
    NewEvent,
    SessionOwnedError,
    Store,
    TidelogError,
    holder_is_dead,
    local_holder,
)

from ._engine import StoreView

if TYPE_CHECKING:
    from ._runtime import Runtime

__all__ = [
    "STATISTICS_PREFIX",
    "PublishedStatistics",
    "StatisticsPublisher",
    "published_statistics",
]

#: The id prefix of the sessions that hold published statistics.
STATISTICS_PREFIX = "tidelog/stats/"
#: The projection checkpoint (name, version) that holds the latest record.
_RECORD = ("tidelog.statistics", 1)
#: A record older than this many intervals is not live, whatever its lease says.
_FRESH_INTERVALS = 3


@attrs.frozen
class PublishedStatistics:
    """One runtime's published statistics: its session, ``holder`` (``"pid P on HOST
    ..."``), when it started and last published (seconds since the epoch), its
    ``interval``, the :class:`RuntimeStatistics` fields as JSON (``statistics``, empty
    before the first publication), and whether it is ``live``."""

    session_id: str
    holder: str
    started_at: float
    published_at: float | None
    interval: float
    statistics: dict[str, JSON]
    live: bool


def published_statistics(store: Store, *, now: float | None = None) -> list[PublishedStatistics]:
    """Every runtime statistics record in ``store`` (any backend, read-only is enough),
    in id order. Blocking: call it in a thread from async code."""
    now = time.time() if now is None else now
    held = {
        lease.session_id: lease
        for lease in store.list_leases(prefix=STATISTICS_PREFIX)
        if lease.expires > now and not holder_is_dead(lease.holder)
    }
    found = []
    for info in store.list_sessions(prefix=STATISTICS_PREFIX):
        first = store.read(info.id, limit=1)
        about = first[0].data if first and isinstance(first[0].data, dict) else {}
        saved = store.load_projection(info.id, *_RECORD)
        record = json.loads(saved[1]) if saved is not None else {}
        published = record.get("published_at")
        interval = about.get("interval")
        interval = float(interval) if isinstance(interval, int | float) else math.inf
        fresh = isinstance(published, int | float) and now - published <= (
            _FRESH_INTERVALS * interval
        )
        statistics = record.get("statistics")
        started = about.get("started_at")
        found.append(
            PublishedStatistics(
                info.id,
                str(about.get("holder", "?")),
                float(started) if isinstance(started, int | float) else info.created_at,
                float(published) if isinstance(published, int | float) else None,
                interval,
                statistics if isinstance(statistics, dict) else {},
                info.id in held and fresh,
            )
        )
    return found


class StatisticsPublisher:
    """The task that publishes a runtime's statistics (see the module doc): through the
    public ``runtime``, and its engine's ``store`` view for the record itself."""

    def __init__(self, runtime: Runtime, store: StoreView, interval: float) -> None:
        self.runtime = runtime
        self._store = store
        self.interval = interval
        tag = uuid.uuid4().hex[:8]
        self.session_id = f"{STATISTICS_PREFIX}{socket.gethostname()}-{os.getpid()}-{tag}"
        self._stop = trio.Event()
        self._done = trio.Event()
        self._started = False

    async def run(self) -> None:
        """Publish until :meth:`stop`; failures are logged, never raised (the runtime's
        work does not depend on them)."""
        self._started = True
        try:
            if self._stop.is_set():
                return  # the runtime ended before this task ever ran
            await self._remove_stale()
            about: dict[str, JSON] = {
                "holder": local_holder(),
                "started_at": time.time(),
                "interval": self.interval,
            }
            async with self.runtime.open_session(
                self.session_id, mode="write", internal=True
            ) as writer:
                await writer.append([NewEvent("tidelog.runtime", about)])
                while not self._stop.is_set():
                    await self._publish()
                    with trio.move_on_after(self.interval):
                        await self._stop.wait()
        except TidelogError as exc:
            _log(f"runtime statistics not published: {exc!r}")
        finally:
            self._done.set()

    async def stop(self) -> None:
        """End the task (at the runtime's exit, before its shutdown) and delete the
        record."""
        self._stop.set()
        if not self._started:
            return
        await self._done.wait()
        try:
            await self.runtime.delete(self.session_id)
        except TidelogError as exc:
            _log(f"runtime statistics record {self.session_id!r} not removed: {exc!r}")

    async def _publish(self) -> None:
        record: dict[str, JSON] = {
            "published_at": time.time(),
            "statistics": _as_json(attrs.asdict(self.runtime.statistics())),
        }
        text = json.dumps(record, separators=(",", ":"), allow_nan=False)
        await self._store.writing(_save_record, self.session_id, text)

    async def _remove_stale(self) -> None:
        """Delete the records of runtimes that are gone (a live one's lease refuses)."""
        for item in await self._store.reading(published_statistics):
            if not item.live:
                # A live runtime's lease refuses (its record not yet written or refreshed).
                with contextlib.suppress(SessionOwnedError):
                    await self.runtime.delete(item.session_id)


def _save_record(store: Store, session_id: str, text: str) -> None:
    """In the writer's lane: save ``text`` as the session's statistics record."""
    pin = store.pin(session_id)
    if pin is not None:
        store.save_projection(pin, *_RECORD, text)


def _as_json(value: object) -> JSON:
    """``attrs.asdict`` output as JSON (floats stay finite: counters and means)."""
    if isinstance(value, dict):
        return {str(k): _as_json(v) for k, v in value.items()}
    if isinstance(value, float) and not math.isfinite(value):
        return None
    assert value is None or isinstance(value, bool | int | float | str)
    return value


def _log(message: str) -> None:
    import logging

    logging.getLogger("tidelog.runtime").warning(message)
