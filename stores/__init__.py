"""tidelog storage engines: records, errors, the Store contract and its backends.

Synchronous and thread-confined; nothing here imports trio. The contract, the records,
the errors and the rules every backend shares live here (private modules, public names
exported below); each backend is a subpackage -- :mod:`stores.memory`,
:mod:`stores.sqlite`, :mod:`stores.jsonl`, :mod:`stores.postgres` -- whose class is also
exported here and loaded on first use, so ``import stores`` needs none of apsw, psycopg
or zstandard (``MemoryStore`` needs nothing).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from ._checks import check_list_args
from ._contract import (
    AppendOp,
    BatchResult,
    Capabilities,
    DeleteOp,
    GroupOp,
    ListOrder,
    Pin,
    ReplaceOp,
    RestoreOp,
    Store,
    Synchronous,
    TruncateOp,
    WalUpkeep,
    WriteOp,
)
from ._errors import (
    BrokenError,
    ClosedError,
    CommitPendingError,
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
    UnwrittenError,
)
from ._leases import holder_is_dead, local_holder
from ._listening import ChangeListener, listener_factory
from ._records import (
    JSON,
    MAX_BATCH_BYTES,
    MAX_EVENT_BYTES,
    MAX_ID_LENGTH,
    MAX_SEQ,
    LeaseInfo,
    NewEvent,
    PreparedEvent,
    SessionInfo,
    StoredEvent,
    check_count,
    check_flag,
    check_seq,
    decode_json,
    decode_json_object,
    encode_json,
    prepare_events,
    validate_header,
    validate_session_id,
)
from ._urls import StoreKind, is_postgres_url, open_store, store_kind

if TYPE_CHECKING:  # loaded on first use by __getattr__ below
    from .jsonl import JsonlStore
    from .memory import MemoryStore
    from .postgres import PostgresStore
    from .sqlite import SqliteStore

__all__ = [
    "JSON",
    "MAX_BATCH_BYTES",
    "MAX_EVENT_BYTES",
    "MAX_ID_LENGTH",
    "MAX_SEQ",
    "AppendOp",
    "BatchResult",
    "BrokenError",
    "Capabilities",
    "ChangeListener",
    "ClosedError",
    "CommitPendingError",
    "ConflictError",
    "DeleteOp",
    "GroupOp",
    "InvalidArgumentError",
    "InvalidEventError",
    "InvalidSessionIdError",
    "JsonlStore",
    "LeaseInfo",
    "ListOrder",
    "MemoryStore",
    "NewEvent",
    "OwnershipLostError",
    "Pin",
    "PostgresStore",
    "PreparedEvent",
    "ReadOnlyError",
    "ReplaceOp",
    "RestoreOp",
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
    "StoreKind",
    "StoredEvent",
    "Synchronous",
    "TidelogError",
    "TruncateOp",
    "UnsupportedFormatError",
    "UnwrittenError",
    "WalUpkeep",
    "WriteOp",
    "check_count",
    "check_flag",
    "check_list_args",
    "check_seq",
    "decode_json",
    "decode_json_object",
    "encode_json",
    "holder_is_dead",
    "is_postgres_url",
    "listener_factory",
    "local_holder",
    "open_store",
    "prepare_events",
    "store_kind",
    "validate_header",
    "validate_session_id",
]


#: The backends loaded on first use: name -> (subpackage, the extra that installs it).
_BACKENDS = {
    "MemoryStore": (".memory", None),
    "SqliteStore": (".sqlite", None),
    "JsonlStore": (".jsonl", None),
    "PostgresStore": (".postgres", "postgres"),
}


def __getattr__(name: str) -> object:
    """Import a backend when it is first asked for (``stores.SqliteStore``...)."""
    if name not in _BACKENDS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module_name, extra = _BACKENDS[name]
    try:
        module = importlib.import_module(module_name, __name__)
    except ImportError as exc:
        if extra is None:
            raise
        raise ImportError(
            f"{name} needs the {extra!r} extra: pip install 'tidelog[{extra}]'"
        ) from exc
    store = getattr(module, name)
    store.__module__ = __name__  # its public home, like the names below
    globals()[name] = store
    return store


def __dir__() -> list[str]:
    return sorted(__all__)


# Public names report their public home (``stores.MemoryStore``, not ``stores.memory._store``).
for _name in __all__:
    _obj = globals().get(_name)
    if getattr(_obj, "__module__", "").startswith(__name__ + "."):
        _obj.__module__ = __name__
del _name, _obj
