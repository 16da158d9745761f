"""Shared by the reliability batteries (``tests/batteries/test_battery_*.py``).

Sizes: every battery runs a fast version in the normal test run and a long one when the
environment variable ``TIDELOG_SOAK=1`` is set. Tests never skip: they are parametrised
by a size chosen with :func:`size`, so the test id shows which version ran.

Counts: when ``TIDELOG_BATTERY_STATS`` names a file, :func:`record` appends one JSON line
per battery run to it (what ``docs/reliability.md`` reports). Nothing is written otherwise.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import trio

__all__ = [
    "ROOT",
    "SOAK",
    "CancelAfterSteps",
    "child_env",
    "python_child",
    "record",
    "run_cancelled_at",
    "size",
]

#: True when the long (soak) versions run.
SOAK = os.environ.get("TIDELOG_SOAK") == "1"
#: The project root (children get it on ``PYTHONPATH``).
ROOT = Path(__file__).resolve().parents[2]
TESTS = Path(__file__).resolve().parent


def size(fast: int, soak: int) -> int:
    """The fast size in the normal run, the soak size under ``TIDELOG_SOAK=1``."""
    return soak if SOAK else fast


def record(battery: str, **counts: object) -> None:
    """Append ``{"battery": ..., **counts}`` to ``$TIDELOG_BATTERY_STATS`` (if set)."""
    target = os.environ.get("TIDELOG_BATTERY_STATS")
    if not target:
        return
    line = json.dumps({"battery": battery, "soak": SOAK, "at": time.time(), **counts})
    with open(target, "a", encoding="utf-8") as f:
        f.write(line + "\n")


def child_env() -> dict[str, str]:
    """Environment of a child Python process: the project importable, warnings as errors
    are *not* forced on it (its stderr is checked instead)."""
    paths = [str(ROOT), str(TESTS), str(TESTS.parent), os.environ.get("PYTHONPATH", "")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in paths if p))
    env.pop("PYTHONWARNINGS", None)
    return env


def python_child(script: str, *args: str) -> list[str]:
    """The argv of ``python tests/<script> args...``."""
    return [sys.executable, str(TESTS / script), *args]


class CancelAfterSteps(trio.abc.Instrument):
    """Cancel ``scope`` after the scheduler ran ``steps`` task steps (of any task: the
    caller's own and the runtime's writer, so every interleaving of "queued", "taken by
    the writer", "committing" and "committed" is hit). Used by the cancellation battery
    (``test_battery_cancel.py``)."""

    def __init__(self, steps: int, scope: trio.CancelScope) -> None:
        self.steps = steps
        self.scope = scope

    def after_task_step(self, task: trio.lowlevel.Task) -> None:  # noqa: ARG002 (counts steps)
        self.steps -= 1
        if self.steps == 0:
            self.scope.cancel()


async def run_cancelled_at(step: int, op: Callable[[], Awaitable[object]]) -> bool:
    """Run ``op`` in a scope cancelled after ``step`` scheduler steps; True if the
    cancellation took effect (the op raised ``Cancelled`` out of it)."""
    with trio.CancelScope() as scope:
        instrument = CancelAfterSteps(step, scope)
        trio.lowlevel.add_instrument(instrument)
        try:
            await op()
        finally:
            trio.lowlevel.remove_instrument(instrument)
    return scope.cancelled_caught


def contiguous(values: Sequence[int], start: int = 1) -> bool:
    """True if ``values`` is exactly ``start, start+1, ...``."""
    return list(values) == list(range(start, start + len(values)))
