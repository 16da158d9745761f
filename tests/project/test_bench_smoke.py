"""The benchmark harness still runs: ``python -m bench`` at a tiny scale, in a subprocess.

No speed is asserted here (bench/ is a benchmark, not a test); only that every workload
runs, the table is printed and the JSON holds the expected rows.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: The optional alternatives (the ``bench`` extra): measured, or "not installed".
ALTERNATIVES = ("openai-agents", "langgraph", "eventsourcing")
#: W1 also runs the synchronous ones in worker threads and on the trio thread.
W1_ONLY = ("langgraph-thread", "langgraph-lag", "eventsourcing-thread", "eventsourcing-lag")
#: W13's LangGraph cases need LangGraph's SQLite saver (the ``bench`` extra), tidelog's
#: too (they are judged against it).
W13_OPTIONAL = tuple(
    f"langgraph-{system}-{kind}"
    for system in ("sqlite", "tidelog", "tidelog-normal")
    for kind in ("one", "many")
)

#: (workload, case) pairs every run must report.
EXPECTED = {
    ("W1", "W1/raw-full"),
    ("W1", "W1/raw-full-direct"),
    ("W1", "W1/raw-normal"),
    ("W1", "W1/tidelog-full"),
    ("W1", "W1/tidelog-normal"),
    ("W1", "W1/raw-full-lag"),
    ("W1", "W1/tidelog-full-lag"),
    ("W1b", "W1b/raw-full-100"),
    ("W1b", "W1b/tidelog-full"),
    ("W2", "W2/raw-full"),
    ("W2", "W2/tidelog-full"),
    ("W2", "W2/raw-normal"),
    ("W2", "W2/tidelog-normal"),
    ("W2", "W2/4proc-raw"),
    ("W2", "W2/4proc-tidelog"),
    ("W3", "W3/raw"),
    ("W3", "W3/tidelog"),
    ("W4", "W4/raw"),
    ("W4", "W4/tidelog"),
    ("W5", "W5/raw"),
    ("W5", "W5/tidelog"),
    ("W6", "W6/raw-inproc"),
    ("W6", "W6/tidelog-inproc"),
    ("W6", "W6/tidelog-cross"),
    ("W8", "W8/tidelog-10k"),
    ("W8", "W8/tidelog-1m"),
    ("W8", "W8/tidelog-rss"),
    ("W9", "W9/idle"),
    ("W9", "W2/tidelog-full"),
    ("W9", "W2/tidelog-normal"),
    ("W9", "W4/tidelog"),
    ("W10", "W10/adapter"),
    ("W10", "W10/run-loop"),
    ("W11", "W11/floor"),
    ("W11", "W11/tidelog"),
    ("W11", "W11/floor-instructions"),
    ("W11", "W11/tidelog-instructions"),
    ("W12", "W12/python"),
    ("W12", "W12/import"),
    ("W12", "W12/sqlite3"),
    ("W12", "W12/tidelog-ls"),
    *((w, f"{w}/{alt}") for w in ("W1", "W2") for alt in ALTERNATIVES),
    *(("W1", f"W1/{alt}") for alt in W1_ONLY),
    *(
        ("W13", f"W13/{framework}-{system}-{kind}")
        for framework in ("langgraph", "openai-agents")
        for system in ("sqlite", "tidelog", "tidelog-normal")
        for kind in ("one", "many")
    ),
}
#: Workloads whose every measured row must have a value.
MEASURED = ("W1", "W1b", "W2", "W3", "W4", "W5", "W6", "W8", "W10")
STATUSES = {"met", "MISSED", "reference", "baseline", "alternative", "-", "no data"}
#: W9's rows against the raw loop's own lag may read "n/a (no reference)": at this scale a
#: raw loop can finish before its lag probe takes a sample, leaving no ratio to judge.
NO_REFERENCE = ("W9", "n/a (no reference)")


def run_bench(out: Path, *options: str) -> subprocess.CompletedProcess[str]:
    """``python -m bench`` at scale 0.02, one round, results in ``out``."""
    command = [sys.executable, "-W", "error", "-m", "bench", "--scale", "0.02"]
    command += ["--rounds", "1", "--out", str(out), *options]
    proc = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def test_bench_cases_run_in_child_processes(tmp_path: Path) -> None:
    """The default mode (a child process per case) measures and reports a workload."""
    out = tmp_path / "results"
    proc = run_bench(out, "--only", "W1b")
    [json_file] = out.glob("results-*.json")
    rows = json.loads(json_file.read_text())["rows"]
    assert {r["case"] for r in rows} >= {"W1b/raw-full-100", "W1b/tidelog-full"}
    assert all(r["value"] is not None and r["value"] > 0 for r in rows), rows
    assert proc.stdout.count("\n| W1b") == len(rows)


@pytest.mark.slow
def test_bench_runs_at_tiny_scale(tmp_path: Path) -> None:
    """Every workload runs at scale 0.02 (in one process: the child-process mode is the
    test above); the table is printed and the JSON and Markdown results hold the
    expected rows (no speed asserted)."""
    out = tmp_path / "results"
    proc = run_bench(out, "--in-process")
    assert "| Workload | System | Value | Unit | Reference | Ratio | Target | Status |" in (
        proc.stdout
    )

    [json_file] = out.glob("results-*.json")
    [md_file] = out.glob("results-*.md")
    doc = json.loads(json_file.read_text())
    rows = doc["rows"]
    assert {(r["workload"], r["case"]) for r in rows} >= EXPECTED
    assert doc["meta"]["scale"] == 0.02
    assert doc["meta"]["rounds"] == 1
    for key, case in doc["cases"].items():
        assert case["errors"] == [], key
        if case["missing"]:  # only an optional alternative may be missing
            assert key.split("/", 1)[1] in ALTERNATIVES + W1_ONLY + W13_OPTIONAL, key
            assert case["rounds"] == [], key
        else:
            assert len(case["rounds"]) == 1, key
    missing = {key for key, case in doc["cases"].items() if case["missing"]}
    for row in rows:
        if row["case"] in missing:
            assert row["status"] == "not installed", row
            assert row["value"] is None, row
            continue
        best_of = (row["reference"] or {}).get("best_of")
        if row["reference"] is None and "the best alternative" in row["label"]:
            assert row["status"] == "n/a (no alternative installed)", row
            continue
        if (row["workload"], row["status"]) == NO_REFERENCE:
            assert row["value"] is not None, row
            continue
        assert row["status"] in STATUSES, row
        if row["workload"] in MEASURED:
            assert row["value"] is not None, row
            assert row["value"] > 0, row
        if row["target"] is not None and row["status"] != "no data":
            assert row["status"] in {"met", "MISSED"}, row
        if best_of:
            assert {case for case, _ in best_of} <= {
                f"{row['workload']}/{a}" for a in ALTERNATIVES + W1_ONLY
            }

    table_lines = [
        line
        for line in proc.stdout.splitlines()
        if line.startswith("| W") and not line.startswith("| Workload")
    ]
    assert len(table_lines) == len(rows)
    assert md_file.read_text().count("\n| W") == len(rows) + 1  # + the header
