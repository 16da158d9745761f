"""ArrayStoreLog: the event-log contract over a store that saves one array of messages."""

from __future__ import annotations

import json
import pathlib

import pytest

from runtime import JSON, ConflictError, InvalidArgumentError, UnwrittenError
from runtime.agents import (
    ArrayStoreLog,
    ArrayStoreUnsupportedError,
    ArrayWriteUnknownError,
    AssistantMessage,
    SidecarEntry,
    ToolResult,
    UserMessage,
)


class FileArrayStore:
    """The old seam as real code writes it: one JSON file per conversation, saved whole."""

    def __init__(self, root: pathlib.Path) -> None:
        self.root = root
        self.saves = 0
        self.fail_save: str | None = None  # "before" / "after": fail around the write
        self.fail_load = False

    def _path(self, session_id: str) -> pathlib.Path:
        return self.root / (session_id.encode().hex() + ".json")

    async def load(self, session_id: str) -> list[dict[str, JSON]] | None:
        if self.fail_load:
            raise OSError("injected: the disk is gone")
        path = self._path(session_id)
        if not path.exists():
            return None
        loaded = json.loads(path.read_text())
        assert isinstance(loaded, list)
        return loaded

    async def save(self, session_id: str, messages: list[dict[str, JSON]]) -> None:
        self.saves += 1
        if self.fail_save == "before":
            raise OSError("injected: failed before writing")
        self._path(session_id).write_text(json.dumps(messages))
        if self.fail_save == "after":
            raise OSError("injected: failed after writing")


@pytest.fixture
def store(tmp_path: pathlib.Path) -> FileArrayStore:
    return FileArrayStore(tmp_path)


async def test_append_folds_into_the_array_and_read_replays_events(
    store: FileArrayStore,
) -> None:
    """Appends save the whole array, head is the message count, read replays events."""
    log = ArrayStoreLog(store)
    assert await log.head("chat") == 0
    assert await log.read("chat") == []
    assert await log.append("chat", [UserMessage("hi")], expected_head=0) == 1
    head = await log.append("chat", [AssistantMessage("hello", agent="bot"), UserMessage("x")])
    assert head == 3
    assert await store.load("chat") == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello", "agent": "bot"},
        {"role": "user", "content": "x"},
    ]
    events = await log.read("chat")
    assert [(e.seq, e.kind, e.data) for e in events] == [
        (1, "user", {"text": "hi"}),
        (2, "assistant", {"text": "hello", "agent": "bot"}),
        (3, "user", {"text": "x"}),
    ]
    assert [e.seq for e in await log.read("chat", since_seq=2)] == [3]
    assert await log.load("chat") == [
        UserMessage("hi"),
        AssistantMessage("hello", agent="bot"),
        UserMessage("x"),
    ]
    assert await log.append("chat", []) == 3
    assert store.saves == 2  # the empty append saved nothing


async def test_existing_arrays_are_read_as_they_were_written(store: FileArrayStore) -> None:
    """An array written by the old code (no adapter) reads back as events."""
    await store.save(
        "old", [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    )
    log = ArrayStoreLog(store)
    assert await log.head("old") == 2
    assert await log.load("old") == [UserMessage("q"), AssistantMessage("a")]
    await store.save("bad", [{"role": "system", "content": "s"}])
    with pytest.raises(InvalidArgumentError, match="stored message 1 has role 'system'"):
        await log.read("bad")


async def test_bad_input_and_stale_head_write_nothing(store: FileArrayStore) -> None:
    """Entries the array cannot hold, bad ids and a stale head are refused before save."""
    log = ArrayStoreLog(store)
    await log.append("chat", [UserMessage("hi")])
    with pytest.raises(InvalidArgumentError, match=r"entries\[1\].*'tool_result'"):
        await log.append("chat", [UserMessage("a"), ToolResult("c1", "out")])
    with pytest.raises(InvalidArgumentError, match="'file_snapshot'"):
        await log.append("chat", [SidecarEntry("file_snapshot", {})])
    with pytest.raises(InvalidArgumentError):
        await log.append("", [UserMessage("a")])
    with pytest.raises(InvalidArgumentError):
        await log.append("chat", "not entries")  # type: ignore[arg-type]
    with pytest.raises(ConflictError) as conflict:
        await log.append("chat", [UserMessage("late")], expected_head=0)
    assert (conflict.value.expected, conflict.value.actual) == (0, 1)
    assert store.saves == 1
    assert await log.load("chat") == [UserMessage("hi")]
    with pytest.raises(InvalidArgumentError):
        ArrayStoreLog(object())  # type: ignore[arg-type]


async def test_truncate_delete_are_refused_and_list_is_empty(store: FileArrayStore) -> None:
    """What the old store cannot do is refused (nothing changes) or empty."""
    log = ArrayStoreLog(store)
    await log.append("chat", [UserMessage("a"), AssistantMessage("b")])
    with pytest.raises(ArrayStoreUnsupportedError, match="cannot truncate"):
        await log.truncate("chat", 1)
    with pytest.raises(ArrayStoreUnsupportedError, match="cannot delete"):
        await log.delete("chat")
    assert await log.list_sessions() == []
    assert await log.head("chat") == 2


async def test_failed_save_says_whether_the_append_was_stored(store: FileArrayStore) -> None:
    """Write contract: a save that failed before writing raises UnwrittenError with the
    events to resend; one that failed after writing returns the head (it landed); a
    save and read-back that both fail raise ArrayWriteUnknownError."""
    log = ArrayStoreLog(store)
    await log.append("chat", [UserMessage("a")])
    store.fail_save = "before"
    with pytest.raises(UnwrittenError) as unwritten:
        await log.append("chat", [UserMessage("b"), AssistantMessage("c")])
    assert (unwritten.value.first, unwritten.value.last) == (2, 3)
    assert [e.kind for e in unwritten.value.events] == ["user", "assistant"]
    assert await log.load("chat") == [UserMessage("a")]

    store.fail_save = "after"
    assert await log.append("chat", [UserMessage("b")]) == 2
    assert await log.load("chat") == [UserMessage("a"), UserMessage("b")]

    class Both(FileArrayStore):
        async def save(self, session_id: str, messages: list[dict[str, JSON]]) -> None:  # noqa: ARG002
            self.fail_load = True
            raise OSError("injected: save failed, then the disk went away")

    both = Both(store.root)
    with pytest.raises(ArrayWriteUnknownError) as unknown:
        await ArrayStoreLog(both).append("chat", [UserMessage("c")])
    assert isinstance(unknown.value.__cause__, OSError)
    assert await log.load("chat") == [UserMessage("a"), UserMessage("b")]
