"""WalCheckpointer: copies the write-ahead log into the database file off the write path.

SQLite's default checkpoints inside the commit that leaves 1000+ frames in the WAL: that
commit (and every append waiting on its batch) stalls while pages are copied and, with
``synchronous="normal"``, the database file is fsynced. The runtime opens its writer with
``checkpoints="deferred"`` instead, so commits only append to the WAL, and this task runs
a PASSIVE checkpoint on a connection and thread of its own whenever the WAL has grown by
:data:`THRESHOLD` frames since the last one. A PASSIVE checkpoint never waits for the
writer or readers; the writer restarts the WAL at its next commit after a complete one.
Durability is unchanged: a commit is durable (or not yet) in the WAL exactly as before.
The writer restarts the WAL at a commit that finds it completely checkpointed (after any
pause in writing); under a continuous stream of commits the commit that leaves
:data:`stores.sqlite._store.CHECKPOINT_FALLBACK_PAGES` frames finishes the job itself (copying
only what this task has not), so the WAL stays bounded regardless. The runtime runs it
only for a store whose :class:`~stores.Capabilities` declare ``wal_upkeep``.
"""

from __future__ import annotations

from typing import cast

import trio

from stores import InvalidArgumentError, Store, TidelogError, WalUpkeep

from ._lane import StoreLane

__all__ = ["THRESHOLD", "WalCheckpointer"]

#: WAL frames written since the last checkpoint that start the next one (SQLite's default
#: autocheckpoint threshold).
THRESHOLD = 1000


class WalCheckpointer:
    """Runs checkpoints for the store behind ``writer_lane``, which must declare
    ``wal_upkeep`` in its capabilities (else :class:`~stores.InvalidArgumentError`). Run
    :meth:`run` in a nursery; call :meth:`poke` after each commit; :meth:`aclose` after
    the task ended.

    Its connection is a clone of the writer's store, opened at the first checkpoint (a
    runtime whose WAL never grows never opens it).
    """

    def __init__(self, writer_lane: StoreLane, *, threshold: int = THRESHOLD) -> None:
        if not writer_lane.store.capabilities.wal_upkeep:
            raise InvalidArgumentError("this store does not leave WAL checkpoints to its owner")
        self._writer_lane = writer_lane
        self._source: Store = writer_lane.store
        #: The writer's handle as what its capabilities declare it to be.
        self._upkeep = cast(WalUpkeep, writer_lane.store)
        self.threshold = threshold
        self._lane: StoreLane | None = None
        self._wake = trio.Event()
        self._running = False
        #: WAL frames the last checkpoint covered (0 after the WAL restarted).
        self._covered = 0
        self.checkpoints = 0
        self.failures = 0

    def poke(self) -> None:
        """Start a checkpoint if the WAL grew by :attr:`threshold` frames since the last
        one and none is running. Not a checkpoint; cheap (reads one attribute)."""
        pages = self._upkeep.wal_pages
        if pages < self._covered:
            self._covered = 0  # the WAL was restarted
        if pages - self._covered >= self.threshold and not self._running:
            self._wake.set()

    async def run(self) -> None:
        """Checkpoint when poked, until cancelled (a started checkpoint finishes first).

        A failed checkpoint (busy, I/O) is counted in :attr:`failures` and retried at a
        later poke: it changes no data."""
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            self._running = True
            try:
                lane = self._lane or await self._open_lane()
                clone = cast(WalUpkeep, lane.store)  # a clone of a WalUpkeep store
                self._covered = await lane.run(clone.checkpoint_wal)
                self.checkpoints += 1
            except TidelogError:
                self.failures += 1
            finally:
                self._running = False

    async def _open_lane(self) -> StoreLane:
        # Shielded: a clone opened while cancellation arrives must still be kept (and
        # closed by aclose), never dropped with its connection open.
        with trio.CancelScope(shield=True):
            clone = await self._writer_lane.run(self._source.clone)
            lane = self._lane = StoreLane(clone, name="checkpointer")
        return lane

    async def aclose(self) -> None:
        """Close the checkpoint connection, if it was opened. Call after :meth:`run` ended."""
        lane, self._lane = self._lane, None
        if lane is not None:
            await lane.aclose()
