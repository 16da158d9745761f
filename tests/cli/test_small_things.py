"""Small things a new user meets: a backup is created like any new file (its mode
follows the umask, as a dump's does); the progress line of a backup through a dump
counts the dump's bytes against its size; `check` of a JSONL store reads it a page at a
time instead of holding several times the file."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from cli_support import MEASURED, TIMEOUT, make_db, read_terminal

from stores import AppendOp, NewEvent, open_store, prepare_events

COMMAND = [sys.executable, "-m", "runtime.cli"]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@pytest.mark.parametrize("umask", [0o022, 0o027], ids=["022", "027"])
def test_a_backup_and_a_dump_follow_the_umask(tmp_path: Path, umask: int) -> None:
    """`backup DB new.db` and `export -o` under umask 022 and 027: both files get mode
    0666 less the umask (a backup used to be 0600 whatever the umask)."""
    db = make_db(tmp_path)
    for args in (["backup", str(db), "copy.db"], ["export", str(db), "-o", "dump.jsonl"]):
        proc = subprocess.run(
            [*COMMAND, *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            umask=umask,
        )
        assert proc.returncode == 0, proc.stderr
    for name in ("copy.db", "dump.jsonl"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o666 & ~umask, name


def test_the_backup_progress_line_counts_the_dump(tmp_path: Path) -> None:
    """`backup --dest-kind jsonl` on a terminal: the restore step's line counts bytes
    of the dump against its size (it used to show `0/?` sessions, the only moving
    figure being the elapsed time)."""
    import fcntl
    import pty
    import struct
    import termios

    db = make_db(tmp_path)
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    with subprocess.Popen(
        [*COMMAND, "backup", str(db), "copy", "--dest-kind", "jsonl"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=slave,
        cwd=tmp_path,
        env=env,
    ) as proc:
        os.close(slave)
        chunks = [read_terminal(master)]
        assert proc.wait(timeout=TIMEOUT) == 0
    shown = ANSI.sub("", b"".join(chunks).decode(errors="replace"))
    restore = [part for part in re.split(r"[\r\n]", shown) if part.startswith("restore")]
    assert restore, shown
    assert all(re.search(r" \d[\d.]*/\d[\d.]* (bytes|kB|MB)", line) for line in restore), restore
    assert not any("/?" in line for line in restore), restore


def test_check_of_a_jsonl_store_does_not_hold_the_file_several_times(tmp_path: Path) -> None:
    """`check` of a JSONL store with one session of ~24 MB: its peak memory is less
    than twice the file's size above that of checking a one-event store (it was ~5x:
    every event of the session decoded at once)."""
    small, big = tmp_path / "small", tmp_path / "big"
    small.mkdir()
    big.mkdir()
    store = open_store(str(small))
    try:
        store.append("a", [NewEvent("k", 1)])
    finally:
        store.close()
    store = open_store(str(big))
    try:
        page = tuple(
            prepare_events(
                [NewEvent("msg", {"i": i, "text": "lorem ipsum " * 12}) for i in range(5000)]
            )
        )
        for n in range(20):
            store.write_batch([AppendOp("big", page, expected_head=n * len(page))])
    finally:
        store.close()
    size = sum(f.stat().st_size for f in big.rglob("*") if f.is_file())
    assert size > 20_000_000
    peaks = []
    for root in (small, big):
        proc = subprocess.run(
            [sys.executable, "-c", MEASURED, "check", str(root)],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        peaks.append(int(proc.stderr.split()[-1]) * 1024)
    assert peaks[1] - peaks[0] < 2 * size, (peaks, size)
