"""Every program in examples/ runs to completion as a real subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.py"))

#: Text an example must print, by file name (examples not listed only need exit code 0).
EXPECTED_OUTPUT: dict[str, list[str]] = {
    "store_basics.py": [
        "created session 'chat-1'",
        "appended 3 events, head is now 3",
        "conflict: expected head 1, actual head 3",
        "retried with the actual head, head is now 4",
        "read seq 2: assistant",
        "removed 2 events, head 2",
        "session 'notes': head 1",
        "integrity check: ok",
        "done",
    ],
}


def test_examples_are_found() -> None:
    """The glob finds the examples directory's programs (guards against a silent empty run)."""
    assert "store_basics.py" in {p.name for p in EXAMPLES}


@pytest.mark.slow
@pytest.mark.parametrize("example", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_runs(example: Path, tmp_path: Path) -> None:
    """An example exits 0 within the timeout, run with no arguments in a fresh cwd."""
    proc = subprocess.run(
        [sys.executable, str(example)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    for text in EXPECTED_OUTPUT.get(example.name, []):
        assert text in proc.stdout, f"missing {text!r} in:\n{proc.stdout}"
