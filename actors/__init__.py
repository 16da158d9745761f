"""tidelog's trio actors: store lanes, the group-commit writer, session actors, the
supervisor, change notification and the WAL checkpointer. Knows stores/, nothing of the
runtime API above it or of agents."""

from .changes import ChangeHub
from .lane import StoreLane
from .pending import GroupWrite, PendingWrite, WriteKind
from .session import ActorState, SessionActor
from .supervisor import DRAIN_ATTEMPTS, CreateMode, Supervisor
from .wal_checkpointer import WalCheckpointer
from .writer import GroupCommitWriter, WriterStatistics

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
