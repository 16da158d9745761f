"""Streaming in bounded memory, on a 100,000-event session: ``show`` prints as it reads
and stops early under ``| head``, ``tail`` reads only the end; ``show`` (all formats),
``tail -n all`` and ``export`` keep their peak memory flat in the session's length."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import apsw
import pytest
from cli_support import MEASURED, TIMEOUT, big_db, tidelog

from runtime.cli._browse import LARGEST_PAGE

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


@pytest.fixture(scope="module")
def damaged(dbs: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the 100k-event file whose event 50,000 holds text that is not JSON: a
    command that decodes that event fails, one that never reads it does not."""
    copy = tmp_path_factory.mktemp("damaged") / "damaged.db"
    copy.write_bytes(dbs[0].read_bytes())
    conn = apsw.Connection(str(copy))
    try:
        conn.execute("UPDATE events SET data='{not json' WHERE seq=?", (BIG // 2,))
    finally:
        conn.close()
    return copy


@pytest.mark.slow
def test_first_lines_come_before_the_session_is_read(
    dbs: tuple[Path, Path], damaged: Path, tmp_path: Path
) -> None:
    """`show` of 100k events streams: with event 50,000 damaged, it prints the events
    before it (all but those of the page that holds it) and only then fails (loading the
    session first, it printed nothing); a reader that goes away after 3 lines (`| head
    -3`) ends it at once with exit status 0 and no traceback. (Prints the time to the
    first line.)"""
    proc = tidelog("show", str(damaged), "big", "--jsonl", cwd=tmp_path)
    assert proc.returncode == 2
    assert "corrupt" in proc.stderr
    assert BIG // 2 - LARGEST_PAGE <= proc.stdout.count("\n") < BIG // 2
    started = time.monotonic()
    with subprocess.Popen(
        [sys.executable, "-m", "runtime.cli", "show", str(dbs[0]), "big", "--jsonl"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as reader:
        assert reader.stdout is not None
        assert reader.stderr is not None
        lines = [reader.stdout.readline()]
        first_line = time.monotonic() - started
        lines += [reader.stdout.readline(), reader.stdout.readline()]
        reader.stdout.close()  # what `head -3` does once it has its lines
        assert reader.wait(timeout=TIMEOUT) == 0
        assert "Traceback" not in reader.stderr.read()
    assert [json.loads(line)["seq"] for line in lines] == [1, 2, 3]
    print(f"show of {BIG} events: first line after {first_line:.2f}s (process start included)")


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
def test_tail_of_a_long_session_reads_only_its_end(damaged: Path, tmp_path: Path) -> None:
    """`tail` of a 100k-event session prints its last 10 events without reading the
    others: with event 50,000 damaged, `tail` still succeeds where `tail -n all` fails."""
    proc = tidelog("tail", str(damaged), "big", "--jsonl", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert [json.loads(x)["seq"] for x in proc.stdout.splitlines()] == list(range(BIG - 9, BIG + 1))
    whole = tidelog("tail", str(damaged), "big", "-n", "all", "--jsonl", cwd=tmp_path)
    assert whole.returncode == 2
    assert "corrupt" in whole.stderr
