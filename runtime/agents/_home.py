"""Where an agent-layer contract keeps its data when it lives on a tidelog runtime.

The run loop and the completion step ask a :class:`~runtime.agents.Checkpointer` or a
:class:`~runtime.agents.History` for its :class:`SessionHome` (``None`` when it keeps its
data elsewhere) instead of testing for concrete classes: two homes on one runtime are
flushed by one barrier, and written together by one atomic append.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import TypeVar

import attrs

from runtime import CommitPendingError, ConflictError, Runtime, SessionWriter, TidelogError

__all__ = ["SessionHome", "optimistic"]

T = TypeVar("T")


@attrs.frozen(kw_only=True)
class SessionHome:
    """The session of ``runtime`` that holds one run's checkpoint or one conversation.

    ``open_writer()`` is an ``async with`` block yielding a writer of that session to
    write it together with other sessions of the runtime (the run's claimed writer when
    the run is claimed there, else a shared writer)."""

    runtime: Runtime
    session_id: str
    open_writer: Callable[[], AbstractAsyncContextManager[SessionWriter]]


async def optimistic(writer: SessionWriter, attempt: Callable[[int], Awaitable[T]]) -> T:
    """Run ``attempt(head)`` against a committed view of the session as of ``head``,
    again whenever it raises :class:`ConflictError` (a write accepted after ``head``
    changed the view): ``attempt`` reads what it needs, then writes with
    ``expected_head=head``. Check-then-write without a lock.

    Earlier writes that fail to commit make it raise their store error (the attempt's
    own write was not accepted: resending is safe)."""
    while True:
        head = await writer.head()
        try:
            await writer.wait_committed()
        except CommitPendingError as exc:
            cause = exc.__cause__
            if isinstance(cause, TidelogError):
                raise cause from None  # about earlier writes: this attempt accepted nothing
            raise
        try:
            return await attempt(head)
        except ConflictError:
            continue
