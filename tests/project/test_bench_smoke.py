"""The benchmark harness still runs: ``python -m bench`` at a tiny scale, in a subprocess.

No speed is asserted here (bench/ is a benchmark, not a test); only that every workload
runs, the table is printed and the JSON holds the expected rows, and that every
``python -m bench...`` command the documentation names is there to run.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: The documents that name ``python -m bench...`` commands.
DOCS = (
    ROOT / "README.md",
    ROOT / "bench" / "README.md",
    ROOT / "bench" / "HISTORY.md",
    *sorted((ROOT / "docs").glob("*.md")),
)
#: The one-off measurements, each run on its own (``python -m bench.probes.NAME``).
PROBES = ("gil_overlap", "jsonl_thread", "layout", "per_append", "pg_paths")

#: The optional alternatives (the ``bench`` extra): measured, or "not installed".
ALTERNATIVES = ("openai-agents", "langgraph", "eventsourcing")
#: W1 also runs the synchronous ones in worker threads and on the trio thread.
W1_ONLY = ("langgraph-thread", "langgraph-lag", "eventsourcing-thread", "eventsourcing-lag")
#: W14's LangGraph cases need LangGraph's SQLite saver (the ``bench`` extra), tidelog's
#: too (they are judged against it); its PostgreSQL cases need LangGraph's PostgreSQL
#: saver or the SDK's SQLAlchemy session on asyncpg (the ``bench`` extra) and a server.
W14_PG_SYSTEMS = ("postgres", "tidelog-pg", "tidelog-pg-normal")
W14_OPTIONAL = (
    *(
        f"langgraph-{system}-{kind}"
        for system in ("sqlite", "tidelog", "tidelog-normal")
        for kind in ("one", "many")
    ),
    *(
        f"{framework}-{system}-{kind}"
        for framework in ("langgraph", "openai-agents")
        for system in W14_PG_SYSTEMS
        for kind in ("one", "many")
    ),
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
    ("W2", "W2/by-hand-full"),
    ("W2", "W2/by-hand-normal"),
    ("W2", "W2/by-hand-jsonl-full"),
    ("W2", "W2/by-hand-jsonl-normal"),
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
    ("W13", "W13/solo"),
    ("W13", "W13/5-sse"),
    ("W13", "W13/5-sse-serve"),
    ("W13", "W13/first-window"),
    ("W13", "W13/cross-sse"),
    *((w, f"{w}/{alt}") for w in ("W1", "W2") for alt in ALTERNATIVES),
    *(("W1", f"W1/{alt}") for alt in W1_ONLY),
    *(
        ("W14", f"W14/{framework}-{system}-{kind}")
        for framework in ("langgraph", "openai-agents")
        for system in ("sqlite", "tidelog", "tidelog-normal", *W14_PG_SYSTEMS)
        for kind in ("one", "many")
    ),
}
#: Workloads whose every measured row must have a value.
MEASURED = ("W1", "W1b", "W2", "W3", "W4", "W5", "W6", "W8", "W10")
STATUSES = {"met", "MISSED", "reference", "baseline", "bound", "alternative", "-", "no data"}
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
            assert key.split("/", 1)[1] in ALTERNATIVES + W1_ONLY + W14_OPTIONAL, key
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


def test_documented_bench_commands_exist() -> None:
    """Every ``python -m bench...`` command in README.md, bench/ and docs/ names a module
    that ``python -m`` can run (a module, or a package with a ``__main__``)."""
    commands = {
        (doc.relative_to(ROOT).as_posix(), name)
        for doc in DOCS
        for name in re.findall(r"python -m (bench(?:\.\w+)*)", doc.read_text())
    }
    assert ("bench/README.md", "bench") in commands
    missing = []
    for doc, name in sorted(commands):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations is not None:
            spec = importlib.util.find_spec(f"{name}.__main__")
        if spec is None:
            missing.append(f"{doc}: python -m {name}")
    assert missing == []


def test_probes_import_and_have_a_main() -> None:
    """Each probe under bench/probes/ imports and has the ``main`` its ``python -m`` runs."""
    for name in PROBES:
        module = importlib.import_module(f"bench.probes.{name}")
        assert callable(module.main), name


def test_pg_paths_prices_every_variant(pg_where: tuple[str, str]) -> None:
    """``bench.probes.pg_paths`` runs every variant on the real server (its own schema)
    and counts the WAL records bench/HISTORY.md reads from it: one more per event for the
    head update and for a row lock than for the events alone, none more for an advisory
    lock."""
    pg_paths = importlib.import_module("bench.probes.pg_paths")
    n = 3
    wal: dict[str, tuple[int, int]] = {}
    medians = pg_paths.measure(pg_where[0], n, batches=1, rounds=1, wal=wal)
    assert "head off the row, row lock" in medians
    assert all(value == value for value in medians.values())  # every variant ran (no NaN)
    records = {name: counted[0] for name, counted in wal.items()}
    floor = records["no fence (floor)"]
    assert records["known sids, one each"] == floor + n
    assert records["head off the row, row lock"] == floor + n
    assert records["head off the row, advisory lock"] == floor
    assert records["head off the row, no lock (unfenced)"] == floor


def test_a_ratio_is_the_median_of_its_rounds_with_their_range() -> None:
    """A row's ratio pairs each round with its reference's same round: the table shows the
    median of those and, when they differ, their range; a round either side misses is
    left out; the JSON keeps every round's ratio."""
    from bench.harness.core import Row, Target
    from bench.harness.report import markdown_table, to_json
    from bench.harness.runner import CaseResult, evaluate

    raw = CaseResult("X/raw", "raw", rounds=[{"r": 100.0}, {"r": 200.0}, {"r": 100.0}, None])
    tidelog = CaseResult(
        "X/tl", "tidelog", rounds=[{"r": 80.0}, {"r": 190.0}, {"r": 90.0}, {"r": 5.0}]
    )
    steady = CaseResult("X/st", "steady", rounds=[{"r": 50.0}, {"r": 100.0}, {"r": 50.0}])
    rows = [
        Row("X", "X", case, "r", "events/s", ("X/raw", "r"), Target("ratio", ">=", 0.9))
        for case in ("X/tl", "X/st")
    ]
    cases = {c.key: c for c in (raw, tidelog, steady)}
    spread, flat = evaluate(rows, cases)
    assert spread.round_ratios == [0.8, 0.95, 0.9]
    assert spread.ratio == 0.9
    assert spread.status == "met"
    assert flat.round_ratios == [0.5, 0.5, 0.5]
    assert flat.status == "MISSED"
    table = markdown_table([spread, flat])
    assert "| 0.90x (0.80-0.95) |" in table
    assert "| 0.50x |" in table
    assert to_json({}, [spread], cases)["rows"][0]["round_ratios"] == [0.8, 0.95, 0.9]


#: The by-hand tests' shape: 3 sessions (W2's names) of 4 awaited appends each.
_BY_HAND_SESSIONS = [f"session-{i}" for i in range(3)]


def _read_back(store: Any, session: str) -> list[Any]:
    """``session``'s events as tidelog reads them, checked: seqs 1-4 of the payload, each
    a "message" with no run id, and the head 4."""
    from bench.harness.core import PAYLOAD

    assert store.head(session) == 4
    events: list[Any] = store.read(session)
    assert [(e.seq, e.kind, e.data, e.run_id) for e in events] == [
        (seq, "message", PAYLOAD, None) for seq in range(1, 5)
    ]
    return events


def test_the_by_hand_loop_writes_tidelogs_format(tmp_path: Path) -> None:
    """W2's by-hand reference writes a file tidelog reads back exactly: each session's
    events in seq order with their data, kind and batch time, and each session's head."""
    import apsw
    import trio

    from bench.workloads.w2_group_commit import by_hand_main
    from stores import SqliteStore

    run = trio.run(by_hand_main, tmp_path / "by-hand.db", "NORMAL", 3, 4)
    assert (run.events, run.batch_events) == (12, 12)
    store = SqliteStore(tmp_path / "by-hand.db", read_only=True)
    try:
        for session in _BY_HAND_SESSIONS:
            events = _read_back(store, session)
            info = store.stat(session)
            assert info is not None
            assert info.updated_at == max(e.ts for e in events)
    finally:
        store.close()
    # and nothing but the events and the heads changed: no half-made session, no lease
    conn = apsw.Connection(str(tmp_path / "by-hand.db"))
    try:
        assert conn.execute("SELECT count(*) FROM events").fetchall() == [(12,)]
        assert conn.execute("SELECT count(*) FROM leases").fetchall() == [(0,)]
    finally:
        conn.close()


def test_the_by_hand_loop_writes_tidelogs_postgres_schema(
    pg_where: tuple[str, str], pg_open: Callable[..., Any]
) -> None:
    """W2pg's by-hand reference runs the store's own statement: tidelog reads each
    session's events back in seq order with their data and kind, and each session's head,
    and the store's channel heard every new head."""
    import psycopg
    import trio

    from bench.workloads.pg_w1_w2_w9 import by_hand_w2
    from stores.postgres._connection import channel_name

    dsn, schema = pg_where
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute(f"LISTEN {channel_name(schema)}")
        run = trio.run(by_hand_w2, dsn, schema, "on", 3, 4)
        # the store's create of each session notifies too (head 0), then one per batch
        expected = len(_BY_HAND_SESSIONS) + run.batches
        heard = [n.payload for n in listener.notifies(timeout=30.0, stop_after=expected)]
    assert (run.events, run.batch_events) == (12, 12)
    assert len(heard) == expected
    heads: dict[str, int] = {}
    for line in "\n".join(heard).splitlines():
        head, session = line.split(" ", 1)
        heads[session] = max(heads.get(session, 0), int(head))
    assert heads == dict.fromkeys(_BY_HAND_SESSIONS, 4)
    store = pg_open()
    for session in _BY_HAND_SESSIONS:
        _read_back(store, session)


@pytest.mark.parametrize("level", ["NORMAL", "FULL"])
def test_the_by_hand_loop_writes_tidelogs_jsonl_format(
    tmp_path: Path, level: Literal["NORMAL", "FULL"]
) -> None:
    """W2's by-hand reference on files writes lines tidelog's JSONL store reads back
    exactly, each checked by its CRC and tag, with every head and no damage; its change
    log grew by one byte a batch."""
    import trio

    from bench.workloads.jsonl_w1_w2_w3_w5 import by_hand_jsonl_main
    from stores import JsonlStore

    root = tmp_path / "by-hand.jsonl"
    run = trio.run(by_hand_jsonl_main, root, level, 3, 4)
    assert (run.events, run.batch_events) == (12, 12)
    # one byte for each session's create (by the store), then one a batch
    assert (root / "changes").stat().st_size == len(_BY_HAND_SESSIONS) + run.batches
    store = JsonlStore(root, read_only=True)
    try:
        assert store.check_integrity() == (True, "ok")
        for session in _BY_HAND_SESSIONS:
            _read_back(store, session)
    finally:
        store.close()
