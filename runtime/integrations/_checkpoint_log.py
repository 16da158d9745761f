"""How a LangGraph thread lives in one tidelog session: the events the saver appends,
and the fold that reads them back (pure: no I/O, no LangGraph import).

Events (``kind``: ``data``), every serialized value a ``[type, base64]`` pair from the
saver's serde (``dumps_typed``):

* ``checkpoint``: ``{"ns", "id", "parent", "checkpoint", "metadata", "versions",
  "blobs"}`` -- the checkpoint without its channel values, its metadata, its channel
  versions, and the blobs of the channels in ``new_versions`` only, as
  ``[channel, version, type, base64]`` (``type`` ``null``: the channel is empty at that
  version). The event's ``run_id`` is the metadata's ``run_id`` (indexed by tidelog).
* ``writes``: ``{"ns", "checkpoint", "task", "path", "writes"}`` -- one ``put_writes``
  call, each write as ``[idx, channel, type, base64]``; ``idx`` follows LangGraph's
  ``WRITES_IDX_MAP`` (special channels negative). A regular write whose ``(task, idx)``
  the checkpoint already has is ignored by the fold (a retried task writes once); a
  special one replaces the earlier one, as LangGraph's own savers do.

Maintenance that removes checkpoints (``prune``, ``delete_for_runs``) rewrites the
session in one atomic step with :func:`rewrite_events`: each kept checkpoint again
carries every blob it refers to.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from runtime import JSON, NewEvent, StoredEvent

__all__ = [
    "CHECKPOINT",
    "WRITES",
    "NamespaceLog",
    "StoredCheckpoint",
    "ThreadLog",
    "decode",
    "encode",
    "rewrite_events",
]

CHECKPOINT = "checkpoint"
WRITES = "writes"

#: A serialized value: the serde's type tag and bytes.
Typed = tuple[str, bytes]


def encode(typed: Typed) -> list[JSON]:
    """A serde value as JSON."""
    return [typed[0], base64.b64encode(typed[1]).decode("ascii")]


def decode(value: Any) -> Typed:
    """The serde value of :func:`encode`'s JSON."""
    return (str(value[0]), base64.b64decode(value[1]))


def version_key(version: object) -> str:
    """A channel version as a dict key that keeps ``1`` and ``"1"`` apart."""
    return json.dumps(version)


@attrs.define
class StoredCheckpoint:
    """A checkpoint as the log holds it (serialized parts, decoded on read)."""

    ns: str
    id: str
    parent: str | None
    checkpoint: Typed
    metadata: Typed
    versions: dict[str, Any]
    run_id: str | None
    seq: int


@attrs.define
class NamespaceLog:
    """One checkpoint namespace of a thread: checkpoints by id, their pending writes by
    ``(task, idx)``, and the channel blobs by ``(channel, version_key)``."""

    checkpoints: dict[str, StoredCheckpoint] = attrs.field(factory=dict)
    writes: dict[str, dict[tuple[str, int], tuple[str, str, Typed, str]]] = attrs.field(
        factory=dict
    )
    blobs: dict[tuple[str, str], Typed | None] = attrs.field(factory=dict)

    def blob_values(self, versions: dict[str, Any]) -> dict[str, Typed]:
        """The serialized channel values at ``versions`` (empty channels left out)."""
        found: dict[str, Typed] = {}
        for channel, version in versions.items():
            blob = self.blobs.get((channel, version_key(version)))
            if blob is not None:
                found[channel] = blob
        return found

    def latest(self) -> StoredCheckpoint | None:
        """The checkpoint with the greatest id (ids sort by creation)."""
        if not self.checkpoints:
            return None
        return self.checkpoints[max(self.checkpoints)]


@attrs.define
class ThreadLog:
    """The fold of a thread's session: every namespace, and the last event folded (to
    tell whether a later read continues this log or the session was rewritten)."""

    namespaces: dict[str, NamespaceLog] = attrs.field(factory=dict)
    seq: int = 0
    last: tuple[float, str, JSON] | None = None

    def continues(self, event: StoredEvent) -> bool:
        """Whether ``event`` (read again at :attr:`seq`) is the last event folded."""
        return (
            event.seq == self.seq
            and self.last is not None
            and self.last == (event.ts, event.kind, event.data)
        )

    def apply(self, events: Iterable[StoredEvent]) -> None:
        """Fold ``events`` (the next ones, in seq order)."""
        for event in events:
            data = event.data
            if isinstance(data, dict):
                if event.kind == CHECKPOINT:
                    self._checkpoint(data, event.seq)
                elif event.kind == WRITES:
                    self._writes(data)
            self.seq = event.seq
            self.last = (event.ts, event.kind, event.data)

    def _ns(self, ns: str) -> NamespaceLog:
        log = self.namespaces.get(ns)
        if log is None:
            log = self.namespaces[ns] = NamespaceLog()
        return log

    def _checkpoint(self, data: dict[str, Any], seq: int) -> None:
        log = self._ns(str(data["ns"]))
        metadata = decode(data["metadata"])
        stored = StoredCheckpoint(
            ns=str(data["ns"]),
            id=str(data["id"]),
            parent=data.get("parent"),
            checkpoint=decode(data["checkpoint"]),
            metadata=metadata,
            versions=dict(data.get("versions") or {}),
            run_id=data.get("run_id"),
            seq=seq,
        )
        log.checkpoints[stored.id] = stored
        for channel, version, kind, payload in data.get("blobs") or ():
            key = (str(channel), version_key(version))
            log.blobs[key] = None if kind is None else (str(kind), base64.b64decode(payload))

    def _writes(self, data: dict[str, Any]) -> None:
        log = self._ns(str(data["ns"]))
        task = str(data["task"])
        path = str(data.get("path") or "")
        stored = log.writes.setdefault(str(data["checkpoint"]), {})
        for idx, channel, kind, payload in data["writes"]:
            key = (task, int(idx))
            if key[1] >= 0 and key in stored:
                continue
            stored[key] = (task, str(channel), (str(kind), base64.b64decode(payload)), path)


def checkpoint_event(
    *,
    ns: str,
    checkpoint_id: str,
    parent: str | None,
    checkpoint: Typed,
    metadata: Typed,
    versions: dict[str, Any],
    blobs: Sequence[tuple[str, Any, Typed | None]],
    run_id: str | None,
) -> NewEvent:
    """The event of one ``put``."""
    data: dict[str, JSON] = {
        "ns": ns,
        "id": checkpoint_id,
        "parent": parent,
        "checkpoint": encode(checkpoint),
        "metadata": encode(metadata),
        "versions": versions,
        "blobs": [
            [channel, version, None, None] if blob is None else [channel, version, *encode(blob)]
            for channel, version, blob in blobs
        ],
        "run_id": run_id,
    }
    return NewEvent(CHECKPOINT, data, run_id=run_id)


def writes_event(
    *, ns: str, checkpoint_id: str, task: str, path: str, writes: Sequence[tuple[int, str, Typed]]
) -> NewEvent:
    """The event of one ``put_writes``."""
    return NewEvent(
        WRITES,
        {
            "ns": ns,
            "checkpoint": checkpoint_id,
            "task": task,
            "path": path,
            "writes": [[idx, channel, *encode(value)] for idx, channel, value in writes],
        },
    )


def rewrite_events(log: ThreadLog, keep: set[tuple[str, str]]) -> list[NewEvent]:
    """The events of a thread holding only the checkpoints ``keep`` (``(ns, id)``
    pairs) and their pending writes, in their original order; each checkpoint carries
    every blob it refers to, since the events that first held them may be gone."""
    kept = sorted(
        (stored for ns_log in log.namespaces.values() for stored in ns_log.checkpoints.values()),
        key=lambda stored: stored.seq,
    )
    events: list[NewEvent] = []
    for stored in kept:
        if (stored.ns, stored.id) not in keep:
            continue
        ns_log = log.namespaces[stored.ns]
        blobs = [
            (channel, version, ns_log.blobs[(channel, version_key(version))])
            for channel, version in stored.versions.items()
            if (channel, version_key(version)) in ns_log.blobs
        ]
        events.append(
            checkpoint_event(
                ns=stored.ns,
                checkpoint_id=stored.id,
                parent=stored.parent,
                checkpoint=stored.checkpoint,
                metadata=stored.metadata,
                versions=stored.versions,
                blobs=blobs,
                run_id=stored.run_id,
            )
        )
        by_task: dict[tuple[str, str], list[tuple[int, str, Typed]]] = {}
        for (task, idx), (_, channel, value, path) in ns_log.writes.get(stored.id, {}).items():
            by_task.setdefault((task, path), []).append((idx, channel, value))
        for (task, path), writes in by_task.items():
            events.append(
                writes_event(
                    ns=stored.ns, checkpoint_id=stored.id, task=task, path=path, writes=writes
                )
            )
    return events
