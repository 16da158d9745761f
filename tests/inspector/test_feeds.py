"""The shared feeds: each event's SSE message encoded once, byte for byte what
sse-starlette's ``ServerSentEvent`` makes of it; a follower sends what it has not sent in
one piece, each event still its own message."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from inspector_support import sse_events
from sse_starlette import ServerSentEvent

from runtime import JSON, MemoryStore, NewEvent, StoredEvent, open_runtime
from runtime.inspector._feeds import Feed, encode_event, follow, message_of

JSONS = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)


@given(
    seq=st.integers(min_value=1, max_value=2**63 - 1),
    kind=st.text(min_size=1),
    data=JSONS,
    run_id=st.none() | st.text(),
)
def test_a_message_is_what_server_sent_event_encodes(
    seq: int, kind: str, data: JSON, run_id: str | None
) -> None:
    """Any event -- newlines, carriage returns, non-ASCII text in its kind, data or run --
    becomes one SSE message identical to ``ServerSentEvent(...).encode()``."""
    event = StoredEvent("s", seq, 1.5, kind, data, run_id)
    expected = ServerSentEvent(data=encode_event(event), id=str(seq), event="event").encode()
    assert message_of(event) == expected


async def test_follow_sends_what_it_has_not_sent_in_one_piece_each_event_its_own_message() -> None:
    """A follower inside the feed's buffer gets every event after its seq as one piece
    of concatenated messages (id = seq each), then each later batch as one piece; one
    behind the buffer catches up event by event on a tail of its own, with no gap."""
    async with open_runtime(MemoryStore()) as rt:
        async with rt.open_session("s") as writer:
            await writer.append([NewEvent("n", {"i": i}) for i in range(1, 11)])
        async with rt.snapshot("s") as snap:
            stored = await snap.read()
        feed = Feed("s", 10)
        feed.events.extend((e.seq, message_of(e)) for e in stored[4:])  # seqs 5..10
        followed = follow(rt, feed, 7)
        assert await followed.__anext__() == (10, b"".join(message_of(e) for e in stored[7:]))
        behind = follow(rt, feed, 2)
        got = [await behind.__anext__() for _ in range(2)]  # 3 and 4: not in the buffer
        assert got == [(e.seq, message_of(e)) for e in stored[2:4]]
        assert await behind.__anext__() == (10, b"".join(message_of(e) for e in stored[4:]))
        async with rt.open_session("s") as writer:
            await writer.append([NewEvent("n", {"i": i}) for i in (11, 12)])
        async with rt.snapshot("s") as snap:
            more = await snap.read(since_seq=10)
        feed.events.extend((e.seq, message_of(e)) for e in more)
        feed.cursor = 12
        feed.changed.set()
        piece = b"".join(message_of(e) for e in more)
        assert await followed.__anext__() == (12, piece)
        assert await behind.__anext__() == (12, piece)
        text = piece.decode()
        assert [e["id"] for e in sse_events(text)] == ["11", "12"]
        await followed.aclose()
        await behind.aclose()
