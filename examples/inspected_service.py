"""A trio service that embeds the web inspector beside its own runtime: the page shows
this process's sessions live, with no second process.

Run: python examples/inspected_service.py [--forever]   (needs the inspector extra)

Without ``--forever`` it writes a short conversation, reads it back through the
inspector's HTTP API, and stops; with it, it keeps writing and serving until Ctrl-C (open
the printed URL in a browser).
"""

from __future__ import annotations

import contextlib
import json
import sys
import tempfile
import urllib.request
from pathlib import Path

import trio

from runtime import Runtime, open_runtime
from runtime.agents import AssistantMessage, Entry, UserMessage, agent_projections, history
from runtime.inspector import serve_inspector


def get_json(url: str) -> dict[str, object]:
    """One GET of the inspector's API (blocking: run it in a thread)."""
    with urllib.request.urlopen(url, timeout=10) as response:
        body: dict[str, object] = json.load(response)
        return body


async def converse(rt: Runtime, turns: int) -> None:
    """The service's own work: a conversation, one run per turn."""
    for n in range(turns):
        entries: list[Entry] = [
            UserMessage(f"question {n}"),
            AssistantMessage(f"answer {n}", agent="bot"),
        ]
        await history(rt).append("support-1", entries, run_id=f"run-{n}")
        await trio.sleep(0.01)


async def main(db: Path, forever: bool) -> None:
    async with open_runtime(db) as rt, trio.open_nursery() as nursery:
        for projection in agent_projections():
            rt.register_projection(projection)
        server = await nursery.start(serve_inspector, rt)  # 127.0.0.1, a free port
        print(f"inspector at {server.url}")
        await converse(rt, 3)
        url = f"{server.url}api/session?id=support-1"
        session = await trio.to_thread.run_sync(get_json, url)
        print(f"support-1 has {session['head']} events")
        turns = session["values"]
        assert isinstance(turns, dict)
        print(f"turns as the page shows them: {len(turns['turns'])}")
        if forever:
            print("serving until Ctrl-C")
            while True:
                await converse(rt, 1)
                await trio.sleep(2)
        nursery.cancel_scope.cancel()  # stops the inspector
    print("done")


if __name__ == "__main__":
    # Ctrl-C ends --forever.
    with tempfile.TemporaryDirectory() as tmp, contextlib.suppress(KeyboardInterrupt):
        trio.run(main, Path(tmp) / "service.db", "--forever" in sys.argv[1:])
