"""tidelog storage engines: records, errors, the Store contract and its backends.

Synchronous and thread-confined; nothing here imports trio.
"""

from .contract import AppendOp, BatchResult, DeleteOp, Pin, Store, TruncateOp, WriteOp
from .errors import (
    ClosedError,
    ConflictError,
    InvalidArgumentError,
    InvalidEventError,
    InvalidSessionIdError,
    OwnershipLostError,
    ReadOnlyError,
    SessionExistsError,
    SessionNotFoundError,
    SessionOwnedError,
    SnapshotExpiredError,
    StoreBusyError,
    StoreCorruptError,
    StoreError,
    StoreIOError,
    TidelogError,
    UnsupportedFormatError,
)
from .memory import MemoryStore
from .records import (
    JSON,
    NewEvent,
    PreparedEvent,
    SessionInfo,
    StoredEvent,
    check_seq,
    prepare_events,
    validate_session_id,
)
from .sqlite import SqliteStore

__all__ = [
    "JSON",
    "AppendOp",
    "BatchResult",
    "ClosedError",
    "ConflictError",
    "DeleteOp",
    "InvalidArgumentError",
    "InvalidEventError",
    "InvalidSessionIdError",
    "MemoryStore",
    "NewEvent",
    "OwnershipLostError",
    "Pin",
    "PreparedEvent",
    "ReadOnlyError",
    "SessionExistsError",
    "SessionInfo",
    "SessionNotFoundError",
    "SessionOwnedError",
    "SnapshotExpiredError",
    "SqliteStore",
    "Store",
    "StoreBusyError",
    "StoreCorruptError",
    "StoreError",
    "StoreIOError",
    "StoredEvent",
    "TidelogError",
    "TruncateOp",
    "UnsupportedFormatError",
    "WriteOp",
    "check_seq",
    "prepare_events",
    "validate_session_id",
]
