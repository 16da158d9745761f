"""A user's own program, outside the checkout, type-checks against the installed package:
``mypy --strict`` finds ``runtime`` (and its types) from a folder of its own."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROGRAM = """
import trio

from runtime import NewEvent, open_runtime


async def main(path: str) -> int:
    async with open_runtime(path) as rt:
        async with rt.open_session("s1") as w:
            head: int = await w.append([NewEvent("user", {"text": "hi"})])
    return head


wrong: str = NewEvent("user", 1)
trio.run(main, "app.db")
"""


def test_a_program_outside_the_checkout_type_checks(tmp_path: Path) -> None:
    """`mypy --strict prog.py` in a new folder (no project config): the program's only
    error is the one it makes (a NewEvent assigned to a str), so the package was found
    and read, not skipped as missing."""
    (tmp_path / "prog.py").write_text(PROGRAM)
    # One cache per checkout, kept between runs (a cold check of the package's imports
    # takes a while; a warm one a second or two).
    key = hashlib.sha256(str(ROOT).encode()).hexdigest()[:12]
    cache = Path(tempfile.gettempdir()) / f"tidelog-mypy-cache-{key}"
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(cache), "prog.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    errors = [line for line in proc.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 1, proc.stdout + proc.stderr
    assert errors[0].startswith("prog.py:14: error: Incompatible types in assignment")
    assert '"NewEvent"' in errors[0]
    assert proc.returncode == 1
