"""W12: cold start of a command and of ``import runtime``.

Wall time from spawning a fresh process to its exit, measured by the parent, for:

* ``python -c pass``: the interpreter's own start (the reference for the import);
* ``python -c "import runtime"``: what any program using tidelog pays first;
* ``python -c "import trio"``: the import of the event loop alone (the reference for
  ``tidelog ls``: a command of a trio program cannot start faster than trio imports);
* ``sqlite3 DB .tables``: the sqlite3 shell opening the database and listing its tables
  (the reference for a read command; ``no data`` if the shell is not installed);
* ``tidelog ls DB``: the command (the console script installed beside the interpreter,
  as a user runs it; ``no data`` where it is not installed) listing the sessions of a
  small database: :data:`SESSIONS` sessions of one event each, written by
  the parent before the clock starts.

Each measurement is the median of :data:`PROCESSES` fresh processes, one after another,
after one unmeasured run; the file is in the OS page cache. ``tidelog ls``'s case runs
``import trio`` too, its processes taking turns with the command's, and its ratio to
``import trio`` is to that interleaved median: the machine's load drifts over the seconds
between two cases (ratios of 1.04-1.71 within one run when each was measured on its own),
and it moves both sides alike when they take turns. The bytecode cache is warm, as
after ``pip install`` (which compiles every module): the children write and read it under
a ``PYTHONPYCACHEPREFIX`` of their own, whatever ``PYTHONDONTWRITEBYTECODE`` says here, so
neither side pays for compiling. Target: ``tidelog ls`` at most 1.5x ``import trio``.
"""

from __future__ import annotations

import math
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import trio

from runtime import NewEvent, open_runtime

from ..harness.core import PAYLOAD, CaseContext, Metrics, Row, Target, case, rows
from ..harness.procs import ROOT, child_env

__all__ = ["PROCESSES", "SESSIONS"]

#: Fresh processes per measurement (their median is the round's value).
PROCESSES = 5
#: Sessions of the small database ``tidelog ls`` lists.
SESSIONS = 20


async def _write_db(path: Path) -> None:
    async with open_runtime(path) as rt:
        for i in range(SESSIONS):
            async with rt.open_session(f"session-{i:02d}") as w:
                await w.append([NewEvent("message", PAYLOAD)])


def _median_ms(commands: Sequence[Sequence[str]], pycache: Path) -> list[float]:
    """The median wall times of :data:`PROCESSES` runs of each of ``commands``, in ms,
    taking turns (one run of each in order, :data:`PROCESSES` times), after one
    unmeasured run of each that fills the bytecode cache under ``pycache``."""
    env = child_env()
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(pycache)
    for command in commands:
        subprocess.run(command, cwd=ROOT, env=env, capture_output=True, check=True, timeout=120)
    times: list[list[float]] = [[] for _ in commands]
    for _ in range(PROCESSES):
        for command, spent in zip(commands, times, strict=True):
            start = time.perf_counter()
            subprocess.run(command, cwd=ROOT, env=env, capture_output=True, check=True, timeout=120)
            spent.append((time.perf_counter() - start) * 1000.0)
    return [statistics.median(spent) for spent in times]


def _command(
    make: Callable[[Path], list[str] | None], *, db: bool, beside_trio: bool = False
) -> Callable[[CaseContext], Metrics]:
    """The case that measures ``make(path)``'s start (``start_ms``); with ``beside_trio``,
    taking turns with ``import trio``, whose median it reports too
    (``import_trio_ms``)."""

    def run(ctx: CaseContext) -> Metrics:
        with ctx.fresh_dir() as d:
            path = d / "small.db"
            if db:
                trio.run(_write_db, path)
            command = make(path)
            if command is None:
                return {"start_ms": math.nan}  # "no data": the program is not installed
            if not beside_trio:
                [start] = _median_ms([command], d / "pycache")
                return {"start_ms": start}
            trio_start, start = _median_ms([_IMPORT_TRIO, command], d / "pycache")
            return {"start_ms": start, "import_trio_ms": trio_start}

    return run


_IMPORT_TRIO = [sys.executable, "-c", "import trio"]


def _sqlite3(path: Path) -> list[str] | None:
    shell = shutil.which("sqlite3")
    return None if shell is None else [shell, str(path), ".tables"]


case("W12/python", system="python -c pass")(
    _command(lambda _: [sys.executable, "-c", "pass"], db=False)
)
case("W12/import", system='python -c "import runtime"')(
    _command(lambda _: [sys.executable, "-c", "import runtime"], db=False)
)
case("W12/import-trio", system='python -c "import trio"')(
    _command(lambda _: _IMPORT_TRIO, db=False)
)
case("W12/sqlite3", system="sqlite3 DB .tables")(_command(_sqlite3, db=True))


def _tidelog_ls(path: Path) -> list[str] | None:
    script = Path(sys.executable).parent / "tidelog"  # the installed console script
    return [str(script), "ls", str(path)] if script.exists() else None


case("W12/tidelog-ls", system="tidelog ls DB")(_command(_tidelog_ls, db=True, beside_trio=True))

_IMPORT = "W12 cold start: import runtime (fresh process, to exit)"
_LS = f"W12 cold start: list the sessions of a {SESSIONS}-session database (fresh process)"
rows(
    Row("W12", _IMPORT, "W12/python", "start_ms", "ms", note="reference", higher_is_better=False),
    Row(
        "W12",
        _IMPORT,
        "W12/import",
        "start_ms",
        "ms",
        reference=("W12/python", "start_ms"),
        higher_is_better=False,
    ),
    Row("W12", _LS, "W12/sqlite3", "start_ms", "ms", note="reference", higher_is_better=False),
    Row("W12", _LS, "W12/import-trio", "start_ms", "ms", note="reference", higher_is_better=False),
    Row(
        "W12",
        _LS,
        "W12/tidelog-ls",
        "start_ms",
        "ms",
        reference=("W12/sqlite3", "start_ms"),
        higher_is_better=False,
    ),
    Row(
        "W12",
        _LS,
        "W12/tidelog-ls",
        "start_ms",
        "ms",
        reference=("W12/tidelog-ls", "import_trio_ms"),
        reference_label='python -c "import trio", taking turns with it',
        target=Target("ratio", "<=", 1.5),
        higher_is_better=False,
    ),
)
