"""A LangGraph checkpoint saver on tidelog: :class:`TidelogSaver`.

One tidelog session per LangGraph thread, holding all its checkpoint namespaces: the
session id is ``prefix + thread_id`` (default prefix ``"tidelog/langgraph/"``, in
tidelog's reserved namespace, so ``tidelog ls`` shows threads only with
``--internal``); a thread id must make a valid session id (at most 256 characters with the
prefix, no control characters), or the call raises
:class:`~runtime.InvalidSessionIdError`. The events are described in
``runtime.integrations._checkpoint_log``.

The saver holds a thread's writer from its first write until :meth:`TidelogSaver.release`
or the saver closes -- for the whole run, not reopened per call: a second worker (another
process, or another runtime) writing the same thread is refused with
:class:`~runtime.SessionOwnedError`, and a stale one whose lease was taken over gets
:class:`~runtime.OwnershipLostError` at its next write. Writes of one thread are accepted
in call order (also across the asyncio bridge) and are all or nothing.

Needs the ``langgraph`` extra: ``pip install 'tidelog[langgraph]'``.
"""

from __future__ import annotations

import builtins
import functools
import os
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from typing import Any

import trio

try:
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import (
        WRITES_IDX_MAP,
        BaseCheckpointSaver,
        ChannelVersions,
        Checkpoint,
        CheckpointMetadata,
        CheckpointTuple,
        get_checkpoint_id,
        get_checkpoint_metadata,
        writes_sort_key,
    )
    from langgraph.checkpoint.serde.base import SerializerProtocol
except ImportError as exc:  # pragma: no cover - the extra is installed in the checks
    raise ImportError(
        "runtime.integrations.langgraph needs LangGraph: pip install 'tidelog[langgraph]'"
    ) from exc

from runtime import (
    BrokenError,
    ClosedError,
    InvalidArgumentError,
    NewEvent,
    OwnershipLostError,
    Runtime,
    SessionExistsError,
    SessionNotFoundError,
    Store,
    TidelogError,
)

from ._bridge import Bridge
from ._checkpoint_log import (
    StoredCheckpoint,
    ThreadLog,
    Typed,
    checkpoint_event,
    rewrite_events,
    writes_event,
)
from ._holding import HeldSession

__all__ = ["DEFAULT_PREFIX", "TidelogSaver"]

#: Where the threads' sessions live: ``DEFAULT_PREFIX + thread_id``.
DEFAULT_PREFIX = "tidelog/langgraph/"
#: Threads whose fold the saver keeps in memory (reads continue it incrementally).
_CACHED_THREADS = 256
_PRUNE_STRATEGIES = ("keep_latest", "delete")

#: What a read hands back to the caller's thread, which decodes it: the thread id, the
#: checkpoint, its channel blobs and its pending writes (in ``writes_sort_key`` order).
_Found = tuple[str, StoredCheckpoint, dict[str, Typed], list[tuple[str, str, Typed]]]


class TidelogSaver(BaseCheckpointSaver[int]):
    """A LangGraph checkpointer (``builder.compile(checkpointer=saver)``) on a tidelog
    runtime, with every method of ``BaseCheckpointSaver`` sync and async, including
    ``copy_thread`` (a tidelog fork: constant time, the prefix shared),
    ``delete_for_runs`` and ``prune``.

    Make one with :meth:`from_target` (its own runtime on a thread of its own: the usual
    choice for an asyncio or threaded program), or on a :class:`~runtime.integrations.
    Bridge` (``TidelogSaver(bridge)``), which also serves trio programs natively.

    The async methods run from asyncio (any loop) or from the bridge's trio run; the
    sync ones from any thread but the trio thread. Cancellation (asyncio or trio): a
    write is all or nothing -- after ``CancelledError`` it is wholly stored or wholly
    absent, and ``get_tuple`` says which.

    Errors are tidelog's: :class:`~runtime.SessionOwnedError` (another writer holds the
    thread), :class:`~runtime.OwnershipLostError` (this saver's hold was taken over:
    nothing of that write was stored; :meth:`release` and retry, or stop),
    :class:`~runtime.InvalidSessionIdError` (a thread id that makes no session id),
    :class:`~runtime.ClosedError` (the saver or its bridge is closed), store errors.
    """

    def __init__(
        self,
        bridge: Bridge,
        *,
        serde: SerializerProtocol | None = None,
        prefix: str = DEFAULT_PREFIX,
    ) -> None:
        super().__init__(serde=serde)
        if not isinstance(bridge, Bridge):
            raise InvalidArgumentError(
                f"TidelogSaver takes a Bridge, not {type(bridge).__name__} "
                "(TidelogSaver.from_target(path) makes one)"
            )
        if not isinstance(prefix, str):
            raise InvalidArgumentError("prefix must be a str")
        self._bridge = bridge
        self._prefix = prefix
        self._internal = prefix.startswith("tidelog/")
        self._threads: dict[str, HeldSession] = {}
        self._cache: OrderedDict[str, ThreadLog] = OrderedDict()
        self._errors: builtins.list[TidelogError] = []
        self._closed = False
        self._owns_bridge = False
        self._forget = bridge.on_close(self._t_close)

    @classmethod
    def from_target(
        cls,
        target: str | os.PathLike[str] | Store,
        *,
        serde: SerializerProtocol | None = None,
        prefix: str = DEFAULT_PREFIX,
        **runtime_options: Any,
    ) -> TidelogSaver:
        """A saver on its own runtime (``open_runtime(target, **runtime_options)``: a
        SQLite path, a JSONL directory, a ``postgresql://`` URL or a Store), run on a
        thread of its own; :meth:`close` (or a ``with`` / ``async with`` block) ends
        both."""
        bridge = Bridge.start(target, **runtime_options)
        try:
            saver = cls(bridge, serde=serde, prefix=prefix)
        except BaseException:
            bridge.close()
            raise
        saver._owns_bridge = True
        return saver

    @property
    def bridge(self) -> Bridge:
        """The bridge this saver runs on."""
        return self._bridge

    def session_id(self, thread_id: object) -> str:
        """The tidelog session id of a LangGraph thread id."""
        return self._prefix + str(thread_id)

    # -- closing -------------------------------------------------------------------------

    def close(self) -> None:
        """Let go of every thread's writer (what it accepted is committed); with
        :meth:`from_target`, also close the runtime. Idempotent.

        Raises: :class:`~runtime.UnwrittenError` for accepted writes that could not be
        written (once)."""
        if self._owns_bridge:
            self._bridge.close()
        elif not self._closed:
            self._bridge.call_sync(self._t_close)

    async def aclose(self) -> None:
        """:meth:`close`, awaited (from asyncio or the bridge's trio run)."""
        if self._owns_bridge:
            if self._bridge.on_trio_thread():
                raise InvalidArgumentError("a saver of from_target() closes from its callers")
            await self._bridge.aclose()
        elif not self._closed:
            await self._bridge.call(self._t_close)

    def __enter__(self) -> TidelogSaver:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> TidelogSaver:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def acquire(self, thread_id: str) -> None:
        """Take ``thread_id``'s writer now (held until :meth:`release` or the close),
        so a worker learns it may run the thread before running any node: with
        LangGraph's default ``durability="async"`` the first checkpoint is written in the
        background, and a refusal would surface only after the first steps ran.

        Raises: :class:`~runtime.SessionOwnedError` if another writer holds it."""
        self._bridge.call_sync(functools.partial(self._t_admit_acquire, str(thread_id)))

    async def aacquire(self, thread_id: str) -> None:
        """:meth:`acquire`, awaited."""
        await self._bridge.call(functools.partial(self._t_admit_acquire, str(thread_id)))

    def release(self, thread_id: str) -> None:
        """Let go of ``thread_id``'s writer (its writes committed first), so another
        worker may take the thread; the next write here takes it again."""
        self._bridge.call_sync(functools.partial(self._t_admit_release, str(thread_id)))

    async def arelease(self, thread_id: str) -> None:
        """:meth:`release`, awaited."""
        await self._bridge.call(functools.partial(self._t_admit_release, str(thread_id)))

    # -- the BaseCheckpointSaver API: sync -----------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names (its ``checkpoint_id``, else the thread's
        latest in ``checkpoint_ns``), or ``None``."""
        found = self._bridge.call_sync(functools.partial(self._t_get, config))
        return None if found is None else self._tuple(found)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """The checkpoints of ``config``'s thread (every thread with ``None``), newest
        first, whose metadata matches ``filter``, older than ``before``, at most
        ``limit``. Read at once: the iterator holds nothing open."""
        found = self._bridge.call_sync(functools.partial(self._t_list, config, before))
        return iter(self._select(found, filter, limit))

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store ``checkpoint`` (blobs of the channels in ``new_versions`` only) as a
        child of ``config``'s ``checkpoint_id``; returns its config once committed."""
        thread_id, event, result = self._put_event(config, checkpoint, metadata, new_versions)
        self._bridge.call_sync(functools.partial(self._t_admit_write, thread_id, event))
        return result

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's pending writes for ``config``'s checkpoint (one atomic append)."""
        thread_id, event = self._writes_event(config, writes, task_id, task_path)
        self._bridge.call_sync(functools.partial(self._t_admit_write, thread_id, event))

    def delete_thread(self, thread_id: str) -> None:
        """Delete the thread (its session). Refused with
        :class:`~runtime.SessionOwnedError` while another writer holds it."""
        self._bridge.call_sync(functools.partial(self._t_admit_delete, str(thread_id)))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Make ``target_thread_id`` a copy of the source thread: a tidelog fork, in
        constant time, sharing the source's events. A missing source copies nothing.

        Raises: :class:`~runtime.SessionExistsError` if the target thread exists."""
        self._bridge.call_sync(
            functools.partial(self._t_copy, str(source_thread_id), str(target_thread_id))
        )

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Remove the checkpoints (and their writes) whose metadata ``run_id`` is one of
        ``run_ids``, in every thread; each thread is rewritten in one atomic step."""
        self._bridge.call_sync(functools.partial(self._t_delete_runs, _run_ids(run_ids)))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``"keep_latest"``: keep only each namespace's latest checkpoint (with its
        writes and every blob it needs), one atomic rewrite per thread; ``"delete"``:
        delete the threads."""
        admit = self._prune_admit(thread_ids, strategy)
        self._bridge.call_sync(admit)

    # -- the BaseCheckpointSaver API: async ----------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """:meth:`get_tuple`, awaited."""
        found = await self._bridge.call(functools.partial(self._t_get, config))
        return None if found is None else self._tuple(found)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """:meth:`list`, awaited (read at once; nothing stays open while iterating)."""
        found = await self._bridge.call(functools.partial(self._t_list, config, before))
        for item in self._select(found, filter, limit):
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """:meth:`put`, awaited."""
        thread_id, event, result = self._put_event(config, checkpoint, metadata, new_versions)
        await self._bridge.call(functools.partial(self._t_admit_write, thread_id, event))
        return result

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """:meth:`put_writes`, awaited."""
        thread_id, event = self._writes_event(config, writes, task_id, task_path)
        await self._bridge.call(functools.partial(self._t_admit_write, thread_id, event))

    async def adelete_thread(self, thread_id: str) -> None:
        """:meth:`delete_thread`, awaited."""
        await self._bridge.call(functools.partial(self._t_admit_delete, str(thread_id)))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """:meth:`copy_thread`, awaited."""
        await self._bridge.call(
            functools.partial(self._t_copy, str(source_thread_id), str(target_thread_id))
        )

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """:meth:`delete_for_runs`, awaited."""
        await self._bridge.call(functools.partial(self._t_delete_runs, _run_ids(run_ids)))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """:meth:`prune`, awaited."""
        await self._bridge.call(self._prune_admit(thread_ids, strategy))

    # -- encoding and decoding (on the caller's thread) -----------------------------------

    def _put_event(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> tuple[str, NewEvent, RunnableConfig]:
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        ns = str(conf.get("checkpoint_ns", ""))
        parent = conf.get("checkpoint_id")
        rest: dict[str, Any] = dict(checkpoint)
        values: dict[str, Any] = rest.pop("channel_values", None) or {}
        blobs = [
            (
                channel,
                version,
                self.serde.dumps_typed(values[channel]) if channel in values else None,
            )
            for channel, version in new_versions.items()
        ]
        full = get_checkpoint_metadata(config, metadata)
        run_id = full.get("run_id")
        event = checkpoint_event(
            ns=ns,
            checkpoint_id=checkpoint["id"],
            parent=None if parent is None else str(parent),
            checkpoint=self.serde.dumps_typed(rest),
            metadata=self.serde.dumps_typed(full),
            versions=dict(checkpoint["channel_versions"]),
            blobs=blobs,
            run_id=run_id if isinstance(run_id, str) else None,
        )
        result: RunnableConfig = {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
            }
        }
        return thread_id, event, result

    def _writes_event(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> tuple[str, NewEvent]:
        conf = config["configurable"]
        encoded = [
            (WRITES_IDX_MAP.get(channel, idx), channel, self.serde.dumps_typed(value))
            for idx, (channel, value) in enumerate(writes)
        ]
        event = writes_event(
            ns=str(conf.get("checkpoint_ns", "")),
            checkpoint_id=str(conf["checkpoint_id"]),
            task=str(task_id),
            path=str(task_path),
            writes=encoded,
        )
        return str(conf["thread_id"]), event

    def _tuple(self, found: _Found) -> CheckpointTuple:
        thread_id, stored, blobs, writes = found
        loads = self.serde.loads_typed
        checkpoint = loads(stored.checkpoint)
        checkpoint["channel_values"] = {channel: loads(blob) for channel, blob in blobs.items()}
        return CheckpointTuple(
            config={
                "configurable": {
                    "thread_id": thread_id,
                    "checkpoint_ns": stored.ns,
                    "checkpoint_id": stored.id,
                }
            },
            checkpoint=checkpoint,
            metadata=loads(stored.metadata),
            parent_config=(
                {
                    "configurable": {
                        "thread_id": thread_id,
                        "checkpoint_ns": stored.ns,
                        "checkpoint_id": stored.parent,
                    }
                }
                if stored.parent
                else None
            ),
            pending_writes=[(task, channel, loads(value)) for task, channel, value in writes],
        )

    def _select(
        self, found: builtins.list[_Found], filter: dict[str, Any] | None, limit: int | None
    ) -> builtins.list[CheckpointTuple]:
        if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool)):
            raise InvalidArgumentError(f"limit must be an int or None, not {limit!r}")
        out: builtins.list[CheckpointTuple] = []
        for item in found:
            if limit is not None and len(out) >= limit:
                break
            if filter:
                metadata = self.serde.loads_typed(item[1].metadata)
                if not all(metadata.get(key) == value for key, value in filter.items()):
                    continue
            out.append(self._tuple(item))
        return out

    def _prune_admit(
        self, thread_ids: Sequence[str], strategy: str
    ) -> Callable[[], Awaitable[None]]:
        if strategy not in _PRUNE_STRATEGIES:
            raise InvalidArgumentError(
                f"prune strategy must be one of {_PRUNE_STRATEGIES}, not {strategy!r}"
            )
        if isinstance(thread_ids, str):
            raise InvalidArgumentError("prune takes a sequence of thread ids, not one str")
        ids = [str(thread_id) for thread_id in thread_ids]
        if strategy == "delete":
            return functools.partial(self._t_admit_many, ids, self._t_delete)
        return functools.partial(self._t_admit_many, ids, self._t_keep_latest)

    # -- on the trio thread: admission (synchronous, in call order) -----------------------

    def _thread(self, thread_id: str) -> HeldSession:
        if self._closed:
            raise ClosedError("the saver was closed")
        session_id = self.session_id(thread_id)
        thread = self._threads.get(session_id)
        if thread is None:
            thread = HeldSession(self._bridge, session_id, self._internal, self._errors)
            self._threads[session_id] = thread
        return thread

    def _t_admit_write(self, thread_id: str, event: NewEvent) -> Awaitable[None]:
        thread = self._thread(thread_id)
        return self._t_write(thread, thread.turns.take(), event)

    def _t_admit_delete(self, thread_id: str) -> Awaitable[None]:
        thread = self._thread(thread_id)
        return self._t_delete(thread, thread.turns.take())

    def _t_admit_acquire(self, thread_id: str) -> Awaitable[None]:
        thread = self._thread(thread_id)

        async def acquire(thread: HeldSession) -> None:
            await thread.writer()

        return self._t_turn(thread, thread.turns.take(), acquire)

    def _t_admit_release(self, thread_id: str) -> Awaitable[None]:
        thread = self._thread(thread_id)
        return self._t_turn(thread, thread.turns.take(), self._t_let_go)

    def _t_admit_many(
        self,
        thread_ids: builtins.list[str],
        operation: Callable[[HeldSession, int], Awaitable[None]],
    ) -> Awaitable[None]:
        threads = [self._thread(thread_id) for thread_id in thread_ids]
        tickets = [thread.turns.take() for thread in threads]

        async def run() -> None:
            pending = list(zip(threads, tickets, strict=True))
            try:
                while pending:
                    thread, ticket = pending.pop(0)
                    await operation(thread, ticket)
            finally:
                for thread, ticket in pending:
                    thread.turns.abandon(ticket)

        return run()

    # -- on the trio thread: the work ----------------------------------------------------

    @property
    def _rt(self) -> Runtime:
        return self._bridge.runtime

    async def _t_turn(
        self, thread: HeldSession, ticket: int, work: Callable[[HeldSession], Awaitable[None]]
    ) -> None:
        await thread.turns.wait(ticket)
        try:
            await work(thread)
        finally:
            thread.turns.done(ticket)

    async def _t_write(self, thread: HeldSession, ticket: int, event: NewEvent) -> None:
        await thread.turns.wait(ticket)
        try:
            writer = await thread.writer()
        finally:
            thread.turns.done(ticket)
        # Accepted synchronously at the call, before the next turn's task can run.
        try:
            await writer.append([event])
        except (OwnershipLostError, BrokenError, ClosedError):
            thread.drop()
            raise

    async def _t_let_go(self, thread: HeldSession) -> None:
        await thread.let_go()
        self._cache.pop(thread.session_id, None)

    async def _t_delete(self, thread: HeldSession, ticket: int) -> None:
        async def delete(thread: HeldSession) -> None:
            await self._t_let_go(thread)
            await self._rt.delete(thread.session_id)
            self._cache.pop(thread.session_id, None)

        await self._t_turn(thread, ticket, delete)

    async def _t_keep_latest(self, thread: HeldSession, ticket: int) -> None:
        def keep(log: ThreadLog) -> set[tuple[str, str]]:
            latest = (ns_log.latest() for ns_log in log.namespaces.values())
            return {(stored.ns, stored.id) for stored in latest if stored is not None}

        await self._t_turn(thread, ticket, functools.partial(self._t_rewrite, keep=keep))

    async def _t_rewrite(
        self, thread: HeldSession, *, keep: Callable[[ThreadLog], set[tuple[str, str]]]
    ) -> None:
        """Rewrite the thread keeping ``keep(log)``'s checkpoints (the caller has the
        turn): one atomic ``replace`` of the whole session."""
        if await self._rt.stat(thread.session_id) is None:
            return
        held = thread.held
        writer = await thread.writer()
        try:
            await writer.wait_committed()
            head = await writer.head()
            log = await self._t_fold(thread.session_id)
            kept = keep(log)
            every = {
                (stored.ns, stored.id)
                for ns_log in log.namespaces.values()
                for stored in ns_log.checkpoints.values()
            }
            if kept != every:
                await writer.replace(0, rewrite_events(log, kept), expected_head=head)
                self._cache.pop(thread.session_id, None)
        finally:
            if not held:
                await self._t_let_go(thread)

    async def _t_delete_runs(self, run_ids: builtins.list[str]) -> None:
        if not run_ids:
            await trio.lowlevel.checkpoint()
            return
        doomed: set[str] = set(run_ids)
        for session_id in await self._t_thread_sessions():
            hits = [await self._rt.find_run(session_id, run_id) for run_id in run_ids]
            if not any(hits):
                continue
            thread = self._thread(session_id[len(self._prefix) :])

            def keep(log: ThreadLog) -> set[tuple[str, str]]:
                return {
                    (stored.ns, stored.id)
                    for ns_log in log.namespaces.values()
                    for stored in ns_log.checkpoints.values()
                    if stored.run_id not in doomed
                }

            await self._t_turn(
                thread, thread.turns.take(), functools.partial(self._t_rewrite, keep=keep)
            )

    async def _t_copy(self, source: str, target: str) -> None:
        source_id, target_id = self.session_id(source), self.session_id(target)
        try:
            await self._rt.fork(source_id, target_id, internal=True)
        except SessionNotFoundError:
            return
        except SessionExistsError:
            raise
        self._cache.pop(target_id, None)

    async def _t_close(self) -> None:
        """Let go of every writer (the bridge's close, or :meth:`close`)."""
        if self._closed:
            return
        self._closed = True
        self._forget()
        for thread in list(self._threads.values()):
            await self._t_let_go(thread)
        self._threads.clear()
        self._cache.clear()
        errors, self._errors = self._errors, []
        if errors:
            raise errors[0]

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


def _run_ids(run_ids: Sequence[str]) -> list[str]:
    if isinstance(run_ids, str):
        raise InvalidArgumentError("delete_for_runs takes a sequence of run ids, not one str")
    return [str(run_id) for run_id in run_ids]
