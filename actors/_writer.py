"""GroupCommitWriter: one task per store that commits every session's writes.

Session actors queue writes; the writer drains all of them into one
:meth:`~stores.Store.write_batch` call -- one transaction, one thread hop -- while the
previous batch is in flight the next one accumulates, so under load each hop carries many
sessions' appends (group commit). Awaited appends and flushes are *urgent* and start a batch
at once; ``append_nowait`` alone waits up to ``batch_window`` seconds to gather more.

Durability barrier: a flush asks for a *sync batch* (``write_batch(..., sync=True)``); one
such batch fsyncs every commit before it, so concurrent flushes share one barrier.

A batch that has started in the thread is never abandoned; the writer task is only cancelled
at runtime shutdown, after the actors were drained.

A non-blocking store (memory) needs no thread hop, so waking the writer task for an awaited
append would only cost a second trip through the scheduler. There the first caller that
finds the writer idle *leads* the batch (:meth:`GroupCommitWriter.submit_awaited` decides):
it yields once, so that the appends of every task that runs in the same scheduler round
join its batch, then commits that batch in its own task. The writer task only takes what
arrives while a batch is already being made: the ``append_nowait`` writes, flushes and
retries.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Collection

import attrs
import trio
from trio_util import AsyncValue

from stores import AppendOp, BrokenError, ClosedError, GroupOp, ReplaceOp, TidelogError, WriteOp

from ._actor_commits import ActorCommits
from ._lane import StoreLane

__all__ = ["DELIVERY_SLICE", "GroupCommitWriter", "WriterStatistics"]

#: A batch's results are delivered this many ops at a time, with a checkpoint between
#: slices, so the woken waiters' work is spread over several event-loop rounds instead of
#: one long one (event-loop lag under load). Each slice costs a scheduler round: W2 (100
#: sessions) ran 9.6 % faster with 100 than with 25, with the same lag p99 (1.0 ms).
DELIVERY_SLICE = 100


@attrs.frozen
class WriterStatistics:
    """Counters of one store's group-commit writer (see ``Runtime.statistics``).

    ``fsyncs`` counts commits that ended in an fsync barrier: the sync batches of flushes,
    and every batch when the store fsyncs each commit (``synchronous="full"``)."""

    mailbox_depth: int
    batches_committed: int
    events_committed: int
    mean_batch_size: float
    failed_batches: int
    flushes: int
    fsyncs: int


def _event_count(op: WriteOp) -> int:
    """How many events an op writes (for statistics)."""
    if isinstance(op, GroupOp):
        return sum(_event_count(member) for member in op.ops)
    return len(op.events) if isinstance(op, AppendOp | ReplaceOp) else 0


class GroupCommitWriter:
    """Commits all sessions' queued writes for one store. Run :meth:`run` in a nursery."""

    def __init__(
        self,
        lane: StoreLane,
        *,
        batch_window: float,
        on_commit: Callable[[Collection[str]], None],
        max_ops: int = 1000,
    ) -> None:
        self.lane = lane
        self.batch_window = batch_window
        self.max_ops = max_ops
        self._on_commit = on_commit
        self._dirty: dict[ActorCommits, None] = {}
        self._watched: set[ActorCommits] = set()
        self._wake = trio.Event()
        self._urgent = trio.Event()
        #: What :meth:`submit` has set of the two events since they were made: 0 neither,
        #: 1 ``_wake``, 2 both. Every later submission of a batch skips the two calls; a
        #: lower value than the events' own state (another caller set them) only costs a
        #: call that changes nothing.
        self._signalled = 0
        #: Tasks waiting for the next batch to finish (committed or failed), and how
        #: many they are (an int is cheaper to test than the lot, every batch).
        self._progress = trio.lowlevel.ParkingLot()
        self._progress_waiters = 0
        self._sync_requested = False
        self._unsynced = False
        self.running = False
        #: Set when the runtime closes (stops) the writer on purpose.
        self.closed = False
        #: A non-blocking store (memory), called on the event loop (see StoreLane): only
        #: then may a caller lead a batch (:meth:`lead`).
        self.inline = not lane.store.capabilities.blocking
        #: A store that fsyncs every commit (``synchronous="full"``).
        self._every_commit_syncs = lane.store.capabilities.syncs_every_commit
        self._next_batch = 1
        #: A caller leads the next batch (see :meth:`submit_awaited`): submissions only mark
        #: their actor dirty; ``_lead_urgent`` remembers whether one was urgent.
        self._leading = False
        self._lead_urgent = False
        #: A batch is being made (taken, written, its results delivered).
        self._busy = False
        #: What a leading caller's batch raised that is no :class:`TidelogError` (a bug
        #: in the store): the writer task dies of it, as if it had made the call.
        self._crash: BaseException | None = None
        #: The number of the last sync batch that succeeded.
        self.synced_through: AsyncValue[int] = AsyncValue(0)
        self.sync_failed: tuple[int, TidelogError] | None = None
        self._batches = 0
        self._events = 0
        self._failed = 0
        self._flushes = 0
        self._fsyncs = 0

    # -- called by actors --------------------------------------------------------------

    def submit(self, actor: ActorCommits, *, urgent: bool) -> None:
        """Mark ``actor`` as having queued writes."""
        self._dirty[actor] = None
        if self._leading:  # the leading caller takes it (or hands it over, see lead_done)
            self._lead_urgent = self._lead_urgent or urgent
            return
        level = 2 if urgent else 1
        if self._signalled < level:  # the batch's first submission (of its urgency)
            self._signalled = level
            self._wake.set()
            if urgent:
                self._urgent.set()

    def lead(self, actor: ActorCommits) -> bool:
        """Does the calling task make the next batch itself? True if the store is
        non-blocking and the writer is running and idle (nothing queued, no batch being
        made, no caller leading, no flush asked for, no crash to raise): then ``actor``
        is marked as having a write the caller waits for (urgent), and the caller must
        call :meth:`lead_yield` next. False: nothing changed.

        (Whatever wakes the writer task leaves one of those behind, so its wake event
        need not be read here; and a task woken for nothing makes an empty pass.)"""
        if (
            self.inline
            and self.running
            and not (self._dirty or self._leading or self._busy or self._sync_requested)
            and self._crash is None
        ):
            self._dirty[actor] = None
            self._leading = True
            self._lead_urgent = True
            return True
        return False

    def submit_awaited(self, actor: ActorCommits) -> bool:
        """Mark ``actor`` as having queued a write that the calling task will wait for
        (urgent). The one place that decides who makes its batch: True if the calling
        task makes it itself (:meth:`lead`; then it calls :meth:`lead_yield` and, if that
        says so, ``commit_batch(lead=True)``, next); False if the writer task does."""
        if self.lead(actor):
            return True
        self.submit(actor, urgent=True)
        return False

    async def lead_yield(self, actor: ActorCommits) -> bool:
        """The leading caller's yield, a checkpoint: the writes of the other tasks of
        this scheduler round join its batch meanwhile (their submissions only mark their
        actors). True if the caller makes the batch now (``commit_batch(lead=True)``,
        next, before any other checkpoint); False if it does not (the writer stopped, or
        its task is making a batch): whatever is queued went to the writer task.

        On True ``actor`` is marked again: the writer task may have made a batch during
        the yield (a flush asked for one), which took it off the marked set, and the
        caller's write (accepted only now, on the :meth:`~actors.SessionActor.append`
        path) must be in the caller's batch, or nobody would ever take it.

        A cancel at the yield hands every queued write to the writer task and raises."""
        try:
            await trio.lowlevel.checkpoint()
        except BaseException:
            self.lead_done()
            raise
        return self.lead_resume(actor)

    def lead_resume(self, actor: ActorCommits) -> bool:
        """The rest of :meth:`lead_yield` after its checkpoint, for a caller that
        yields itself (the actor's awaited append, which saves a coroutine that way; a
        cancel at its yield must call :meth:`lead_done`). Returns as :meth:`lead_yield`."""
        self._leading = False
        if not self.running or self._busy:
            self.lead_done()
            return False
        self._dirty[actor] = None
        return True

    def lead_done(self) -> None:
        """Leading ended without a batch: hand what is queued over to the writer task."""
        self._leading = False
        if self._dirty:
            self._wake.set()
            if self._lead_urgent:
                self._urgent.set()

    def request_sync(self) -> int:
        """Ask for a durability barrier; return the number of the batch that will carry
        it (it starts after this call, so it covers every commit made before the call)."""
        self._flushes += 1
        self._sync_requested = True
        self._wake.set()
        self._urgent.set()
        return self._next_batch

    @property
    def needs_sync(self) -> bool:
        """True if some commit since the last barrier is not yet fsynced."""
        return self._unsynced or self._sync_requested

    def watch(self, actor: ActorCommits) -> None:
        """Note a live actor: if the writer stops, it wakes the tasks parked on it (they
        would wait for a commit that never comes)."""
        self._watched.add(actor)

    def unwatch(self, actor: ActorCommits) -> None:
        """Undo :meth:`watch` (the actor stopped)."""
        self._watched.discard(actor)

    def notify_progress(self) -> None:
        """Wake everyone waiting in :meth:`wait_progress` (something they wait for changed
        outside a batch, e.g. an actor died)."""
        if self._progress_waiters:
            self._progress.unpark_all()

    def stopped_error(self) -> TidelogError:
        """What a call that needs the stopped writer raises: :class:`~stores.ClosedError`
        after the runtime closed it, :class:`~stores.BrokenError` otherwise."""
        if self.closed:
            return ClosedError("the runtime was closed")
        return BrokenError("the runtime's commit task has stopped")

    async def wait_progress(self) -> None:
        """Wait until the next batch finishes (successfully or not), or someone calls
        :meth:`notify_progress`.

        Raises :class:`~stores.ClosedError` / :class:`~stores.BrokenError` if the writer
        is not running (it would never finish another batch)."""
        if not self.running:
            raise self.stopped_error()
        await self._park_progress()

    async def _park_progress(self) -> None:
        self._progress_waiters += 1
        try:
            await self._progress.park()
        finally:
            self._progress_waiters -= 1

    async def wait_synced(self, number: int) -> None:
        """Wait until sync batch ``number`` (or a later one) succeeded; raise its error."""
        while self.synced_through.value < number:
            if self.sync_failed is not None and self.sync_failed[0] >= number:
                raise self.sync_failed[1]
            await self.wait_progress()

    def statistics(self) -> WriterStatistics:
        """A frozen record of the writer's counters."""
        depth = sum(actor.queued_events() for actor in self._dirty)
        mean = self._events / self._batches if self._batches else 0.0
        return WriterStatistics(
            depth, self._batches, self._events, mean, self._failed, self._flushes, self._fsyncs
        )

    # -- the task ----------------------------------------------------------------------

    def _next_retry(self) -> float:
        """When the earliest backed-off actor may be retried."""
        times = [a.retry_at for a in self._dirty if a.pending and not a.in_flight]
        return min(times) if times else math.inf

    async def run(self) -> None:
        """Commit batches until cancelled (at runtime shutdown)."""
        self.running = True
        try:
            while True:
                retry = self._next_retry()
                if retry == math.inf:  # the usual case: no backed-off retry to wake for
                    await self._wake.wait()
                else:
                    with trio.move_on_at(retry):
                        await self._wake.wait()
                if self.batch_window > 0 and not self._urgent.is_set():
                    with trio.move_on_after(self.batch_window):
                        await self._urgent.wait()
                while self._busy:  # a leading caller delivers its batch's results
                    await self._park_progress()
                if self._crash is not None:
                    raise self._crash
                self._wake = trio.Event()
                self._urgent = trio.Event()
                self._signalled = 0
                await self.commit_batch()
        finally:
            self.running = False
            self.notify_progress()
            for actor in list(self._watched):
                actor.wake_waiters()

    def _take(self) -> tuple[list[tuple[ActorCommits, ...]], list[WriteOp], int]:
        """Take one op per ready actor for the next batch: each op's actors (one, or a
        group's members), the ops and how many events they write."""
        dirty = self._dirty
        now: float | None = None  # read only if an actor backs off or a group waits
        targets: list[tuple[ActorCommits, ...]] = []
        ops: list[WriteOp] = []
        events = 0
        max_ops = self.max_ops
        for actor in list(dirty):
            if len(ops) >= max_ops:
                self._wake.set()
                break
            if actor not in dirty:
                continue  # taken as a member of a group already
            append = actor.take_op(True)  # the usual op: plain appends, no backoff
            if append is not None:
                del dirty[actor]
                targets.append((actor,))
                ops.append(append)
                events += len(append.events)
                continue
            front = actor.front
            if front is None:
                del dirty[actor]
                continue
            if actor.in_flight:
                continue  # not ready (see ActorCommits.ready)
            if actor.retry_at:
                if now is None:
                    now = trio.current_time()
                if now < actor.retry_at:
                    continue  # backing off
            unit = front.group
            if unit is not None:
                if now is None:
                    now = trio.current_time()
                if not unit.ready(now):
                    continue  # a member still has earlier writes to commit
                members = tuple(member for member, _ in unit.members)
                parts = [member.take_op() for member in members]
                group = GroupOp(tuple(p for p in parts if isinstance(p, AppendOp)))
                ops.append(group)
                targets.append(members)
                events += _event_count(group)
                for member in members:
                    dirty.pop(member, None)
                continue
            op = actor.take_op()
            if op is not None:
                del dirty[actor]
                targets.append((actor,))
                ops.append(op)
                events += len(op.events) if type(op) is AppendOp else _event_count(op)
        return targets, ops, events

    async def commit_batch(self, lead: bool = False) -> None:
        """Take one op per ready actor, commit them in one batch, deliver the results:
        the one batch routine, of the writer task and of a leading caller alike.

        ``lead``: the leading caller's call, after :meth:`lead_yield` said so (its
        write is queued): the batch takes every write
        queued meanwhile, and writes left queued afterwards go to the writer task. The
        batch itself is not cancelled (as one in the writer task). What the store
        raises that is no :class:`~stores.TidelogError` (a bug in it) kills the writer
        task, as if it had made the call."""
        self._busy = True
        try:
            dirty = self._dirty
            appends = None
            # Each op's actors (for one actor's appends, built only if they fail).
            targets: list[tuple[ActorCommits, ...]] | None = None
            ops: list[WriteOp]
            if len(dirty) == 1:  # the usual case on a quiet store: one actor's appends
                [actor] = dirty
                appends = actor.take_op(True)  # appends_only=True
            if appends is not None:
                del dirty[actor]
                ops, events = [appends], len(appends.events)
            else:
                targets, ops, events = self._take()
            sync = self._sync_requested
            if not ops and not sync:
                return
            number = self._next_batch
            self._next_batch += 1
            self._sync_requested = False
            try:
                if self.inline:
                    # A non-blocking store (memory) is called right here: no hop, and no
                    # extra trip through the scheduler (the loop yields at its next wait).
                    lane = self.lane
                    lane.calls += 1
                    if sync:
                        results = lane.store.write_batch(ops, sync=True)
                    else:  # the usual case, without a keyword argument
                        results = lane.store.write_batch(ops)
                else:
                    write_batch = functools.partial(self.lane.store.write_batch, sync=sync)
                    results = await self.lane.run(write_batch, ops)
            except TidelogError as exc:
                self._failed += 1
                now = trio.current_time()
                for members in [(actor,)] if targets is None else targets:
                    for actor in members:
                        actor.commit_failed(exc, now)
                if sync:
                    self.sync_failed = (number, exc)
                return
            count = len(ops)
            if len(results) != count:
                raise RuntimeError(f"the store returned {len(results)} results for {count} ops")
            changed: Collection[str]
            if appends is not None:  # one actor's op: delivered without the loops below
                actor.last_batch = number
                # (commit_done resubmits what is still queued; a tuple is made for less)
                changed = (actor.session_id,) if actor.commit_done(results[0]) else ()
            else:
                changed = touched = set()
                sliced = count > DELIVERY_SLICE
                delivered = 0
                assert targets is not None
                for members, result in zip(targets, results, strict=False):
                    if sliced:
                        if delivered == DELIVERY_SLICE:
                            # Let the waiters woken so far run before waking more: a big
                            # batch never holds the event loop for all of its waiters'
                            # work at once.
                            await trio.lowlevel.cancel_shielded_checkpoint()
                            delivered = 0
                        delivered += 1
                    for member in members:
                        member.last_batch = number
                        if member.commit_done(result):  # resubmits what is still queued
                            touched.add(member.session_id)
                if sliced:
                    # ...and once more, so that the last slice has queued its next writes
                    # before the next batch is taken (run() yields again before taking
                    # it).
                    await trio.lowlevel.cancel_shielded_checkpoint()
            self._batches += 1
            self._events += events
            if sync or self._every_commit_syncs:
                self._fsyncs += 1
            if sync:
                self.synced_through.value = number
                self._unsynced = False
            else:
                self._unsynced = True
            if changed:
                self._on_commit(changed)
        except Exception as exc:
            if not lead:
                raise
            self._crash = exc  # the writer task raises it
            self._wake.set()
            self._urgent.set()
        finally:
            self._busy = False
            if self._progress_waiters:
                self.notify_progress()
            if lead and self._dirty:  # (it stopped leading before the batch)
                self.lead_done()
