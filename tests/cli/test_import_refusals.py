"""``tidelog import`` refusing what it cannot import: an event the store refuses, bytes
that are not UTF-8, JSON nested too deeply, a compressed or binary file, fork lineage
that loops -- each one line on stderr naming the dump line, exit status 2, the sessions
before it whole and nothing of the one it is in, on every backend; and ``check``
reporting a loop of fork lineage that a store holds."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import attrs
import pytest
from cli_support import contents, files, new_address, tidelog

from runtime import JSON, NewEvent
from stores import RestoreOp, open_store, prepare_events

KINDS = ["sqlite", "jsonl", "postgres"]

#: ``(id, parent, data of each event)`` of the sessions of a dump.
Spec = tuple[str, tuple[str, int] | None, list[JSON]]


def dump_lines(sessions: list[Spec]) -> list[str]:
    """A dump of ``sessions`` as ``export`` writes it, one string per line (line 1 is
    ``[0]``); every event at ``ts`` 1.5, every session created at 1.0, updated at 2.0."""
    lines = [json.dumps({"format": "tidelog-dump", "version": 1, "created_at": 1.0})]
    for sid, parent, data in sessions:
        header: dict[str, JSON] = {}
        parent_obj: JSON = None
        if parent is not None:
            header = {"forked_from": parent[0], "fork_seq": parent[1]}
            parent_obj = {"id": parent[0], "seq": parent[1]}
        lines.append(
            json.dumps(
                {
                    "type": "session",
                    "id": sid,
                    "head": len(data),
                    "created_at": 1.0,
                    "updated_at": 2.0,
                    "header": header,
                    "parent": parent_obj,
                }
            )
        )
        for seq, value in enumerate(data, start=1):
            event = {"type": "event", "seq": seq, "ts": 1.5, "kind": "k", "run_id": None}
            lines.append(json.dumps({**event, "data": value}))
        lines.append(json.dumps({"type": "end", "id": sid, "events": len(data)}))
    lines.append(json.dumps({"type": "end-of-dump", "sessions": len(sessions)}))
    return lines


def write_dump(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def restore(address: str, sid: str, parent: tuple[str, int] | None, data: list[JSON]) -> None:
    """Write ``sid`` as an import writes it (recorded times, header and lineage; a copy
    of its own even for a fork), without the command."""
    header = (
        "{}"
        if parent is None
        else json.dumps({"forked_from": parent[0], "fork_seq": parent[1]}, separators=(",", ":"))
    )
    events = tuple(prepare_events([NewEvent("k", value) for value in data]))
    op = RestoreOp(sid, events, (1.5,) * len(events), 0, header, 1.0, 2.0, parent)
    store = open_store(address)
    try:
        assert store.write_batch([op]) == [len(data)]
    finally:
        store.close()


def one_line(stderr: str) -> str:
    """The single line a refused import prints (never a traceback)."""
    assert "Traceback" not in stderr
    assert len(stderr.splitlines()) == 1, stderr
    return stderr


A: Spec = ("a", None, [{"i": i} for i in range(3)])
B_EVENTS = 9001
#: ``b``'s event at line ``BAD_LINE`` of the dump (its seq is ``B_EVENTS``) is replaced.
BAD_LINE = 2 + len(A[2]) + 1 + 1 + B_EVENTS


@pytest.mark.parametrize("kind", KINDS)
def test_an_event_refused_late_leaves_nothing_of_its_session(tmp_path: Path, kind: str) -> None:
    """Event 9,001 of 9,001 has a lone surrogate (valid JSON, refused by the store): exit
    2 naming its line; the session before it is whole, nothing of the refused one is
    left (a new one removed, a resumed one cut back to where it was)."""
    lines = dump_lines([A, ("b", None, [{"i": i} for i in range(B_EVENTS)])])
    assert json.loads(lines[BAD_LINE - 1])["seq"] == B_EVENTS
    lines[BAD_LINE - 1] = lines[BAD_LINE - 1].replace('{"i": 9000}', '"\\ud800"')
    dump = write_dump(tmp_path / "bad.jsonl", lines)
    with new_address(kind, tmp_path) as address:
        proc = tidelog("import", address, str(dump), cwd=tmp_path)
        assert proc.returncode == 2, proc.stderr
        assert f"dump line {BAD_LINE}:" in one_line(proc.stderr)
        assert "lone surrogate" in proc.stderr
        got = contents(address)
        assert sorted(got) == ["a"]
        assert [e.data for e in got["a"][1]] == A[2]
        # b part-imported before (a crashed import), then the bad dump again: b is cut
        # back to its 500 events, with its lineage (its update time is the cut's on a
        # JSONL store, whose RestoreOp without events keeps it).
        restore(address, "b", None, [{"i": i} for i in range(500)])
        before = contents(address)
        proc = tidelog("import", address, str(dump), cwd=tmp_path)
        assert proc.returncode == 2, proc.stderr
        assert f"dump line {BAD_LINE}:" in one_line(proc.stderr)
        after = contents(address)
        assert after["a"] == before["a"]
        assert after["b"][1] == before["b"][1]
        assert attrs.evolve(after["b"][0], updated_at=2.0) == before["b"][0]
        if kind != "jsonl":
            assert after == before


def _deep(lines: list[str]) -> bytes:
    text = ("\n".join(lines) + "\n").encode()
    return text.replace(b'{"i": 1}', b"[" * 100_000 + b"]" * 100_000)


def _not_utf8(lines: list[str]) -> bytes:
    text = ("\n".join(lines) + "\n").encode()
    return text.replace(b'{"i": 1}', b'"\xff\xfe"')


@pytest.mark.parametrize(
    ("make", "where"),
    [(_deep, "dump line 7: JSON nested too deeply"), (_not_utf8, "dump line 7: not UTF-8")],
    ids=["nested-100000-deep", "invalid-utf8"],
)
def test_unreadable_lines_mid_dump_stop_the_import(
    tmp_path: Path, make: object, where: str
) -> None:
    """A line nested 100,000 deep, or bytes that are not UTF-8, in the second session's
    second event (line 7): one line naming it, exit 2; the first session whole, nothing
    of the second."""
    assert callable(make)
    lines = dump_lines([("a", None, [0]), ("b", None, [{"i": i} for i in range(3)])])
    dump = tmp_path / "bad.jsonl"
    dump.write_bytes(make(lines))
    target = tmp_path / "t.db"
    proc = tidelog("import", str(target), str(dump), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert where in one_line(proc.stderr)
    assert sorted(contents(str(target))) == ["a"]


@pytest.mark.parametrize("form", ["gzip", "binary"])
def test_a_compressed_or_binary_file_is_refused_creating_nothing(tmp_path: Path, form: str) -> None:
    """A gzip-compressed dump, or random bytes with no line break, given as DUMP: one
    line naming line 1 (and how to decompress), exit 2, no database created."""
    text = ("\n".join(dump_lines([A])) + "\n").encode()
    body = gzip.compress(text) if form == "gzip" else b"\x00\x9c" + os.urandom(200_000)
    dump = tmp_path / "dump.bin"
    dump.write_bytes(body)
    proc = tidelog("import", str(tmp_path / "t.db"), str(dump), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "dump line 1:" in one_line(proc.stderr)
    if form == "gzip":
        assert "gunzip -c" in proc.stderr
    assert files(tmp_path) == ["dump.bin"]


@pytest.mark.parametrize("kind", KINDS)
def test_fork_lineage_that_loops_is_refused(tmp_path: Path, kind: str) -> None:
    """A session naming itself as its parent, and two sessions each other's parent
    (within the dump, or with a session already in the target): exit 2 naming the
    session's line; the session that would close the loop is not imported."""
    with new_address(kind, tmp_path) as address:
        self_parent = write_dump(tmp_path / "c.jsonl", dump_lines([("c", ("c", 1), [1, 2])]))
        proc = tidelog("import", address, str(self_parent), cwd=tmp_path)
        assert proc.returncode == 2, proc.stderr
        assert "dump line 2:" in one_line(proc.stderr)
        assert "names itself as its parent" in proc.stderr
        assert contents(address) == {}
        loop = dump_lines([("a", ("b", 1), [1, 2]), ("b", ("a", 1), [1, 2])])
        proc = tidelog(
            "import", address, str(write_dump(tmp_path / "ab.jsonl", loop)), cwd=tmp_path
        )
        assert proc.returncode == 2, proc.stderr
        assert "dump line 6:" in one_line(proc.stderr)
        assert "(b -> a -> b)" in proc.stderr
        assert sorted(contents(address)) == ["a"]  # a alone is a copy whose parent is missing
        only_b = write_dump(tmp_path / "b.jsonl", dump_lines([("b", ("a", 1), [1, 2])]))
        proc = tidelog("import", address, str(only_b), cwd=tmp_path)
        assert proc.returncode == 2, proc.stderr
        assert "(b -> a -> b)" in one_line(proc.stderr)
        assert sorted(contents(address)) == ["a"]


@pytest.mark.parametrize("kind", ["sqlite", "jsonl"])
def test_check_reports_a_loop_of_fork_lineage(tmp_path: Path, kind: str) -> None:
    """A store holding a and b, each recorded as the other's fork (as an import wrote
    them before it refused loops): `check` exits 1 with a lineage error naming the
    loop; --json lists it."""
    with new_address(kind, tmp_path) as address:
        restore(address, "a", ("b", 1), [1, 2])
        restore(address, "b", ("a", 1), [1, 2])
        restore(address, "c", None, [1])
        proc = tidelog("check", address, "--jsonl", cwd=tmp_path)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        findings = [json.loads(line) for line in proc.stdout.splitlines()]
        loops = [f for f in findings if f["check"] == "lineage" and "loop" in f["message"]]
        assert len(loops) == 1, findings
        assert loops[0]["level"] == "error"
        assert "a -> b -> a" in loops[0]["message"]
        assert loops[0]["hint"]
