"""Run checkpoints on a tidelog runtime: :class:`RuntimeCheckpointer`.

Each run is a tidelog session in the runtime's reserved namespace
(``tidelog/run/<run_id>``), so checkpoints ride the same group commit, leases and
durability barriers as conversations -- the claim *is* the run session's lease, and a
run's completion can commit together with its history segment.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager

import trio

from runtime import (
    JSON,
    CommitPendingError,
    NewEvent,
    Runtime,
    SessionOwnedError,
    SessionWriter,
    TidelogError,
)
from stores import prepare_events

from ._checkpoints import (
    HEAD_KIND,
    RUN_SESSION_PREFIX,
    RunHead,
    RunInfo,
    RunSnapshot,
    RunStatus,
    check_run_id,
    checkpoint_events,
    control_session_id,
)
from ._home import SessionHome
from ._transcript import Entry, entry_from_stored

__all__ = ["CLAIM_POLL", "RuntimeCheckpointer"]

logger = logging.getLogger("tidelog")

#: How often a claim that waits for the run's owner tries again (seconds).
CLAIM_POLL = 0.1


class RuntimeCheckpointer:
    """A :class:`Checkpointer` on a tidelog runtime: run ``R`` is the internal session
    ``tidelog/run/R`` (get the runtime's one with :func:`runtime.agents.checkpoints`).

    Each append is one atomic append (entries, then the head event) through the session's
    writer; it returns once committed. ``Runtime.flush()`` makes checkpoints durable like
    everything else. A claim is an exclusive writer of the run session: its lease keeps
    every other runtime (any process, any host on the same database) out.
    """

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self._claims: dict[str, SessionWriter] = {}
        #: Per run, the save whose append raised CommitPendingError (a resend is expected).
        self._unconfirmed: dict[str, list[NewEvent]] = {}

    @staticmethod
    def session_id(run_id: str) -> str:
        """The tidelog session that holds ``run_id``'s checkpoint."""
        return RUN_SESSION_PREFIX + check_run_id(run_id)

    @staticmethod
    def _header(run_id: str) -> dict[str, JSON]:
        return {"tidelog": "checkpoint", "run_id": run_id}

    def claimed_writer(self, run_id: str) -> SessionWriter | None:
        """The writer of a run claimed by this checkpointer, if it is claimed here."""
        return self._claims.get(run_id)

    @asynccontextmanager
    async def claim(self, run_id: str, *, wait: bool = False) -> AsyncIterator[None]:
        """See :meth:`Checkpointer.claim`. Held by the run session's lease; while claimed,
        :meth:`append` writes through it. A claim that wrote nothing leaves no session
        behind."""
        sid = self.session_id(run_id)
        writer: SessionWriter | None = None
        try:
            async with AsyncExitStack() as stack:
                while True:
                    try:
                        writer = await stack.enter_async_context(
                            self.runtime.open_session(
                                sid, header=self._header(run_id), internal=True
                            )
                        )
                        break
                    except SessionOwnedError:
                        if not wait:
                            raise
                        await trio.sleep(CLAIM_POLL)
                self._claims[run_id] = writer
                try:
                    yield
                finally:
                    del self._claims[run_id]
        finally:
            if writer is not None and writer.committed_head == 0:
                # Nothing was saved: leave no empty run behind.
                # (It stays if it was claimed again meanwhile, or the store is failing.)
                with trio.CancelScope(shield=True), contextlib.suppress(TidelogError):
                    await self.runtime.delete(sid)

    async def append(self, run_id: str, entries: Sequence[Entry], head: RunHead) -> None:
        """See :meth:`Checkpointer.append`. Raises as ``SessionWriter.append`` (a
        :class:`~stores.CommitPendingError` means the entries *were* accepted).

        Safe to resend after :class:`~stores.CommitPendingError`: the same save again
        (equal entries and head) is recognised as the resend of the accepted one. It
        returns once that copy is committed (storing nothing more), raises
        ``CommitPendingError`` again while it is still queued, and stores the save only
        if the first copy was dropped after all."""
        events = checkpoint_events(run_id, entries, head)
        unconfirmed = self._unconfirmed.pop(run_id, None)
        if run_id not in self._claims:
            # The open below creates the run session: refuse bad data before it. (With
            # the claim's writer, its append validates and encodes once, all or nothing.)
            prepare_events(events)
        async with self._writer(run_id) as writer:
            try:
                if unconfirmed == events and await _landed(writer, events):
                    return
                await writer.append(events)
            except CommitPendingError:
                self._unconfirmed[run_id] = events
                raise

    def _shared_writer(self, run_id: str) -> AbstractAsyncContextManager[SessionWriter]:
        return self.runtime.open_session(
            self.session_id(run_id), header=self._header(run_id), shared=True, internal=True
        )

    @asynccontextmanager
    async def _writer(self, run_id: str) -> AsyncIterator[SessionWriter]:
        """The claimed writer of the run (left open), else a shared one."""
        claimed = self._claims.get(run_id)
        if claimed is not None:
            await trio.lowlevel.checkpoint()
            yield claimed
            return
        async with self._shared_writer(run_id) as writer:
            yield writer

    def home(self, run_id: str) -> SessionHome:
        """See :meth:`Checkpointer.home`: the run session ``tidelog/run/<run_id>``."""
        return SessionHome(
            runtime=self.runtime,
            session_id=self.session_id(run_id),
            open_writer=lambda: self._writer(run_id),
        )

    async def load(self, run_id: str) -> RunSnapshot | None:
        """See :meth:`Checkpointer.load`."""
        entries: list[Entry] = []
        head: RunHead | None = None
        async for event in self.runtime.iter_events(self.session_id(run_id)):
            if event.kind == HEAD_KIND:
                head = RunHead.from_json(event.data)
            else:
                entries.append(entry_from_stored(event))
        if head is None:
            return None
        return RunSnapshot(run_id, tuple(entries), head)

    async def delete(self, run_id: str) -> None:
        """See :meth:`Checkpointer.delete`. Under this checkpointer's own claim (a
        ``restart``), the claim's writer empties the run session in one atomic step and
        the claim goes on holding it (its control session stays: the run goes on).
        Otherwise the run session is deleted, then the run's control session
        (:meth:`delete_control`; a failure there is logged, not raised: the checkpoint is
        gone, and the next prune removes what is left). Raises
        :class:`~stores.SessionOwnedError` while the run is claimed elsewhere."""
        self._unconfirmed.pop(run_id, None)
        claimed = self._claims.get(run_id)
        if claimed is not None:
            await claimed.replace(0, [])
            return
        await self.runtime.delete(self.session_id(run_id))
        try:
            await self.delete_control(run_id)
        except TidelogError as exc:
            logger.warning("run %s: its control session is left for prune: %r", run_id, exc)

    async def delete_control(self, run_id: str) -> bool:
        """Delete the control session of ``run_id`` (``tidelog/ctl/<run_id>``, its stop
        requests) once the run has no checkpoint: under the run's claim, so that no host
        runs it meanwhile (a host follows the control session only while it holds the
        claim). ``False``, and nothing deleted, if there is none or the run has a saved
        checkpoint (again). A control session left behind is harmless: a host follows it
        only from its head as found when the host starts.

        Raises :class:`~stores.SessionOwnedError` while the run is claimed (a host runs
        it; the control session is kept), and the errors of ``Runtime.delete``."""
        control = control_session_id(run_id)
        if await self.runtime.stat(control) is None:
            return False
        async with self.claim(run_id):
            if await self.load(run_id) is not None:
                return False
            return await self.runtime.delete(control)

    async def list(self, *, status: RunStatus | None = None) -> list[RunInfo]:
        """See :meth:`Checkpointer.list`."""
        infos: list[RunInfo] = []
        for info in await self.runtime.list_sessions(include_internal=True):
            if not info.id.startswith(RUN_SESSION_PREFIX) or info.head == 0:
                continue
            run_id = info.id[len(RUN_SESSION_PREFIX) :]
            last = await self.runtime.read(info.id, limit=1, from_end=True)
            if not last or last[-1].kind != HEAD_KIND:
                continue
            head = RunHead.from_json(last[-1].data)
            if status is None or head.status == status:
                infos.append(RunInfo(run_id, head))
        infos.sort(key=lambda i: (-i.head.updated_at, i.run_id))
        return infos


async def _landed(writer: SessionWriter, events: Sequence[NewEvent]) -> bool:
    """Are ``events`` (a save accepted earlier, resent) the last committed ones? Waits
    for the session's queue first: raises :class:`~stores.CommitPendingError` while it
    still fails (the earlier copy stays queued)."""
    await writer.wait_committed()
    tail = await writer.read(limit=len(events), from_end=True)
    return [(e.kind, e.data, e.run_id) for e in tail] == [
        (e.kind, e.data, e.run_id) for e in events
    ]
