"""What every PostgreSQL module of tidelog uses: error translation at the store boundary
(:func:`map_errors`), the options of a store, its connection (:class:`Link`, reopened
after the server dropped it) and the small helpers of its SQL. Synchronous (psycopg 3's
blocking API), never called on a trio thread.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import urllib.parse
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import attrs
import psycopg
from psycopg import errors as pgerrors
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.pq import TransactionStatus

from .._contract import Synchronous
from .._errors import (
    InvalidArgumentError,
    StoreBusyError,
    StoreCorruptError,
    StoreError,
    StoreIOError,
)
from .._records import check_flag

__all__ = [
    "EVERYTHING",
    "MAX_PAYLOAD_BYTES",
    "Link",
    "PgOptions",
    "advisory_key",
    "channel_name",
    "check_options",
    "describe_dsn",
    "map_errors",
    "notify_payload",
    "one",
    "parse_payload",
    "quote_ident",
    "row_of",
    "rows_of",
    "split_url",
]

#: A schema name tidelog accepts: lowercase letters, digits and ``_``, not starting with
#: a digit, at most 63 bytes (PostgreSQL's identifier length), and not starting with
#: ``pg_`` (PostgreSQL reserves those for its own schemas). tidelog always quotes it
#: (:func:`quote_ident`), so SQL keywords (``select``, ``user``...) are names like any
#: other; a name of these characters means the same quoted or not wherever it is not a
#: keyword, so ``psql`` users type it as they see it.
_SCHEMA_NAME = re.compile(r"(?!pg_)[a-z_][a-z0-9_]{0,62}")
#: The longest ``busy_timeout_ms`` / ``statement_timeout_ms`` (PostgreSQL's int limit).
MAX_TIMEOUT_MS = 2**31 - 1

#: SQLSTATEs that mean "the server was busy": retry later (nothing was written).
_BUSY = {
    "40001": "a serialization failure",
    "40P01": "a deadlock with another transaction",
    "55P03": "a lock held by another connection (lock_timeout)",
    "57014": "the statement timed out or was cancelled (statement_timeout)",
}


@contextmanager
def map_errors(what: str, *, writing: bool = False) -> Iterator[None]:
    """Translate psycopg exceptions raised inside the block into tidelog errors.

    ``what`` names the operation for the message; the psycopg exception is kept as
    ``__cause__``. The mapping:

    * a lost or refused connection, a server shutting down, too many connections, a full
      disk, a refused permission, a server that only reads: :class:`StoreIOError` (for a
      connection lost during a write, ambiguous: it may have been committed, and the
      message says to resend with ``retry=True`` -- see the class);
    * a serialization failure, a deadlock, a lock or statement timeout:
      :class:`StoreBusyError` (nothing was written; retry);
    * damaged data (``XX001``/``XX002``): :class:`StoreCorruptError`;
    * a value PostgreSQL refuses (a NUL character in text, a value past a limit) is the
      caller's when ``writing`` -- an :class:`InvalidArgumentError`: retrying the same
      write can never succeed -- and a :class:`StoreError` when reading;
    * anything else: :class:`StoreError`.
    """
    try:
        yield
    except psycopg.Error as exc:
        raise translate(what, exc, writing=writing) from exc


def translate(what: str, exc: psycopg.Error, *, writing: bool = False) -> Exception:
    """The tidelog error for a psycopg error (see :func:`map_errors`)."""
    state = exc.sqlstate or ""
    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if state in _BUSY:
        return StoreBusyError(f"{what}: {_BUSY[state]} ({detail})")
    if state in ("XX001", "XX002"):
        return StoreCorruptError(f"{what}: the server reports damaged data ({detail})")
    if isinstance(exc, psycopg.DataError) or state == "54000":
        if writing:
            return InvalidArgumentError(f"{what}: PostgreSQL refuses a value ({detail})")
        return StoreError(f"{what}: a stored value cannot be read ({detail})")
    if state == "42501":
        return StoreIOError(f"{what}: permission denied by the server ({detail})")
    if state == "25006":
        return StoreIOError(f"{what}: the server only allows reads ({detail})")
    if state.startswith(("08", "53", "57")) or isinstance(
        exc, psycopg.OperationalError | psycopg.InterfaceError
    ):
        if writing:  # the server may have committed before the answer was lost
            return StoreIOError(
                f"{what}: connection to the PostgreSQL server failed ({detail}); the "
                "write may have been committed before it failed: resend it with "
                "retry=True (and the same expected_head) to land it exactly once"
            )
        return StoreIOError(f"{what}: connection to the PostgreSQL server failed ({detail})")
    if isinstance(exc, pgerrors.UndefinedTable | pgerrors.UndefinedFunction):
        return StoreError(f"{what}: the store's tables are missing or changed ({detail})")
    return StoreError(f"{what}: {type(exc).__name__}: {detail}")


def one(conn: psycopg.Connection[Any], sql: str, args: Any = None) -> tuple[Any, ...]:
    """Run a query that always yields exactly one row and return it."""
    row = conn.execute(sql, args).fetchone()
    assert row is not None, sql
    return tuple(row)


def row_of(conn: psycopg.Connection[Any], sql: str, *args: Any) -> tuple[Any, ...] | None:
    """The first row of a query, or ``None``."""
    return conn.execute(sql, args).fetchone()


def rows_of(conn: psycopg.Connection[Any], sql: str, *args: Any) -> list[tuple[Any, ...]]:
    """Every row of a query."""
    return conn.execute(sql, args).fetchall()


def split_url(url: str) -> tuple[str, str | None]:
    """Split tidelog's ``schema`` query parameter off a PostgreSQL URL: ``(the URL for
    libpq, the schema or None)``. Raises :class:`InvalidArgumentError` for a URL that is
    not a ``str`` or names the schema twice."""
    if not isinstance(url, str):
        raise InvalidArgumentError(f"url must be a str, not {type(url).__name__}")
    base, _, text = url.partition("?")
    query = urllib.parse.parse_qsl(text, keep_blank_values=True)
    schemas = [value for key, value in query if key == "schema"]
    if len(schemas) > 1:
        raise InvalidArgumentError("the URL names its schema more than once")
    if not schemas:
        return url, None
    rest = urllib.parse.urlencode([(key, value) for key, value in query if key != "schema"])
    return (f"{base}?{rest}" if rest else base), schemas[0]


def describe_dsn(dsn: str) -> str:
    """The DSN for messages: host, port, database and user -- never a password."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.Error:
        return "<invalid DSN>"
    shown = {k: params[k] for k in ("host", "port", "dbname", "user") if params.get(k)}
    return " ".join(f"{k}={v}" for k, v in shown.items()) or "<local defaults>"


def quote_ident(schema: str) -> str:
    """A schema name (one that passed :data:`_SCHEMA_NAME`: no quote in it) as a quoted SQL
    identifier, so a keyword such as ``select`` or ``user`` is just a name."""
    return f'"{schema}"'


def advisory_key(schema: str, session_id: str) -> int:
    """The session-level advisory lock key of a session's lease (a signed 64-bit int,
    stable across hosts and Python versions)."""
    digest = hashlib.blake2b(f"tidelog\0{schema}\0{session_id}".encode(), digest_size=8)
    return int.from_bytes(digest.digest(), "big", signed=True)


def channel_name(schema: str) -> str:
    """The NOTIFY channel of a store: one per schema (at most 63 bytes)."""
    name = f"tidelog_{schema}"
    if len(name) > 63:
        name = "tidelog_" + hashlib.blake2b(schema.encode(), digest_size=16).hexdigest()
    return name


#: The longest NOTIFY payload tidelog sends (PostgreSQL's limit is 8000 bytes).
MAX_PAYLOAD_BYTES = 7900
#: A payload that means "something changed, look at every session you watch".
EVERYTHING = "*"


def notify_payload(heads: Mapping[str, int]) -> str:
    """The NOTIFY payload of a commit that moved ``heads``: lines ``"<head> <session
    id>"`` (ids hold no control characters) -- or :data:`EVERYTHING` when they would not
    fit in :data:`MAX_PAYLOAD_BYTES` (a listener then looks at every session it
    watches)."""
    payload = "\n".join(f"{head} {session_id}" for session_id, head in heads.items())
    return payload if len(payload.encode()) <= MAX_PAYLOAD_BYTES else EVERYTHING


def parse_payload(payload: str) -> list[str] | None:
    """The session ids a NOTIFY payload names; ``None`` for :data:`EVERYTHING` (or a
    payload this version does not understand: treated as "anything changed")."""
    if payload == EVERYTHING:
        return None
    ids: list[str] = []
    for line in payload.split("\n"):
        head, sep, session_id = line.partition(" ")
        if not sep or not head.isdigit() or not session_id:
            return None
        ids.append(session_id)
    return ids


@attrs.frozen
class PgOptions:
    """The checked options of a :class:`~stores.PostgresStore` (see there)."""

    dsn: str
    schema: str = "tidelog"
    synchronous: Synchronous = "normal"
    busy_timeout_ms: int = 5000
    statement_timeout_ms: int | None = None
    connect_timeout: int = 10
    read_only: bool = False
    notify: bool = True


def check_options(options: PgOptions) -> None:
    """Refuse bad options with :class:`InvalidArgumentError` before any connection."""
    if not isinstance(options.dsn, str):
        raise InvalidArgumentError(f"dsn must be a str, not {type(options.dsn).__name__}")
    if "\x00" in options.dsn:
        raise InvalidArgumentError("dsn contains a NUL character")
    try:
        conninfo_to_dict(options.dsn)
    except psycopg.Error as exc:
        raise InvalidArgumentError(
            f"dsn is not a valid PostgreSQL connection string: {exc}"
        ) from None
    if not isinstance(options.schema, str) or not _SCHEMA_NAME.fullmatch(options.schema):
        raise InvalidArgumentError(
            "schema must be 1 to 63 characters of a-z, 0-9 and _, not starting with a "
            f"digit or with pg_ (reserved by PostgreSQL), not {options.schema!r}"
        )
    if options.synchronous not in ("normal", "full"):
        raise InvalidArgumentError(
            f"synchronous must be 'normal' or 'full', not {options.synchronous!r}"
        )
    for name, value, optional in (
        ("busy_timeout_ms", options.busy_timeout_ms, False),
        ("statement_timeout_ms", options.statement_timeout_ms, True),
        ("connect_timeout", options.connect_timeout, False),
    ):
        if value is None and optional:
            continue
        if type(value) is not int or not 0 <= value <= MAX_TIMEOUT_MS:
            raise InvalidArgumentError(
                f"{name} must be an int in 0..{MAX_TIMEOUT_MS}, not {value!r}"
            )
    check_flag(options.read_only, "read_only")
    check_flag(options.notify, "notify")


class Link:
    """The one psycopg connection of a store handle, opened on first use and opened again
    on the next use after the server dropped it (a restart, ``pg_terminate_backend``, a
    network failure): the call that met the failure raised :class:`StoreIOError`, the
    next one reconnects. Not thread-safe: its store serialises calls.

    Every connection is in autocommit mode (transactions are explicit, nothing is left
    open between calls), uses the store's schema as its ``search_path`` and the
    options' timeouts and commit mode.
    """

    def __init__(self, options: PgOptions) -> None:
        self.options = options
        self._conn: psycopg.Connection[Any] | None = None
        #: Connections opened so far (1 unless the server dropped one).
        self.connects = 0

    @property
    def alive(self) -> bool:
        """True while the current connection is usable (no reconnect needed)."""
        return self._conn is not None and not self._conn.closed and not self._conn.broken

    @property
    def backend_pid(self) -> int | None:
        """The server process serving the current connection (``None``: not connected)."""
        return self._conn.info.backend_pid if self.alive and self._conn is not None else None

    def connection(self) -> psycopg.Connection[Any]:
        """The connection, (re)opened if needed. Raises psycopg errors (the caller's
        :func:`map_errors` translates them)."""
        conn = self._conn
        if conn is not None and not conn.closed and not conn.broken:
            return conn
        if conn is not None:
            self._conn = None
            conn.close()
        conn = connect(self.options)
        self._conn = conn
        self.connects += 1
        return conn

    def close(self, *, unlock: bool = False) -> None:
        """Close the connection. The server releases the session's advisory locks when
        its backend exits, which is some time *after* the client closed; ``unlock=True``
        releases them first, in a statement that has returned before this does, so
        another host can take the leases over at once (best effort: a connection that is
        broken or inside a transaction is just closed)."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if unlock and not conn.broken and conn.info.transaction_status == TransactionStatus.IDLE:
            with contextlib.suppress(psycopg.Error):
                conn.execute("SELECT pg_advisory_unlock_all()")
        conn.close()


def connect(options: PgOptions, *, role: str = "store") -> psycopg.Connection[Any]:
    """Open one configured connection (see :class:`Link`); psycopg errors propagate."""
    params = conninfo_to_dict(options.dsn)
    extra: dict[str, Any] = {}
    if "connect_timeout" not in params and options.connect_timeout:
        extra["connect_timeout"] = options.connect_timeout
    if "application_name" not in params:
        extra["application_name"] = f"tidelog {role}"
    conn = psycopg.connect(make_conninfo(options.dsn, **extra), autocommit=True)
    try:
        settings = [
            f"SET search_path = {quote_ident(options.schema)}",
            # Commits are asynchronous unless a flush asks (see stores.postgres._store).
            "SET synchronous_commit = " + ("off" if options.synchronous == "normal" else "on"),
            f"SET lock_timeout = {options.busy_timeout_ms}",
            # Every statement tidelog sends is keyed by primary keys: one generic plan each
            # (no re-planning per call of the prepared statements).
            "SET plan_cache_mode = force_generic_plan",
        ]
        if options.statement_timeout_ms is not None:
            settings.append(f"SET statement_timeout = {options.statement_timeout_ms}")
        if options.read_only:
            settings.append("SET default_transaction_read_only = on")
        conn.execute("; ".join(settings))
    except BaseException:
        conn.close()
        raise
    return conn
