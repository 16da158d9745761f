"""Supervisor: get-or-spawn session actors, keep their leases alive, evict idle ones.

Actors are tasks in the runtime's nursery. The first use of a session spawns its actor,
which takes the session's lease (cross-process single-writer ownership) before it accepts
writes; concurrent first uses share that one start. An actor lives while it is used and is
evicted ``idle_timeout`` seconds after its last user left -- at once when an explicit writer
handle closes, so that other processes can take the session. Eviction and runtime shutdown
*drain* the actor: queued writes are committed first, then the lease is released.

One heartbeat task renews every lease this runtime holds in one transaction every
``lease_ttl / 3`` seconds; a lease found taken over kills its actor with
:class:`~stores.OwnershipLostError` (its queued writes are fenced out, never written).
"""

from __future__ import annotations

import contextlib
import functools

import trio

from stores import (
    ClosedError,
    OwnershipLostError,
    SessionOwnedError,
    Store,
    TidelogError,
)
from stores.leases import local_holder
from stores.records import decode_json_object

from .lane import StoreLane
from .session import ActorState, SessionActor
from .writer import GroupCommitWriter

__all__ = ["Supervisor"]

_DRAIN_ATTEMPTS = 3


def _start_session(
    store: Store,
    session_id: str,
    owner: str,
    holder: str,
    ttl: float,
    header_json: str | None,
) -> int:
    """In the lane: take the lease, create the session if asked; return its head."""
    store.acquire_lease(session_id, owner, ttl=ttl, holder=holder)
    try:
        if header_json is not None:
            return store.create(session_id, decode_json_object(header_json), exist_ok=True).head
        return store.head(session_id)
    except BaseException:
        store.release_lease(session_id, owner)
        raise


def _create(store: Store, session_id: str, header_json: str) -> int:
    return store.create(session_id, decode_json_object(header_json), exist_ok=True).head


class Supervisor:
    """Owns the registry of session actors for one runtime."""

    def __init__(
        self,
        nursery: trio.Nursery,
        writer: GroupCommitWriter,
        *,
        owner: str,
        lease_ttl: float,
        idle_timeout: float,
    ) -> None:
        self._nursery = nursery
        self.writer = writer
        self.lane: StoreLane = writer.lane
        self.owner = owner
        self.holder = local_holder()
        self.lease_ttl = lease_ttl
        self.idle_timeout = idle_timeout
        self.actors: dict[str, SessionActor] = {}
        self.closing = False
        self.drain_errors: list[TidelogError] = []

    # -- attach / detach ---------------------------------------------------------------

    async def acquire(
        self, session_id: str, *, header_json: str | None, exclusive: bool
    ) -> SessionActor:
        """Attach to the session's actor, spawning it if needed; a checkpoint.

        ``header_json`` not None: the session is created if missing. ``exclusive``: this is
        the process's one writer handle (a second raises :class:`SessionOwnedError`).

        Raises: :class:`SessionOwnedError` (another handle here or another process holds
        it), :class:`ClosedError` (runtime closing), store errors from the lease/create.
        """
        while True:
            if self.closing:
                raise ClosedError("the runtime is closing")
            actor = self.actors.get(session_id)
            if actor is None:
                actor = SessionActor(session_id, self.owner, header_json or "{}", self.writer)
                self.actors[session_id] = actor
                self._nursery.start_soon(self._actor_main, actor, header_json)
            elif actor.state is ActorState.DRAINING:
                await actor.stopped.wait()
                continue
            if exclusive and actor.handle_open:
                raise SessionOwnedError(session_id, "another writer handle in this process")
            actor.users += 1
            actor.handle_open = actor.handle_open or exclusive
            try:
                await actor.started.wait()
                if actor.start_error is not None:
                    raise actor.start_error
                if header_json is not None and not actor.created:
                    await self.lane.run(_create, self.lane.store, session_id, header_json)
                    actor.created = True
            except BaseException:
                self.release(actor, exclusive=exclusive)
                raise
            if actor.state is not ActorState.RUNNING:
                self.release(actor, exclusive=exclusive)
                continue
            return actor

    def release(self, actor: SessionActor, *, exclusive: bool) -> None:
        """Detach; the actor is evicted at once after the writer handle closes, else after
        ``idle_timeout`` unused."""
        actor.users -= 1
        if exclusive:
            actor.handle_open = False
        actor.last_used = trio.current_time()
        if actor.users == 0:
            if exclusive:
                actor.stop_requested = True
            actor.wake.set()

    # -- actor lifetime ----------------------------------------------------------------

    async def _actor_main(self, actor: SessionActor, header_json: str | None) -> None:
        try:
            head = await self.lane.run(
                _start_session,
                self.lane.store,
                actor.session_id,
                self.owner,
                self.holder,
                self.lease_ttl,
                header_json,
            )
        except TidelogError as exc:
            actor.start_error = exc
            actor.state = ActorState.STOPPED
            self.actors.pop(actor.session_id, None)
            actor.started.set()
            actor.stopped.set()
            return
        actor.assigned = actor.committed = head
        actor.created = header_json is not None
        actor.state = ActorState.RUNNING
        actor.last_used = trio.current_time()
        self.writer.watch(actor)  # its waiters are woken if the writer stops
        actor.started.set()
        try:
            await self._live(actor)
        finally:
            with trio.CancelScope(shield=True):
                try:
                    await self._drain(actor)
                finally:
                    self.writer.unwatch(actor)

    async def _live(self, actor: SessionActor) -> None:
        while True:
            actor.wake = trio.Event()
            if actor.fatal is not None or actor.stop_requested or self.closing:
                return
            deadline = trio.current_time() + 3600.0
            if actor.users == 0:
                deadline = actor.last_used + self.idle_timeout
                if trio.current_time() >= deadline and not actor.pending:
                    return
            with trio.move_on_at(deadline):
                await actor.wake.wait()

    async def _drain(self, actor: SessionActor) -> None:
        actor.state = ActorState.DRAINING
        attempts = 0
        while actor.pending and actor.fatal is None and self.writer.running:
            failures = actor.failures
            self.writer.submit(actor, urgent=True)
            await actor.wait_progress()
            if actor.failures > failures:
                attempts += 1
                if attempts >= _DRAIN_ATTEMPTS and actor.fault is not None:
                    self.drain_errors.append(actor.fault)
                    actor.die(actor.fault)
                    break
                await trio.sleep(actor.backoff)
        if actor.fatal is None or not isinstance(actor.fatal, OwnershipLostError | ClosedError):
            with contextlib.suppress(TidelogError):  # else it expires after lease_ttl
                await self.lane.run(self.lane.store.release_lease, actor.session_id, self.owner)
        actor.state = ActorState.STOPPED
        if self.actors.get(actor.session_id) is actor:
            del self.actors[actor.session_id]
        actor.stopped.set()
        actor.wake.set()

    async def stop_all(self) -> None:
        """Drain and stop every actor (runtime shutdown). Shield it."""
        self.closing = True
        actors = list(self.actors.values())
        for actor in actors:
            actor.stop_requested = True
            actor.wake.set()
        for actor in actors:
            await actor.stopped.wait()

    # -- heartbeat ---------------------------------------------------------------------

    async def run_heartbeat(self) -> None:
        """Renew all held leases every ``lease_ttl / 3`` seconds, until cancelled."""
        while True:
            await trio.sleep(self.lease_ttl / 3)
            ids = [
                sid
                for sid, a in self.actors.items()
                if a.state in (ActorState.RUNNING, ActorState.DRAINING) and a.fatal is None
            ]
            if not ids:
                continue
            try:
                renew = functools.partial(self.lane.store.renew_leases, ttl=self.lease_ttl)
                lost = await self.lane.run(renew, self.owner, ids)
            except TidelogError:
                continue  # retried next beat; fencing protects the data meanwhile
            for sid in lost:
                actor = self.actors.get(sid)
                if actor is not None:
                    actor.die(OwnershipLostError(sid))
