"""The LangGraph saver on the trio thread, reading: a thread's checkpoints, from the fold
of its session (:class:`~runtime.integrations._checkpoint_log.ThreadLog`), kept for the
last threads read and continued incrementally; the base layer of
:class:`~runtime.integrations.langgraph.TidelogSaver` (its other layers:
``_langgraph_writes``, the writers held and the work of writes, and ``_langgraph_codec``,
encoding and decoding on the caller's thread).
"""

from __future__ import annotations

import builtins
from collections import OrderedDict
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, get_checkpoint_id, writes_sort_key

from runtime import Runtime

from ._bridge import Bridge
from ._checkpoint_log import StoredCheckpoint, ThreadLog, Typed

__all__ = ["ThreadReads"]

#: Threads whose fold the saver keeps in memory (reads continue it incrementally).
_CACHED_THREADS = 256

#: What a read hands back to the caller's thread, which decodes it: the thread id, the
#: checkpoint, its channel blobs and its pending writes (in ``writes_sort_key`` order).
_Found = tuple[str, StoredCheckpoint, dict[str, Typed], list[tuple[str, str, Typed]]]


class ThreadReads(BaseCheckpointSaver[int]):
    """The saver's reads on the bridge's trio thread (state set by ``TidelogSaver``)."""

    _bridge: Bridge
    _prefix: str
    _internal: bool
    _cache: OrderedDict[str, ThreadLog]

    def session_id(self, thread_id: object) -> str:
        """The tidelog session id of a LangGraph thread id."""
        return self._prefix + str(thread_id)

    # -- on the trio thread: reads -------------------------------------------------------

    @property
    def _rt(self) -> Runtime:
        return self._bridge.runtime

    async def _t_thread_sessions(self) -> builtins.list[str]:
        """Every thread session id under the prefix."""
        ids: builtins.list[str] = []
        after: str | None = None
        while True:
            page = await self._rt.list_sessions(
                prefix=self._prefix, after=after, limit=1000, include_internal=self._internal
            )
            ids += [info.id for info in page]
            if len(page) < 1000:
                return ids
            after = page[-1].id

    async def _t_fold(self, session_id: str) -> ThreadLog:
        """The thread's log, continuing the cached fold when the session was only
        appended to since (one read either way, two after a rewrite)."""
        while True:
            cached = self._cache.get(session_id)
            if cached is None or cached.seq == 0:
                events = await self._rt.read(session_id)
                log = ThreadLog()
                log.apply(events)
            else:
                start = cached.seq
                events = await self._rt.read(session_id, since_seq=start - 1)
                if self._cache.get(session_id) is not cached or cached.seq != start:
                    continue  # another read moved it meanwhile: read again
                if events and cached.continues(events[0]):
                    cached.apply(events[1:])
                    log = cached
                else:
                    self._cache.pop(session_id, None)
                    continue
            self._cache[session_id] = log
            self._cache.move_to_end(session_id)
            while len(self._cache) > _CACHED_THREADS:
                self._cache.popitem(last=False)
            return log

    async def _t_get(self, config: RunnableConfig) -> _Found | None:
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        session_id = self.session_id(thread_id)
        log = await self._t_fold(session_id)
        ns_log = log.namespaces.get(str(conf.get("checkpoint_ns", "")))
        if ns_log is None:
            return None
        checkpoint_id = get_checkpoint_id(config)
        stored = ns_log.checkpoints.get(checkpoint_id) if checkpoint_id else ns_log.latest()
        if stored is None:
            return None
        return _found(thread_id, ns_log, stored)

    async def _t_list(
        self, config: RunnableConfig | None, before: RunnableConfig | None
    ) -> builtins.list[_Found]:
        if config is None:
            session_ids = await self._t_thread_sessions()
            ns_wanted: str | None = None
            checkpoint_id = None
        else:
            conf = config["configurable"]
            thread_id = str(conf["thread_id"])
            session_ids = [self.session_id(thread_id)]
            ns = conf.get("checkpoint_ns")
            ns_wanted = None if ns is None else str(ns)
            checkpoint_id = get_checkpoint_id(config)
        before_id = get_checkpoint_id(before) if before else None
        out: builtins.list[_Found] = []
        for session_id in session_ids:
            thread_id = session_id[len(self._prefix) :]
            log = await self._t_fold(session_id)
            found: builtins.list[_Found] = []
            for ns, ns_log in log.namespaces.items():
                if ns_wanted is not None and ns != ns_wanted:
                    continue
                for stored in ns_log.checkpoints.values():
                    if checkpoint_id and stored.id != checkpoint_id:
                        continue
                    if before_id and stored.id >= before_id:
                        continue
                    found.append(_found(thread_id, ns_log, stored))
            found.sort(key=lambda item: item[1].id, reverse=True)
            out += found
        return out


def _found(thread_id: str, ns_log: Any, stored: StoredCheckpoint) -> _Found:
    """What a read returns for ``stored`` (copies: the fold may change after)."""
    writes = ns_log.writes.get(stored.id, {})
    ordered = sorted(writes.items(), key=lambda item: writes_sort_key(item[1][3], *item[0]))
    return (
        thread_id,
        stored,
        ns_log.blob_values(stored.versions),
        [(task, channel, value) for (_, (task, channel, value, _path)) in ordered],
    )
