"""Test helpers importable from every test module (``from helpers import ...``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager

from runtime import MemoryStore, Runtime
from stores import BatchResult, StoreIOError, WriteOp

RuntimeFactory = Callable[..., AbstractAsyncContextManager[Runtime]]


class FlakyMemoryStore(MemoryStore):
    """A real MemoryStore whose ``write_batch`` can be told to fail.

    ``fail_next`` batches raise ``StoreIOError`` before writing anything;
    ``fail_after_commit`` batches commit and *then* raise (an ambiguous failure, as when
    the disk reports an error after the data reached it).
    """

    def __init__(self) -> None:
        super().__init__()
        self.fail_next = 0
        self.fail_after_commit = 0
        self.batches = 0

    def write_batch(self, ops: Sequence[WriteOp], *, sync: bool = False) -> list[BatchResult]:
        self.batches += 1
        if self.fail_next:
            self.fail_next -= 1
            raise StoreIOError("injected: disk I/O error")
        results = super().write_batch(ops, sync=sync)
        if self.fail_after_commit:
            self.fail_after_commit -= 1
            raise StoreIOError("injected: error after commit")
        return results

    def clone(self) -> FlakyMemoryStore:
        other = FlakyMemoryStore()
        other._state = self._state
        return other
