"""The resend rule after a lost acknowledgement, exact in every case: the head the store
reports against the seqs ``first..last`` an :class:`UnwrittenError` names.

The case the rule used to get wrong: a PostgreSQL server restarted at once loses the
commits it acknowledged but had not flushed (``synchronous="normal"`` is asynchronous
commit), and the writer's next commit is refused with a head *below* what it had
committed. Restarting the shared test server is not allowed here (other tests use it at
the same time), so the loss is made the way the server would leave it: a second
connection deletes the acknowledged rows behind the writer's back and sets the session's
head back."""

from __future__ import annotations

from typing import Any

import pytest
import trio

pytest.importorskip("psycopg", reason="psycopg is not installed (pip install -e '.[postgres]')")

import psycopg
from pgtest import url_of

from runtime import NewEvent, open_runtime
from stores import ConflictError, UnwrittenError


def lose_after(dsn: str, schema: str, session_id: str, head: int) -> None:
    """What an immediate restart leaves when the commits after ``head`` were not flushed."""
    with psycopg.connect(dsn, autocommit=True) as conn, conn.transaction():
        row = conn.execute(
            f'SELECT sid FROM "{schema}".sessions WHERE id = %s', (session_id,)
        ).fetchone()
        assert row is not None
        conn.execute(f'DELETE FROM "{schema}".events WHERE sid = %s AND seq > %s', (row[0], head))
        conn.execute(f'UPDATE "{schema}".sessions SET head = %s WHERE sid = %s', (head, row[0]))


async def test_commits_lost_by_the_server_are_reported_lost(pg_where: tuple[str, str]) -> None:
    """After the server lost acknowledged seqs 6..10, the writer's next append (11) raises
    UnwrittenError whose store head (5) is below first - 1: outcome "lost", nothing of 11
    stored -- never "it landed after all"."""
    dsn, schema = pg_where
    errors: list[Any] = []
    async with open_runtime(url_of(dsn, schema)) as rt:
        try:
            async with rt.open_session("s") as w:
                for i in range(10):
                    await w.append([NewEvent("k", i)])
                await trio.to_thread.run_sync(lose_after, dsn, schema, "s", 5)
                with pytest.raises(UnwrittenError) as info:
                    await w.append([NewEvent("k", 10)])
                errors.append(info.value)
        except UnwrittenError as exc:  # the writer gave up: its close says so too
            errors.append(exc)
        [error, *_] = errors
        assert (error.first, error.last) == (11, 11)
        assert isinstance(error.__cause__, ConflictError)
        assert error.store_head == 5
        assert error.outcome() == "lost"
        assert [e.data for e in error.events] == [10]
        events = await rt.read("s")
        assert [e.data for e in events] == [0, 1, 2, 3, 4]


def test_outcome_covers_every_case() -> None:
    """outcome(): head == first - 1 is "unwritten", head >= first "stored" (part or all
    of first..last stands), head < first - 1 "lost"; no head known is a ValueError."""
    error = UnwrittenError("s", 11, 13, ())
    assert error.store_head is None
    with pytest.raises(ValueError, match="head"):
        error.outcome()
    assert error.outcome(10) == "unwritten"
    assert error.outcome(11) == "stored"
    assert error.outcome(13) == "stored"
    assert error.outcome(20) == "stored"
    assert error.outcome(9) == "lost"
    assert error.outcome(0) == "lost"
    error.__cause__ = ConflictError("s", 10, 4)
    assert error.store_head == 4
    assert error.outcome() == "lost"
