"""Battery 6: hostile input. Hypothesis-generated payloads, kinds, run ids and session ids
-- non-JSON values (tuples, sets, bytes, objects), NaN/inf, non-str keys, lone surrogates,
NUL and control characters, SQL metacharacters, path tricks -- plus huge strings (10 MB),
deep nesting (10k levels) and hostile database file names.

Each input is either refused with the named error (``InvalidEventError`` naming the first
bad event's index, ``InvalidSessionIdError``, ``InvalidArgumentError``) with nothing of it
written, or stored and read back exactly; the runtime keeps serving either way.
"""

from __future__ import annotations

import itertools
import math
import os
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from battery_support import record, size
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime import (
    InvalidArgumentError,
    InvalidEventError,
    InvalidSessionIdError,
    MemoryStore,
    NewEvent,
    Runtime,
    SessionWriter,
    SqliteStore,
    StoreError,
    TidelogError,
    open_runtime,
)
from runtime.agents import (
    UserMessage,
    history,
)
from stores import JsonlStore

EXAMPLES = size(100, 1000)
TRIED = {"inputs": 0, "refused": 0, "stored": 0}
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
_counter = itertools.count()

CONTROL = [chr(c) for c in [*range(0x00, 0x20), *range(0x7F, 0xA0)]]
SURROGATES = ["\ud800", "\udfff", "\udcff", "a\ud83d", "\ude00b"]
SQL = ["'", '"', ";", "--", "/*", "*/", "%", "_", "\\", "' OR 1=1 --", "); DROP TABLE events;--"]
PATHS = ["../", "..", "/etc/passwd", "./", "~", "C:\\", "\\\\server\\share", "file:", ":memory:"]


@pytest.fixture(scope="module", autouse=True)
def _record_counts() -> Any:
    yield
    record(
        "hostile", inputs_tried=TRIED["inputs"], refused=TRIED["refused"], stored=TRIED["stored"]
    )


# -- an oracle independent of the library ------------------------------------------------


def is_text(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def exact_json(value: object) -> bool:
    """Is ``value`` exactly JSON (what ``stores._records`` accepts: the JSON types
    themselves, no subclass; finite floats; text without lone surrogates)?"""
    t = type(value)  # exact types: isinstance below only narrows for the type checker
    if value is None or t is bool or t is int:
        return True
    if t is float and isinstance(value, float):
        return math.isfinite(value)
    if t is str and isinstance(value, str):
        return is_text(value)
    if t is list and isinstance(value, list):
        return all(exact_json(v) for v in value)
    if t is dict and isinstance(value, dict):
        return all(type(k) is str and is_text(k) and exact_json(v) for k, v in value.items())
    return False


def valid_name(value: object) -> bool:
    """A valid session id / kind / run_id: 1..256 chars, no control chars or surrogates."""
    return (
        type(value) is str
        and 0 < len(value) <= 256
        and not any(c in CONTROL for c in value)
        and is_text(value)
    )


# -- strategies --------------------------------------------------------------------------

texts = st.lists(
    st.one_of(
        st.characters(codec=None, categories=None),  # everything, surrogates included
        st.sampled_from(CONTROL + SURROGATES + SQL + PATHS),
    ),
    max_size=8,
).map("".join)
bad_leaves = st.one_of(
    st.sampled_from([math.nan, math.inf, -math.inf]),
    st.binary(max_size=4),
    st.tuples(st.integers()),
    st.frozensets(st.integers(), max_size=2),
    st.sets(st.integers(), max_size=2),
    st.complex_numbers(allow_nan=False, allow_infinity=False, max_magnitude=10),
    st.builds(object),
    st.sampled_from(SURROGATES),
)
good_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    texts,
)
keys = st.one_of(
    texts,
    st.integers(),
    st.none(),
    st.booleans(),
    st.floats(allow_nan=False),
    st.tuples(st.integers()),
)
payloads = st.recursive(
    st.one_of(good_leaves, good_leaves, good_leaves, bad_leaves),
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(texts, children, max_size=4),
        st.dictionaries(keys, children, max_size=3),
        st.tuples(children),
    ),
    max_leaves=12,
)
names = st.one_of(
    st.sampled_from(["msg", "tool_call", "x" * 256]),
    texts,
    st.sampled_from(["", "x" * 257, "a\x00b", "tab\tbed", "nl\n", "\x7f", "\x9f", *SURROGATES]),
    st.sampled_from(SQL + PATHS),
    st.integers(),
    st.none(),
    st.binary(max_size=3),
)
session_ids = st.one_of(
    st.sampled_from(SQL + PATHS + ["x" * 256, "x" * 257, "", "\x00", "a/b", "a\\b"]),
    texts,
    st.sampled_from(SURROGATES),
    st.integers(),
    st.none(),
    st.binary(max_size=3),
)
events = st.tuples(names, payloads, st.one_of(st.none(), names))


# -- runtimes per example ----------------------------------------------------------------


async def refused(cm: Any, error: type[BaseException]) -> None:
    """Entering ``cm`` (an async context manager) raises ``error``."""
    with pytest.raises(error):
        async with cm:
            raise AssertionError(f"accepted: {cm!r}")


@asynccontextmanager
async def runtimes(tmp: Path) -> AsyncIterator[dict[str, Runtime]]:
    """A memory runtime, a SQLite runtime (on one shared file) and a JSONL one."""
    (tmp / "hostile.jsonl").mkdir(exist_ok=True)
    async with (
        open_runtime(MemoryStore()) as mem,
        open_runtime(tmp / "hostile.db") as sql,
        open_runtime(tmp / "hostile.jsonl") as files,
    ):
        yield {"memory": mem, "sqlite": sql, "jsonl": files}


def store_path(tmp: Path, name: str, backend: str) -> Path:
    """A SQLite file, or a (created) JSONL store directory, under ``tmp``."""
    if backend == "jsonl":
        (tmp / f"{name}.jsonl").mkdir(exist_ok=True)
        return tmp / f"{name}.jsonl"
    return tmp / f"{name}.db"


async def submit(w: SessionWriter, events: list[NewEvent], *, nowait: bool) -> tuple[int, int]:
    """Write ``events`` with ``append_nowait`` and a flush, or with one awaited append;
    return their seq range."""
    if nowait:
        seqs = w.append_nowait(events)
        await w.flush()
        return seqs
    head = await w.append(events)
    return head - len(events) + 1, head


def first_bad(batch: list[tuple[object, object, object]]) -> int | None:
    for index, (kind, data, run_id) in enumerate(batch):
        if not valid_name(kind) or not exact_json(data):
            return index
        if run_id is not None and not valid_name(run_id):
            return index
    return None


@given(batch=st.lists(events, min_size=1, max_size=4), nowait=st.booleans())
@SETTINGS
async def test_hostile_events_refused_whole_or_stored_exactly(
    tmp_path: Path, batch: list[tuple[Any, Any, Any]], nowait: bool
) -> None:
    """A batch with a bad value, kind or run_id is refused whole, naming it; others round-trip."""
    sid = f"e{next(_counter)}"
    bad = first_bad(batch)
    TRIED["inputs"] += len(batch)
    with trio.fail_after(30):
        async with runtimes(tmp_path) as rts:
            for side, rt in rts.items():
                async with rt.open_session(sid) as w:
                    await w.append([NewEvent("anchor", {"side": side})])
                    new = [NewEvent(k, d, run_id=r) for k, d, r in batch]
                    if bad is not None:
                        with pytest.raises(InvalidEventError) as info:
                            await submit(w, new, nowait=nowait)
                        assert info.value.index == bad, (side, info.value, batch)
                        assert await w.head() == 1
                        TRIED["refused"] += 1
                    else:
                        assert await submit(w, new, nowait=nowait) == (2, 1 + len(batch))
                        TRIED["stored"] += 1
                    # Keeps serving, and nothing of a refused batch is there.
                    head = await w.append([NewEvent("after", None)])
                    stored = await w.read()
                want: list[tuple[str, object, str | None]] = [("anchor", {"side": side}, None)]
                if bad is None:
                    want += [(k, d, r) for k, d, r in batch]
                want.append(("after", None, None))
                assert head == len(want)
                assert [(e.kind, e.data, e.run_id) for e in stored] == want, side
                assert [e.seq for e in stored] == list(range(1, len(want) + 1))


@given(sid=session_ids)
@SETTINGS
async def test_hostile_session_ids(tmp_path: Path, sid: Any) -> None:
    """A bad session id is refused everywhere (InvalidSessionIdError); a valid one is data."""
    TRIED["inputs"] += 1
    with trio.fail_after(30):
        async with runtimes(tmp_path) as rts:
            for rt in rts.values():
                if not valid_name(sid):
                    await refused(rt.open_session(sid), InvalidSessionIdError)
                    await refused(rt.open_session(sid, mode="read"), InvalidSessionIdError)
                    await refused(rt.snapshot(sid), InvalidSessionIdError)
                    for attempt in (
                        lambda rt=rt: rt.stat(sid),
                        lambda rt=rt: rt.delete(sid),
                        lambda rt=rt: history(rt).append(sid, [UserMessage("x")]),
                    ):
                        with pytest.raises(InvalidSessionIdError):
                            await attempt()
                    with pytest.raises(InvalidSessionIdError):
                        rt.tail(sid)
                    TRIED["refused"] += 1
                    continue
                TRIED["stored"] += 1
                tag = f"t{next(_counter)}"
                async with rt.open_session(sid) as w:
                    head = await w.head()
                    await w.append([NewEvent("k", {"tag": tag})])
                info = await rt.stat(sid)
                assert info is not None
                assert info.id == sid
                assert info.head == head + 1
                async with rt.open_session(sid, mode="read") as r:
                    assert (await r.read())[-1].data == {"tag": tag}
                assert sid in {i.id for i in await rt.list_sessions()}
                # Look-alikes (LIKE wildcards, case, a prefix) are other sessions.
                for other in {sid + "x", sid.swapcase(), sid.replace("%", "a").replace("_", "a")}:
                    if other != sid and valid_name(other):
                        got = await rt.stat(other)
                        assert got is None or got.id == other
                        async with rt.snapshot(sid) as snap:
                            assert all(e.session_id == sid for e in await snap.read())


@given(
    header=st.dictionaries(keys, payloads, max_size=3) | payloads,
    meta=st.none() | st.dictionaries(keys, payloads, max_size=3),
    run_id=st.none() | names,
)
@SETTINGS
async def test_hostile_headers_meta_and_run_ids(
    tmp_path: Path, header: Any, meta: Any, run_id: Any
) -> None:
    """Bad headers, history meta and run ids are refused, writing nothing; valid ones round-trip."""
    TRIED["inputs"] += 3
    sid = f"h{next(_counter)}"
    header_ok = header is None or (type(header) is dict and exact_json(header))
    meta_ok = meta is None or (type(meta) is dict and exact_json(meta))
    run_ok = run_id is None or (valid_name(run_id) and len(run_id) <= 252 and run_id.isprintable())
    with trio.fail_after(30):
        async with runtimes(tmp_path) as rts:
            for rt in rts.values():
                if header_ok:
                    async with rt.open_session(sid, header=header):
                        pass
                    info = await rt.stat(sid)
                    assert info is not None
                    assert info.header == (header or {})
                else:
                    await refused(rt.open_session(sid, header=header), InvalidArgumentError)
                    assert await rt.stat(sid) is None
                hist = f"{sid}-history"
                if meta_ok and run_ok:
                    got = await history(rt).append(
                        hist, [UserMessage("q")], run_id=run_id, meta=meta
                    )
                    [segment] = await history(rt).segments(hist)
                    assert (segment.run_id, segment.meta) == (got, meta)
                else:
                    with pytest.raises(InvalidArgumentError):
                        await history(rt).append(hist, [UserMessage("q")], run_id=run_id, meta=meta)
                    assert await rt.stat(hist) is None
                TRIED["stored" if header_ok and meta_ok and run_ok else "refused"] += 1


# -- sizes and depths --------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["memory", "sqlite", "jsonl"])
async def test_huge_strings(tmp_path: Path, backend: str) -> None:
    """A 10 MB string round-trips; a 10 MB id or kind is refused; the runtime keeps serving."""
    big = "\x00\u00e9\U0001f600" + "x" * (10 * 1024 * 1024) + "'; DROP TABLE events; --"
    target: Any = MemoryStore() if backend == "memory" else store_path(tmp_path, "big", backend)
    with trio.fail_after(120):
        async with open_runtime(target) as rt, rt.open_session("big") as w:
            assert await w.append([NewEvent("k", {"text": big}), NewEvent("k", big)]) == 2
            [first, second] = await w.read()
            assert first.data == {"text": big}
            assert second.data == big
            await refused(rt.open_session(big), InvalidSessionIdError)
            with pytest.raises(InvalidEventError) as info:
                await w.append([NewEvent("ok", None), NewEvent(big, None)])
            assert info.value.index == 1
            assert await w.append([NewEvent("k", "after")]) == 3
    TRIED["inputs"] += 3


def nested(depth: int, kind: str = "list") -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value] if kind == "list" else {"k": value}
    return value


@pytest.mark.parametrize("shape", ["list", "dict"])
@pytest.mark.parametrize("backend", ["memory", "sqlite", "jsonl"])
async def test_deep_nesting_refused(tmp_path: Path, backend: str, shape: str) -> None:
    """Data nested 10k levels deep is refused with InvalidEventError and writes nothing."""
    target: Any = MemoryStore() if backend == "memory" else store_path(tmp_path, "deep", backend)
    with trio.fail_after(30):
        async with open_runtime(target) as rt, rt.open_session("deep") as w:
            with pytest.raises(InvalidEventError) as info:
                await w.append([NewEvent("ok", 1), NewEvent("deep", nested(10_000, shape))])
            assert (info.value.index, info.value.kind) == (1, "deep")
            assert await w.head() == 0
            assert await w.append([NewEvent("k", nested(50, shape))]) == 1
            assert (await w.read())[0].data == nested(50, shape)
    TRIED["inputs"] += 2


def _accept_deepest(store: Any, count: int) -> list[int]:
    """In a fresh thread (a shallow stack, like a small script writing to the database):
    append, each to its own session, the ``count`` deepest nestings ``store.append``
    accepts. Returns their depths."""
    depths: list[int] = []

    def probe() -> None:
        depth = sys.getrecursionlimit() + 100
        while len(depths) < count and depth > 0:
            depth -= 1
            try:
                store.append(f"d{depth}", [NewEvent("deep", nested(depth))])
            except InvalidEventError:
                continue
            depths.append(depth)

    thread = threading.Thread(target=probe)
    thread.start()
    thread.join()
    return depths


@pytest.mark.parametrize("writer", ["runtime", "shallow-thread"])
@pytest.mark.parametrize("backend", ["memory", "sqlite", "jsonl"])
async def test_every_accepted_depth_reads_back(tmp_path: Path, backend: str, writer: str) -> None:
    """Every nesting depth an append accepts reads back through read, snapshot and tail."""
    path = store_path(tmp_path, "depth", backend)
    memory = MemoryStore()
    target: Any = memory if backend == "memory" else path
    depths: list[int] = []
    if writer == "shallow-thread":
        store: Any = (
            memory
            if backend == "memory"
            else JsonlStore(path)
            if backend == "jsonl"
            else SqliteStore(path)
        )
        try:
            depths = _accept_deepest(store, 5)
        finally:
            if store is not memory:
                store.close()
    problems: list[str] = []
    with trio.fail_after(60):
        async with open_runtime(target) as rt:
            if writer == "runtime":
                depth = sys.getrecursionlimit() + 100
                while len(depths) < 5 and depth > 0:  # the 5 deepest accepted depths
                    depth -= 1
                    async with rt.open_session(f"d{depth}") as w:
                        try:
                            await w.append([NewEvent("deep", nested(depth))])
                        except InvalidEventError:
                            continue
                        depths.append(depth)
            assert len(depths) == 5
            for depth in depths:
                TRIED["inputs"] += 1
                sid = f"d{depth}"
                try:
                    async with rt.open_session(sid, mode="read") as r:
                        assert (await r.read())[0].data == nested(depth)
                    async with rt.snapshot(sid) as snap:
                        assert (await snap.read())[0].data == nested(depth)
                    async for event in rt.tail(sid):
                        assert event.data == nested(depth)
                        break
                except RecursionError as exc:
                    problems.append(f"depth {depth}: accepted, read raises {exc!r}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("backend", ["memory", "sqlite", "jsonl"])
async def test_huge_int_refused_or_exact(tmp_path: Path, backend: str) -> None:
    """Integers past 64 bits (and past 4300 digits) are stored exactly or refused."""
    target: Any = MemoryStore() if backend == "memory" else store_path(tmp_path, "ints", backend)
    async with open_runtime(target) as rt, rt.open_session("ints") as w:
        for value in (2**63, -(2**64) - 1, 10**300, 10**4299, 10**5000):
            TRIED["inputs"] += 1
            head = await w.head()
            try:
                await w.append([NewEvent("k", {"v": value})])
            except InvalidEventError:
                assert await w.head() == head
                continue
            assert (await w.read(since_seq=head))[0].data == {"v": value}


# -- hostile database file names ---------------------------------------------------------


def _entries(directory: Path) -> set[str]:
    return set(os.listdir(directory))


@pytest.mark.parametrize(
    "name",
    [
        "nul\x00byte.db",
        "surrogate\udcff.db",
        "file:uri.db",
        "file::memory:",
        ":memory:",
        "",
    ],
    ids=["nul", "surrogate", "file-uri", "file-memory", "memory", "empty"],
)
async def test_hostile_file_names_refused_cleanly(tmp_path: Path, name: str) -> None:
    """NUL, surrogate, URI and in-memory database names are refused cleanly, leaving no file."""
    work = tmp_path / "work"
    work.mkdir()
    before = _entries(work)
    path = name if name in ("", ":memory:") or name.startswith("file:") else str(work / name)

    async def open_and_close(opener: str) -> None:
        if opener == "store":
            SqliteStore(path).close()
            return
        with trio.fail_after(10):
            async with open_runtime(path):
                pass

    for opener in ("store", "runtime"):
        TRIED["inputs"] += 1
        with pytest.raises(TidelogError) as info:
            await open_and_close(opener)
        assert isinstance(info.value, InvalidArgumentError | StoreError), repr(info.value)
        assert _entries(work) == before, f"{opener} left {_entries(work) - before}"
        TRIED["refused"] += 1


async def test_path_tricks_in_file_names(tmp_path: Path) -> None:
    """'..', '?' and '#' in paths name one plain file; symlinks are refused, targets untouched."""
    (tmp_path / "sub").mkdir()
    dotted = tmp_path / "sub" / ".." / "dotted.db"
    async with open_runtime(dotted) as rt, rt.open_session("s") as w:
        await w.append([NewEvent("k", 1)])
    assert (tmp_path / "dotted.db").exists()
    literal = tmp_path / "q.db?mode=memory&cache=shared#frag"
    async with open_runtime(literal) as rt, rt.open_session("s") as w:
        await w.append([NewEvent("k", 1)])
    assert literal.exists()
    target = tmp_path / "target.db"
    SqliteStore(target).close()
    content = target.read_bytes()
    for link, points_to in (
        (tmp_path / "link.db", target),
        (tmp_path / "dangling.db", tmp_path / "nowhere.db"),
    ):
        link.symlink_to(points_to)
        TRIED["inputs"] += 1
        with pytest.raises(StoreError):
            SqliteStore(link).close()
        with pytest.raises(StoreError), trio.fail_after(10):
            async with open_runtime(link):
                pass
        TRIED["refused"] += 1
    assert target.read_bytes() == content
    assert not (tmp_path / "nowhere.db").exists()
