"""Tables on an 80-column terminal (a real pseudo-terminal): ids are never cut -- two
ids that share a long prefix stay two different ids -- and no column disappears
silently: the lesser ones are left out first, and a line under the table names them."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

from cli_support import TIMEOUT, read_terminal

from runtime import NewEvent
from stores import open_store

#: Ids sharing their first 40 characters (a cut to fewer shows them as one).
IDS = [
    "tidelog/run/2f1c9a7e-long-run-identifier-000001",
    "tidelog/run/2f1c9a7e-long-run-identifier-000002",
    "conversation-with-a-rather-long-name-alpha",
    "conversation-with-a-rather-long-name-alpha/fork-b",
]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def on_terminal(args: list[str], cwd: Path, columns: int = 80) -> tuple[int, str]:
    """``tidelog ARGS`` with its stdout on a pseudo-terminal ``columns`` wide (stdin
    not a terminal, no COLUMNS in the environment: the width is the terminal's)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    with subprocess.Popen(
        [sys.executable, "-m", "runtime.cli", *args],
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=subprocess.PIPE,
        cwd=cwd,
        env=env,
    ) as proc:
        os.close(slave)
        chunks = [read_terminal(master)]
        assert proc.wait(timeout=TIMEOUT) in (0, 1), proc.stderr
    return proc.returncode, ANSI.sub("", b"".join(chunks).decode()).replace("\r\n", "\n")


def _store(tmp_path: Path) -> str:
    db = str(tmp_path / "s.db")
    store = open_store(db)
    try:
        for sid in IDS[:3]:
            store.append(sid, [NewEvent("k", {"text": "hello world " * 5})] * 3)
        store.fork(IDS[2], IDS[3], at_seq=2)
    finally:
        store.close()
    return db


def _columns_accounted(output: str, names: list[str]) -> None:
    """Every column is in the header line, or named in the line saying it was left out."""
    header = next(line for line in output.splitlines() if line.strip())
    note = next((line for line in output.splitlines() if line.startswith("(left out")), "")
    for name in names:
        assert name in header or name in note, (name, output)


def test_ls_on_80_columns_keeps_ids_whole_and_names_what_it_leaves_out(tmp_path: Path) -> None:
    """`ls --internal` on 80 columns: every id printed whole on its row beside its HEAD,
    no line wider than 80, and each column shown or named as left out."""
    db = _store(tmp_path)
    _, output = on_terminal(["ls", db, "--internal"], tmp_path)
    lines = output.splitlines()
    assert all(len(line) <= 80 for line in lines), output
    heads = {IDS[0]: 3, IDS[1]: 3, IDS[2]: 3, IDS[3]: 2}
    for sid, head in heads.items():
        row = [line for line in lines if line.split()[:1] == [sid]]
        assert len(row) == 1, (sid, output)
        assert row[0].split()[1] == str(head), output
    assert "HEAD" in lines[0]
    _columns_accounted(output, ["ID", "HEAD", "UPDATED", "PARENT", "HEADER"])
    assert "(left out to fit 80 columns:" in output


def test_check_on_80_columns_keeps_level_and_session(tmp_path: Path) -> None:
    """`check` on 80 columns with two findings on long internal ids: each finding's row
    starts with its LEVEL and holds its whole session id; the columns left out are
    named."""
    db = _store(tmp_path)
    code, output = on_terminal(["check", db], tmp_path)
    assert code == 1, output
    table = output.splitlines()[1:]  # (the first line is the verdict, naming the path)
    assert all(len(line) <= 80 for line in table), output
    for sid in IDS[:2]:
        row = [line for line in table if sid in line.split()]
        assert len(row) == 1, (sid, output)
        assert row[0].split()[0] == "warning", output
    _columns_accounted("\n".join(table), ["LEVEL", "CHECK", "SESSION", "FINDING", "WHAT TO DO"])
