"""The writes a session actor has accepted and not yet committed, and atomic groups of
them across sessions.

Each :class:`PendingWrite` carries its own outcome (committed, failed attempts, dropped),
so every waiter learns what became of *its* write (see :mod:`actors._session`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal, TypeAlias

import attrs

from stores import ConflictError, InvalidArgumentError, PreparedEvent, TidelogError

if TYPE_CHECKING:
    from ._session import SessionActor

__all__ = ["GroupWrite", "PendingWrite", "WriteKind"]

WriteKind: TypeAlias = Literal["append", "truncate", "replace", "delete", "group"]


@attrs.define(eq=False)
class PendingWrite:
    """One accepted write and its outcome: an append (seqs ``first..last``), a truncate
    to ``to_seq``, a replace of everything after ``to_seq`` by ``events`` (seqs
    ``first..last``), a delete, or this session's part of a :class:`GroupWrite`.

    Outcome: ``done`` (committed; ``result`` is the store's), ``dropped`` (never written:
    the error its waiters get), or still queued -- ``failed_attempts`` counts the commit
    attempts covering it that failed, ``error`` is the last one's."""

    kind: WriteKind
    prev: int
    first: int = 1
    last: int = 0
    events: tuple[PreparedEvent, ...] = ()
    to_seq: int = 0
    group: GroupWrite | None = None
    result: int | None = None
    done: bool = False
    dropped: TidelogError | None = None
    failed_attempts: int = 0
    error: TidelogError | None = None
    #: A waiter raised ``dropped`` (so closing the writer need not report it again).
    reported: bool = False
    #: Tasks waiting for this write's outcome right now (they will report a drop).
    watchers: int = 0

    @property
    def head_after(self) -> int:
        """The session's head once this write is committed."""
        if self.kind == "truncate":
            return self.to_seq
        if self.kind == "delete":
            return 0
        return self.last


@attrs.define(eq=False)
class GroupWrite:
    """Writes to several sessions that commit together or not at all (one GroupOp).

    Each member actor holds its part as a ``"group"`` :class:`PendingWrite`; the writer
    takes the group when it is at the front of every member's queue."""

    members: list[tuple[SessionActor, PendingWrite]] = attrs.Factory(list)

    @classmethod
    def enqueue(
        cls, parts: Sequence[tuple[SessionActor, Sequence[PreparedEvent], int | None]]
    ) -> GroupWrite:
        """Accept appends to several sessions as one unit (``(actor, events,
        expected_head)`` each; all actors distinct). All or nothing: if any part is
        refused, nothing is accepted.

        Raises: :class:`~stores.InvalidArgumentError` (a session named twice, no parts),
        :class:`~stores.ConflictError`, and the refusals of :meth:`SessionActor.append_nowait`.
        """
        if not parts:
            raise InvalidArgumentError("an atomic append needs at least one session")
        if len({id(actor) for actor, _, _ in parts}) != len(parts):
            raise InvalidArgumentError("an atomic append names one session twice")
        for actor, _, expected_head in parts:
            actor.check_writable()
            if expected_head is not None and expected_head != actor.accepted_head:
                raise ConflictError(actor.session_id, expected_head, actor.accepted_head)
        group = cls()
        for actor, events, _ in parts:
            write = actor._accept("group", tuple(events), group=group)
            group.members.append((actor, write))
        for actor, _, _ in parts:
            actor.writer.submit(actor, urgent=True)
        return group

    def ready(self, now: float) -> bool:
        """True when the group is at the front of every member's queue, none in flight."""
        return all(actor.ready(now) and actor.front is write for actor, write in self.members)

    async def wait(self) -> list[int]:
        """Wait for the group's commit; return each member's new head. Shield it: a
        group cannot be withdrawn once accepted.

        Raises :class:`~stores.CommitPendingError` (the group stays queued) or
        :class:`~stores.UnwrittenError` for the first member that reports it."""
        for actor, write in self.members:
            await actor.wait_write(write, 0, withdraw=False)
        return [write.last for _, write in self.members]
