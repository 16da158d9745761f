"""tidelog's trio actors: store lanes, the group-commit writer, session actors, the
supervisor, change notification and the WAL checkpointer. Knows stores/, nothing of the
runtime API above it or of agents."""

from ._actor_life import ActorState
from ._changes import ChangeHub
from ._group import GroupWrite
from ._lane import StoreLane
from ._pending import PendingWrite, WriteKind
from ._session import SessionActor
from ._supervisor import DRAIN_ATTEMPTS, CreateMode, Supervisor
from ._wal_checkpointer import WalCheckpointer
from ._writer import GroupCommitWriter, WriterStatistics

__all__ = [
    "DRAIN_ATTEMPTS",
    "ActorState",
    "ChangeHub",
    "CreateMode",
    "GroupCommitWriter",
    "GroupWrite",
    "PendingWrite",
    "SessionActor",
    "StoreLane",
    "Supervisor",
    "WalCheckpointer",
    "WriteKind",
    "WriterStatistics",
]
