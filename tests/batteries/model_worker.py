"""A store handle in a process of its own, for ``test_battery_model_processes.py``.

Usage::

    python model_worker.py jsonl ROOT         # a JsonlStore on ROOT
    python model_worker.py jsonl-zstd ROOT    # the same, compressed
    python model_worker.py sqlite PATH        # a SqliteStore on PATH

It reads requests from stdin and writes one reply to stdout for each, both pickles (the
parent and this process are one test's, nothing else writes to the pipes). A request is
``(method, args, kwargs)``: ``"open"`` opens the store (a fresh handle, as a new process
would), ``"close"`` closes it, any other name is called on the open store. The reply is
``("ok", value)`` -- for ``write_batch`` each op's result as its head or its error's
class name -- or ``("error", class name, message)``. EOF ends the process.
"""

from __future__ import annotations

import pickle
import sys
from typing import Any

from stores import JsonlStore, SqliteStore, Store, TidelogError


def _open(kind: str, where: str) -> Store:
    if kind == "sqlite":
        return SqliteStore(where)
    return JsonlStore(where, compress=kind == "jsonl-zstd")


def _serve(kind: str, where: str) -> None:
    store: Store | None = None
    while True:
        try:
            method, args, kwargs = pickle.load(sys.stdin.buffer)
        except EOFError:
            break
        reply: tuple[Any, ...]
        try:
            if method == "open":
                store = _open(kind, where)
                value: object = None
            elif method == "close":
                if store is not None:
                    store.close()
                store = None
                value = None
            else:
                assert store is not None, "no store is open"
                result = getattr(store, method)(*args, **kwargs)
                if method == "write_batch":  # (heads and errors: the names travel)
                    value = [r if isinstance(r, int) else type(r).__name__ for r in result]
                else:
                    value = result
            reply = ("ok", value)
        except (TidelogError, AssertionError) as exc:
            reply = ("error", type(exc).__name__, str(exc))
        pickle.dump(reply, sys.stdout.buffer)
        sys.stdout.buffer.flush()
    if store is not None:
        store.close()


if __name__ == "__main__":
    _serve(sys.argv[1], sys.argv[2])
