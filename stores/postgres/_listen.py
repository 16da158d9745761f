"""PgListener: the NOTIFY feed of a PostgresStore, for wake-ups across hosts.

Every commit through a :class:`~stores.PostgresStore` that moves a head issues a
``NOTIFY`` on the store's channel naming the sessions and their new heads
(:func:`~stores.postgres._connection.notify_payload`). A listener holds a connection of its own
that ``LISTEN``\\s on that channel, and :meth:`PgListener.wait` blocks (in the caller's
thread) until notifications arrive, the timeout passes, or :meth:`PgListener.wake` is
called from any thread. It is libpq's own way of waiting: ``select`` on the connection's
socket (and on a pipe that ``wake`` writes to), then ``PQconsumeInput`` and
``PQnotifies``.

A runtime pauses its listener (``UNLISTEN``) while nothing in it is watched, so that its
own commits do not wake the listening thread for nothing (:meth:`PgListener.pause`); it
resumes before a watcher needs it, and the wait after :meth:`PgListener.resume` says
"anything may have changed".

A listener never skips a change silently: after its connection was lost and opened
again -- notifications sent meanwhile are gone -- its next :meth:`~PgListener.wait`
returns ``None``, "anything may have changed", as it does for a payload naming too many
sessions to fit (``"*"``). While the server cannot be reached, ``wait`` sleeps for its
timeout and tries again; :attr:`PgListener.connected` says whether it listens now.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
from typing import Any

import psycopg

from .._errors import ClosedError
from ._connection import PgOptions, connect, parse_payload

__all__ = ["PgListener"]


class PgListener:
    """A blocking feed of one store's change notifications (see the module doc).

    One thread calls :meth:`wait`; :meth:`wake` may be called from any thread;
    :meth:`close` once no :meth:`wait` runs (after waking it)."""

    def __init__(self, options: PgOptions, channel: str) -> None:
        self._options = options
        self._channel = channel
        self._conn: psycopg.Connection[Any] | None = None
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._closed = False
        self._fds = threading.Lock()  # close() and wake() from different threads
        #: Set when notifications may have been missed (a reconnect): the next wait says so.
        self._missed = False
        #: Set by :meth:`pause` (read from any thread: see :attr:`paused`).
        self._paused = False
        #: Connections opened so far (the first one in the constructor).
        self.connects = 0
        self._connect()  # errors propagate: the caller knows at once if it cannot listen

    @property
    def connected(self) -> bool:
        """True while it listens: the connection is up and the listener not paused."""
        return not self._paused and self._up()

    def _up(self) -> bool:
        conn = self._conn
        return conn is not None and not conn.closed and not conn.broken

    @property
    def paused(self) -> bool:
        """True from :meth:`pause` to :meth:`resume` (a plain attribute: any thread)."""
        return self._paused

    def pause(self) -> None:
        """Stop listening (``UNLISTEN``) until :meth:`resume`: notifications sent meanwhile
        are not received, and :meth:`wait` only sleeps. For a runtime whose tailers are
        gone: every commit of its own would wake this thread for nothing. The waiting
        thread's call."""
        self._paused = True
        self._send(f'UNLISTEN "{self._channel}"')

    def resume(self) -> None:
        """Listen again after :meth:`pause`; the next :meth:`wait` returns ``None``
        (what was sent meanwhile was not heard: anything may have changed). The waiting
        thread's call; a lost connection is opened again by the next wait, as always."""
        self._paused = False
        self._missed = True
        self._send(f'LISTEN "{self._channel}"')

    def _send(self, sql: str) -> None:
        """Run ``sql`` on the open connection, if there is one; a lost connection is
        dropped (the next wait opens it again)."""
        if self._up():
            assert self._conn is not None
            try:
                self._conn.execute(sql)
            except psycopg.Error:
                self._drop()

    def _connect(self) -> None:
        conn = connect(self._options, role="listener")
        try:
            conn.execute(f'LISTEN "{self._channel}"')  # a checked name (channel_name)
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        self.connects += 1

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()
        self._missed = True

    def wait(self, timeout: float) -> set[str] | None:
        """Block until notifications arrive (return the session ids they name), up to
        ``timeout`` seconds or until :meth:`wake` (return an empty set); ``None``: anything
        may have changed (a reconnect lost notifications, or one said ``"*"``). Never
        raises for a lost server: it retries at the next call.

        Raises :class:`~stores._errors.ClosedError` after :meth:`close`."""
        if self._closed:
            raise ClosedError("this PgListener was closed")
        if self._paused:
            self._sleep(timeout)  # until woken: nothing is received while paused
            return set()
        if not self.connected:
            self._drop()
            try:
                self._connect()
            except psycopg.Error:
                self._sleep(timeout)  # the server is away: try again next time
                return set()
        if self._missed:
            self._missed = False
            return None
        conn = self._conn
        assert conn is not None
        pgconn = conn.pgconn
        found = self._take(pgconn)
        if found is None or found:
            return found
        try:
            ready, _, _ = select.select([pgconn.socket, self._wake_r], [], [], max(timeout, 0.0))
        except (OSError, ValueError, psycopg.Error):
            self._drop()
            return set()
        if self._wake_r in ready:
            self._drain_wake()
        if pgconn.socket in ready:
            try:
                pgconn.consume_input()
            except psycopg.Error:  # the connection was lost: the next wait reconnects
                self._drop()
                return set()
        found = self._take(pgconn)
        return found

    def _take(self, pgconn: Any) -> set[str] | None:
        """The ids named by the notifications already received (None: anything)."""
        ids: set[str] = set()
        while (note := pgconn.notifies()) is not None:
            named = parse_payload(note.extra.decode("utf-8", "replace"))
            if named is None:
                while pgconn.notifies() is not None:
                    pass  # "anything" covers the rest too
                return None
            ids.update(named)
        return ids

    def _sleep(self, timeout: float) -> None:
        with contextlib.suppress(OSError, ValueError):
            ready, _, _ = select.select([self._wake_r], [], [], max(timeout, 0.0))
            if ready:
                self._drain_wake()

    def _drain_wake(self) -> None:
        with contextlib.suppress(OSError):
            while os.read(self._wake_r, 4096):
                pass

    def wake(self) -> None:
        """Make a :meth:`wait` running in another thread return now (thread-safe; a
        no-op after :meth:`close`)."""
        with self._fds, contextlib.suppress(OSError):
            if not self._closed:
                os.write(self._wake_w, b"!")

    def close(self) -> None:
        """Close the connection and the wake-up pipe. Idempotent."""
        with self._fds:
            if self._closed:
                return
            self._closed = True
            for fd in (self._wake_r, self._wake_w):
                with contextlib.suppress(OSError):
                    os.close(fd)
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()
