"""An event-log face for a store that keeps a conversation as one array of messages.

Older code often saves a chat as a single list of ``{"role", "content"}`` objects (load it
all, append, save it all). :class:`ArrayStoreLog` puts such a store behind the event-log
contract lite-agent (a TypeScript agent kernel with an event-log Checkpointer) defines for
its ``legacyStoreAdapter``: ``append`` folds the entries into messages and saves the whole
array, ``head`` is the message count, ``read`` replays the messages as ``user`` /
``assistant`` events with seqs ``1..n``. What the old store cannot do is refused or empty,
as documented per call.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import trio

from runtime import (
    JSON,
    ConflictError,
    InvalidArgumentError,
    StoredEvent,
    TidelogError,
    UnwrittenError,
)
from stores import validate_session_id

from ._transcript import AssistantMessage, Entry, UserMessage, entry_to_event

__all__ = [
    "ArrayStoreLog",
    "ArrayStoreUnsupportedError",
    "ArrayWriteUnknownError",
    "MessageArrayStore",
]


@runtime_checkable
class MessageArrayStore(Protocol):
    """A store that keeps each conversation as one array of messages (the old seam).

    Each message is ``{"role": "user" | "assistant", "content": str}``, plus ``"agent"``
    for an assistant message that names its agent. ``load`` returns ``None`` for a
    conversation it does not have; ``save`` replaces the whole array.
    """

    async def load(self, session_id: str) -> list[dict[str, JSON]] | None: ...

    async def save(self, session_id: str, messages: list[dict[str, JSON]]) -> None: ...


class ArrayStoreUnsupportedError(TidelogError):
    """Raised by :meth:`ArrayStoreLog.truncate` and :meth:`ArrayStoreLog.delete`: a
    whole-array store has no such operation. Nothing was changed; use a tidelog store
    (migrate with :meth:`ArrayStoreLog.read` and a writer's ``append``) to get them."""


class ArrayWriteUnknownError(TidelogError):
    """``save`` failed and reading the array back failed too, so whether the append was
    stored is not known. ``__cause__`` is the save's error. Call :meth:`ArrayStoreLog.head`
    when the store is back: ``expected_head + len(entries)`` means it landed."""


def _message(entry: Entry, index: int) -> dict[str, JSON]:
    if isinstance(entry, UserMessage):
        return {"role": "user", "content": entry.text}
    if isinstance(entry, AssistantMessage):
        message: dict[str, JSON] = {"role": "assistant", "content": entry.text}
        if entry.agent is not None:
            message["agent"] = entry.agent
        return message
    entry_to_event(entry)  # a non-entry gets the transcript's own error
    raise InvalidArgumentError(
        f"entries[{index}]: a whole-array message store holds only user and assistant "
        f"messages, not {entry.kind!r} events"
    )


def _entry(message: object, session_id: str, index: int) -> Entry:
    where = f"session {session_id!r}: stored message {index}"
    if not isinstance(message, dict):
        raise InvalidArgumentError(f"{where} is not an object")
    role, content = message.get("role"), message.get("content")
    if not isinstance(content, str):
        raise InvalidArgumentError(f"{where} has no str 'content'")
    if role == "user":
        return UserMessage(content)
    if role == "assistant":
        agent = message.get("agent")
        return AssistantMessage(content, agent if isinstance(agent, str) and agent else None)
    raise InvalidArgumentError(f"{where} has role {role!r} (expected 'user' or 'assistant')")


class ArrayStoreLog:
    """The event-log contract over a :class:`MessageArrayStore`.

    One adapter serialises its own appends (load, fold, save under a lock); two adapters
    or processes over the same array store are *not* serialised against each other beyond
    the ``expected_head`` check, since the old store offers no compare-and-set.
    """

    def __init__(self, store: MessageArrayStore) -> None:
        if not isinstance(store, MessageArrayStore):
            raise InvalidArgumentError(
                "store must have async load(session_id) and save(session_id, messages)"
            )
        self._store = store
        self._lock = trio.Lock()

    async def _messages(self, session_id: str) -> list[dict[str, JSON]]:
        loaded = await self._store.load(session_id)
        if loaded is None:
            return []
        if not isinstance(loaded, list):
            raise InvalidArgumentError(f"session {session_id!r}: load() did not return a list")
        return loaded

    async def append(
        self, session_id: str, entries: Sequence[Entry], *, expected_head: int | None = None
    ) -> int:
        """Fold ``entries`` (user and assistant messages only) into the array, save it and
        return the new head (the message count).

        Raises, writing nothing: :class:`InvalidArgumentError` for a bad id or an entry
        the array cannot hold (tool calls, results, sidecars); :class:`ConflictError` for
        a stale ``expected_head``. If ``save`` raises, the array is read back:
        unchanged means :class:`UnwrittenError` (nothing stored, ``events`` to resend,
        ``__cause__`` the save's error); the new array means the append landed and the
        head is returned; a failing read-back raises :class:`ArrayWriteUnknownError`.
        An empty ``entries`` returns the head and saves nothing.
        """
        validate_session_id(session_id)
        if isinstance(entries, str | bytes) or not isinstance(entries, Sequence):
            raise InvalidArgumentError("entries must be a sequence of transcript entries")
        new = [_message(entry, index) for index, entry in enumerate(entries)]
        if expected_head is not None and (type(expected_head) is not int or expected_head < 0):
            raise InvalidArgumentError(f"expected_head must be an int >= 0, not {expected_head!r}")
        async with self._lock:
            old = await self._messages(session_id)
            if expected_head is not None and expected_head != len(old):
                raise ConflictError(session_id, expected_head, len(old))
            if not new:
                return len(old)
            wanted = old + new
            try:
                await self._store.save(session_id, wanted)
            except Exception as exc:
                try:
                    now = await self._messages(session_id)
                except Exception:
                    raise ArrayWriteUnknownError(
                        f"session {session_id!r}: save failed ({exc!r}) and reading the "
                        "array back failed too: whether the append was stored is unknown"
                    ) from exc
                if now == wanted:
                    return len(wanted)
                events = tuple(entry_to_event(entry) for entry in entries)
                raise UnwrittenError(
                    session_id,
                    len(old) + 1,
                    len(wanted),
                    events,
                    reason=f"the message store's save failed: {exc!r}",
                ) from exc
            return len(wanted)

    async def read(self, session_id: str, *, since_seq: int = 0) -> list[StoredEvent]:
        """The messages as events (seq ``i`` is message ``i``, 1-based), after
        ``since_seq``. The store keeps no times, so ``ts`` is the read's time; unknown
        session: ``[]``. A stored message that is not a user/assistant object with str
        content raises :class:`InvalidArgumentError` naming it."""
        validate_session_id(session_id)
        if type(since_seq) is not int or since_seq < 0:
            raise InvalidArgumentError(f"since_seq must be an int >= 0, not {since_seq!r}")
        messages = await self._messages(session_id)
        now = time.time()
        out: list[StoredEvent] = []
        for index in range(since_seq, len(messages)):
            event = entry_to_event(_entry(messages[index], session_id, index + 1))
            out.append(StoredEvent(session_id, index + 1, now, event.kind, event.data))
        return out

    async def load(self, session_id: str) -> list[Entry]:
        """The conversation as transcript entries (what :meth:`read` replays)."""
        validate_session_id(session_id)
        messages = await self._messages(session_id)
        return [_entry(m, session_id, i + 1) for i, m in enumerate(messages)]

    async def head(self, session_id: str) -> int:
        """The message count (0 for an unknown session)."""
        validate_session_id(session_id)
        return len(await self._messages(session_id))

    async def list_sessions(self) -> list[str]:
        """Always ``[]``: a whole-array store cannot enumerate its conversations."""
        await trio.lowlevel.checkpoint()
        return []

    async def truncate(self, session_id: str, to_seq: int) -> int:
        """Refused with :class:`ArrayStoreUnsupportedError` (nothing changes)."""
        validate_session_id(session_id)
        await trio.lowlevel.checkpoint()
        raise ArrayStoreUnsupportedError(
            f"session {session_id!r}: a whole-array message store cannot truncate "
            f"(to seq {to_seq!r})"
        )

    async def delete(self, session_id: str) -> bool:
        """Refused with :class:`ArrayStoreUnsupportedError` (nothing changes)."""
        validate_session_id(session_id)
        await trio.lowlevel.checkpoint()
        raise ArrayStoreUnsupportedError(
            f"session {session_id!r}: a whole-array message store cannot delete"
        )
