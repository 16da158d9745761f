"""The optional change feed of a store: how a runtime hears of other hosts' commits.

A store that can push notifications of commits (PostgreSQL's ``LISTEN``/``NOTIFY``)
declares ``change_feed`` in its :class:`~stores._contract.Capabilities` and offers a
``listen()`` method returning a :class:`ChangeListener` (:class:`ChangeFeed`). It is not
part of the :class:`~stores._contract.Store` contract: a store without it (memory, SQLite)
is watched by polling :meth:`~stores._contract.Store.data_version` only, and a runtime
keeps that poller as the fallback even when it listens (see ``actors._changes``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, cast

from ._contract import Store

__all__ = ["ChangeFeed", "ChangeListener", "listener_factory"]


class ChangeListener(Protocol):
    """A blocking feed of a store's commits, on a connection of its own."""

    @property
    def connected(self) -> bool:
        """True while it listens (notifications are being received now)."""
        ...

    def wait(self, timeout: float) -> set[str] | None:
        """Block until commits are announced (return the session ids they changed), for
        at most ``timeout`` seconds or until :meth:`wake` (return an empty set). ``None``
        means "anything may have changed" (notifications may have been lost, as across a
        reconnect): look at everything. Never raises for a lost server."""
        ...

    def wake(self) -> None:
        """Make a :meth:`wait` blocked in another thread return now (thread-safe)."""
        ...

    @property
    def paused(self) -> bool:
        """True from :meth:`pause` to :meth:`resume` (readable from any thread)."""
        ...

    def pause(self) -> None:
        """Stop receiving notifications until :meth:`resume`; :meth:`wait` only sleeps
        meanwhile (until its timeout or :meth:`wake`). The waiting thread's call."""
        ...

    def resume(self) -> None:
        """Receive notifications again; the next :meth:`wait` returns ``None`` (what was
        announced meanwhile was not heard). The waiting thread's call."""
        ...

    def close(self) -> None:
        """Release the connection; call once no :meth:`wait` runs. Idempotent."""
        ...


class ChangeFeed(Protocol):
    """What a store whose capabilities declare ``change_feed`` adds to the contract."""

    def listen(self) -> ChangeListener:
        """A new feed of the store's commits, on a connection of its own."""
        ...


def listener_factory(store: Store) -> Callable[[], ChangeListener] | None:
    """The store's ``listen`` method if its capabilities declare a change feed (else
    ``None``: poll only)."""
    if not store.capabilities.change_feed:
        return None
    return cast(ChangeFeed, store).listen
