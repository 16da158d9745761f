"""Forks that share their parent's prefix: the lineage rules of the SQL backends, once.

A forked session stores only its own events. Its row names a *base* (``base_sid``,
``base_seq``): seqs up to ``base_seq`` are read from the base session, which may itself
be a fork (reads walk the chain). Forking is therefore O(1) in time and space.

The prefix must never change under a child: before a destructive change removes events
a child still reads through its base (a truncate or rewrite of the base below the
child's ``base_seq``, or deleting the base), :func:`protect_children` copies exactly
those events into the child and re-points its base -- the only copying forks ever do,
in the same transaction as the change itself.

The walk is written here; each backend gives the few statements it needs as a
:class:`LineageSql` (SQLite: plain statements on its one connection; PostgreSQL: the
same rows locked ``FOR SHARE`` / ``FOR UPDATE`` so that a concurrent truncate cannot miss
a new child, and copies that stay on the server).
"""

from __future__ import annotations

from typing import Protocol

from ._checks import check_fork, fork_header
from ._records import JSON, SessionInfo, decode_json_object, encode_json

__all__ = ["LineageSql", "fork_session", "protect_children"]


class LineageSql(Protocol):
    """The statements of one backend, run inside the caller's write transaction."""

    def exists(self, session_id: str) -> bool:
        """True if a session ``session_id`` exists."""
        ...

    def source(self, session_id: str) -> tuple[int, int, str, int | None, int] | None:
        """``(sid, head, header_json, base_sid, base_seq)`` of a session to fork from
        (held against concurrent destructive changes until the transaction ends)."""
        ...

    def base_of(self, sid: int) -> tuple[int | None, int]:
        """``(base_sid, base_seq)`` of session ``sid`` (held like :meth:`source`)."""
        ...

    def insert_fork(
        self,
        new_id: str,
        at: int,
        now: float,
        header_json: str,
        parent_id: str,
        base_sid: int | None,
    ) -> None:
        """Insert the fork's session row: head ``at``, parent ``(parent_id, at)``, base
        ``(base_sid, at)``."""
        ...

    def children(self, sid: int) -> list[tuple[int, int]]:
        """``(child_sid, child_base_seq)`` of the sessions whose base is ``sid``, locked
        for update where the backend locks rows."""
        ...

    def copy_prefix(self, sid: int, child: int, keep: int, upto: int) -> None:
        """Copy into ``child`` the events of ``sid``'s log (its chain included) with
        ``keep < seq <= upto``."""
        ...

    def rebase(self, child: int, base_sid: int | None, base_seq: int) -> None:
        """Point ``child``'s base at ``(base_sid, base_seq)``."""
        ...


def fork_session(
    sql: LineageSql,
    source_id: str,
    new_id: str,
    at_seq: object,
    header: dict[str, JSON],
    now: float,
) -> SessionInfo:
    """Create ``new_id`` as a fork of ``source_id`` at ``at_seq`` (its head if None): one
    session row whose base is the session that stores the events at the fork point. The
    child's header is :func:`~stores._checks.fork_header`'s. The ids and ``header`` are
    validated by the caller; ``at_seq`` is checked here, after the lookups
    (:func:`~stores._checks.check_fork`'s order).

    Raises :class:`SessionExistsError`, :class:`SessionNotFoundError`, or
    :class:`InvalidArgumentError` for a bad ``at_seq``, in that order."""
    target_exists = sql.exists(new_id)
    row = sql.source(source_id)
    at = check_fork(
        source_id,
        new_id,
        at_seq,
        target_exists=target_exists,
        source_head=None if row is None else int(row[1]),
    )
    assert row is not None  # check_fork refused an unknown source
    sid, _, header_json, base_sid, base_seq = row
    while base_sid is not None and at <= base_seq:  # point at the events' owner
        sid = base_sid
        base_sid, base_seq = sql.base_of(sid)
    merged = fork_header(decode_json_object(header_json), header, source_id, at)
    sql.insert_fork(new_id, at, now, encode_json(merged), source_id, sid if at > 0 else None)
    return SessionInfo(new_id, at, now, now, merged, (source_id, at))


def protect_children(sql: LineageSql, sid: int, cut: int, *, deleting: bool) -> None:
    """Before events of ``sid`` after ``cut`` are removed (or ``sid`` is deleted), copy
    into each child the part of its prefix it would lose, and re-point its base."""
    own_base: tuple[int | None, int] | None = None
    for child, child_base in sql.children(sid):
        if not deleting and child_base <= cut:
            continue
        new_base: int | None
        if deleting:
            if own_base is None:
                own_base = sql.base_of(sid)
            base_sid, base_seq = own_base
            keep = min(base_seq, child_base) if base_sid is not None else 0
            new_base = base_sid if keep > 0 else None
        else:
            keep, new_base = cut, (sid if cut > 0 else None)
        sql.copy_prefix(sid, child, keep, child_base)
        sql.rebase(child, new_base, keep)
