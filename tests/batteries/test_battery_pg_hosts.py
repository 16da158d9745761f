"""Battery: several hosts on one PostgreSQL database.

Each host is a separate OS process with a runtime of its own (``pg_host_worker.py``),
whose leases name a host of its own (so no peer can look at its pid): contention for one
session, an owner SIGKILLed in the middle of its writes and taken over at once by another
host (the lease's ttl is 30 s: only the server's advisory lock can tell it died), a tail in
a third process that sees every event exactly once (woken by NOTIFY alone: it never
polls), a live owner cut off by a network partition (``pg_proxy.py``) taken over the same
way and fenced by its lease when it returns, and four hosts appending to disjoint
sessions with no error reaching a caller.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from battery_support import child_env, python_child
from helpers import text
from pg_proxy import open_cut_proxy

from stores import PostgresStore

pytestmark = pytest.mark.slow

#: The lease ttl of every host: far longer than any takeover the tests allow.
TTL = 30.0
#: A dead owner must be taken over within this many seconds of its SIGKILL.
TAKEOVER_LIMIT = 1.0


@pytest.fixture
def url(pg_schema: tuple[str, str]) -> str:
    from pgtest import url_of

    return url_of(*pg_schema)


class Host:
    """One running ``pg_host_worker.py`` process and its JSON lines."""

    def __init__(self, proc: trio.Process, name: str, err: Path) -> None:
        self.proc = proc
        self.name = name
        self.err = err
        self._buffer = b""

    async def message(self, within: float = 30.0) -> dict[str, Any]:
        """The next JSON line of the host (fails if it exits or stays silent)."""
        assert self.proc.stdout is not None
        with trio.fail_after(within):
            while b"\n" not in self._buffer:
                chunk = await self.proc.stdout.receive_some(65536)
                if not chunk:
                    raise AssertionError(f"{self.name} ended: {self.err.read_text()}")
                self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return dict(json.loads(line))

    async def send(self, line: str) -> None:
        """Write ``line`` to the host's stdin."""
        assert self.proc.stdin is not None
        await self.proc.stdin.send_all(line.encode() + b"\n")

    async def until(self, key: str, within: float = 30.0) -> list[dict[str, Any]]:
        """Every message up to and including the first with ``key``."""
        seen: list[dict[str, Any]] = []
        while not seen or key not in seen[-1]:
            seen.append(await self.message(within))
        return seen


@asynccontextmanager
async def host(
    tmp_path: Path, command: str, url: str, name: str, *args: str
) -> AsyncIterator[Host]:
    """Run a host for the block; killed and reaped at exit if still running."""
    err = tmp_path / f"{name}.err"
    argv = python_child("pg_host_worker.py", command, url, "--host", name, *args)
    with err.open("wb") as stderr:
        proc = await trio.lowlevel.open_process(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, env=child_env()
        )
    try:
        yield Host(proc, name, err)
    finally:
        with trio.CancelScope(shield=True):
            if proc.returncode is None:
                proc.kill()
            await proc.wait()
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    await stream.aclose()


def stored(url: str, session: str) -> list[Any]:
    store = PostgresStore.from_url(url)
    try:
        return store.read(session)
    finally:
        store.close()


async def test_hosts_contend_for_one_session(tmp_path: Path, url: str) -> None:
    """Four hosts want the same session: one owns it at a time, the others are refused
    until it is released; the log is four whole, gapless turns."""
    count = 40
    args = ("--count", str(count), "--hold")
    async with (
        host(tmp_path, "write", url, "h0", *args, "--seed", "0") as h0,
        host(tmp_path, "write", url, "h1", *args, "--seed", "1") as h1,
        host(tmp_path, "write", url, "h2", *args, "--seed", "2") as h2,
        host(tmp_path, "write", url, "h3", *args, "--seed", "3") as h3,
    ):
        # The first owner holds the session until the other three were refused once.
        first = {h.name: await h.message(within=60) for h in (h0, h1, h2, h3)}
        assert sorted("owner" in m for m in first.values()) == [False, False, False, True]
        assert [m for m in first.values() if "owner" not in m] == [{"waiting": True}] * 3
        for h in (h0, h1, h2, h3):
            await h.send("go")
        reports = {}
        for h in (h0, h1, h2, h3):
            messages = [first[h.name], *await h.until("done", within=120)]
            messages = [m for m in messages if "waiting" not in m]
            reports[h.name] = (messages[0]["head"], messages[-1]["done"], messages[0]["refused"])
    events = stored(url, "s")
    assert [e.seq for e in events] == list(range(1, 4 * count + 1))
    turns = sorted(reports.values())
    assert [(start, end) for start, end, _ in turns] == [
        (k * count, (k + 1) * count) for k in range(4)
    ]
    for name, (start, end, _) in reports.items():
        assert {e.data["tag"] for e in events[start:end]} == {name}
    assert sum(refused > 0 for _, _, refused in turns) == 3  # each later owner waited


async def test_killed_owner_taken_over_at_once_and_tail_sees_every_event_once(
    tmp_path: Path, url: str
) -> None:
    """A host SIGKILLed in the middle of its writes is taken over by a waiting host
    within a second (not the 30 s ttl); nothing it had acknowledged is lost, no batch is
    torn; a tail on a third host sees every event exactly once, in order."""
    async with (
        host(tmp_path, "tail", url, "watcher") as watcher,
        host(tmp_path, "write", url, "first", "--seed", "7", "--lease-ttl", str(TTL)) as first,
    ):
        await watcher.until("ready")
        owned = await first.message()
        assert owned["owner"] == "first"
        async with host(
            tmp_path, "write", url, "second", "--count", "60", "--end", "--lease-ttl", str(TTL)
        ) as second:
            assert (await second.message()) == {"waiting": True}  # it contends
            acked = 0
            while acked < 80:
                acked = max(acked, (await first.message()).get("ack", 0))
            await trio.sleep(0.05)
            os.kill(first.proc.pid, signal.SIGKILL)
            killed = time.time()
            await first.proc.wait()
            took = await second.message(within=30)
            assert took["owner"] == "second"
            assert took["refused"] > 0
            assert took["at"] - killed < TAKEOVER_LIMIT, took["at"] - killed
            assert took["head"] >= acked
            done = (await second.until("done", within=60))[-1]["done"]
        seen = [m["seq"] for m in await watcher.until("done", within=30) if "seq" in m]
    events = stored(url, "s")
    assert [e.seq for e in events] == list(range(1, done + 1))
    assert seen == [e.seq for e in events]  # every event once, in order
    batches: dict[tuple[str, int], list[tuple[int, int, int]]] = {}
    for e in events[:-1]:
        batches.setdefault((e.data["tag"], e.data["b"]), []).append(
            (e.seq, e.data["k"], e.data["of"])
        )
    for parts in batches.values():
        seq0, _, of = parts[0]
        assert [(s, k) for s, k, _ in parts] == [(seq0 + k, k) for k in range(of)]
    tags = [e.data["tag"] for e in events[:-1]]
    assert tags == ["first"] * took["head"] + ["second"] * 60


async def test_partitioned_owner_is_taken_over_and_fenced_when_it_returns(
    tmp_path: Path, pg_schema: tuple[str, str]
) -> None:
    """A live host cut off from the server by a network partition (every connection
    through a proxy cut, new ones refused) is taken over by a waiting host within a
    second: the server freed its advisory lock. When the partition heals, the first
    host's writes are refused, never stored after the new owner's; every event it had
    acknowledged stands, and the log is its prefix then the new owner's events."""
    from pgtest import url_of

    dsn, schema = pg_schema
    url = url_of(dsn, schema)
    with open_cut_proxy(dsn) as proxy:
        cut = url_of(proxy.dsn(dsn), schema)
        first_args = ("--seed", "7", "--lease-ttl", str(TTL))
        async with host(tmp_path, "write", cut, "first", *first_args) as first:
            owned = await first.message()
            assert owned["owner"] == "first"
            second_args = ("--count", "60", "--end", "--lease-ttl", str(TTL))
            async with host(tmp_path, "write", url, "second", *second_args) as second:
                assert (await second.message()) == {"waiting": True}  # it contends
                acks: list[int] = []
                while not acks or acks[-1] < 80:
                    acks.append((await first.message())["ack"])
                proxy.partition()
                parted = time.time()
                took = await second.message(within=30)
                assert took["owner"] == "second"
                assert took["at"] - parted < TAKEOVER_LIMIT, took["at"] - parted
                proxy.heal()  # the first host is still alive, and retrying
                done = (await second.until("done", within=60))[-1]["done"]
                with trio.fail_after(60):
                    while True:  # every acknowledgement the first host printed
                        try:
                            acks.append((await first.message())["ack"])
                        except AssertionError:  # it ended
                            break
                    await first.proc.wait()
    assert first.proc.returncode != 0  # its writes after the takeover were refused
    assert "OwnershipLostError" in first.err.read_text() or "UnwrittenError" in (
        first.err.read_text()
    )
    events = stored(url, "s")
    assert [e.seq for e in events] == list(range(1, done + 1))
    assert max(acks) <= took["head"]  # every acknowledged event of the first host stands
    tags = [e.data["tag"] for e in events[:-1]]
    assert tags == ["first"] * took["head"] + ["second"] * 60


async def test_four_hosts_append_to_disjoint_sessions(tmp_path: Path, url: str) -> None:
    """Four hosts, ten sessions each, appending at once: no error reaches any caller and
    every event is stored once."""
    names = [f"host{k}" for k in range(4)]
    sessions = {n: ",".join(f"{n}-s{i}" for i in range(10)) for n in names}
    opts = ["--count", "30", "--nowait", "20"]
    async with (
        host(tmp_path, "append", url, names[0], "--sessions", sessions[names[0]], *opts) as a,
        host(tmp_path, "append", url, names[1], "--sessions", sessions[names[1]], *opts) as b,
        host(tmp_path, "append", url, names[2], "--sessions", sessions[names[2]], *opts) as c,
        host(tmp_path, "append", url, names[3], "--sessions", sessions[names[3]], *opts) as d,
    ):
        results = {h.name: (await h.until("done", within=120))[-1]["done"] for h in (a, b, c, d)}
        for h in (a, b, c, d):
            assert await h.proc.wait() == 0, h.err.read_text()
            assert "Traceback" not in h.err.read_text()
    store = PostgresStore.from_url(url)
    try:
        for name, heads in results.items():
            assert heads == dict.fromkeys(sessions[name].split(","), 50)
            for session in heads:
                events = store.read(session)
                assert Counter(e.kind for e in events) == {"a": 30, "b": 20}
                assert {text(e, "tag") for e in events} == {name}
    finally:
        store.close()
