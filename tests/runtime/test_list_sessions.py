"""Runtime.list_sessions: the store's id order and cursor, with the reserved namespace
hidden unless asked for, on both backends."""

from __future__ import annotations

import pytest

from runtime import INTERNAL_PREFIX, InvalidArgumentError, NewEvent, Runtime, SessionInfo


def _ids(infos: list[SessionInfo]) -> list[str]:
    return [info.id for info in infos]


async def _make(rt: Runtime, ids: list[str]) -> None:
    for sid in ids:
        async with rt.open_session(sid, internal=sid.startswith(INTERNAL_PREFIX)) as w:
            await w.append([NewEvent("k", sid)])


async def _pages(rt: Runtime, size: int, **options: object) -> list[str]:
    seen: list[str] = []
    while True:
        page = await rt.list_sessions(
            limit=size,
            after=seen[-1] if seen else None,
            **options,  # type: ignore[arg-type]
        )
        seen += _ids(page)
        if len(page) < size:
            return seen


async def test_pages_skip_the_reserved_namespace(rt: Runtime) -> None:
    """Pages of any size list the user's sessions in id order, each once, and never an
    internal one -- also when internal ids fill whole pages of the store."""
    internal = [f"{INTERNAL_PREFIX}run/{n:02d}" for n in range(7)]
    public = ["a", "s", "tidelog", "tidelog0", "u", "🎉"]
    await _make(rt, internal + public)
    assert _ids(await rt.list_sessions()) == sorted(public)
    for size in (1, 2, 3, 10):
        assert await _pages(rt, size) == sorted(public)
    every = sorted(internal + public)
    assert await _pages(rt, 3, include_internal=True) == every
    assert _ids(await rt.list_sessions(prefix=INTERNAL_PREFIX)) == []
    listed = await rt.list_sessions(prefix=INTERNAL_PREFIX, include_internal=True, limit=2)
    assert _ids(listed) == internal[:2]
    assert _ids(await rt.list_sessions(prefix="t")) == ["tidelog", "tidelog0"]


async def test_updated_order_hides_internal_sessions(rt: Runtime) -> None:
    """order="updated" lists the most recently updated first, internal ones only when
    asked for; a cursor needs the id order."""
    await _make(rt, ["b", f"{INTERNAL_PREFIX}x", "a"])
    assert _ids(await rt.list_sessions(order="updated")) == ["a", "b"]
    assert _ids(await rt.list_sessions(order="updated", limit=1)) == ["a"]
    both = await rt.list_sessions(order="updated", include_internal=True)
    assert _ids(both) == ["a", f"{INTERNAL_PREFIX}x", "b"]
    with pytest.raises(InvalidArgumentError):
        await rt.list_sessions(order="updated", after="a")
    with pytest.raises(InvalidArgumentError):
        await rt.list_sessions(include_internal=1)  # type: ignore[arg-type]
