"""A worker process for the SDK session tests: adds one item to a TidelogSession on a
SQLite file, prints ``held`` and keeps the session until a line arrives on stdin.

Usage: python session_worker.py DB SESSION_ID TEXT
"""

from __future__ import annotations

import asyncio
import sys

from runtime.integrations import Bridge
from runtime.integrations.openai_agents import TidelogSession


def main() -> None:
    db, session_id, text = sys.argv[1:4]
    with Bridge.start(db) as bridge:
        session = TidelogSession(session_id, bridge)
        asyncio.run(session.add_items([{"role": "user", "content": text}]))
        print("held", flush=True)
        sys.stdin.readline()


if __name__ == "__main__":
    main()
