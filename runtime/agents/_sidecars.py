"""Sidecar events a tool records through its context (lite-agent's ``recordSnapshot``,
lite-agent being a TypeScript agent kernel with an event-log Checkpointer), and file
snapshots.

``await ctx.record(kind, data)`` adds a :class:`SidecarEntry` to the run, tagged with the
call's id (``data["call_id"]``), and checkpoints it before the call's result can be
recorded. The conversation projection and the model adapters skip sidecars, so they never
split a group of tool results.

``await ctx.snapshot_file(path)`` records a ``file_snapshot`` of the file as it is now --
its bytes (base64) or that it did not exist -- before the tool changes it; ``restore_session``
writes those back. A per-session byte quota (``quota_bytes``, counted over the snapshots
already in the conversation and the run) keeps snapshots from growing the log without
bound: a snapshot over it, or over the event size limit, is stored as ``truncated`` (no
content), and a restore skips its path.
"""

from __future__ import annotations

import base64
import os
from typing import TYPE_CHECKING

import attrs
import trio

from runtime import JSON, InvalidArgumentError
from stores import MAX_EVENT_BYTES, prepare_events

from ._transcript import SidecarEntry, entry_to_event

if TYPE_CHECKING:
    from ._loop import Run

__all__ = ["DEFAULT_SNAPSHOT_QUOTA", "FILE_SNAPSHOT", "CallSink", "snapshot_data"]

#: Event kind of a file snapshot.
FILE_SNAPSHOT = "file_snapshot"
#: Default per-session quota of snapshot content, in bytes of the files (64 MiB).
DEFAULT_SNAPSHOT_QUOTA = 64 * 1024 * 1024
#: Kinds the run loop itself records about a call: a tool may not forge them.
_LOOP_KINDS = frozenset({"tool_started", "tool_aborted", "approval_requested", "approval_decision"})
#: Room left in an event for the snapshot's other fields.
_OVERHEAD = 64 * 1024


def snapshot_data(entry: object) -> dict[str, JSON] | None:
    """The data of a ``file_snapshot`` entry or event data, else None."""
    if isinstance(entry, SidecarEntry):
        if entry.kind != FILE_SNAPSHOT:
            return None
        entry = entry.data
    if isinstance(entry, dict) and isinstance(entry.get("path"), str):
        return entry
    return None


def _stored_bytes(entries: object) -> int:
    total = 0
    assert isinstance(entries, list)
    for entry in entries:
        data = snapshot_data(entry)
        if data is not None and not data.get("truncated"):
            size = data.get("size")
            total += size if isinstance(size, int) else 0
    return total


def _read(path: str) -> tuple[str, bytes | None]:
    """The absolute path and the file's bytes (None: it does not exist)."""
    path = os.path.abspath(path)
    if not os.path.lexists(path):
        return path, None
    if os.path.isdir(path):
        raise InvalidArgumentError(f"snapshot_file: {path!r} is a directory, not a file")
    with open(path, "rb") as f:
        return path, f.read()


@attrs.define
class CallSink:
    """Where one tool call's sidecars go: the run, tagged with the call's id."""

    run: Run
    call_id: str

    async def record(self, kind: str, data: dict[str, JSON]) -> SidecarEntry:
        """Add a sidecar to the run and checkpoint it (see :meth:`RunContext.record`)."""
        if not isinstance(data, dict):
            raise InvalidArgumentError(
                f"a tool's sidecar data must be a dict, not {type(data).__name__}"
            )
        if "call_id" in data:
            raise InvalidArgumentError("a tool's sidecar data may not set 'call_id' (it is added)")
        if kind in _LOOP_KINDS:
            raise InvalidArgumentError(f"sidecar kind {kind!r} is recorded by the run loop itself")
        entry = SidecarEntry(kind, {"call_id": self.call_id, **data})  # checks kind and JSON
        prepare_events([entry_to_event(entry)])  # checks the event size limit
        self.run.entries.append(entry)
        await self.run.save()
        return entry

    async def snapshot_file(self, path: str | os.PathLike[str], quota_bytes: int) -> SidecarEntry:
        """Record the file's current content (see :meth:`RunContext.snapshot_file`)."""
        if type(quota_bytes) is not int or quota_bytes < 0:
            raise InvalidArgumentError(f"quota_bytes must be an int >= 0, not {quota_bytes!r}")
        try:
            name = os.fspath(path)
        except TypeError:
            raise InvalidArgumentError(
                f"snapshot_file takes a path, not {type(path).__name__}"
            ) from None
        absolute, content = await trio.to_thread.run_sync(_read, name)
        data: dict[str, JSON] = {"path": absolute, "existed": content is not None}
        if content is None:
            data.update(size=0, truncated=False, content=None)
            return await self.record(FILE_SNAPSHOT, data)
        used = _stored_bytes(self.run.prior) + _stored_bytes(self.run.entries)
        encoded_size = (len(content) + 2) // 3 * 4
        if used + len(content) > quota_bytes or encoded_size + _OVERHEAD > MAX_EVENT_BYTES:
            data.update(size=len(content), truncated=True, content=None)
        else:
            text = base64.b64encode(content).decode("ascii")
            data.update(size=len(content), truncated=False, content=text)
        return await self.record(FILE_SNAPSHOT, data)
