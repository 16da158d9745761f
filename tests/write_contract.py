"""A client that follows the write contract, and a store that fails one batch: shared by
the write-contract tests of the runtime and of the agent layer."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import attrs

from runtime import (
    CommitPendingError,
    MemoryStore,
    NewEvent,
    Runtime,
    StoreIOError,
    TidelogError,
    UnwrittenError,
)
from stores import BatchResult, SqliteStore, WriteOp

__all__ = ["Caller", "OneFailure", "SqliteOneFailure", "ev"]


class OneFailure(MemoryStore):
    """A real MemoryStore whose ``write_batch`` call number ``fail_at`` (0-based) fails
    once: before writing anything, or after committing (``after_commit``)."""

    def __init__(self, fail_at: int | None, *, after_commit: bool) -> None:
        super().__init__()
        self.fail_at = fail_at
        self.after_commit = after_commit
        self.calls = 0

    def write_batch(self, ops: Sequence[WriteOp], *, sync: bool = False) -> list[BatchResult]:
        number = self.calls
        self.calls += 1
        if number == self.fail_at and not self.after_commit:
            raise StoreIOError("injected: the disk failed before the commit")
        results = super().write_batch(ops, sync=sync)
        if number == self.fail_at:
            raise StoreIOError("injected: the disk failed after the commit landed")
        return results


class SqliteOneFailure(SqliteStore):
    """:class:`OneFailure` on a real SQLite file."""

    def __init__(self, path: str, fail_at: int | None, *, after_commit: bool) -> None:
        super().__init__(path)
        self.fail_at = fail_at
        self.after_commit = after_commit
        self.calls = 0

    def write_batch(self, ops: Sequence[WriteOp], *, sync: bool = False) -> list[BatchResult]:
        number = self.calls
        self.calls += 1
        if number == self.fail_at and not self.after_commit:
            raise StoreIOError("injected: the disk failed before the commit")
        results = super().write_batch(ops, sync=sync)
        if number == self.fail_at:
            raise StoreIOError("injected: the disk failed after the commit landed")
        return results


def ev(tag: str) -> NewEvent:
    return NewEvent("k", {"tag": tag})


@attrs.define
class Caller:
    """A client that follows the contract and keeps the log it was promised."""

    rt: Runtime
    resend: bool
    model: dict[str, list[str]] = attrs.Factory(dict)
    refused: int = 0
    pending: int = 0
    dropped: int = 0

    def log(self, session_id: str) -> list[str]:
        return self.model.setdefault(session_id, [])

    async def call(
        self,
        attempt: Callable[[], Awaitable[object]],
        accept: Callable[[], object],
        events: Callable[[], list[tuple[str, str]]] = list,
    ) -> None:
        """Run one write call: ``accept()`` updates the model when it was accepted;
        ``events()`` names the (session, tag) pairs it writes (resent if dropped)."""
        while True:
            try:
                await attempt()
            except CommitPendingError:
                self.pending += 1  # accepted: queued, retried in the background
            except UnwrittenError:
                self.dropped += 1
                accept()  # it was accepted, then dropped: take it out again
                for sid, tag in events():
                    self.log(sid).remove(tag)
                if self.resend:
                    continue
                return
            except TidelogError:
                self.refused += 1  # nothing accepted
                if self.resend:
                    continue
                return
            accept()
            return
