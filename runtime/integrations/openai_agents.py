"""An OpenAI Agents SDK session on tidelog: :class:`TidelogSession`
(``Runner.run(agent, input, session=TidelogSession("chat-1", bridge))``).

One tidelog session per SDK session: the session id is ``prefix + session_id``
(default prefix ``"tidelog/openai-agents/"``, in tidelog's reserved namespace); each
conversation item is one event of kind ``item`` whose data is the item, so the order
is the log's seq order, never a timestamp's. ``get_items(n)`` is one bounded read from
the end; ``add_items`` one atomic, group-committed append; ``pop_item`` an atomic
compare-and-set on the head (the last item is removed only if it is still the last);
``clear_session`` empties the session in one step.

The session holds its writer from its first write until :meth:`TidelogSession.close`
or its bridge closes: another process (or runtime) writing the same session is refused
with :class:`~runtime.SessionOwnedError`; a stale holder whose lease was taken over gets
:class:`~runtime.OwnershipLostError`. Writes are accepted in call order, also when many
tasks call at once, and are all or nothing: a run cancelled mid-save (a stream's cleanup,
a timeout) leaves each ``add_items`` wholly stored or wholly absent.

The SDK's compaction hooks are private to its own sessions (``_get_compaction_snapshot``)
and are not implemented; ``run_compaction`` (server-side compaction of the Responses
API) is not either.

Needs the ``openai-agents`` extra: ``pip install 'tidelog[openai-agents]'``.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

# The session satisfies the SDK's Session protocol structurally: the SDK (slow to import)
# is needed by its callers, not imported here; only its presence is checked.
if importlib.util.find_spec("agents") is None:  # pragma: no cover - installed in the checks
    raise ImportError(
        "runtime.integrations.openai_agents needs the OpenAI Agents SDK: "
        "pip install 'tidelog[openai-agents]'"
    )
if TYPE_CHECKING:
    from agents.items import TResponseInputItem
    from agents.memory import SessionSettings

from runtime import (
    BrokenError,
    ClosedError,
    ConflictError,
    InvalidArgumentError,
    NewEvent,
    OwnershipLostError,
    TidelogError,
)

from ._bridge import Bridge
from ._holding import HeldSession

__all__ = ["DEFAULT_PREFIX", "ITEM", "TidelogSession"]

#: Where the SDK sessions live: ``DEFAULT_PREFIX + session_id``.
DEFAULT_PREFIX = "tidelog/openai-agents/"
#: The event kind of one conversation item.
ITEM = "item"
#: How many times pop_item retries when the head moved under it (another task's write).
_POP_ATTEMPTS = 8


class TidelogSession:
    """The SDK's ``Session`` protocol on a tidelog session, on a
    :class:`~runtime.integrations.Bridge` (one bridge serves many sessions).

    ``session_settings.limit`` is the default of :meth:`get_items`'s ``limit``. The
    methods run from asyncio (any loop, including ``Runner.run_sync``'s) or from the
    bridge's trio run. Cancellation: a write is all or nothing; after ``CancelledError``
    :meth:`get_items` tells whether it is there.

    Items must be JSON (the SDK's input items are); anything else raises
    :class:`~runtime.InvalidEventError` and stores nothing.
    """

    session_id: str
    session_settings: SessionSettings | None

    def __init__(
        self,
        session_id: str,
        bridge: Bridge,
        *,
        session_settings: SessionSettings | None = None,
        prefix: str = DEFAULT_PREFIX,
    ) -> None:
        if not isinstance(bridge, Bridge):
            raise InvalidArgumentError(
                f"TidelogSession takes a Bridge, not {type(bridge).__name__} "
                "(Bridge.start(path) makes one)"
            )
        if not isinstance(session_id, str) or not isinstance(prefix, str):
            raise InvalidArgumentError("session_id and prefix must be str")
        self.session_id = session_id
        self.session_settings = session_settings
        self._bridge = bridge
        self._tidelog_id = prefix + session_id
        self._errors: list[TidelogError] = []
        self._held = HeldSession(
            bridge, self._tidelog_id, prefix.startswith("tidelog/"), self._errors
        )
        self._closed = False
        self._forget = bridge.on_close(self._t_close)

    def __repr__(self) -> str:
        return f"<TidelogSession {self.session_id!r}>"

    @property
    def tidelog_session_id(self) -> str:
        """The tidelog session holding the items."""
        return self._tidelog_id

    # -- the Session protocol ------------------------------------------------------------

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The newest ``limit`` items (default ``session_settings.limit``; ``None``:
        all) in order: one bounded read from the end. ``limit`` 0 gives ``[]``, a
        negative one all items (as the SDK's SQLite session)."""
        wanted = limit if limit is not None else _settings_limit(self.session_settings)
        if wanted is not None and (not isinstance(wanted, int) or isinstance(wanted, bool)):
            raise InvalidArgumentError(f"limit must be an int or None, not {wanted!r}")
        if wanted is not None and wanted < 0:
            wanted = None
        return await self._bridge.call(functools.partial(self._t_admit_read, wanted))

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items`` in one atomic append (group-committed with concurrent
        writers), returning once committed."""
        events = [NewEvent(ITEM, _json_item(item)) for item in items]
        await self._bridge.call(functools.partial(self._t_admit_add, events))

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove and return the newest item, ``None`` if there is none: removed only
        if it is still the newest when the removal commits (compare-and-set on the
        head)."""
        item: TResponseInputItem | None = await self._bridge.call(self._t_admit_pop)
        return item

    async def clear_session(self) -> None:
        """Remove every item, in one atomic step."""
        await self._bridge.call(self._t_admit_clear)

    # -- closing -------------------------------------------------------------------------

    async def close(self) -> None:
        """Let go of the session's writer (its writes committed), so another process may
        write it. Idempotent; the bridge's close does it too."""
        await self._bridge.call(self._t_close)

    # -- on the trio thread ----------------------------------------------------------------

    def _check(self) -> None:
        if self._closed:
            raise ClosedError(f"the session {self.session_id!r} was closed")

    def _t_admit_read(self, limit: int | None) -> Awaitable[list[Any]]:
        self._check()
        return self._t_read(limit)

    async def _t_read(self, limit: int | None) -> list[Any]:
        if limit == 0:
            await self._bridge.runtime.stat(self._tidelog_id)  # a checkpoint, and the id checked
            return []
        events = await self._bridge.runtime.read(self._tidelog_id, limit=limit, from_end=True)
        return [event.data for event in events if event.kind == ITEM]

    def _t_admit_add(self, events: list[NewEvent]) -> Awaitable[None]:
        self._check()
        return self._t_add(self._held.turns.take(), events)

    async def _t_add(self, ticket: int, events: list[NewEvent]) -> None:
        held = self._held
        await held.turns.wait(ticket)
        try:
            writer = await held.writer()
        finally:
            held.turns.done(ticket)
        try:
            await writer.append(events)  # accepted here, before the next turn runs
        except (OwnershipLostError, BrokenError, ClosedError):
            held.drop()
            raise

    def _t_admit_pop(self) -> Awaitable[Any]:
        self._check()
        return self._t_pop(self._held.turns.take())

    async def _t_pop(self, ticket: int) -> Any:
        held = self._held
        await held.turns.wait(ticket)
        try:
            writer = await held.writer()
            for _ in range(_POP_ATTEMPTS):
                await writer.wait_committed()
                head = await writer.head()
                if head == 0:
                    return None
                last = await writer.read(since_seq=head - 1)
                if not last or last[-1].seq != head:
                    continue
                try:
                    await writer.replace(head - 1, [], expected_head=head)
                except ConflictError:
                    continue
                return last[-1].data
            raise ConflictError(self._tidelog_id, head, await writer.head())
        except (OwnershipLostError, BrokenError, ClosedError):
            held.drop()
            raise
        finally:
            held.turns.done(ticket)

    def _t_admit_clear(self) -> Awaitable[None]:
        self._check()
        return self._t_clear(self._held.turns.take())

    async def _t_clear(self, ticket: int) -> None:
        held = self._held
        await held.turns.wait(ticket)
        try:
            if not held.held and await self._bridge.runtime.stat(self._tidelog_id) is None:
                return
            writer = await held.writer()
            await writer.truncate(0)
        except (OwnershipLostError, BrokenError, ClosedError):
            held.drop()
            raise
        finally:
            held.turns.done(ticket)

    async def _t_close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._forget()
        await self._held.let_go()
        errors, self._errors[:] = list(self._errors), []
        if errors:
            raise errors[0]


def _settings_limit(settings: object) -> Any:
    """``session_settings``' limit (a ``SessionSettings`` or a dict of its fields)."""
    if settings is None:
        return None
    if isinstance(settings, dict):
        return settings.get("limit")
    return getattr(settings, "limit", None)


def _json_item(item: object) -> Any:
    """An item as the event's data (a plain dict: the SDK's items are JSON objects,
    possibly TypedDict-shaped pydantic dumps)."""
    if isinstance(item, dict):
        return item
    dump = getattr(item, "model_dump", None)
    if callable(dump):
        return dump(mode="json", exclude_unset=True)
    raise InvalidArgumentError(f"a session item must be a JSON object, not {type(item).__name__}")
