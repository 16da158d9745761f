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

ROOT = Path(__file__).resolve().parent.parent

#: (workload, case) pairs every run must report.
EXPECTED = {
    ("W2", "W2/raw-full"),
    ("W2", "W2/tidelog-full"),
    ("W2", "W2/raw-normal"),
    ("W2", "W2/tidelog-normal"),
    ("W4", "W4/raw"),
    ("W4", "W4/tidelog"),
    ("W9", "W9/idle"),
    ("W9", "W2/tidelog-full"),
    ("W9", "W2/tidelog-normal"),
    ("W9", "W4/tidelog"),
}


@pytest.mark.slow
def test_bench_runs_at_tiny_scale(tmp_path: Path) -> None:
    out = tmp_path / "results"
    proc = subprocess.run(
        [
            sys.executable,
            "-W",
            "error",
            "-m",
            "bench",
            "--scale",
            "0.02",
            "--rounds",
            "1",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
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
    for case in doc["cases"].values():
        assert case["errors"] == [] and case["missing"] == []
        assert len(case["rounds"]) == 1
    for row in rows:
        assert row["status"] in {"met", "MISSED", "reference", "baseline", "-", "no data"}, row
        if row["workload"] in ("W2", "W4"):
            assert row["value"] is not None and row["value"] > 0, row
        if row["target"] is not None and row["status"] != "no data":
            assert row["status"] in {"met", "MISSED"}, row

    table_lines = [
        line
        for line in proc.stdout.splitlines()
        if line.startswith("| W") and not line.startswith("| Workload")
    ]
    assert len(table_lines) == len(rows)
    assert md_file.read_text().count("\n| W") == len(rows) + 1  # + the header
