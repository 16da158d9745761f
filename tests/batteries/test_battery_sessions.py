"""Battery: many sessions opened and closed one after another free what each one took.

On every backend a runtime opens, writes and closes 2,000 sessions (400 on JSONL, where
creating a session file costs an fsync and ~12 ms here, and 500 on PostgreSQL; 10,000
everywhere under ``TIDELOG_SOAK=1``) after a warm-up; open descriptors and threads must
come back to what they were after the warm-up (within a few: caches of the store and
trio's thread cache), and the resident set may grow only by a small bound per session
(the events themselves stay in a MemoryStore)."""

from __future__ import annotations

import gc
import os
import threading
from pathlib import Path

import pytest
import trio
import trio.lowlevel
from battery_support import SOAK, record, size
from helpers import runtime_target

from runtime import NewEvent, open_runtime

#: Sessions per backend (the fast run's sizes keep the battery to a few seconds each).
SESSIONS = {
    "memory": size(2_000, 10_000),
    "sqlite": size(2_000, 10_000),
    "jsonl": size(400, 10_000),
    "postgres": size(500, 10_000),
}
WARM_UP = 100


def descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def resident_kib() -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.mark.slow
@pytest.mark.parametrize("run", ["soak" if SOAK else "fast"])
async def test_sessions_free_their_resources(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest, run: str
) -> None:
    del run  # (names the size in the test id)
    """Descriptors and threads return to their level after a warm-up, and RSS grows by
    less than 4 KiB per session, over the backend's sessions opened, written and closed."""
    sessions = SESSIONS[backend]
    async with open_runtime(runtime_target(backend, tmp_path, request)) as rt:

        async def one(i: int) -> None:
            async with rt.open_session(f"s{i}") as w:
                await w.append([NewEvent("k", i)])

        for i in range(WARM_UP):
            await one(i)
        gc.collect()
        fds, threads, rss = descriptors(), threading.active_count(), resident_kib()
        for i in range(WARM_UP, WARM_UP + sessions):
            await one(i)
        await trio.lowlevel.checkpoint()
        gc.collect()
        grown = (
            descriptors() - fds,
            threading.active_count() - threads,
            resident_kib() - rss,
        )
        record("sessions", backend=backend, sessions=sessions, grown=list(grown))
        assert grown[0] <= 4, f"{grown[0]} descriptors more after {sessions} sessions"
        assert grown[1] <= 2, f"{grown[1]} threads more after {sessions} sessions"
        assert grown[2] < 4 * sessions + 8192, f"RSS grew {grown[2]} KiB"
        assert await rt.stat(f"s{WARM_UP + sessions - 1}") is not None
