"""``tidelog fork`` and ``rewind``: what they change, what ``--keep`` counts, and their
refusals worded with the command's flags."""

from __future__ import annotations

import json
from pathlib import Path

import trio
from cli_support import tidelog

from runtime import open_runtime
from runtime.agents import (
    Entry,
    SidecarEntry,
    ToolCall,
    ToolResult,
    UserMessage,
    history,
)


def _seed(db: Path, runs: list[list[Entry]]) -> None:
    async def seed() -> None:
        async with open_runtime(db) as rt:
            for n, entries in enumerate(runs):
                await history(rt).append("chat", entries, run_id=f"r{n}")

    trio.run(seed)


def _load(db: Path, session_id: str) -> list[Entry]:
    async def load() -> list[Entry]:
        async with open_runtime(db) as rt:
            return await history(rt).load(session_id)

    return trio.run(load)


def test_fork_and_rewind_commands(tmp_path: Path) -> None:
    """`fork` makes an independent child; `rewind --keep 1` keeps exactly one entry; a
    taken target, a missing source and --at past the head give a message naming the
    flag and status 2."""
    db = tmp_path / "f.db"
    _seed(db, [[UserMessage(f"m{n}")] for n in range(3)])
    forked = tidelog("fork", str(db), "chat", "alt", "--at", "4", cwd=tmp_path)
    assert forked.returncode == 0, forked.stderr
    assert "forked 'alt' from 'chat' at seq 4" in forked.stdout
    again = tidelog("fork", str(db), "chat", "alt", cwd=tmp_path)
    assert again.returncode == 2
    assert "already exists" in again.stderr
    missing = tidelog("fork", str(db), "nope", "other", cwd=tmp_path)
    assert missing.returncode == 2
    assert "no session 'nope'" in missing.stderr
    past = tidelog("fork", str(db), "chat", "far", "--at", "99", cwd=tmp_path)
    assert past.returncode == 2
    assert "--at 99 is past the last seq" in past.stderr
    assert "at_seq" not in past.stderr
    record = json.loads(tidelog("fork", str(db), "chat", "j", "--json", cwd=tmp_path).stdout)
    assert record["parent"] == {"id": "chat", "seq": 6}
    rewound = tidelog("rewind", str(db), "chat", "--keep", "1", cwd=tmp_path)
    assert rewound.returncode == 0, rewound.stderr
    assert "kept 1 entries, removed 2" in rewound.stdout
    assert _load(db, "chat") == [UserMessage("m0")]
    assert _load(db, "alt") == [UserMessage("m0"), UserMessage("m1")]


def test_fork_inside_an_open_run_names_the_flag(tmp_path: Path) -> None:
    """Forking where a tool call has no result yet is refused with a message that names
    --allow-open-run (not a Python keyword argument); with the flag it forks."""
    db = tmp_path / "f.db"
    _seed(db, [[UserMessage("go"), ToolCall("c1", "run", {}), ToolResult("c1", "done")]])
    proc = tidelog("fork", str(db), "chat", "alt", "--at", "2", cwd=tmp_path)
    assert proc.returncode == 2
    assert "--allow-open-run" in proc.stderr
    assert "allow_open_run" not in proc.stderr
    assert "'c1'" in proc.stderr or "c1" in proc.stderr
    proc = tidelog("fork", str(db), "chat", "alt", "--at", "2", "--allow-open-run", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr


def test_rewind_keeps_exactly_n_entries_and_no_dangling_sidecar(tmp_path: Path) -> None:
    """`rewind --keep N` counts entries of the flat history (messages, tool calls and
    results, sidecar records). A cut between a tool call and its result -- which used
    to keep two entries plus the call's `tool_started` record, dangling -- is refused
    with the nearest clean cuts; a clean cut keeps exactly N entries."""
    db = tmp_path / "r.db"
    run: list[Entry] = [
        UserMessage("go"),
        ToolCall("c1", "run", {}),
        SidecarEntry("tool_started", {"call_id": "c1", "name": "run"}),
        ToolResult("c1", "done"),
        UserMessage("next"),
    ]
    _seed(db, [run, [UserMessage("later")]])
    for keep in ("2", "3"):
        proc = tidelog("rewind", str(db), "chat", "--keep", keep, cwd=tmp_path)
        assert proc.returncode == 2
        assert "between tool call 'c1' and its result" in proc.stderr
        assert "nearest clean cuts are --keep 1 and --keep 4 (of 6 entries)" in proc.stderr
    assert len(_load(db, "chat")) == 6  # nothing changed
    proc = tidelog("rewind", str(db), "chat", "--keep", "4", "--json", cwd=tmp_path)
    assert json.loads(proc.stdout) == {"session": "chat", "kept": 4, "removed": 2}
    assert _load(db, "chat") == run[:4]
    proc = tidelog("rewind", str(db), "chat", "--keep", "9", cwd=tmp_path)
    assert proc.returncode == 0
    assert "kept 4 entries, removed 0" in proc.stdout


def test_fork_into_the_reserved_namespace_is_refused(tmp_path: Path) -> None:
    """`fork DB chat tidelog/run/zz`: exit 2 with a message saying the id is reserved,
    nothing created, and `check` still finds nothing wrong."""
    db = tmp_path / "f.db"
    _seed(db, [[UserMessage("m")]])
    proc = tidelog("fork", str(db), "chat", "tidelog/run/zz", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "'tidelog/' are tidelog's own" in proc.stderr
    listed = tidelog("ls", str(db), "--internal", "--jsonl", cwd=tmp_path)
    assert [json.loads(line)["id"] for line in listed.stdout.splitlines()] == ["chat"]
    assert tidelog("check", str(db), cwd=tmp_path).returncode == 0
