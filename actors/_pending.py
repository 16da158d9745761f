"""The writes a session actor has accepted and not yet committed: plain data.

Each :class:`PendingWrite` carries its own outcome (committed, failed attempts, dropped),
so every waiter learns what became of *its* write; the actor
(:mod:`actors._session`) changes it, nothing here calls back into the actor."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, TypeAlias

import attrs

from stores import PreparedEvent, TidelogError

if TYPE_CHECKING:  # only the annotation: a group's members are its actors' writes
    from ._group import GroupWrite

__all__ = ["PendingWrite", "WriteKind"]

WriteKind: TypeAlias = Literal["append", "truncate", "replace", "delete", "group"]


@attrs.define(eq=False)
class PendingWrite:
    """One accepted write and its outcome: an append (seqs ``first..last``), a truncate
    to ``to_seq``, a replace of everything after ``to_seq`` by ``events`` (seqs
    ``first..last``), a delete, or this session's part of a
    :class:`~actors.GroupWrite`.

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
