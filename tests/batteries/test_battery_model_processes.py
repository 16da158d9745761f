"""Battery 4b: the random batches of the conformance model with a second process.

The model of :mod:`stores.conformance.model` draws batches of appends, groups, truncates,
replaces, deletes and restores over three sessions, leases and forks between them, and
resends; each batch goes through one of two handles on the same data and is compared,
result by result and log by log, with a :class:`~stores.MemoryStore`. Here the second
handle lives in another process (``model_worker.py``): what one process writes -- a file
rewritten by a truncate or a replace, a session deleted and created again, a group, a
restore -- the other must read back exactly, and then write on from (its cached indexes
and writer state checked against the files, as after any other process's write). The
worker's store is closed and opened again between examples and at drawn steps, where the
parent's is reopened too.

A lease is held by a process (on JSONL, a kernel lock), so the model gives up its leases
before each batch of the other process, and no op names a lease token (it would only ever
be refused); the leases taken between batches still put this process's writes on the
path of a session it holds. The JSONL store, plain and compressed, and the
SQLite store (where the database arbitrates between processes itself) run it.

CI: 100 examples per backend. Soak (``TIDELOG_SOAK=1``): 2,000.
"""

from __future__ import annotations

import pickle
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

import pytest
from battery_support import child_env, python_child, record, size
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stores
from stores import (
    BatchResult,
    JsonlStore,
    SessionInfo,
    SqliteStore,
    Store,
    StoredEvent,
    TidelogError,
    WriteOp,
)
from stores.conformance.model import Handle, model_steps, replay

BACKENDS = ["jsonl", "jsonl-zstd", "sqlite"]


def _error(name: str, message: str = "") -> TidelogError:
    """An error of the class the worker named (its class is what the model compares)."""
    cls = getattr(stores, name, None)
    if not (isinstance(cls, type) and issubclass(cls, TidelogError)):
        raise RuntimeError(f"the worker failed: {name}: {message}")
    error: TidelogError = cls.__new__(cls)
    return error


class Worker:
    """The worker process: one per test, its store opened and closed as the model asks."""

    def __init__(self, kind: str, where: Path) -> None:
        self._proc = subprocess.Popen(
            python_child("model_worker.py", kind, str(where)),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=child_env(),
        )
        assert self._proc.stdin is not None
        assert self._proc.stdout is not None
        self._to: IO[bytes] = self._proc.stdin
        self._from: IO[bytes] = self._proc.stdout

    def call(self, method: str, *args: object, **kwargs: object) -> Any:
        """Call ``method`` in the worker; its value, or its error raised here."""
        pickle.dump((method, args, kwargs), self._to)
        self._to.flush()
        reply = pickle.load(self._from)
        if reply[0] == "error":
            raise _error(reply[1], reply[2])
        return reply[1]

    def stop(self) -> None:
        """End the worker (EOF on its stdin) and wait for it: it must exit cleanly."""
        try:
            self._to.close()
        finally:
            code = self._proc.wait(timeout=60)
            self._from.close()
        assert code == 0, f"the worker exited with {code}"


class RemoteStore:
    """The worker's store as the model's :class:`~stores.conformance.model.Handle`."""

    def __init__(self, worker: Worker) -> None:
        self._worker = worker
        worker.call("open")

    def write_batch(self, ops: Sequence[WriteOp], *, sync: bool = False) -> list[BatchResult]:
        results = self._worker.call("write_batch", list(ops), sync=sync)
        return [r if isinstance(r, int) else _error(r) for r in results]

    def acquire_lease(self, session_id: str, owner: str, *, ttl: float, holder: str) -> None:
        self._worker.call("acquire_lease", session_id, owner, ttl=ttl, holder=holder)

    def release_lease(self, session_id: str, owner: str) -> None:
        self._worker.call("release_lease", session_id, owner)

    def fork(self, source_id: str, new_id: str, *, at_seq: int | None = None) -> SessionInfo:
        info: SessionInfo = self._worker.call("fork", source_id, new_id, at_seq=at_seq)
        return info

    def read(self, session_id: str) -> list[StoredEvent]:
        events: list[StoredEvent] = self._worker.call("read", session_id)
        return events

    def head(self, session_id: str) -> int:
        head: int = self._worker.call("head", session_id)
        return head

    def stat(self, session_id: str) -> SessionInfo | None:
        info: SessionInfo | None = self._worker.call("stat", session_id)
        return info

    def clone(self) -> Handle:
        return RemoteStore(self._worker)  # (the worker's store opened afresh)

    def close(self) -> None:
        self._worker.call("close")


def _where(kind: str, tmp_path: Path) -> Path:
    return tmp_path / ("db.sqlite" if kind == "sqlite" else "store")


def _open(kind: str, where: Path) -> Store:
    if kind == "sqlite":
        return SqliteStore(where)
    return JsonlStore(where, compress=kind == "jsonl-zstd")


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Path, Worker]]:
    """``(kind, where, worker)``: the store's kind and place (created here), and a
    worker process on it."""
    kind: str = request.param
    where = _where(kind, tmp_path)
    _open(kind, where).close()
    worker = Worker(kind, where)
    try:
        yield kind, where, worker
    finally:
        worker.stop()


_COUNTER = iter(range(1_000_000))


@settings(
    max_examples=size(100, 2000),
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    batches=model_steps(owners=False, min_size=3, max_size=12),
    reopens=st.sets(st.integers(min_value=0, max_value=11), max_size=3),
)
def test_another_process_reads_and_writes_on_exactly(
    backend: tuple[str, Path, Worker], batches: list[Any], reopens: set[int]
) -> None:
    """Random batches through this process's handle and another process's give the
    reference's per-op results, and both processes read the reference's logs, across
    reopens of both handles."""
    kind, where, worker = backend
    live = [_open(kind, where)]

    def reopen(current: Handle) -> Handle:
        assert current is live[-1]
        live[-1].close()
        live.append(_open(kind, where))
        return live[-1]

    try:
        replay(
            live[0],
            batches,
            f"p{next(_COUNTER)}",
            second=lambda _: RemoteStore(worker),
            shares_leases=False,
            reopen=reopen,
            at=frozenset(reopens),
        )
    finally:
        live[-1].close()
    record("model-processes", backend=kind, steps=len(batches))
