"""``tidelog runs``: the stored agent runs, and deciding or stopping one.

``tidelog runs DB`` lists every run (its status, conversation, last update, the calls
awaiting approval and those whose outcome is unknown) from a read-only store;
``tidelog runs approve|reject DB RUN CALL`` records a decision
(:func:`runtime.agents.approve` / :func:`~runtime.agents.reject`), ``tidelog runs stop
DB RUN`` asks a live run to stop (:func:`runtime.agents.request_stop`).
"""

from __future__ import annotations

import argparse
import getpass
import sys
from typing import TextIO

import trio

from runtime.agents import (
    RunOverview,
    approve,
    checkpoints,
    list_runs,
    reject,
    request_stop,
)

from ._errors import CliError
from ._opening import check_database, reading_runtime, writing_runtime
from ._output import dumps, printable, show_time, table

__all__ = ["ACTIONS", "cmd_runs"]

#: The words that make ``tidelog runs`` act on one run, and their operands.
ACTIONS = {"approve": ("DB", "RUN", "CALL"), "reject": ("DB", "RUN", "CALL"), "stop": ("DB", "RUN")}


def cmd_runs(args: argparse.Namespace) -> int:
    """``tidelog runs``."""
    words: list[str] = args.words
    action = words[0] if words[0] in ACTIONS else None
    args.db = words[0] if action is None or len(words) < 2 else words[1]  # for error lines
    if action is None:
        if len(words) != 1:
            raise CliError(
                "tidelog: runs: give DB alone to list, or approve|reject DB RUN CALL, or "
                "stop DB RUN"
            )
        runs = trio.run(_list, words[0], args.status)
        _show(sys.stdout, args.format, runs)
        return 0
    operands = ACTIONS[action]
    if len(words) - 1 != len(operands):
        raise CliError(f"tidelog: runs {action}: expected {' '.join(operands)}")
    by = args.by or getpass.getuser()
    message = trio.run(_act, action, words[1:], by, args)
    sys.stdout.write(message + "\n")
    return 0


async def _list(address: str, status: str | None) -> list[RunOverview]:
    await trio.to_thread.run_sync(check_database, address)
    async with reading_runtime(address) as rt:
        return await list_runs(checkpoints(rt), status=status)  # type: ignore[arg-type]


async def _act(action: str, operands: list[str], by: str, args: argparse.Namespace) -> str:
    address, run_id = operands[0], operands[1]
    async with writing_runtime(address) as rt:
        if action == "stop":
            reason = args.reason or "stopped with tidelog runs stop"
            outcome = await request_stop(rt, run_id, by=by, reason=reason)
            if outcome.requested:
                return f"asked run {run_id} to stop (it stops at its next safe point)"
            return f"run {run_id} is {outcome.status} and no host runs it: nothing to stop"
        call_id = operands[2]
        decide = approve if action == "approve" else reject
        decision = await decide(checkpoints(rt), run_id, call_id, by=by, message=args.message)
        how = "approved" if decision.approved else "rejected"
        return f"{how} call {call_id} of run {run_id} (by {by}); re-issue the run to go on"


def _calls(run: RunOverview, which: str) -> str:
    calls = run.pending_approvals if which == "pending" else run.unknown_outcomes
    return ", ".join(f"{c.call_id}:{c.name}" for c in calls) or "-"


def _show(out: TextIO, fmt: str, runs: list[RunOverview]) -> None:
    if fmt == "json":
        out.write(dumps({"runs": [r.to_json() for r in runs]}) + "\n")
        return
    if fmt == "jsonl":
        for run in runs:
            out.write(dumps(run.to_json()) + "\n")
        return
    rows = [
        [
            printable(r.run_id),
            r.status,
            printable(r.session_id or "-"),
            show_time(r.updated_at),
            printable(_calls(r, "pending")),
            printable(_calls(r, "unknown")),
        ]
        for r in runs
    ]
    table(out, ("RUN", "STATUS", "SESSION", "UPDATED", "AWAITING APPROVAL", "UNKNOWN"), rows)
