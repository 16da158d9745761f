"""The shared feeds' SSE messages: encoded once per event, byte for byte what
sse-starlette's ``ServerSentEvent`` makes of the same id, kind and data."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from sse_starlette import ServerSentEvent

from runtime import JSON, StoredEvent
from runtime.inspector._feeds import encode_event, message_of

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
