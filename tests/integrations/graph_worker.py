"""A worker process for the multi-process graph tests: runs (or resumes) the ``chain``
graph of ``graphs.py`` on one thread of a SQLite file.

Usage: python graph_worker.py DB THREAD CALLS MODE
MODE: ``run`` (from the start, after ``saver.acquire``), ``block`` (from the start, each
step's checkpoint committed before the next step; inside node ``two`` it prints ``in-two``
and waits on stdin, holding the thread),
``resume`` (continue the thread). Prints one JSON line: ``{"log": [...]}`` or
``{"error": "SessionOwnedError"}``.
"""

from __future__ import annotations

import json
import pathlib
import sys
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from graphs import chain, file_recorder

from runtime import SessionOwnedError
from runtime.integrations.langgraph import TidelogSaver


def block() -> None:
    print("in-two", flush=True)
    sys.stdin.readline()


def main() -> None:
    db, thread, calls, mode = sys.argv[1:5]
    config: Any = {"configurable": {"thread_id": thread}}
    inputs: Any = None if mode == "resume" else {"log": []}
    record = file_recorder(pathlib.Path(calls))
    with TidelogSaver.from_target(db) as saver:
        graph = chain(record, slow=block if mode == "block" else None).compile(checkpointer=saver)
        try:
            if mode == "run":
                saver.acquire(thread)
            # ``block`` is killed inside ``two``: its checkpoint of ``one`` (and with it
            # the thread's writer) must be committed before ``two`` starts, not written in
            # the background as LangGraph's default ``durability="async"`` does.
            durability: Any = "sync" if mode == "block" else None
            result = graph.invoke(inputs, config, durability=durability)
        except SessionOwnedError:
            print(json.dumps({"error": "SessionOwnedError"}), flush=True)
            return
    print(json.dumps({"log": result["log"]}), flush=True)


if __name__ == "__main__":
    main()
