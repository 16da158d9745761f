"""tidelog's trio actors: store lanes, the group-commit writer, session actors, the
supervisor and change notification. Knows stores/, nothing of agents or the runtime API."""

from .changes import ChangeHub
from .checkpointer import Checkpointer
from .lane import StoreLane
from .session import ActorState, GroupWrite, PendingWrite, SessionActor
from .supervisor import Supervisor
from .writer import GroupCommitWriter, WriterStatistics

__all__ = [
    "ActorState",
    "ChangeHub",
    "Checkpointer",
    "GroupCommitWriter",
    "GroupWrite",
    "PendingWrite",
    "SessionActor",
    "StoreLane",
    "Supervisor",
    "WriterStatistics",
]
