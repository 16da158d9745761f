"""``tidelog serve`` as a real subprocess: it prints the URL, serves a store opened
read-only beside a writer in another process, stops on Ctrl-C with status 0; and the
install hint when the inspector extra is missing."""

from __future__ import annotations

import importlib.util
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from inspector_support import fill, sse_read, store_address

import runtime.inspector
from runtime import NewEvent, open_runtime
from runtime.cli import main
from runtime.inspector import InspectorServer

pytestmark = pytest.mark.slow


async def read_line(stream: Any, buffer: bytearray) -> str:
    while b"\n" not in buffer:
        chunk = await stream.receive_some(4096)
        if not chunk:
            raise AssertionError(f"tidelog serve ended before printing a line: {buffer!r}")
        buffer += chunk
    line, _, rest = bytes(buffer).partition(b"\n")
    buffer[:] = rest
    return line.decode()


@pytest.fixture(params=["sqlite", "jsonl", "postgres"])
def address(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A store address of each backend (a PostgreSQL schema of the test's own)."""
    with store_address(request.param, tmp_path) as found:
        yield found


async def test_serve_prints_the_url_serves_read_only_and_stops_on_ctrl_c(address: str) -> None:
    """The URL comes first; the API answers from the store (leases shown); a writer in
    another process appends meanwhile and its events reach the stream; SIGINT ends the
    command with status 0."""
    db = address
    async with open_runtime(db) as rt:
        await fill(rt)
    command = [sys.executable, "-m", "runtime.cli", "serve", db, "--port", "0"]
    proc = await trio.lowlevel.open_process(command, stdout=subprocess.PIPE)
    try:
        with trio.fail_after(60):
            assert proc.stdout is not None
            buffer = bytearray()
            first = await read_line(proc.stdout, buffer)
            match = re.search(r" at (http://127\.0\.0\.1:(\d+)/)$", first)
            assert match is not None, first
            assert "(read-only)" in first
            url, port = match.group(1), int(match.group(2))
            async with httpx.AsyncClient(base_url=url) as client:
                listed = (await client.get("/api/sessions")).json()
                assert [s["id"] for s in listed["sessions"]] == ["chat", "chat-fork", "notes"]
                assert all(s["writer"] is None for s in listed["sessions"])
                refused = await client.post("/api/fork", json={"id": "chat", "new_id": "x"})
                assert refused.status_code == 403
            server = InspectorServer(url, "127.0.0.1", port, None, False)
            async with open_runtime(db) as rt, trio.open_nursery() as nursery:

                async def append_soon() -> None:
                    await trio.sleep(0.2)
                    async with rt.open_session("notes") as writer:  # never blocked
                        await writer.append([NewEvent("note", {"n": 6})])

                nursery.start_soon(append_soon)
                got = await sse_read(server, 1, id="notes", since_seq=5)
            assert [e["id"] for e in got] == ["6"]
            proc.send_signal(signal.SIGINT)
            assert await proc.wait() == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


def test_serve_refuses_a_missing_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A path that names no store is refused before anything listens (nothing created)."""
    missing = tmp_path / "missing.db"
    assert main(["serve", str(missing)]) == 2
    assert "no such database file" in capsys.readouterr().err
    assert not missing.exists()


def test_serve_without_the_extra_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Without Starlette, hypercorn or sse-starlette, ``serve`` (and the library) name
    the extra to install."""
    found = importlib.util.find_spec

    def without_hypercorn(name: str, *args: Any) -> Any:
        return None if name == "hypercorn" else found(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", without_hypercorn)
    hint = runtime.inspector.missing_extra()
    assert hint == "the inspector needs hypercorn: pip install 'tidelog[inspector]'"
    assert main(["serve", str(tmp_path / "any.db")]) == 2
    assert capsys.readouterr().err.strip() == f"tidelog: serve: {hint}"
