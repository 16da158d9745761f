"""``python -m bench``: run the workloads, print the table, write JSON and markdown."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import apsw
import trio

from .. import workloads as _workloads  # registers the cases and rows
from .core import CASES, PAYLOAD_BYTES
from .report import markdown_table, to_json
from .runner import evaluate, run_cases, select_rows, workloads

__all__ = ["main"]

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "results"
_REPO = Path(__file__).resolve().parents[2]
assert _workloads


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, not {text!r}")
    return value


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an int >= 1, not {text!r}")
    return value


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench",
        description="tidelog benchmarks side by side with the raw apsw reference.",
    )
    p.add_argument("--scale", type=_positive_float, default=1.0, help="workload size factor")
    p.add_argument("--rounds", type=_positive_int, default=3, help="rounds (median reported)")
    p.add_argument(
        "--only", default="", help=f"comma-separated workloads ({','.join(workloads())})"
    )
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="directory for JSON/markdown")
    p.add_argument("--list", action="store_true", help="list workloads and cases, then exit")
    p.add_argument(
        "--in-process",
        action="store_true",
        help="run every case in this process (debugging; default: a child process each)",
    )
    return p


def _git_commit() -> str | None:
    """``git describe`` of the checkout, or ``$TIDELOG_BENCH_COMMIT`` (for exported trees)."""
    if os.environ.get("TIDELOG_BENCH_COMMIT"):
        return os.environ["TIDELOG_BENCH_COMMIT"]
    try:
        proc = subprocess.run(
            ["git", "-C", str(_REPO), "describe", "--always", "--dirty", "--abbrev=12"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except OSError:
        return None
    return proc.stdout.strip() or None


def _meta(args: argparse.Namespace, started: dt.datetime, seconds: float) -> dict[str, Any]:
    return {
        "date": started.isoformat(timespec="seconds"),
        "duration_s": round(seconds, 1),
        "scale": args.scale,
        "rounds": args.rounds,
        "only": args.only or None,
        "isolated": not args.in_process,
        "payload_bytes": PAYLOAD_BYTES,
        "commit": _git_commit(),
        "python": platform.python_version(),
        "sqlite": apsw.sqlite_lib_version(),
        "apsw": apsw.apsw_version(),
        "trio": trio.__version__,
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "argv": sys.argv[1:],
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Run the harness; 0 on success (missed targets included), 1 if a case failed."""
    args = _parser().parse_args(argv)
    if args.list:
        for name in workloads():
            print(name)
        for key, c in CASES.items():
            print(f"  {key}: {c.system}")
        return 0
    try:
        selected = select_rows(args.only.split(",") if args.only else None)
    except ValueError as exc:
        print(f"python -m bench: {exc}", file=sys.stderr)
        return 2
    keys = list(dict.fromkeys(k for row in selected for k in row.cases()))
    started = dt.datetime.now().astimezone()
    t0 = time.perf_counter()
    cases = run_cases(keys, scale=args.scale, rounds=args.rounds, isolate=not args.in_process)
    results = evaluate(selected, cases)
    meta = _meta(args, started, time.perf_counter() - t0)
    table = markdown_table(results)
    header = (
        f"tidelog bench {meta['date']} - scale {args.scale:g}, {args.rounds} round(s), "
        f"median shown; {meta['cpus']} CPUs, SQLite {meta['sqlite']}, "
        f"commit {meta['commit'] or 'unknown'}, {meta['duration_s']} s"
    )
    print(header)
    print()
    print(table)
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = started.strftime("%Y%m%dT%H%M%S")
    json_path = args.out / f"results-{stamp}.json"
    json_path.write_text(json.dumps(to_json(meta, results, cases), indent=2) + "\n")
    md_path = args.out / f"results-{stamp}.md"
    md_path.write_text(header + "\n\n" + table + "\n")
    print(f"\nwrote {json_path} and {md_path.name}", file=sys.stderr)
    missed = [r for r in results if r.status == "MISSED"]
    if missed:
        print(f"{len(missed)} target(s) MISSED", file=sys.stderr)
    failed = [k for k, c in cases.items() if c.errors]
    if failed:
        print(f"case(s) failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0
