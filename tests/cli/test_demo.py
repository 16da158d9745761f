"""``tidelog demo`` as a real subprocess: the scripted sessions, the crash mid-tool and
its recovery, the snapshot and the tail."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_support import make_db, tidelog

from runtime.cli._demo import CRASH_SUBJECT, CRASH_TO, OUTBOX


@pytest.mark.slow
def test_demo_runs_crash_recovery_snapshot_and_tail(tmp_path: Path) -> None:
    """`tidelog demo` exits 0 and reports re-ran, unknown, replay, snapshot, tail, sent once."""
    db = tmp_path / "demo.db"
    proc = tidelog("demo", "--db", str(db), cwd=tmp_path)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    out = proc.stdout
    for text in [
        "finished support-ada",
        "finished billing-bob",
        "finished docs-cy",
        "host died: return code -9 (SIGKILL)",
        "checkpoint of nightly-1: status=running",
        "run nightly-1 resumed",
        "re-ran  (idempotent, started before the crash): write_file",
        "unknown (not idempotent, started before the crash): send_email",
        "TOOL_OUTCOME_UNKNOWN",
        "I will check the outbox before resending",
        "ran     (fresh call): check_outbox",
        "summary: re-ran write_file; unknown send_email; ran fresh check_outbox",
        "replay: running nightly-1 again",
        "finish_reason=None, model requests=0",
        "the snapshot still reads as_of_seq=",
        "tail seq=",
        "tidelog.segment",
        f"the crashed run's email {CRASH_SUBJECT!r} was sent exactly once",
        "demo finished: every step checked",
    ]:
        assert text in out, f"missing {text!r} in:\n{out}"
    outbox = (tmp_path / "demo-workspace" / OUTBOX).read_text().splitlines()
    assert outbox.count(f"{CRASH_TO}\t{CRASH_SUBJECT}") == 1
    assert "Traceback" not in proc.stderr


def test_demo_refuses_an_existing_database(tmp_path: Path) -> None:
    """`tidelog demo --db` on an existing file exits 2 and leaves the file alone."""
    db = make_db(tmp_path)
    before = db.read_bytes()
    proc = tidelog("demo", "--db", str(db), cwd=tmp_path)
    assert proc.returncode == 2
    assert "already exists" in proc.stderr
    assert db.read_bytes() == before
