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

try:
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import (
        ChannelVersions,
        Checkpoint,
        CheckpointMetadata,
        CheckpointTuple,
    )
    from langgraph.checkpoint.serde.base import SerializerProtocol
except ImportError as exc:  # pragma: no cover - the extra is installed in the checks
    raise ImportError(
        "runtime.integrations.langgraph needs LangGraph: pip install 'tidelog[langgraph]'"
    ) from exc

from runtime import InvalidArgumentError, Store, TidelogError

from ._bridge import Bridge
from ._checkpoint_log import ThreadLog
from ._holding import HeldSession
from ._langgraph_codec import CheckpointCodec
from ._langgraph_writes import ThreadWrites

__all__ = ["DEFAULT_PREFIX", "TidelogSaver"]

#: Where the threads' sessions live: ``DEFAULT_PREFIX + thread_id``.
DEFAULT_PREFIX = "tidelog/langgraph/"
_PRUNE_STRATEGIES = ("keep_latest", "delete")


# One object in layers, a module each: the reads on the trio thread (_langgraph_reads),
# the writes on it (_langgraph_writes), encoding and decoding on the caller's thread
# (_langgraph_codec), and here the public API.
class TidelogSaver(CheckpointCodec, ThreadWrites):
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

    # -- arguments (on the caller's thread) ----------------------------------------------

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


def _run_ids(run_ids: Sequence[str]) -> list[str]:
    if isinstance(run_ids, str):
        raise InvalidArgumentError("delete_for_runs takes a sequence of run ids, not one str")
    return [str(run_id) for run_id in run_ids]
