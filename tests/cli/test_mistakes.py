"""Ordinary mistakes and accidents meet one line on stderr, never a traceback: an output
in a folder that does not exist, a full disk (``/dev/full``), a reader that goes away (a
closed pipe: quiet, status 0); and Ctrl-C in the middle of exporting one big session
stops it there, leaving no file (status 130). Real processes, real files."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_support import TIMEOUT, big_db, files, make_db, tidelog

COMMAND = [sys.executable, "-m", "runtime.cli"]


def one_line(stderr: str) -> str:
    assert "Traceback" not in stderr
    assert "Exception ignored" not in stderr
    assert len(stderr.splitlines()) == 1, stderr
    return stderr


@pytest.mark.parametrize(
    "args",
    [
        ["export", "{db}", "-o", "missing/x.jsonl"],
        ["backup", "{db}", "missing/x.db"],
        ["backup", "{db}", "missing/x", "--dest-kind", "jsonl"],
    ],
    ids=["export", "backup-sqlite", "backup-jsonl"],
)
def test_an_output_in_a_missing_folder_is_one_line(tmp_path: Path, args: list[str]) -> None:
    """`export -o missing/x`, `backup DB missing/x` (either kind): exit 2, one line
    naming the folder, nothing created."""
    db = make_db(tmp_path)
    proc = tidelog(*(a.format(db=db) for a in args), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "no folder" in one_line(proc.stderr)
    assert "missing" in proc.stderr
    assert files(tmp_path) == ["app.db"]


@pytest.mark.parametrize(
    "args",
    [["export", "{db}"], ["show", "{db}", "chat"], ["ls", "{db}"], ["ls", "{db}", "--json"]],
    ids=["export", "show", "ls", "ls-json"],
)
def test_a_full_disk_is_one_line(tmp_path: Path, args: list[str]) -> None:
    """Output to a full device (/dev/full: every write fails with ENOSPC): exit 2, one
    line saying the output cannot be written and why."""
    db = make_db(tmp_path)
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [*COMMAND, *(a.format(db=db) for a in args)],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
            timeout=TIMEOUT,
        )
    assert proc.returncode == 2, proc.stderr
    assert "No space left on device" in one_line(proc.stderr)


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One session of 200,000 events (a few seconds to export whole)."""
    return big_db(tmp_path_factory.mktemp("big") / "big.db", 200_000)


@pytest.mark.parametrize("args", [["show", "{db}", "big"], ["export", "{db}"]])
def test_a_closed_pipe_ends_quietly(big: Path, tmp_path: Path, args: list[str]) -> None:
    """The reader of `show` / `export` goes away after one line (`| head -1`): exit 0,
    nothing on stderr."""
    with subprocess.Popen(
        [*COMMAND, *(a.format(db=big) for a in args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
    ) as proc:
        assert proc.stdout is not None
        assert proc.stderr is not None
        assert proc.stdout.readline()
        proc.stdout.close()
        stderr = proc.stderr.read()
        assert proc.wait(timeout=TIMEOUT) == 0, stderr
    assert stderr == b""


def test_ctrl_c_mid_export_of_one_session_stops_there(big: Path, tmp_path: Path) -> None:
    """SIGINT while `export -o FILE` writes its one big session: it stops inside the
    session (exit 130, a line saying no dump was written), neither FILE nor a partial
    file is left."""
    out = tmp_path / "d.jsonl"
    partial = Path(f"{out}.partial")
    with subprocess.Popen(
        [*COMMAND, "export", str(big), "-o", str(out)],
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    ) as proc:
        deadline = time.monotonic() + TIMEOUT
        while not partial.exists() or partial.stat().st_size == 0:
            assert time.monotonic() < deadline
            assert proc.poll() is None
            time.sleep(0.01)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 130, stderr
    assert "no dump was written" in one_line(stderr)
    assert files(tmp_path) == []
