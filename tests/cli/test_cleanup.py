"""``tidelog prune`` and ``delete``: the retention policy from the command line, its dry
run, and what is never deleted (a session a live writer holds, one a fork borrows from)."""

from __future__ import annotations

import json
from pathlib import Path

import apsw
import trio
from cli_support import db_state, files, tidelog

from runtime import SqliteStore, open_runtime
from runtime.agents import RunHead, RunStatus, UserMessage, checkpoints, history, request_stop
from stores._leases import local_holder


def _seed(db: Path, runs: dict[str, list[tuple[str, RunStatus, float]]]) -> None:
    """Conversations with runs; each run (run_id, status, saved at) has a checkpoint."""

    async def seed() -> None:
        async with open_runtime(db) as rt:
            for conversation, items in runs.items():
                for run_id, status, at in items:
                    await history(rt).append(conversation, [UserMessage(run_id)], run_id=run_id)
                    head = RunHead("a", status=status, session_id=conversation, updated_at=at)
                    await checkpoints(rt).append(run_id, [UserMessage(run_id)], head)

    trio.run(seed)


def _age_everything(db: Path, *, hours: float) -> None:
    """Make every session of ``db`` look last updated ``hours`` earlier (the file's own
    column, written the way a session that old would have it)."""
    conn = apsw.Connection(str(db))
    try:
        conn.execute("UPDATE sessions SET updated_at = updated_at - ?", (hours * 3600,))
    finally:
        conn.close()


def _ids(db: Path) -> list[str]:
    store = SqliteStore(db, read_only=True)
    try:
        return [info.id for info in store.list_sessions()]
    finally:
        store.close()


def _actions(proc_stdout: str) -> dict[str, dict[str, object]]:
    return {a["session_id"]: a for a in json.loads(proc_stdout)["actions"]}


def test_prune_dry_run_changes_nothing(tmp_path: Path) -> None:
    """`prune --older-than 0s --dry-run` lists every conversation with its checkpoints as
    'would delete', and the database is unchanged, no file created."""
    db = tmp_path / "p.db"
    _seed(db, {"a": [("a1", "completed", 1.0)], "b": [("b1", "running", 2.0)]})
    before = db_state(db)
    proc = tidelog("prune", str(db), "--older-than", "0s", "--dry-run", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    actions = _actions(proc.stdout)
    assert set(actions) == {"a", "b", "tidelog/run/a1", "tidelog/run/b1"}
    assert not any(a["deleted"] for a in actions.values())
    assert db_state(db) == before
    assert files(tmp_path) == ["p.db"]
    text = tidelog("prune", str(db), "--older-than", "0s", "--dry-run", cwd=tmp_path).stdout
    assert "would delete" in text
    assert "dry run: 4 sessions would be deleted, 0 kept" in text


def test_prune_never_touches_live_writers_nor_lent_events(tmp_path: Path) -> None:
    """`prune --older-than 1s` deletes an old conversation with its checkpoints, keeps one
    a live writer holds (its checkpoints too), and keeps an old parent while a recent
    fork still borrows its events."""
    db = tmp_path / "p.db"
    _seed(db, {"old": [("o1", "completed", 1.0)], "held": [("h1", "completed", 1.0)]})
    _seed(db, {"parent": [("p1", "completed", 1.0)]})
    _age_everything(db, hours=2)  # old by a margin no slow start of a process can eat
    store = SqliteStore(db)
    store.fork("parent", "recent-fork")
    store.acquire_lease("held", "someone", ttl=60.0, holder=local_holder())
    store.close()
    proc = tidelog("prune", str(db), "--older-than", "1h", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    actions = _actions(proc.stdout)
    assert actions["old"]["deleted"]
    assert actions["tidelog/run/o1"]["deleted"]
    assert actions["held"]["kept"] == "a live writer holds it"
    assert "its conversation 'held' is kept" in str(actions["tidelog/run/h1"]["kept"])
    assert actions["parent"]["kept"] == "fork 'recent-fork' borrows its events"
    assert "recent-fork" not in actions
    assert _ids(db) == ["held", "parent", "recent-fork", "tidelog/run/h1", "tidelog/run/p1"]


def test_prune_checkpoint_policies(tmp_path: Path) -> None:
    """--completed-checkpoints removes completed runs' checkpoints only; --keep-last-runs
    1 keeps each conversation's most recently saved one; --orphaned-checkpoints removes
    those whose conversation is gone. Conversations stay."""
    db = tmp_path / "p.db"
    _seed(
        db,
        {
            "a": [("a1", "completed", 1.0), ("a2", "running", 3.0), ("a3", "failed", 2.0)],
            "b": [("b1", "completed", 5.0)],
            "gone": [("g1", "running", 1.0)],
        },
    )
    store = SqliteStore(db)
    store.delete("gone")
    store.close()
    proc = tidelog("prune", str(db), "--completed-checkpoints", "--json", cwd=tmp_path)
    assert {sid for sid, a in _actions(proc.stdout).items() if a["deleted"]} == {
        "tidelog/run/a1",
        "tidelog/run/b1",
    }
    proc = tidelog("prune", str(db), "--keep-last-runs", "1", "--json", cwd=tmp_path)
    assert set(_actions(proc.stdout)) == {"tidelog/run/a3"}
    proc = tidelog("prune", str(db), "--orphaned-checkpoints", cwd=tmp_path)
    assert "tidelog/run/g1" in proc.stdout
    assert "its conversation is gone" in proc.stdout
    assert _ids(db) == ["a", "b", "tidelog/run/a2"]
    refused = tidelog("prune", str(db), cwd=tmp_path)
    assert refused.returncode == 2
    assert "--older-than AGE" in refused.stderr


def test_delete_takes_checkpoints_along_and_refuses_live_writers(tmp_path: Path) -> None:
    """`delete` removes a conversation with its run checkpoints; a session a live writer
    holds is kept and named, a missing one reported; either makes the exit status 1."""
    db = tmp_path / "d.db"
    _seed(db, {"a": [("a1", "completed", 1.0)], "b": [("b1", "completed", 1.0)]})
    store = SqliteStore(db)
    store.acquire_lease("b", "someone", ttl=60.0, holder=local_holder())
    store.close()
    proc = tidelog("delete", str(db), "a", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    [result] = json.loads(proc.stdout)["sessions"]
    assert result == {"session": "a", "deleted": ["a", "tidelog/run/a1"], "error": None}
    proc = tidelog("delete", str(db), "b", "nobody", cwd=tmp_path)
    assert proc.returncode == 1
    assert "kept: a live writer holds it" in proc.stdout
    assert "no such session" in proc.stdout
    assert _ids(db) == ["b", "tidelog/run/b1"]


def test_delete_takes_control_sessions_along_and_finishes_a_stopped_delete(
    tmp_path: Path,
) -> None:
    """`delete` removes a conversation's runs with their control sessions (stop
    requests); run again for a conversation already gone, it deletes what a delete that
    stopped midway left of it (here: a control session naming it)."""
    db = tmp_path / "d.db"
    _seed(db, {"a": [("a1", "running", 1.0)], "b": [("b1", "running", 1.0)]})

    async def stop_both() -> None:
        async with open_runtime(db) as rt:
            for run_id in ("a1", "b1"):
                async with checkpoints(rt).claim(run_id):
                    assert (await request_stop(rt, run_id, by="ops", reason="r")).requested
            await rt.delete("b")  # as a delete that stopped midway
            await rt.delete("tidelog/run/b1")

    trio.run(stop_both)
    proc = tidelog("delete", str(db), "a", "b", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout)["sessions"]
    assert results == [
        {"session": "a", "deleted": ["a", "tidelog/run/a1", "tidelog/ctl/a1"], "error": None},
        {"session": "b", "deleted": ["tidelog/ctl/b1"], "error": None},
    ]
    assert _ids(db) == []
    proc = tidelog("delete", str(db), "b", cwd=tmp_path)
    assert proc.returncode == 1
    assert "no such session" in proc.stdout
