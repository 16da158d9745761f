"""The agent layer's per-runtime objects: one history and one checkpointer per runtime."""

from __future__ import annotations

import weakref

from runtime import Runtime

from ._checkpoints_runtime import RuntimeCheckpointer
from ._history_runtime import RuntimeHistory

__all__ = ["checkpoints", "history"]

_CHECKPOINTERS: weakref.WeakKeyDictionary[Runtime, RuntimeCheckpointer] = (
    weakref.WeakKeyDictionary()
)
_HISTORIES: weakref.WeakKeyDictionary[Runtime, RuntimeHistory] = weakref.WeakKeyDictionary()


def checkpoints(runtime: Runtime) -> RuntimeCheckpointer:
    """The run checkpoints kept on ``runtime`` (one object per runtime: the runs it has
    claimed live there)."""
    found = _CHECKPOINTERS.get(runtime)
    if found is None:
        found = _CHECKPOINTERS[runtime] = RuntimeCheckpointer(runtime)
    return found


def history(runtime: Runtime) -> RuntimeHistory:
    """The conversation history kept on ``runtime`` (rewinds delete the checkpoints of the
    rewound runs in :func:`checkpoints`; trimmed outputs are archived)."""
    found = _HISTORIES.get(runtime)
    if found is None:
        found = _HISTORIES[runtime] = RuntimeHistory(runtime, checkpointer=checkpoints(runtime))
    return found
