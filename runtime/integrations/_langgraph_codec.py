"""The LangGraph saver on the caller's thread: a ``put``'s or ``put_writes``' event
encoded with the saver's serde, and what a read found decoded into ``CheckpointTuple``
values (filtered and limited for ``list``); the layer of
:class:`~runtime.integrations.langgraph.TidelogSaver` that never touches the runtime.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_metadata,
)

from runtime import InvalidArgumentError, NewEvent

from ._checkpoint_log import checkpoint_event, writes_event
from ._langgraph_reads import _Found

__all__ = ["CheckpointCodec"]


class CheckpointCodec(BaseCheckpointSaver[int]):
    """Encoding and decoding with ``self.serde``, for ``TidelogSaver``."""

    # -- encoding and decoding (on the caller's thread) -----------------------------------

    def _put_event(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> tuple[str, NewEvent, RunnableConfig]:
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        ns = str(conf.get("checkpoint_ns", ""))
        parent = conf.get("checkpoint_id")
        rest: dict[str, Any] = dict(checkpoint)
        values: dict[str, Any] = rest.pop("channel_values", None) or {}
        blobs = [
            (
                channel,
                version,
                self.serde.dumps_typed(values[channel]) if channel in values else None,
            )
            for channel, version in new_versions.items()
        ]
        full = get_checkpoint_metadata(config, metadata)
        run_id = full.get("run_id")
        event = checkpoint_event(
            ns=ns,
            checkpoint_id=checkpoint["id"],
            parent=None if parent is None else str(parent),
            checkpoint=self.serde.dumps_typed(rest),
            metadata=self.serde.dumps_typed(full),
            versions=dict(checkpoint["channel_versions"]),
            blobs=blobs,
            run_id=run_id if isinstance(run_id, str) else None,
        )
        result: RunnableConfig = {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
            }
        }
        return thread_id, event, result

    def _writes_event(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> tuple[str, NewEvent]:
        conf = config["configurable"]
        encoded = [
            (WRITES_IDX_MAP.get(channel, idx), channel, self.serde.dumps_typed(value))
            for idx, (channel, value) in enumerate(writes)
        ]
        event = writes_event(
            ns=str(conf.get("checkpoint_ns", "")),
            checkpoint_id=str(conf["checkpoint_id"]),
            task=str(task_id),
            path=str(task_path),
            writes=encoded,
        )
        return str(conf["thread_id"]), event

    def _tuple(self, found: _Found) -> CheckpointTuple:
        thread_id, stored, blobs, writes = found
        loads = self.serde.loads_typed
        checkpoint = loads(stored.checkpoint)
        checkpoint["channel_values"] = {channel: loads(blob) for channel, blob in blobs.items()}
        return CheckpointTuple(
            config={
                "configurable": {
                    "thread_id": thread_id,
                    "checkpoint_ns": stored.ns,
                    "checkpoint_id": stored.id,
                }
            },
            checkpoint=checkpoint,
            metadata=loads(stored.metadata),
            parent_config=(
                {
                    "configurable": {
                        "thread_id": thread_id,
                        "checkpoint_ns": stored.ns,
                        "checkpoint_id": stored.parent,
                    }
                }
                if stored.parent
                else None
            ),
            pending_writes=[(task, channel, loads(value)) for task, channel, value in writes],
        )

    def _select(
        self, found: builtins.list[_Found], filter: dict[str, Any] | None, limit: int | None
    ) -> builtins.list[CheckpointTuple]:
        if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool)):
            raise InvalidArgumentError(f"limit must be an int or None, not {limit!r}")
        out: builtins.list[CheckpointTuple] = []
        for item in found:
            if limit is not None and len(out) >= limit:
                break
            if filter:
                metadata = self.serde.loads_typed(item[1].metadata)
                if not all(metadata.get(key) == value for key, value in filter.items()):
                    continue
            out.append(self._tuple(item))
        return out
