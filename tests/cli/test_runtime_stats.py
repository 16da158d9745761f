"""`tidelog stats` shows the statistics a live runtime of another process publishes
(``open_runtime(..., publish_statistics=SECONDS)``), on every backend; a runtime that
exited removes its record, one that was killed leaves a stale record that stats does not
show as live and the next publishing runtime removes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import trio
from cli_support import TIMEOUT, new_address, tidelog

from runtime import InvalidArgumentError, open_runtime, published_statistics
from stores._urls import open_store

#: A host: a runtime publishing every 0.1 s, 50 appends, then "ready", then it runs until
#: its stdin closes.
HOST = """
import sys, trio
from runtime import NewEvent, open_runtime

async def main(address):
    async with open_runtime(address, publish_statistics=0.1) as rt:
        async with rt.open_session("work") as w:
            for i in range(50):
                await w.append([NewEvent("e", i)])
        await trio.sleep(0.3)  # at least one publication after the appends
        print("ready", flush=True)
        await trio.to_thread.run_sync(sys.stdin.read)

trio.run(main, sys.argv[1])
"""


@contextmanager
def host(address: str) -> Iterator[subprocess.Popen[str]]:
    """A host process running a publishing runtime on ``address``, ready."""
    with subprocess.Popen(
        [sys.executable, "-c", HOST, address],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready"
            yield proc
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=TIMEOUT)


def stats(address: str, cwd: Path) -> dict[str, object]:
    proc = tidelog("stats", address, "--json", cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    document: dict[str, object] = json.loads(proc.stdout)
    return document


@pytest.mark.parametrize("kind", ["sqlite", "jsonl", "postgres"])
def test_stats_shows_a_live_runtime_of_another_process(tmp_path: Path, kind: str) -> None:
    """While a host runs, `stats --json` lists its runtime as live, with its holder and
    the writer's counters (its 50 appends committed) and the text names it; once the
    host has exited its record is gone and the text says no live runtime publishes."""
    with new_address(kind, tmp_path) as address:
        with host(address) as proc:
            runtimes = stats(address, tmp_path)["runtimes"]
            assert isinstance(runtimes, list)
            assert len(runtimes) == 1
            (runtime,) = runtimes
            assert runtime["live"] is True
            assert runtime["holder"].startswith(f"pid {proc.pid} on ")
            assert runtime["interval"] == 0.1
            assert runtime["statistics"]["writer"]["events_committed"] >= 50
            text = tidelog("stats", address, cwd=tmp_path).stdout
            assert "LIVE RUNTIME" in text
            assert f"pid {proc.pid} on " in text
            assert proc.stdin is not None
            proc.stdin.close()
            assert proc.wait(timeout=TIMEOUT) == 0
        assert stats(address, tmp_path)["runtimes"] == []
        text = tidelog("stats", address, cwd=tmp_path).stdout
        assert "live runtimes: none publishes statistics here" in text


def test_a_killed_runtimes_record_is_stale_until_the_next_runtime(tmp_path: Path) -> None:
    """A host killed with SIGKILL leaves its record: `stats` shows it as not live and
    says there is a stale record; the next runtime that publishes removes it (and its
    own at exit). A publish interval that is not a positive number is refused."""
    address = str(tmp_path / "app.db")
    with host(address) as proc:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=TIMEOUT)
    runtimes = stats(address, tmp_path)["runtimes"]
    assert isinstance(runtimes, list)
    assert [r["live"] for r in runtimes] == [False]
    assert (
        "(1 stale records of runtimes that are gone)"
        in tidelog("stats", address, cwd=tmp_path).stdout
    )

    async def publish_once() -> None:
        async with open_runtime(address, publish_statistics=0.05):
            await trio.sleep(0.2)
        for bad in (0, -1.0, float("nan"), "5"):
            with pytest.raises(InvalidArgumentError, match="publish_statistics"):
                async with open_runtime(address, publish_statistics=bad):  # type: ignore[arg-type]
                    pass

    trio.run(publish_once)
    store = open_store(address, read_only=True)
    try:
        assert published_statistics(store) == []
        assert [info.id for info in store.list_sessions()] == ["work"]
    finally:
        store.close()
