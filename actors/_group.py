"""Atomic appends to several sessions: one :class:`GroupWrite`, one GroupOp."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs

from stores import ConflictError, InvalidArgumentError, PreparedEvent

from ._pending import PendingWrite

if TYPE_CHECKING:
    from ._session import SessionActor

__all__ = ["GroupWrite"]


@attrs.define(eq=False)
class GroupWrite:
    """Writes to several sessions that commit together or not at all (one GroupOp).

    Each member actor holds its part as a ``"group"`` :class:`~actors.PendingWrite`; the
    writer takes the group when it is at the front of every member's queue."""

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
            write = actor.accept_group_part(tuple(events), group)
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
