"""PostgreSQL schema names: SQL keywords that pass the documented rule work (tidelog
quotes the name everywhere), names starting with ``pg_`` are refused before connecting."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("psycopg", reason="psycopg is not installed (pip install -e '.[postgres]')")

import psycopg
from pgtest import require_pg

from stores import InvalidArgumentError, NewEvent, PostgresStore

#: Reserved words (and ``current_user``, a reserved function-like keyword) that are valid
#: by the rule: 1-63 characters of a-z, 0-9 and _, not starting with a digit or pg_.
KEYWORDS = ["select", "user", "default", "order", "current_user", "table"]


@pytest.fixture
def admin() -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection holding an advisory lock that serialises the tests using
    these fixed schema names (they are shared by every run on the server)."""
    with psycopg.connect(require_pg(), autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(7027012)")
        try:
            yield conn
        finally:
            for name in KEYWORDS:
                conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
            conn.execute("SELECT pg_advisory_unlock(7027012)")


def test_keyword_schema_names_work(admin: psycopg.Connection[Any]) -> None:
    """A store in schema ``select`` (``user``, ``order``...) opens, writes, leases, reads
    and reopens; the schema is the one named (quoted), nothing else is created."""
    dsn = require_pg()
    for name in KEYWORDS:
        admin.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
        store = PostgresStore(dsn, schema=name)
        try:
            store.acquire_lease("s", "me", ttl=30.0, holder="me")
            assert store.append("s", [NewEvent("k", {"i": 1}), NewEvent("k", 2)]) == 2
            assert [lease.session_id for lease in store.list_leases()] == ["s"]
            store.release_lease("s", "me")
        finally:
            store.close()
        again = PostgresStore(dsn, schema=name, read_only=True)
        try:
            assert [e.data for e in again.read("s")] == [{"i": 1}, 2]
        finally:
            again.close()
        row = admin.execute(
            "SELECT count(*) FROM pg_tables WHERE schemaname = %s AND tablename = 'events'",
            (name,),
        ).fetchone()
        assert row == (1,), name


@pytest.mark.parametrize("name", ["pg_x", "pg_catalog", "pg_toast", "pg_"])
def test_pg_prefix_refused_naming_the_rule(name: str) -> None:
    """A schema starting with ``pg_`` (PostgreSQL's own) is InvalidArgumentError saying
    so, before connecting (the DSN points nowhere)."""
    with pytest.raises(InvalidArgumentError, match="pg_"):
        PostgresStore("host=127.0.0.1 port=1 dbname=nothing connect_timeout=1", schema=name)
