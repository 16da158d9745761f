"""A TCP proxy on 127.0.0.1 in front of the test's PostgreSQL server that cuts its
connections on demand: a network failure at a moment the test chooses.

Every byte goes through unchanged until the proxy is armed (:meth:`CutProxy.arm`) for
the ``n``-th chunk a client sends from then on. That chunk is then

* **dropped** (``deliver=False``): both sides are closed before the server sees it, so
  whatever it asked for never runs (a transaction left open is rolled back when the
  server notices the closed socket);
* or **delivered** (``deliver=True``): the server gets it and runs it, and the proxy
  closes both sides as soon as the server starts to answer (or after
  :data:`REPLY_WAIT` seconds without an answer) without passing the answer on. A
  statement that commits on its own (autocommit) has then committed, and its client
  never learns it: the lost acknowledgement.

The client sees what a real network failure shows it (``server closed the connection
unexpectedly``); the next connection goes through the proxy as before. The proxy runs in
a thread of its own (one ``selectors`` loop for every connection, blocking sends: the
tests' messages are small), so a blocking client -- the store's lane thread -- is served
whatever the test's event loop does.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
import time
from collections.abc import Iterator

import attrs
import psycopg
from psycopg.conninfo import make_conninfo

__all__ = ["REPLY_WAIT", "CutProxy", "open_cut_proxy"]

#: Seconds a delivered chunk's connection waits for the server's answer before the cut.
REPLY_WAIT = 2.0


@attrs.define(eq=False)
class _Pair:
    client: socket.socket
    server: socket.socket
    #: The delivered chunk went through: cut at the server's first answer.
    cut_at_reply: float | None = None


@attrs.define(eq=False)
class CutProxy:
    """The proxy's state; the test reads it, :meth:`arm` plans the cuts, and
    :meth:`partition` / :meth:`heal` cut everything for a while."""

    listener: socket.socket
    upstream: str | tuple[str, int]
    _selector: selectors.DefaultSelector = attrs.field(factory=selectors.DefaultSelector)
    _lock: threading.Lock = attrs.field(factory=threading.Lock)
    _pairs: list[_Pair] = attrs.field(factory=list)
    _stop: bool = False
    #: Chunks clients sent since the proxy started.
    chunks: int = 0
    #: The cuts to come, in order: ``[chunks to pass, this one included; deliver;
    #: match]`` each; the first counts from when it was armed, each next one from the
    #: cut before it.
    _plans: list[tuple[int, bool, bytes | None]] = attrs.field(factory=list)
    #: Every chunk clients sent, in order, while ``record`` is set.
    record: bool = False
    sent: list[bytes] = attrs.field(factory=list)
    #: Cuts made: ``(deliver, chunk)`` each, in order.
    cuts: list[tuple[bool, bytes]] = attrs.field(factory=list)
    #: The answers thrown away by delivered cuts (their first chunk each).
    lost: list[bytes] = attrs.field(factory=list)
    #: Connections accepted.
    connections: int = 0
    _partitioned: bool = False

    @property
    def port(self) -> int:
        return int(self.listener.getsockname()[1])

    def dsn(self, dsn: str) -> str:
        """``dsn`` with its host and port replaced by the proxy's."""
        return make_conninfo(
            dsn, host="127.0.0.1", port=str(self.port), sslmode="disable", gssencmode="disable"
        )

    def arm(self, n: int = 1, *, deliver: bool, match: bytes | None = None) -> None:
        """Cut at the ``n``-th chunk (1-based) any client sends from now on -- or, if
        a cut is armed already, from the last armed cut on -- counting only the chunks
        that hold ``match`` if it is given."""
        if n < 1:
            raise ValueError("n counts from 1")
        with self._lock:
            self._plans.append((n, deliver, match))

    def disarm(self) -> None:
        """Forget the cuts still to come."""
        with self._lock:
            self._plans.clear()

    def partition(self) -> None:
        """A network partition: every connection is cut now (at its next chunk either
        way, or within a loop's turn), and new ones are refused until :meth:`heal`."""
        with self._lock:
            self._partitioned = True

    def heal(self) -> None:
        """End the partition: connections go through again."""
        with self._lock:
            self._partitioned = False

    def serve(self) -> None:
        """The proxy's loop (its thread's target), until :meth:`stop`."""
        self.listener.setblocking(False)
        self._selector.register(self.listener, selectors.EVENT_READ, None)
        while not self._stop:
            for key, _ in self._selector.select(timeout=0.05):
                if key.data is None:
                    self._accept()
                else:
                    pair, from_client = key.data
                    self._relay(pair, from_client)
            now = time.monotonic()
            with self._lock:
                partitioned = self._partitioned
            for pair in list(self._pairs):
                if partitioned or (
                    pair.cut_at_reply is not None and now > pair.cut_at_reply + REPLY_WAIT
                ):
                    self._close(pair)
        for pair in list(self._pairs):
            self._close(pair)
        self._selector.close()
        self.listener.close()

    def stop(self) -> None:
        self._stop = True

    def _accept(self) -> None:
        client, _ = self.listener.accept()
        with self._lock:
            partitioned = self._partitioned
        if partitioned:  # nothing gets through
            client.close()
            return
        if isinstance(self.upstream, str):
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        else:
            server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            server.connect(self.upstream)
        except OSError:  # the server refused: so does the proxy
            server.close()
            client.close()
            return
        client.setblocking(True)
        server.setblocking(True)
        pair = _Pair(client, server)
        self._pairs.append(pair)
        self.connections += 1
        self._selector.register(client, selectors.EVENT_READ, (pair, True))
        self._selector.register(server, selectors.EVENT_READ, (pair, False))

    def _relay(self, pair: _Pair, from_client: bool) -> None:
        source, sink = (pair.client, pair.server) if from_client else (pair.server, pair.client)
        try:
            data = source.recv(65536)
        except OSError:
            data = b""
        if not data:
            self._close(pair)
            return
        if not from_client:
            if pair.cut_at_reply is not None:  # the answer to the delivered chunk: lost
                self.lost.append(data)
                self._close(pair)
                return
        else:
            with self._lock:
                self.chunks += 1
                if self.record:
                    self.sent.append(data)
                cut = deliver = False
                if self._plans:
                    left, deliver, match = self._plans[0]
                    if match is None or match in data:
                        left -= 1
                    cut = left == 0
                    if cut:
                        del self._plans[0]
                    else:
                        self._plans[0] = (left, deliver, match)
            if cut:
                self.cuts.append((deliver, data))
                if not deliver:
                    self._close(pair)
                    return
                pair.cut_at_reply = time.monotonic()
        try:
            sink.sendall(data)
        except OSError:
            self._close(pair)

    def _close(self, pair: _Pair) -> None:
        if pair not in self._pairs:
            return
        self._pairs.remove(pair)
        for sock in (pair.client, pair.server):
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(sock)
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


def _upstream(dsn: str) -> str | tuple[str, int]:
    """Where the server of ``dsn`` listens: a Unix socket's path or ``(host, port)``."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        host, port = conn.info.host, int(conn.info.port)
    if host.startswith("/"):
        return f"{host}/.s.PGSQL.{port}"
    return (host, port)


@contextlib.contextmanager
def open_cut_proxy(dsn: str) -> Iterator[CutProxy]:
    """A running :class:`CutProxy` in front of the server of ``dsn``; stopped (every
    connection closed) when the block ends."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    proxy = CutProxy(listener, _upstream(dsn))
    thread = threading.Thread(target=proxy.serve, name="pg-cut-proxy", daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        proxy.stop()
        thread.join(timeout=10)
