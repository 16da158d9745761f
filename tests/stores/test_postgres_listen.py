"""PgListener, the change feed of a PostgresStore: what a wait returns for notifications,
a wake-up, a timeout, a lost connection and a server that is away.

The real server, a schema per test, real connections; no mocks.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("psycopg", reason="psycopg is not installed (pip install -e '.[postgres]')")

import psycopg

from stores import ClosedError, NewEvent, PostgresStore, StoreIOError
from stores.postgres._connection import split_url
from stores.postgres._listen import PgListener


@pytest.fixture
def store(pg_schema: tuple[str, str]) -> Iterator[PostgresStore]:
    opened = PostgresStore(pg_schema[0], schema=pg_schema[1])
    yield opened
    opened.close()


@pytest.fixture
def feed(store: PostgresStore) -> Iterator[PgListener]:
    listener = store.listen()
    yield listener
    listener.close()


def _listener_pid(conn: psycopg.Connection[Any], schema: str) -> int:
    row = conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE application_name = 'tidelog listener'"
        " AND query = %s",
        (f'LISTEN "tidelog_{schema}"',),
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_wait_returns_the_sessions_a_commit_changed(store: PostgresStore, feed: PgListener) -> None:
    """A commit's notification wakes a waiting listener with the ids it changed; a quiet
    wait times out with an empty set."""
    assert feed.connected
    assert feed.wait(0.05) == set()
    store.append("a b", [NewEvent("k")])
    assert feed.wait(5.0) == {"a b"}
    store.append("c", [NewEvent("k")])
    store.append("d", [NewEvent("k")])
    time.sleep(0.1)
    assert feed.wait(5.0) == {"c", "d"}  # both waiting notifications at once


def test_wake_interrupts_a_wait(feed: PgListener) -> None:
    """wake() from another thread makes a long wait return at once with nothing."""
    threading.Timer(0.1, feed.wake).start()
    started = time.monotonic()
    assert feed.wait(30.0) == set()
    assert time.monotonic() - started < 5.0


def test_lost_connection_reports_anything_may_have_changed(
    store: PostgresStore, feed: PgListener, pg_schema: tuple[str, str]
) -> None:
    """When the listening connection is ended, the feed reconnects and its next wait
    says "anything may have changed" (None): notifications of the gap are lost."""
    with psycopg.connect(pg_schema[0], autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (_listener_pid(admin, pg_schema[1]),))
    results = [feed.wait(2.0) for _ in range(3)]
    assert None in results
    assert feed.connects == 2
    assert feed.connected
    store.append("s", [NewEvent("k")])
    assert feed.wait(5.0) == {"s"}


def test_server_away_makes_wait_sleep_not_fail(pg_schema: tuple[str, str]) -> None:
    """A listener whose server cannot be reached keeps waiting (each wait sleeps its
    timeout) instead of raising; opening one that cannot connect at all raises."""
    store = PostgresStore(pg_schema[0], schema=pg_schema[1])
    try:
        listener = store.listen()
    finally:
        store.close()
    try:
        listener._drop()  # as if the connection broke...
        listener._options = listener._options.__class__(
            "host=127.0.0.1 port=1 connect_timeout=2", pg_schema[1]
        )  # ...and the server moved away
        started = time.monotonic()
        assert listener.wait(0.2) == set()
        assert not listener.connected
        assert time.monotonic() - started >= 0.15
    finally:
        listener.close()
    with pytest.raises(ClosedError):
        listener.wait(0.1)
    refused = PostgresStore(pg_schema[0], schema=pg_schema[1])
    try:
        refused.options = refused.options.__class__("host=127.0.0.1 port=1", pg_schema[1])
        with pytest.raises(StoreIOError):
            refused.listen()
    finally:
        refused.close()


def test_split_url_takes_the_schema_out() -> None:
    """A URL's schema parameter is tidelog's, the rest goes to libpq unchanged."""
    assert split_url("postgresql://h/db") == ("postgresql://h/db", None)
    assert split_url("postgres://u@h/db?schema=s1&sslmode=disable") == (
        "postgres://u@h/db?sslmode=disable",
        "s1",
    )
    assert split_url("postgresql://?dbname=test&schema=x") == ("postgresql://?dbname=test", "x")
    assert split_url("postgresql:///db?schema=x") == ("postgresql:///db", "x")


def test_a_paused_listener_hears_nothing_and_says_anything_when_it_resumes(
    store: PostgresStore, feed: PgListener
) -> None:
    """Paused (``UNLISTEN``), a listener receives no notification and only sleeps; its
    first wait after resuming returns None ("anything may have changed": the commits of
    the pause were not heard), and it hears commits again from then on."""
    feed.pause()
    assert feed.paused
    assert not feed.connected
    store.append("during", [NewEvent("k")])
    time.sleep(0.1)
    assert feed.wait(0.2) == set()
    feed.resume()
    assert not feed.paused
    assert feed.connected
    assert feed.wait(1.0) is None
    store.append("after", [NewEvent("k")])
    assert feed.wait(5.0) == {"after"}


def test_wake_interrupts_a_paused_wait(feed: PgListener) -> None:
    """A paused listener's wait returns at once when woken from another thread."""
    feed.pause()
    threading.Timer(0.1, feed.wake).start()
    started = time.monotonic()
    assert feed.wait(30.0) == set()
    assert time.monotonic() - started < 5.0
