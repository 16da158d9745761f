"""Where the tests find PostgreSQL, and a schema of their own for each test.

The server is named by the environment variable ``TIDELOG_TEST_PG`` (a libpq DSN or
URI; default :data:`DEFAULT_DSN`, the local socket's database ``test``). If it cannot be
reached, the PostgreSQL tests are skipped with the reason -- unless
``TIDELOG_REQUIRE_PG=1`` (set by ``.ci/check``): then they fail, so CI cannot pass
without running them.

Every test gets a fresh schema (:func:`new_schema`), dropped afterwards, so tests (and
several test runs) share one database without seeing each other.
"""

from __future__ import annotations

import contextlib
import os
import urllib.parse
import uuid
from collections.abc import Iterator

import pytest

__all__ = [
    "DEFAULT_DSN",
    "drop_schema",
    "fresh_schema",
    "new_schema",
    "optional_pg",
    "pg_required",
    "require_pg",
    "test_dsn",
    "url_of",
]

DEFAULT_DSN = "dbname=test"

_checked: tuple[str, str | None] | None = None


def test_dsn() -> str:
    """The DSN of the test server (``TIDELOG_TEST_PG``, else :data:`DEFAULT_DSN`)."""
    return os.environ.get("TIDELOG_TEST_PG") or DEFAULT_DSN


test_dsn.__test__ = False  # type: ignore[attr-defined]  # a helper, not a test


def pg_required() -> bool:
    """True when a missing server must fail the PostgreSQL tests (``TIDELOG_REQUIRE_PG=1``)."""
    return os.environ.get("TIDELOG_REQUIRE_PG", "") == "1"


def _probe(dsn: str) -> str | None:
    """Why PostgreSQL cannot be used for the tests, or ``None`` if it can."""
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed (pip install -e '.[postgres]')"
    try:
        with psycopg.connect(dsn, connect_timeout=5, autocommit=True) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"no PostgreSQL server at TIDELOG_TEST_PG={dsn!r}: {first}"
    return None


def require_pg() -> str:
    """The test server's DSN; skips the calling test if there is none (fails instead
    under ``TIDELOG_REQUIRE_PG=1``). The server is probed once per test run."""
    global _checked
    dsn = test_dsn()
    if _checked is None or _checked[0] != dsn:
        _checked = (dsn, _probe(dsn))
    reason = _checked[1]
    if reason is not None:
        if pg_required():
            pytest.fail(f"TIDELOG_REQUIRE_PG=1 but {reason}", pytrace=False)
        pytest.skip(reason)
    return dsn


def optional_pg() -> str | None:
    """The test server's DSN, or ``None`` if there is none -- for a test that runs on
    PostgreSQL *as well*, not only (fails instead under ``TIDELOG_REQUIRE_PG=1``)."""
    try:
        return require_pg()
    except pytest.skip.Exception:
        return None


def new_schema() -> str:
    """A schema name no other test uses."""
    return f"t_{uuid.uuid4().hex[:20]}"


def drop_schema(dsn: str, schema: str) -> None:
    """Drop a test's schema and everything in it."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET lock_timeout = '60s'")
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")  # a name of new_schema()


@contextlib.contextmanager
def fresh_schema() -> Iterator[tuple[str, str]]:
    """``(dsn, schema)`` of a new schema name, dropped (if created) when the block ends."""
    dsn = require_pg()
    schema = new_schema()
    try:
        yield dsn, schema
    finally:
        drop_schema(dsn, schema)


def url_of(dsn: str, schema: str) -> str:
    """A ``postgresql://`` URL for ``open_runtime`` naming the server of ``dsn`` (any
    libpq form) and the store's ``schema``."""
    from psycopg.conninfo import conninfo_to_dict

    params = {key: str(value) for key, value in conninfo_to_dict(dsn).items()}
    params["schema"] = schema
    return "postgresql://?" + urllib.parse.urlencode(params)
