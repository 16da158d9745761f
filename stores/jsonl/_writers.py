"""The writer-side file indexes a process keeps: one per session it writes, each holding
the session file's descriptor (:class:`~stores.jsonl._files.Shared`'s ``writers``).

A lease's index stays while the lease is held (and is closed when it is released); the
indexes of sessions written without a lease are kept too, up to :data:`KEEP_WRITERS`, so
that a session written again is not read again (unless another process wrote it
meanwhile: the writer looks at the file's inode and size when it takes the lock). Past
the bound, the least recently written are closed first.
"""

from __future__ import annotations

import resource

from ._files import Shared

__all__ = ["KEEP_WRITERS", "trim_writers"]


def _keep_writers() -> int:
    """An eighth of the process's file descriptor limit, within 64..1024."""
    try:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):
        return 64
    if soft == resource.RLIM_INFINITY:
        return 1024
    return max(64, min(1024, soft // 8))


#: Writer-side file indexes kept open for sessions this process does not hold, the least
#: recently written closed first (each holds a descriptor, hence the bound: an eighth of
#: the descriptor limit, 64..1024; a lease's index is closed when the lease is released).
#: A session written again while its index is kept is not read again (unless another
#: process wrote it meanwhile): batches cycling through more sessions than this without
#: leases read each file's unsaved tail again on every write.
KEEP_WRITERS = _keep_writers()


def trim_writers(shared: Shared, keep: str) -> None:
    """Close writer-side indexes past :data:`KEEP_WRITERS` of sessions whose lock this
    process does not hold, the least recently taken first (``keep``: the one just used).
    The caller holds the mutex."""
    writers = shared.writers
    if len(writers) <= KEEP_WRITERS:
        return
    for other in [s for s in writers if s not in shared.locks and s != keep]:
        dropped = writers.pop(other)
        if dropped is not None:
            dropped.close()
        if len(writers) <= KEEP_WRITERS // 2:
            break
