"""Measurements in child processes: a registry of worker functions and the parent's side.

A workload module registers a worker with :func:`worker`; the parent runs it with
:func:`run_worker` (one child, its JSON result) or :func:`run_together` (several children
that first get ready, then start together on one signal). A child is ``python -m
bench.harness.worker NAME ARGS_JSON``: it imports the harness (so the import is never part
of a timed region), runs the worker and prints its result as the last line of stdout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import trio

from .core import Metrics

__all__ = [
    "WORKERS",
    "WorkerError",
    "child_command",
    "child_env",
    "ready_then_wait",
    "run_together",
    "run_worker",
    "worker",
]

Args = dict[str, Any]
ROOT = Path(__file__).resolve().parents[2]

#: Worker functions by name: ``(args) -> metrics``, run in a child process.
WORKERS: dict[str, Callable[[Args], Metrics]] = {}


class WorkerError(RuntimeError):
    """A child process failed or said something unexpected."""


def worker(name: str) -> Callable[[Callable[[Args], Metrics]], Callable[[Args], Metrics]]:
    """Decorator: register ``fn`` as the child-process worker ``name``."""

    def register(fn: Callable[[Args], Metrics]) -> Callable[[Args], Metrics]:
        if name in WORKERS:
            raise ValueError(f"worker {name!r} is registered twice")
        WORKERS[name] = fn
        return fn

    return register


def child_env() -> dict[str, str]:
    """The environment of a child: this one, with the repository on ``PYTHONPATH``."""
    env = dict(os.environ)
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(ROOT) if not path else f"{ROOT}{os.pathsep}{path}"
    return env


def child_command(name: str, args: Args) -> list[str]:
    """The command line of worker ``name`` (warning options passed on)."""
    warn = [f"-W{option}" for option in sys.warnoptions]
    return [sys.executable, *warn, "-m", "bench.harness.worker", name, json.dumps(args)]


def _result(name: str, stdout: str, stderr: str, returncode: int | None) -> Metrics:
    lines = stdout.strip().splitlines()
    if returncode != 0 or not lines:
        raise WorkerError(f"worker {name} exited with {returncode}:\n{stderr[-4000:]}")
    result = json.loads(lines[-1])
    if not isinstance(result, dict):
        raise WorkerError(f"worker {name} printed {lines[-1]!r}")
    return {str(k): float(v) for k, v in result.items()}


def run_worker(name: str, args: Args, *, timeout: float = 300.0) -> Metrics:
    """Run worker ``name`` in a child process and return its metrics."""
    proc = subprocess.run(
        child_command(name, args),
        cwd=ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return _result(name, proc.stdout, proc.stderr, proc.returncode)


def run_together(
    specs: Sequence[tuple[str, Args]], *, barriers: int = 1, timeout: float = 300.0
) -> list[Metrics]:
    """Start one child per ``(name, args)``; ``barriers`` times, once every child has
    printed ``ready`` (see :func:`ready_then_wait`), tell them all to go; return their
    metrics in order. Every child is killed after ``timeout`` seconds."""
    procs = [
        subprocess.Popen(
            child_command(name, args),
            cwd=ROOT,
            env=child_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, args in specs
    ]

    def kill_all() -> None:
        for p in procs:
            if p.poll() is None:
                p.kill()

    watchdog = threading.Timer(timeout, kill_all)
    watchdog.start()
    try:
        for _ in range(barriers):
            for (name, _), p in zip(specs, procs, strict=True):
                assert p.stdout is not None
                line = p.stdout.readline()
                if line.strip() != "ready":
                    _, err = p.communicate()
                    raise WorkerError(f"worker {name} did not get ready ({line!r}):\n{err[-4000:]}")
            for p in procs:
                assert p.stdin is not None
                p.stdin.write("go\n")
                p.stdin.flush()
        results = []
        for (name, _), p in zip(specs, procs, strict=True):
            out, err = p.communicate()
            results.append(_result(name, out, err, p.returncode))
        return results
    finally:
        watchdog.cancel()
        kill_all()
        for p in procs:
            p.wait()


async def ready_then_wait() -> None:
    """In a child started by :func:`run_together`: say ``ready``, wait for the signal."""
    print("ready", flush=True)
    line = await trio.to_thread.run_sync(sys.stdin.readline)
    if line.strip() != "go":
        raise WorkerError(f"expected 'go' on stdin, got {line!r}")
