"""The batch statements' packed columns (:mod:`stores.postgres._packed`): what the server
splits is exactly what the client packed, a value that cannot be packed is refused, and a
batch holding one is still written exactly (through the general path).

The real server: the split is PostgreSQL's own ``string_to_array``.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("psycopg", reason="psycopg is not installed (pip install -e '.[postgres]')")

import psycopg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stores import AppendOp, MemoryStore, PostgresStore, PreparedEvent, StoredEvent
from stores.postgres import _packed as packed

_FIXTURES = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

#: Texts PostgreSQL can hold (no NUL), the separator and the null mark included.
_texts = st.text(
    st.one_of(
        st.characters(exclude_categories=["Cs"], exclude_characters="\x00"),
        st.sampled_from([packed.SEPARATOR, packed.NULL_TEXT]),
    ),
    max_size=6,
)


def split(conn: psycopg.Connection[Any], sql: str, value: str) -> list[Any]:
    row = conn.execute(f"SELECT {sql}", {"v": value}).fetchone()
    assert row is not None
    return list(row[0])


@_FIXTURES
@given(values=st.lists(_texts, max_size=5))
def test_texts_come_back_exactly_or_are_refused(
    pg_raw: psycopg.Connection[Any], values: list[str]
) -> None:
    """A column of texts packs unless a text is empty or holds the separator, and the
    server splits what packed into exactly the same texts."""
    got = packed.pack_texts(values)
    refused = any(value == "" or packed.SEPARATOR in value for value in values)
    assert (got is None) == refused
    if got is not None:
        assert split(pg_raw, packed.texts("v"), got) == values


@_FIXTURES
@given(values=st.lists(st.none() | _texts, max_size=5))
def test_nullable_texts_come_back_exactly_or_are_refused(
    pg_raw: psycopg.Connection[Any], values: list[str | None]
) -> None:
    """A column of texts and ``None`` packs unless a text is empty, holds the separator or
    is the null mark, and comes back with ``NULL`` where ``None`` was (one ``None`` alone
    included: the empty text would split into no element at all)."""
    got = packed.pack_nullable_texts(values)
    refused = any(
        value is not None and (value in ("", packed.NULL_TEXT) or packed.SEPARATOR in value)
        for value in values
    )
    assert (got is None) == refused
    if got is not None:
        assert split(pg_raw, packed.nullable_texts("v"), got) == values


@_FIXTURES
@given(values=st.lists(st.none() | st.integers(-(2**63), 2**63 - 1), max_size=5))
def test_ints_come_back_exactly(pg_raw: psycopg.Connection[Any], values: list[int | None]) -> None:
    """A column of 64-bit integers and ``None`` always packs and comes back exactly, as
    ``bigint`` (and as ``int`` for values that fit)."""
    assert split(pg_raw, packed.ints("v"), packed.pack_ints(values)) == values
    small = [None if value is None else value % 2**31 for value in values]
    assert split(pg_raw, packed.ints("v", "int"), packed.pack_ints(small)) == small


def _event(kind: str, run_id: str | None, i: int) -> PreparedEvent:
    # made by hand, past prepare_events' checks: what a store must still write as given
    return PreparedEvent(kind, f'{{"i": {i}}}', run_id)


def _facts(events: list[StoredEvent]) -> list[tuple[int, str, object, str | None]]:
    return [(e.seq, e.kind, e.data, e.run_id) for e in events]


def test_a_batch_that_cannot_be_packed_is_written_exactly(pg_open: Any) -> None:
    """Events whose kind holds the separator, whose run id is the null mark or empty (made
    without prepare_events) are written as given, once each, in every shape of batch the
    one-statement paths take (new sessions, known ones one event each, several ops of one
    session): the store gives the model store's results and holds the same events."""
    store: PostgresStore = pg_open()
    model = MemoryStore()
    odd = [("a\x1eb", None), ("k", packed.NULL_TEXT), ("k", ""), ("k", "r\x1es")]
    for n, (kind, run_id) in enumerate(odd):
        ids = [f"s{n}-{i}" for i in range(3)]
        batches = [
            [AppendOp(i, (_event(kind, run_id, 0),), expected_head=0) for i in ids],
            [AppendOp(i, (_event(kind, run_id, 1),), expected_head=1) for i in ids],
            [
                AppendOp(ids[0], (_event(kind, run_id, 2), _event("k", None, 3)), expected_head=2),
                AppendOp(ids[0], (_event(kind, run_id, 4),)),
                AppendOp(ids[1], (_event(kind, run_id, 2),), expected_head=2),
            ],
        ]
        for batch in batches:
            assert store.write_batch(batch) == model.write_batch(batch)
        for session_id in ids:
            assert _facts(store.read(session_id)) == _facts(model.read(session_id))
        events = store.read(ids[0])
        assert [(e.kind, e.run_id) for e in events] == [
            (kind, run_id),
            (kind, run_id),
            (kind, run_id),
            ("k", None),
            (kind, run_id),
        ]
