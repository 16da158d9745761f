"""The values a store holds and exchanges: events, session info, and their validation.

Everything here is an immutable ``attrs`` value. Validation is strict and happens before
any write: ``data`` must be *exactly* JSON, session ids must be sane text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NoReturn, TypeAlias, final

import attrs

from . import _codec
from ._codec import (
    MAX_NESTING,
    decode,
    decode_small,
    encode_plain,
    json_text,
    stdlib_json_text,
)
from ._errors import (
    InvalidArgumentError,
    InvalidEventError,
    InvalidSessionIdError,
    StoreCorruptError,
)
from ._fastinit import draft_of, drafted

__all__ = [
    "INFO_COLUMNS",
    "JSON",
    "MAX_BATCH_BYTES",
    "MAX_EVENT_BYTES",
    "MAX_ID_LENGTH",
    "MAX_NESTING",
    "MAX_SEQ",
    "LeaseInfo",
    "NewEvent",
    "PreparedEvent",
    "SessionInfo",
    "StoredEvent",
    "check_count",
    "check_flag",
    "check_seq",
    "decode_json",
    "decode_json_object",
    "encode_json",
    "events_from_rows",
    "prepare_events",
    "session_info",
    "stored_events",
    "validate_header",
    "validate_session_id",
]

JSON: TypeAlias = bool | int | float | str | list["JSON"] | dict[str, "JSON"] | None

#: The longest accepted session id (and event kind / run id), in characters.
MAX_ID_LENGTH = 256

#: The largest seq, count or limit any store method accepts (a signed 64-bit integer, what
#: every backend can hold); larger values are refused with ``InvalidArgumentError``.
MAX_SEQ = 2**63 - 1

#: The largest event: the UTF-8 JSON text of one event's ``data``, in bytes (16 MiB).
#: :func:`prepare_events` refuses a larger one with ``InvalidEventError``.
MAX_EVENT_BYTES = 16 * 1024 * 1024

#: The largest batch: the UTF-8 JSON texts of the ``data`` of all events of one
#: :func:`prepare_events` call (one append), in bytes together (64 MiB). A larger batch is
#: refused whole with ``InvalidEventError`` naming the event that crossed the limit.
MAX_BATCH_BYTES = 64 * 1024 * 1024

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


@final  # (see drafted)
@drafted
@attrs.frozen(weakref_slot=False)
class NewEvent:
    """An event to append: a ``kind`` tag, JSON ``data`` and an optional ``run_id``.
    A final class: it cannot be subclassed."""

    kind: str
    data: JSON = None
    run_id: str | None = attrs.field(default=None, kw_only=True)


@final  # (see drafted)
@drafted
@attrs.frozen(weakref_slot=False)
class StoredEvent:
    """An event as stored: ``seq`` is 1-based and gapless per session; ``ts`` is the commit
    time in float seconds since the epoch, shared by all events of one append. A final
    class: it cannot be subclassed."""

    session_id: str
    seq: int
    ts: float
    kind: str
    data: JSON
    run_id: str | None = None


@attrs.frozen
class SessionInfo:
    """What a store knows about one session. ``head`` 0 means empty; ``header`` is the JSON
    object given at create (``{}`` if none); ``parent`` is ``(session_id, seq)`` for a fork."""

    id: str
    head: int
    created_at: float
    updated_at: float
    header: dict[str, JSON] = attrs.field(factory=dict)
    parent: tuple[str, int] | None = None


@attrs.frozen
class LeaseInfo:
    """A session's write lease as stored: held by the token ``owner``, described by
    ``holder`` (see :mod:`stores._leases`), valid until ``expires`` (seconds since the
    epoch) unless renewed. An expired lease, or one whose holder process has exited
    (:func:`stores._leases.holder_is_dead`), may be taken over."""

    session_id: str
    owner: str
    holder: str
    expires: float


@final  # (see drafted)
@drafted
@attrs.frozen(weakref_slot=False)
class PreparedEvent:
    """A validated event with its data already encoded as canonical JSON text.

    Produced by :func:`prepare_events`; the batched write path takes these so validation
    and encoding happen once, before any transaction starts. A final class: it cannot be
    subclassed.
    """

    kind: str
    data_json: str
    run_id: str | None = None


#: What prepare_events makes each PreparedEvent from, and stored_events each
#: StoredEvent, inline (as their __new__ would).
_PREPARED_DRAFT = draft_of(PreparedEvent)
_STORED_DRAFT = draft_of(StoredEvent)


def _check_text(value: object, what: str, index: int | None, kind: object) -> str:
    if not isinstance(value, str):
        raise InvalidEventError(index, kind, f"{what} must be a str, not {type(value).__name__}")
    if not value:
        raise InvalidEventError(index, kind, f"{what} must not be empty")
    if len(value) > MAX_ID_LENGTH:
        raise InvalidEventError(index, kind, f"{what} is longer than {MAX_ID_LENGTH} characters")
    if _CONTROL.search(value):
        raise InvalidEventError(index, kind, f"{what} contains control characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidEventError(index, kind, f"{what} contains lone surrogates") from None
    return value


def validate_session_id(session_id: object) -> str:
    """Return ``session_id`` if it is a valid id, else raise :class:`InvalidSessionIdError`.

    Valid: a ``str`` (not a subclass with surprises: exact value is used), 1 to 256
    characters, no control characters and no lone surrogates. Ids are data: any other
    character (quotes, ``../``, ``;``) is fine and is never interpreted.
    """
    if type(session_id) is not str:
        raise InvalidSessionIdError(session_id, f"must be a str, not {type(session_id).__name__}")
    if session_id in _KNOWN_IDS:
        return session_id
    if not session_id:
        raise InvalidSessionIdError(session_id, "must not be empty")
    if len(session_id) > MAX_ID_LENGTH:
        raise InvalidSessionIdError(session_id, f"longer than {MAX_ID_LENGTH} characters")
    if _CONTROL.search(session_id):
        raise InvalidSessionIdError(session_id, "contains control characters")
    try:
        session_id.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidSessionIdError(session_id, "contains lone surrogates") from None
    if len(_KNOWN_IDS) >= 16384:
        _KNOWN_IDS.clear()
    _KNOWN_IDS.add(session_id)
    return session_id


#: Ids already validated (every call on a session validates its id again).
_KNOWN_IDS: set[str] = set()


def encode_id_list(session_ids: list[str]) -> str:
    """JSON text of a list of *validated* session ids (see :func:`validate_session_id`):
    plain text, so no exactness walk is needed."""
    return encode_plain(session_ids)


def encode_json(value: object) -> str:
    """Encode one JSON value canonically (:mod:`stores._codec`); raise
    :class:`InvalidEventError` (index None) for a value that is not exactly JSON."""
    return json_text(value, None, None)[0]


def decode_json(text: str) -> JSON:
    """Decode JSON text (as :func:`encode_json` writes it; any other text as
    :func:`json.loads` reads it)."""
    result: JSON = decode(text)
    return result


def decode_json_object(text: str) -> dict[str, JSON]:
    """Decode JSON text that holds an object (a session header)."""
    value = decode_small(text)
    if not isinstance(value, dict):
        raise InvalidArgumentError(f"expected a JSON object, got {type(value).__name__}")
    return value


def prepare_events(events: Iterable[NewEvent]) -> list[PreparedEvent]:
    """Validate and encode a batch of events.

    Raises:
        InvalidEventError: naming the first bad event's index and kind -- also for an event
            whose data is larger than :data:`MAX_EVENT_BYTES`, and for the event that takes
            the batch past :data:`MAX_BATCH_BYTES`. The whole batch is refused (callers
            write nothing).
        InvalidArgumentError: ``events`` is not a sequence of :class:`NewEvent`.
    """
    plain = type(events) is list or type(events) is tuple  # the usual case: no ABC checks
    if not plain and (
        isinstance(events, NewEvent | str | bytes | Mapping) or not isinstance(events, Iterable)
    ):
        raise InvalidArgumentError(
            f"events must be a sequence of NewEvent, not {type(events).__name__}"
        )
    prepared: list[PreparedEvent] = []
    known, exact = _KNOWN_TEXT, _codec.plain
    most, total, batch_most = MAX_EVENT_BYTES, 0, MAX_BATCH_BYTES
    new, draft, ready_type = object.__new__, _PREPARED_DRAFT, PreparedEvent
    for index, event in enumerate(events):
        if type(event) is not NewEvent and not isinstance(event, NewEvent):
            raise InvalidEventError(index, None, f"expected a NewEvent, not {type(event).__name__}")
        kind = event.kind
        if type(kind) is not str or kind not in known:
            _remember(_check_text(kind, "kind", index, kind))
        run_id = event.run_id
        if run_id is not None and (type(run_id) is not str or run_id not in known):
            _check_text(run_id, "run_id", index, kind)
        # json_text(data, index, kind), its fast path inline: one call fewer per event
        data = event.data
        try:
            raw = _codec.fast_encode(data) if exact(data, 1) else None
        except (TypeError, ValueError, RecursionError):
            raw = None  # a lone surrogate, an int past the digit limit, a deep stack
        if raw is None:  # json_text's fallback: encodes what the contract accepts, or
            text, size = stdlib_json_text(data, index, kind)  # names why it refuses
        else:
            text, size = raw.decode("utf-8"), len(raw)
        total += size
        if size > most or total > batch_most:
            _refuse_size(index, kind, size, total)
        # PreparedEvent(kind, text, run_id), its __new__ inline (one frame fewer per event)
        ready: Any = new(draft)
        ready.kind = kind
        ready.data_json = text
        ready.run_id = run_id
        ready.__class__ = ready_type
        prepared.append(ready)
    return prepared


def _refuse_size(index: int, kind: str, size: int, total: int) -> NoReturn:
    if size > MAX_EVENT_BYTES:
        raise InvalidEventError(
            index,
            kind,
            f"data is {size} bytes of JSON, more than MAX_EVENT_BYTES ({MAX_EVENT_BYTES})",
        )
    raise InvalidEventError(
        index,
        kind,
        f"this event takes the batch to {total} bytes of JSON data, more than "
        f"MAX_BATCH_BYTES ({MAX_BATCH_BYTES}); split it into several appends",
    )


#: Kinds already validated (kinds repeat endlessly; validating one costs a regex search).
_KNOWN_TEXT: set[str] = set()


def _remember(text: str) -> None:
    if len(_KNOWN_TEXT) >= 4096:
        _KNOWN_TEXT.clear()
    _KNOWN_TEXT.add(text)


def validate_header(header: object) -> str:
    """Validate a session header (``None`` or a JSON object) and return its JSON text."""
    if header is None:
        return "{}"
    if not isinstance(header, dict):
        raise InvalidArgumentError(f"header must be a dict or None, not {type(header).__name__}")
    return json_text(header, None, "header")[0]


def check_seq(value: object, name: str, *, allow_none: bool = False) -> int | None:
    """Check a sequence-number argument: an ``int`` (not bool) in ``0 ..`` :data:`MAX_SEQ`.

    Raises :class:`InvalidArgumentError` naming ``name`` otherwise (``None`` passes only
    with ``allow_none``)."""
    if value is None and allow_none:
        return None
    if type(value) is not int:
        raise InvalidArgumentError(f"{name} must be an int, not {type(value).__name__}")
    if not 0 <= value <= MAX_SEQ:
        raise InvalidArgumentError(f"{name} must be in 0..{MAX_SEQ} (2**63 - 1), got {value}")
    return value


def check_count(value: object, name: str) -> int | None:
    """Check an optional count (``limit``): ``None`` or an int in ``0 ..`` :data:`MAX_SEQ`."""
    return check_seq(value, name, allow_none=True)


def check_flag(value: object, name: str) -> bool:
    """Check a flag argument: exactly ``True`` or ``False`` (not 0, 1, ``"no"`` or None,
    which would otherwise be taken by their truth value). Raises
    :class:`InvalidArgumentError` naming ``name``."""
    if value is not True and value is not False:
        raise InvalidArgumentError(f"{name} must be True or False, not {value!r}")
    return value


#: The columns of a session row :func:`session_info` builds a :class:`SessionInfo` from,
#: in this order: every SQL backend selects them so.
INFO_COLUMNS = "id, head, created_at, updated_at, header, parent_id, parent_seq"


def session_info(row: Sequence[Any]) -> SessionInfo:
    """A :class:`SessionInfo` from an :data:`INFO_COLUMNS` row."""
    session_id, head, created_at, updated_at, header_json, parent_id, parent_seq = row
    try:
        header = decode_json_object(header_json)
    except ValueError as exc:  # InvalidArgumentError is one too
        raise StoreCorruptError(
            f"session {session_id!r}: the stored header is not a JSON object ({exc})"
        ) from exc
    parent = None if parent_id is None else (parent_id, parent_seq)
    return SessionInfo(session_id, head, created_at, updated_at, header, parent)


def stored_events(
    session_id: str, rows: Iterable[Sequence[Any]], *, decode_data: bool = False
) -> list[StoredEvent]:
    """The :class:`StoredEvent` values of ``session_id``'s ``(seq, ts, kind, data,
    run_id)`` rows, in order; with ``decode_data``, each ``data`` is JSON text to decode
    (:func:`~stores._codec.decode`). Each event is made from the class's draft inline, as
    its ``__new__`` would (:mod:`stores._fastinit`: a third fewer instructions than a call
    of the class per event, and a read makes one per event).

    Raises what the decoder raises for bad text, and ``TypeError`` / ``ValueError`` for a
    row of another shape: the callers turn them into
    :class:`~stores._errors.StoreCorruptError`."""
    new, draft, event_type = object.__new__, _STORED_DRAFT, StoredEvent
    events: list[StoredEvent] = []
    add = events.append
    for seq, ts, kind, data, run_id in rows:
        event: Any = new(draft)
        event.session_id = session_id
        event.seq = seq
        event.ts = ts
        event.kind = kind
        event.data = decode(data) if decode_data else data
        event.run_id = run_id
        event.__class__ = event_type
        add(event)
    return events


def events_from_rows(session_id: str, rows: Sequence[Sequence[Any]]) -> list[StoredEvent]:
    """Build :class:`StoredEvent` values from ``(seq, ts, kind, data_json, run_id)`` rows."""
    try:
        return stored_events(session_id, rows, decode_data=True)
    except (ValueError, TypeError, RecursionError) as exc:
        raise StoreCorruptError(
            f"session {session_id!r}: a stored event is not valid JSON ({exc})"
        ) from exc
