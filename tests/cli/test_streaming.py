"""Streaming in bounded memory, on a 100,000-event session: ``show`` prints its first
line at once and stops early under ``| head``; ``show``, ``show --json``, ``tail`` and
``export`` keep their peak memory flat in the session's length."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_support import MEASURED, TIMEOUT, big_db

BIG = 100_000
SMALL = 1_000
#: How much more memory a 100x longer session may take (pages, allocator noise).
FLAT_KIB = 16 * 1024


@pytest.fixture(scope="module")
def dbs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A 100k-event session and a 1k-event one, each in its own file."""
    directory = tmp_path_factory.mktemp("streaming")
    return big_db(directory / "big.db", BIG), big_db(directory / "small.db", SMALL)


@pytest.fixture(scope="module")
def baseline(dbs: tuple[Path, Path]) -> int:
    """The peak memory of `show` on the 1k-event session: the runtime, the command and
    one page of events."""
    peak, _ = _peak_kib(dbs[1], "show", "big", "--jsonl")
    return peak


def _peak_kib(db: Path, *args: str) -> tuple[int, str]:
    """Run the command to completion (stdout to a pipe, read whole); its peak RSS."""
    proc = subprocess.run(
        [sys.executable, "-c", MEASURED, args[0], str(db), *args[1:]],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert proc.returncode == 0, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("maxrss ")
    return int(last.split()[1]), proc.stdout


@pytest.mark.slow
def test_first_line_at_once_and_head_stops_it(dbs: tuple[Path, Path]) -> None:
    """`show` of 100k events prints its first line long before it could have read the
    session (well under a second), and a reader that goes away after 3 lines (`| head
    -3`) ends it at once with exit status 0 and no traceback."""
    big, _ = dbs
    started = time.monotonic()
    with subprocess.Popen(
        [sys.executable, "-m", "runtime.cli", "show", str(big), "big", "--jsonl"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        first = proc.stdout.readline()
        first_line = time.monotonic() - started
        lines = [first, proc.stdout.readline(), proc.stdout.readline()]
        proc.stdout.close()  # what `head -3` does once it has its lines
        assert proc.wait(timeout=TIMEOUT) == 0
        stopped = time.monotonic() - started
        assert "Traceback" not in proc.stderr.read()
    assert [json.loads(line)["seq"] for line in lines] == [1, 2, 3]
    full = subprocess.run(
        [sys.executable, "-m", "runtime.cli", "show", str(big), "big", "--jsonl"],
        stdout=subprocess.DEVNULL,
        timeout=TIMEOUT,
        check=True,
    )
    whole = time.monotonic() - started - stopped
    print(f"first line {first_line:.2f}s, stopped {stopped:.2f}s, whole {whole:.2f}s")
    assert full.returncode == 0
    assert stopped < whole  # it did not read the whole session first


@pytest.mark.slow
@pytest.mark.parametrize(
    "args",
    [
        ["show", "big", "--jsonl"],
        ["show", "big", "--json"],
        ["show", "big"],
        ["tail", "big", "-n", "all", "--jsonl"],
        ["export"],
    ],
    ids=["show-jsonl", "show-json", "show-table", "tail-all", "export"],
)
def test_memory_stays_flat_in_the_session_length(
    dbs: tuple[Path, Path], baseline: int, args: list[str]
) -> None:
    """The command's peak memory on 100k events is within a few MiB of `show`'s on 1k
    events (it was 278 MB for 200k events when sessions were loaded whole), and its
    output is complete: every event, in order, once."""
    peak, out = _peak_kib(dbs[0], *args)
    print(f"{args}: peak {peak} KiB on {BIG} events; show on {SMALL}: {baseline} KiB")
    assert peak - baseline < FLAT_KIB
    if "--json" in args:
        assert [e["seq"] for e in json.loads(out)["events"]] == list(range(1, BIG + 1))
    elif "--jsonl" in args:
        assert sum(1 for _ in out.splitlines()) == BIG
    else:
        assert out.count("\n") >= BIG


@pytest.mark.slow
def test_tail_of_a_long_session_reads_only_its_end(dbs: tuple[Path, Path]) -> None:
    """`tail` of a 100k-event session prints the last 10 events and takes about as long
    as on a short one (it reads the end, not the whole session)."""
    big, small = dbs
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "runtime.cli", "tail", str(big), "big", "--jsonl"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    took_big = time.monotonic() - started
    assert [json.loads(x)["seq"] for x in proc.stdout.splitlines()] == list(range(BIG - 9, BIG + 1))
    started = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "runtime.cli", "tail", str(small), "big"],
        capture_output=True,
        timeout=TIMEOUT,
        check=True,
    )
    took_small = time.monotonic() - started
    print(f"tail: {took_big:.2f}s on {BIG} events, {took_small:.2f}s on {SMALL}")
    assert took_big < took_small + 1.0
