"""Conformance cases: listing sessions -- the id order, the cursor (``after``), prefixes,
and paging that stays exact while other writes go on -- and listing leases."""

from __future__ import annotations

import time
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stores import InvalidArgumentError, LeaseInfo, SessionInfo, Store

__all__ = ["ListingCases"]

from stores.conformance._support import _QUICK, _WEIRD_IDS, ConformanceBase, _events

#: Ids around the edges of the code point order: case, accents, the last BMP character
#: before the surrogates, the first after them, astral characters and U+10FFFF.
_EDGE_IDS = [
    "A",
    "a",
    "a\U0010ffff",
    "a\U0010ffffz",
    "ab",
    "é",
    "\ud7ff",
    "\ud7ffx",
    "\ue000",
    "中",
    "🎉",
    "\U0010ffff",
    "\U0010ffff\U0010ffff",
]

_BAD_LIST_ARGS: dict[str, dict[str, Any]] = {
    "prefix_int": {"prefix": 3},
    "prefix_bytes": {"prefix": b"a"},
    "prefix_too_long": {"prefix": "p" * 257},
    "prefix_lone_surrogate": {"prefix": "a\ud800"},
    "after_empty": {"after": ""},
    "after_int": {"after": 1},
    "after_control": {"after": "a\nb"},
    "order_unknown": {"order": "created"},
    "order_none": {"order": None},
    "after_with_updated_order": {"after": "a", "order": "updated"},
}

_IDS = st.text(
    alphabet=st.sampled_from(["a", "b", "z", "é", "\ud7ff", "\ue000", "🎉", "\U0010ffff"]),
    min_size=1,
    max_size=4,
)


def _ids(infos: list[SessionInfo]) -> list[str]:
    return [info.id for info in infos]


def _page_through(store: Store, size: int, prefix: str | None = None) -> list[str]:
    """Every id, listed ``size`` at a time with the cursor."""
    seen: list[str] = []
    while True:
        page = store.list_sessions(limit=size, prefix=prefix, after=seen[-1] if seen else None)
        seen += _ids(page)
        if len(page) < size:
            return seen


class ListingCases(ConformanceBase):
    """list_sessions: id order, cursor, prefix."""

    def test_ids_listed_in_code_point_order(self, store: Store) -> None:
        """The default order is by id in code point order (= UTF-8 byte order), whatever
        the characters: ASCII case, accents, both sides of the surrogates, astral ones."""
        everything = sorted(set(_EDGE_IDS + _WEIRD_IDS))
        for sid in reversed(everything):
            store.create(sid)
        assert _ids(store.list_sessions()) == everything
        assert sorted(everything, key=lambda i: i.encode("utf-8")) == everything

    def test_cursor_pages_through_every_session_once(self, store: Store) -> None:
        """Pages of any size, each after the last id of the previous one, list every
        session exactly once, in order; a cursor past the last id gives an empty page."""
        for n in range(23):
            store.create(f"s{n:02d}")
        everything = _ids(store.list_sessions())
        for size in (1, 2, 5, 22, 23, 24):
            assert _page_through(store, size) == everything
        assert store.list_sessions(after="s22") == []
        assert _ids(store.list_sessions(after="s1")) == everything[10:]  # not an id: fine

    def test_cursor_is_stable_under_concurrent_writes(self, store: Store) -> None:
        """Between two pages, sessions are appended to, created (behind and after the
        cursor) and deleted: the next page holds exactly the existing sessions after the
        cursor, so no session that exists throughout is missed or listed twice."""
        for sid in ("b", "d", "f", "h", "j"):
            store.append(sid, _events(1))
        first = _ids(store.list_sessions(limit=2))
        assert first == ["b", "d"]
        store.append("b", _events(3))  # moves in the "updated" order, not in this one
        store.append("f", _events(2))
        store.create("a")  # behind the cursor: not listed later
        store.create("e")  # after it: listed
        store.delete("h")
        rest = _ids(store.list_sessions(after=first[-1]))
        assert rest == ["e", "f", "j"]
        assert not set(first) & set(rest)

    def test_prefix_selects_ids_starting_with_it(self, store: Store) -> None:
        """``prefix`` lists exactly the ids that start with it (in id order, with the
        cursor and a limit too), also for prefixes ending at the edges of the code point
        order; an empty prefix lists everything, one no id starts with lists nothing."""
        ids = sorted(set([*_EDGE_IDS, "run/1", "run/2", "run0", "ru", "tidelog/run/x"]))
        for sid in ids:
            store.create(sid)
        for prefix in ["a", "a\U0010ffff", "\ud7ff", "\U0010ffff", "run/", "ru", "tidelog/", ""]:
            expected = [i for i in ids if i.startswith(prefix)]
            assert _ids(store.list_sessions(prefix=prefix)) == expected, prefix
            assert _page_through(store, 1, prefix) == expected, prefix
        assert store.list_sessions(prefix="nothing") == []
        assert store.list_sessions(prefix="a\n") == []  # no id holds a control character
        assert _ids(store.list_sessions(prefix="run", after="run/1", limit=1)) == ["run/2"]

    def test_prefix_in_updated_order(self, store: Store) -> None:
        """``prefix`` and ``limit`` work in the "updated" order too."""
        for sid in ("x1", "y", "x2", "x3"):
            store.append(sid, _events(1))
        store.append("x1", _events(1))
        listed = _ids(store.list_sessions(prefix="x", order="updated", limit=2))
        assert listed == ["x1", "x3"]

    @pytest.mark.parametrize("case", sorted(_BAD_LIST_ARGS))
    def test_bad_list_arguments_refused(self, store: Store, case: str) -> None:
        """A bad prefix, cursor or order raises InvalidArgumentError (a cursor only pages
        in id order)."""
        store.create("a")
        with pytest.raises(InvalidArgumentError):
            store.list_sessions(**_BAD_LIST_ARGS[case])

    @_QUICK
    @given(
        ids=st.sets(_IDS, max_size=12),
        size=st.integers(min_value=1, max_value=5),
        prefix=st.one_of(st.none(), _IDS),
    )
    def test_paging_matches_the_sorted_ids(
        self, store: Store, ids: set[str], size: int, prefix: str | None
    ) -> None:
        """Property: for any ids, page size and prefix, paging lists exactly the ids that
        start with the prefix, sorted."""
        for info in store.list_sessions():
            store.delete(info.id)
        for sid in ids:
            store.create(sid)
        expected = sorted(i for i in ids if prefix is None or i.startswith(prefix))
        assert _page_through(store, size, prefix) == expected

    # -- leases ---------------------------------------------------------------------------

    def test_list_leases_shows_holders_and_expiry(self, store: Store) -> None:
        """list_leases shows each stored lease (owner, holder, expiry), by id, expired
        ones too; a prefix selects ids; released and deleted sessions' leases are gone;
        a read-only clone sees them."""
        assert store.list_leases() == []
        before = time.time()
        store.acquire_lease("run/b", "B", ttl=60.0, holder="host b")
        store.acquire_lease("a", "A", ttl=0.0, holder="host a")
        store.acquire_lease("run/c", "C", ttl=60.0, holder="host c")
        leases = store.list_leases()
        assert [(i.session_id, i.owner, i.holder) for i in leases] == [
            ("a", "A", "host a"),
            ("run/b", "B", "host b"),
            ("run/c", "C", "host c"),
        ]
        assert all(isinstance(i, LeaseInfo) for i in leases)
        assert leases[0].expires <= time.time() < leases[1].expires
        assert before + 59 < leases[1].expires < time.time() + 61
        assert [i.session_id for i in store.list_leases(prefix="run/")] == ["run/b", "run/c"]
        store.release_lease("run/b", "B")
        store.append("run/c", _events(1))
        store.delete("run/c")
        reader = self._track(store.clone(read_only=True))
        assert [i.session_id for i in reader.list_leases()] == ["a"]
        with pytest.raises(InvalidArgumentError):
            store.list_leases(prefix=5)  # type: ignore[arg-type]
