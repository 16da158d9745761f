"""tidelog's session runtime: ``open_runtime()``, session handles, snapshots, tails,
projections and forks.

Every session is an append-only event log written by one actor; reads run on their own
connection and never block the writer. The agent layer (``runtime.agents``) and the
command line (``runtime.cli``) are clients of this public API.

``MemoryStore`` and ``SqliteStore`` (re-exported from :mod:`stores`) are loaded on first
use, as :mod:`stores` loads its backends: ``import runtime`` needs neither the memory
backend nor apsw until one is asked for.
"""

from typing import TYPE_CHECKING

from actors import WriterStatistics
from stores import (
    JSON,
    BrokenError,
    ClosedError,
    CommitPendingError,
    ConflictError,
    InvalidArgumentError,
    InvalidEventError,
    InvalidSessionIdError,
    NewEvent,
    OwnershipLostError,
    ReadOnlyError,
    SessionExistsError,
    SessionInfo,
    SessionNotFoundError,
    SessionOwnedError,
    SnapshotExpiredError,
    Store,
    StoreBusyError,
    StoreCorruptError,
    StoredEvent,
    StoreError,
    StoreIOError,
    TidelogError,
    UnsupportedFormatError,
    UnwrittenError,
)

from ._folding import Watch
from ._handles import SessionReader, SessionWriter
from ._opening import open_runtime
from ._projections import Projection, StatsProjection
from ._published import STATISTICS_PREFIX, PublishedStatistics, published_statistics
from ._runtime import INTERNAL_PREFIX, Runtime, RuntimeStatistics
from ._snapshot import Snapshot
from ._tail import Tail

if TYPE_CHECKING:  # loaded on first use by __getattr__ below
    from stores import MemoryStore, SqliteStore

__all__ = [
    "INTERNAL_PREFIX",
    "JSON",
    "STATISTICS_PREFIX",
    "BrokenError",
    "ClosedError",
    "CommitPendingError",
    "ConflictError",
    "InvalidArgumentError",
    "InvalidEventError",
    "InvalidSessionIdError",
    "MemoryStore",
    "NewEvent",
    "OwnershipLostError",
    "Projection",
    "PublishedStatistics",
    "ReadOnlyError",
    "Runtime",
    "RuntimeStatistics",
    "SessionExistsError",
    "SessionInfo",
    "SessionNotFoundError",
    "SessionOwnedError",
    "SessionReader",
    "SessionWriter",
    "Snapshot",
    "SnapshotExpiredError",
    "SqliteStore",
    "StatsProjection",
    "Store",
    "StoreBusyError",
    "StoreCorruptError",
    "StoreError",
    "StoreIOError",
    "StoredEvent",
    "Tail",
    "TidelogError",
    "UnsupportedFormatError",
    "UnwrittenError",
    "Watch",
    "WriterStatistics",
    "open_runtime",
    "published_statistics",
]

#: The store backends re-exported from :mod:`stores`, loaded on first use.
_BACKENDS = frozenset({"MemoryStore", "SqliteStore"})


def __getattr__(name: str) -> object:
    """Load a re-exported backend when it is first asked for (``runtime.SqliteStore``)."""
    if name not in _BACKENDS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    store: object
    if name == "MemoryStore":
        from stores import MemoryStore as store
    else:
        from stores import SqliteStore as store
    globals()[name] = store
    return store


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


# Public names report their public home (``runtime.Runtime``, not ``runtime._runtime``).
for _name in __all__:
    _obj = globals().get(_name)
    if getattr(_obj, "__module__", "").startswith(__name__ + "._"):
        _obj.__module__ = __name__
del _name, _obj
