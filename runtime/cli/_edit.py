"""``tidelog fork`` and ``tidelog rewind``: the two commands that change a conversation.

Both go through the agent layer on a writing runtime, so they take the session's lease
(a live writer elsewhere makes them fail with a message, never write beside it).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TextIO

import trio

from runtime import INTERNAL_PREFIX, JSON, SessionInfo, SessionNotFoundError
from runtime.agents import Entry, SidecarEntry, ToolCall, fork_conversation, history
from runtime.agents import pending_tool_calls as pending_calls

from ._errors import CliError
from ._opening import writing_runtime
from ._output import dumps, session_obj

__all__ = ["clean_cut_problem", "cmd_fork", "cmd_rewind"]


def cmd_fork(args: argparse.Namespace) -> int:
    """``tidelog fork``."""
    return trio.run(_fork, args, sys.stdout)


async def _fork(args: argparse.Namespace, out: TextIO) -> int:
    if isinstance(args.new, str) and args.new.startswith(INTERNAL_PREFIX):
        raise CliError(
            f"tidelog: fork: ids starting with {INTERNAL_PREFIX!r} are tidelog's own (run "
            "checkpoints, archives): give NEW another id"
        )
    async with writing_runtime(args.db) as rt:
        source = await rt.stat(args.source)
        if source is None:
            raise SessionNotFoundError(args.source)
        if args.at is not None and args.at > source.head:
            raise CliError(
                f"tidelog: fork: --at {args.at} is past the last seq of {args.source!r} "
                f"({source.head})"
            )
        info = await fork_conversation(
            rt, args.source, args.new, at_seq=args.at, allow_open_run=args.allow_open_run
        )
    _print(out, args.format, session_obj(info), _forked(info))
    return 0


def _forked(info: SessionInfo) -> str:
    assert info.parent is not None
    return f"forked {info.id!r} from {info.parent[0]!r} at seq {info.parent[1]}"


def _print(out: TextIO, fmt: str, record: dict[str, JSON], text: str) -> None:
    out.write((text if fmt == "text" else dumps(record)) + "\n")


def _call_ids(entries: Sequence[Entry]) -> set[str]:
    return {entry.call_id for entry in entries if isinstance(entry, ToolCall)}


def clean_cut_problem(entries: Sequence[Entry], keep: int) -> str | None:
    """Why keeping the first ``keep`` entries would leave a broken conversation (a tool
    call without its result, or a tool's sidecar record -- ``tool_started``,
    ``tool_aborted``... -- naming a call that is not kept), or ``None`` for a clean cut."""
    kept = entries[:keep]
    pending = pending_calls(kept)
    if pending:
        return f"it would cut between tool call {pending[0].call_id!r} and its result"
    calls = _call_ids(kept)
    for entry in kept:
        if isinstance(entry, SidecarEntry) and isinstance(entry.data, dict):
            call_id = entry.data.get("call_id")
            if isinstance(call_id, str) and call_id not in calls:
                return f"it would keep the {entry.kind!r} record of tool call {call_id!r} alone"
    return None


def cmd_rewind(args: argparse.Namespace) -> int:
    """``tidelog rewind``."""
    return trio.run(_rewind, args, sys.stdout)


async def _rewind(args: argparse.Namespace, out: TextIO) -> int:
    async with writing_runtime(args.db) as rt:
        if await rt.stat(args.session) is None:
            raise SessionNotFoundError(args.session)
        conversation = history(rt)
        entries = await conversation.load(args.session)
        keep = args.keep
        problem = None if keep >= len(entries) else clean_cut_problem(entries, keep)
        if problem is not None:
            clean = [n for n in range(len(entries) + 1) if clean_cut_problem(entries, n) is None]
            below = max(n for n in clean if n < keep)
            above = min((n for n in clean if n > keep), default=len(entries))
            raise CliError(
                f"tidelog: rewind: --keep {keep} would leave a broken conversation: {problem}; "
                f"the nearest clean cuts are --keep {below} and --keep {above} "
                f"(of {len(entries)} entries)"
            )
        removed = await conversation.rewind(args.session, keep)
        after = len(await conversation.load(args.session))
    record: dict[str, JSON] = {"session": args.session, "kept": after, "removed": removed}
    text = f"rewound {args.session!r}: kept {after} entries, removed {removed}"
    _print(out, args.format, record, text)
    return 0
