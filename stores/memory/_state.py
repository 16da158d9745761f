"""MemoryStore's data: the sessions (their rows, truncation cuts and projection
checkpoints) and the leases, in one :class:`State` that a :class:`~stores.MemoryStore`
shares with its clones; a part of :class:`~stores.MemoryStore`, kept apart to keep each
module to one concern."""

from __future__ import annotations

import threading

import attrs

from .._contract import Pin
from .._records import SessionInfo, decode_json
from ._leases import Lease

__all__ = ["Row", "Session", "State"]

Row = tuple[int, float, str, str, str | None]  # seq, ts, kind, data_json, run_id


@attrs.define
class Session:
    incarnation: int
    created_at: float
    updated_at: float
    header_json: str
    parent: tuple[str, int] | None = None
    rows: list[Row] = attrs.Factory(list)
    epoch: int = 0
    cuts: list[tuple[int, int]] = attrs.Factory(list)  # (epoch, to_seq)
    projections: dict[str, tuple[int, Pin, str]] = attrs.Factory(dict)

    def info(self, session_id: str) -> SessionInfo:
        header = decode_json(self.header_json)
        assert isinstance(header, dict)
        return SessionInfo(
            session_id, len(self.rows), self.created_at, self.updated_at, header, self.parent
        )


@attrs.define
class State:
    """Shared by a MemoryStore and its clones."""

    lock: threading.RLock = attrs.Factory(threading.RLock)
    sessions: dict[str, Session] = attrs.Factory(dict)
    leases: dict[str, Lease] = attrs.Factory(dict)
    incarnations: int = 0
    version: int = 0  # bumped on every commit
