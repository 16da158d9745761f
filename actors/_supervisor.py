"""Supervisor: get-or-spawn session actors, keep their leases alive, evict idle ones.

Actors are tasks in the runtime's service nursery (shielded from the caller's
cancellation: only the runtime's own shutdown stops them). The first use of a session
spawns its actor, which takes the session's lease (cross-process single-writer ownership)
before it accepts writes; concurrent first uses share that one start. An actor lives
while it is used and is evicted ``idle_timeout`` seconds after its last user left -- at
once when an explicit writer handle closes, so that other processes can take the session.
Eviction and runtime shutdown *drain* the actor: accepted writes are committed first (a
few attempts with backoff), then the lease is released. Writes the drain cannot commit
are dropped and reported as :class:`~stores.UnwrittenError` (by the closing handle, or
by the runtime's exit) -- never silently.

One heartbeat task renews every lease this runtime holds in one transaction every
``lease_ttl / 3`` seconds; a lease found taken over kills its actor with
:class:`~stores.OwnershipLostError` (its queued writes are fenced out, never written).
"""

from __future__ import annotations

import contextlib
import functools
from typing import Literal, TypeAlias

import attrs
import trio

from stores import (
    ClosedError,
    CommitPendingError,
    OwnershipLostError,
    SessionExistsError,
    SessionNotFoundError,
    SessionOwnedError,
    Store,
    TidelogError,
    UnwrittenError,
    decode_json_object,
    local_holder,
)

from ._actor_life import ActorState
from ._lane import StoreLane
from ._session import SessionActor
from ._writer import GroupCommitWriter

__all__ = ["CreateMode", "Supervisor"]

#: Commit attempts a drain makes (with backoff) before it gives the writes up.
DRAIN_ATTEMPTS = 3

#: How a write open treats a missing or existing session (see ``Runtime.open_session``).
CreateMode: TypeAlias = Literal["if_missing", "new", "never"]


def _start_session(
    store: Store,
    session_id: str,
    owner: str,
    holder: str,
    ttl: float,
    header_json: str,
    create: CreateMode,
) -> int:
    """In the lane: take the lease, create the session as ``create`` says; its head."""
    store.acquire_lease(session_id, owner, ttl=ttl, holder=holder)
    try:
        info = store.stat(session_id)
        if info is not None:
            if create == "new":
                raise SessionExistsError(session_id)
            return info.head
        if create == "never":
            raise SessionNotFoundError(session_id)
        return store.create(session_id, decode_json_object(header_json), exist_ok=True).head
    except BaseException:
        store.release_lease(session_id, owner)
        raise


@attrs.define(eq=False)
class _Life:
    """The supervisor's bookkeeping of one actor: who uses it and when it stops."""

    actor: SessionActor
    users: int = 0
    handle_open: bool = False
    last_used: float = 0.0
    stop_requested: bool = False
    wake: trio.Event = attrs.Factory(trio.Event)
    start_error: TidelogError | None = None
    #: A closing handle waits for this actor's stop and reports its dropped writes.
    reporter: bool = False
    #: Accepted writes this actor dropped that no handle has reported yet.
    unwritten: list[UnwrittenError] = attrs.Factory(list)


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
        self._lives: dict[str, _Life] = {}
        self.closing = False
        #: Dropped writes of actors that stopped with nobody left to report them.
        self._orphans: list[UnwrittenError] = []

    # -- lookups -------------------------------------------------------------------------

    def get(self, session_id: str) -> SessionActor | None:
        """The session's live actor in this runtime, if any (no I/O)."""
        life = self._lives.get(session_id)
        return None if life is None else life.actor

    def actors(self) -> list[SessionActor]:
        """Every live actor."""
        return [life.actor for life in self._lives.values()]

    def handle_open(self, session_id: str) -> bool:
        """True while an exclusive writer handle of this runtime holds the session."""
        life = self._lives.get(session_id)
        return life is not None and life.handle_open

    def __len__(self) -> int:
        return len(self._lives)

    # -- attach / detach -----------------------------------------------------------------

    async def acquire(
        self,
        session_id: str,
        *,
        header_json: str,
        exclusive: bool,
        create: CreateMode,
    ) -> SessionActor:
        """Attach to the session's actor, spawning it if needed; a checkpoint.

        ``create``: ``"if_missing"`` creates the session (with ``header_json``) if it
        does not exist, ``"new"`` insists on creating it, ``"never"`` insists it exists.
        ``exclusive``: this is the runtime's one writer handle of the session (a second
        raises :class:`SessionOwnedError`); non-exclusive users share the actor with it.

        Raises: :class:`SessionOwnedError` (another handle here or another process holds
        it), :class:`SessionExistsError` / :class:`SessionNotFoundError` (``create``),
        :class:`ClosedError` (runtime closing), store errors from the lease/create.
        Cancellation: nothing is left attached.
        """
        while True:
            if self.closing:
                raise ClosedError("the runtime is closing")
            life = self._lives.get(session_id)
            if life is None:
                actor = SessionActor(session_id, self.owner, header_json, self.writer)
                life = self._lives[session_id] = _Life(actor)
                self._nursery.start_soon(self._actor_main, life, header_json, create)
                fresh = True
            else:
                fresh = False
                state = life.actor.state.value
                if (
                    life.stop_requested
                    or life.actor.fatal is not None
                    or state in (ActorState.DRAINING, ActorState.STOPPED)
                ):
                    # It is stopping (its writer handle closed, it died, or it is being
                    # evicted): wait for the stop and start a new one, never attach to it.
                    life.wake.set()  # (one that died, e.g. deleted on a retry, stops now)
                    await life.actor.state.wait_value(ActorState.STOPPED)
                    continue
            if exclusive and life.handle_open:
                raise SessionOwnedError(session_id, "another writer handle in this process")
            actor = life.actor
            life.users += 1
            life.handle_open = life.handle_open or exclusive
            try:
                await actor.state.wait_value(lambda s: s is not ActorState.STARTING)
                if life.start_error is not None:
                    raise life.start_error
                if not fresh and create == "new":
                    raise SessionExistsError(session_id)
            except BaseException:
                self.release(actor, exclusive=exclusive)
                raise
            if actor.state.value is not ActorState.RUNNING:
                self.release(actor, exclusive=exclusive)
                continue
            return actor

    def release(self, actor: SessionActor, *, exclusive: bool) -> None:
        """Detach; the actor is evicted at once after the writer handle closes, else after
        ``idle_timeout`` unused."""
        life = self._lives.get(actor.session_id)
        if life is None or life.actor is not actor:
            return  # it stopped already (start failed, or it died and was removed)
        life.users -= 1
        if exclusive:
            life.handle_open = False
        life.last_used = trio.current_time()
        if life.users == 0:
            if exclusive:
                life.stop_requested = True
            life.wake.set()

    async def close_handle(self, actor: SessionActor, *, exclusive: bool) -> None:
        """Detach a handle that is closing, after the writes accepted so far: the close
        of the writer handle by the last user drains and stops the actor. Shield it.

        Raises :class:`~stores.UnwrittenError` (or :class:`~stores.OwnershipLostError`)
        for accepted writes that were dropped and not yet reported, and
        :class:`~stores.CommitPendingError` if the actor outlives this handle and its
        writes are still failing (they stay queued and are retried)."""
        life = self._lives.get(actor.session_id)
        if life is None or life.actor is not actor:
            return
        stops = exclusive and life.users == 1
        pending: CommitPendingError | None = None
        if not stops:
            with contextlib.suppress(UnwrittenError):  # taken below
                try:
                    await self._settle(actor)
                except CommitPendingError as exc:
                    pending = exc
        if stops:
            life.reporter = True  # this close reports what the drain drops
        self.release(actor, exclusive=exclusive)
        if stops:
            await actor.state.wait_value(ActorState.STOPPED)
        dropped = life.unwritten + actor.take_dropped()
        life.unwritten = []
        if dropped:
            raise dropped[0]
        if pending is not None:
            raise pending

    def report_at_exit(self, error: TidelogError) -> None:
        """Have the runtime's exit (:meth:`stop_all`) raise ``error``: what closing a
        handle raised where nobody sees it (a block finalized by the garbage collector)."""
        if isinstance(error, UnwrittenError):
            self._orphans.append(error)

    # -- actor lifetime ------------------------------------------------------------------

    async def _actor_main(self, life: _Life, header_json: str, create: CreateMode) -> None:
        actor = life.actor
        try:
            head = await self.lane.run(
                _start_session,
                self.lane.store,
                actor.session_id,
                self.owner,
                self.holder,
                self.lease_ttl,
                header_json,
                create,
            )
        except TidelogError as exc:
            life.start_error = exc
            self._forget(life)
            actor.mark_stopped()
            return
        actor.start(head)
        life.last_used = trio.current_time()
        self.writer.watch(actor)  # its waiters are woken if the writer stops
        try:
            await self._live(life)
        finally:
            with trio.CancelScope(shield=True):
                try:
                    await self._drain(life)
                finally:
                    self.writer.unwatch(actor)

    async def _live(self, life: _Life) -> None:
        actor = life.actor
        while True:
            life.wake = trio.Event()
            if actor.fatal is not None or life.stop_requested or self.closing:
                return
            deadline = trio.current_time() + 3600.0
            if life.users == 0:
                deadline = life.last_used + self.idle_timeout
                if trio.current_time() >= deadline and not actor.pending:
                    return
            with trio.move_on_at(deadline):
                await life.wake.wait()

    async def _settle(self, actor: SessionActor) -> None:
        """Wait for every write accepted so far, retrying failed attempts a few times.

        Raises :class:`~stores.CommitPendingError` when the last attempt failed too,
        :class:`~stores.UnwrittenError` if they were dropped."""
        attempts = 0
        while True:
            try:
                await actor.wait_committed(report=False)  # drops go to take_dropped
                return
            except CommitPendingError:
                attempts += 1
                if attempts >= DRAIN_ATTEMPTS or not self.writer.running:
                    raise
                await trio.sleep(actor.backoff)

    async def _drain(self, life: _Life) -> None:
        actor = life.actor
        actor.stop_accepting("the runtime is closing" if self.closing else "its writer closed")
        if self.writer.running:
            try:
                await self._settle(actor)
            except CommitPendingError as exc:
                cause = exc.__cause__
                assert isinstance(cause, TidelogError)
                actor.drop_pending(cause)
            except UnwrittenError:
                pass  # dropped by a fatal error: taken below
        elif actor.pending:
            actor.drop_pending(self.writer.stopped_error())
        life.unwritten.extend(actor.take_dropped())
        if not isinstance(actor.fatal, OwnershipLostError | SessionNotFoundError):
            with contextlib.suppress(TidelogError):  # else it expires after lease_ttl
                await self.lane.run(self.lane.store.release_lease, actor.session_id, self.owner)
        self._forget(life)
        if not life.reporter and life.unwritten:
            self._orphans.extend(life.unwritten)  # no handle is left to report them
            life.unwritten = []
        actor.mark_stopped()
        life.wake.set()

    def _forget(self, life: _Life) -> None:
        if self._lives.get(life.actor.session_id) is life:
            del self._lives[life.actor.session_id]

    async def stop_all(self) -> list[UnwrittenError]:
        """Drain and stop every actor (runtime shutdown); shield it. Returns the
        dropped writes no handle reported."""
        self.closing = True
        lives = list(self._lives.values())
        for life in lives:
            life.stop_requested = True
            life.wake.set()
        for life in lives:
            await life.actor.state.wait_value(ActorState.STOPPED)
        for life in lives:
            self._orphans.extend(life.unwritten)
            life.unwritten = []
        orphans, self._orphans = self._orphans, []
        return orphans

    # -- heartbeat -----------------------------------------------------------------------

    async def run_heartbeat(self) -> None:
        """Renew all held leases every ``lease_ttl / 3`` seconds, until cancelled."""
        while True:
            await trio.sleep(self.lease_ttl / 3)
            ids = [
                sid
                for sid, life in self._lives.items()
                if life.actor.state.value in (ActorState.RUNNING, ActorState.DRAINING)
                and life.actor.fatal is None
            ]
            if not ids:
                continue
            try:
                renew = functools.partial(self.lane.store.renew_leases, ttl=self.lease_ttl)
                lost = await self.lane.run(renew, self.owner, ids)
            except TidelogError:
                continue  # retried next beat; fencing protects the data meanwhile
            for sid in lost:
                life = self._lives.get(sid)
                if life is not None:
                    life.actor.die(OwnershipLostError(sid))
