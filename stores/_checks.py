"""The argument checks every backend applies, written once.

Store methods check their arguments with these before touching storage (fork's
``at_seq`` excepted, see :func:`check_fork`), so every backend refuses the same values
with the same error. The seq, count, flag and id checks underneath are in
:mod:`stores._records`; the checks of ``write_batch``'s ops in :mod:`stores._batching`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ._contract import Pin
from ._errors import InvalidArgumentError, SessionExistsError, SessionNotFoundError
from ._records import (
    _CONTROL,
    JSON,
    MAX_ID_LENGTH,
    check_count,
    check_flag,
    check_seq,
    decode_json_object,
    validate_header,
    validate_session_id,
)

__all__ = [
    "check_create_args",
    "check_fork",
    "check_fork_args",
    "check_lease_args",
    "check_list_args",
    "check_pin_arg",
    "check_projection_args",
    "check_read_args",
    "check_session_ids",
    "check_text",
    "fork_header",
    "prefix_end",
]


def check_text(value: object, name: str, *, max_length: int = MAX_ID_LENGTH) -> str:
    """Check a text argument stored as is (a projection name, a lease owner or holder): a
    non-empty ``str`` of at most ``max_length`` characters, without control characters or
    lone surrogates. Raises :class:`InvalidArgumentError` naming ``name``."""
    if type(value) is not str:
        raise InvalidArgumentError(f"{name} must be a str, not {type(value).__name__}")
    if not value or len(value) > max_length:
        raise InvalidArgumentError(f"{name} must have 1 to {max_length} characters")
    if _CONTROL.search(value):
        raise InvalidArgumentError(f"{name} contains control characters: {value!r}")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidArgumentError(f"{name} contains lone surrogates") from None
    return value


def check_pin_arg(pin: object) -> Pin:
    """Check a :class:`Pin` argument: its session id, and seq, incarnation and epoch
    within ``0 ..`` :data:`~stores._records.MAX_SEQ` (a pin comes from :meth:`Store.pin`,
    but can be built by hand)."""
    if not isinstance(pin, Pin):
        raise InvalidArgumentError(f"pin must be a Pin, not {type(pin).__name__}")
    validate_session_id(pin.session_id)
    check_seq(pin.as_of_seq, "pin.as_of_seq")
    check_seq(pin.incarnation, "pin.incarnation")
    check_seq(pin.epoch, "pin.epoch")
    return pin


def check_read_args(
    since_seq: object, until_seq: object, limit: object, pin: object, from_end: object
) -> int | None:
    """Check :meth:`Store.read`'s arguments (the session id aside); return the read's
    upper bound: ``until_seq`` clamped to the pin's ``as_of_seq`` (``None``: no bound)."""
    check_seq(since_seq, "since_seq")
    until = check_seq(until_seq, "until_seq", allow_none=True)
    check_count(limit, "limit")
    check_flag(from_end, "from_end")
    if pin is None:
        return until
    as_of = check_pin_arg(pin).as_of_seq
    return as_of if until is None else min(until, as_of)


def check_create_args(session_id: object, header: object, exist_ok: object) -> str:
    """Check :meth:`Store.create`'s arguments; return the header's JSON text."""
    validate_session_id(session_id)
    header_json = validate_header(header)
    check_flag(exist_ok, "exist_ok")
    return header_json


def check_fork_args(source_id: object, new_id: object, header: object) -> dict[str, JSON]:
    """Check what :meth:`Store.fork` checks before touching storage (both ids and the
    header; ``at_seq`` comes later, see :func:`check_fork`); return the header."""
    validate_session_id(source_id)
    validate_session_id(new_id)
    return decode_json_object(validate_header(header))


def check_fork(
    source_id: str,
    new_id: str,
    at_seq: object,
    *,
    target_exists: bool,
    source_head: int | None,
) -> int:
    """:meth:`Store.fork`'s checks in the contract's order, once the backend looked up
    whether ``new_id`` exists and ``source_id``'s head (``None``: no such session) in
    its write transaction: :class:`SessionExistsError`, then
    :class:`SessionNotFoundError`, then :class:`InvalidArgumentError` for an ``at_seq``
    that is not ``None`` or an int in ``0 ..`` ``source_head``. Returns the fork point."""
    if target_exists:
        raise SessionExistsError(new_id)
    if source_head is None:
        raise SessionNotFoundError(source_id)
    at = check_seq(at_seq, "at_seq", allow_none=True)
    if at is None:
        return source_head
    if at > source_head:
        raise InvalidArgumentError(
            f"at_seq {at} is past the head {source_head} of session {source_id!r}"
        )
    return at


def fork_header(
    source_header: dict[str, JSON], extra: dict[str, JSON], source_id: str, at: int
) -> dict[str, JSON]:
    """The header of a fork: the source's, updated with ``extra`` (the caller's) and the
    lineage keys ``forked_from`` and ``fork_seq``."""
    merged = dict(source_header)
    merged.update(extra)
    merged.update({"forked_from": source_id, "fork_seq": at})
    return merged


def check_projection_args(name: object, version: object, state_json: object = "") -> None:
    """Check a projection checkpoint's ``name`` (:func:`check_text`), ``version`` (an int
    of 64 bits, signed) and ``state_json`` (a ``str`` without lone surrogates)."""
    check_text(name, "name")
    if type(version) is not int or not -(2**63) <= version < 2**63:
        raise InvalidArgumentError(f"version must be a 64-bit int, not {version!r}")
    if type(state_json) is not str:
        raise InvalidArgumentError(f"state_json must be a str, not {type(state_json).__name__}")
    if not state_json.isascii():
        try:
            state_json.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidArgumentError("state_json contains lone surrogates") from None


_ORDERS = ("id", "updated")


def check_list_args(limit: object, prefix: object, after: object, order: object) -> None:
    """Check :meth:`Store.list_sessions`'s arguments: ``limit`` (a count), ``prefix``
    (``None`` or a ``str`` of at most :data:`~stores._records.MAX_ID_LENGTH` characters
    without lone surrogates; it may hold anything else, and matches nothing if no id can
    start with it), ``after`` (``None`` or a valid session id), ``order`` (``"id"`` or
    ``"updated"``; ``after`` only with ``"id"``)."""
    check_count(limit, "limit")
    if prefix is not None:
        if type(prefix) is not str:
            raise InvalidArgumentError(f"prefix must be a str or None, not {type(prefix).__name__}")
        if len(prefix) > MAX_ID_LENGTH:
            raise InvalidArgumentError(f"prefix is longer than {MAX_ID_LENGTH} characters")
        try:
            prefix.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidArgumentError("prefix contains lone surrogates") from None
    if after is not None:
        validate_session_id(after)
    if order not in _ORDERS:
        raise InvalidArgumentError(f"order must be 'id' or 'updated', not {order!r}")
    if after is not None and order != "id":
        raise InvalidArgumentError("a cursor (after=...) pages only in order='id'")


def prefix_end(prefix: str) -> str | None:
    """The least string greater than every string that starts with ``prefix`` (in code
    point order), or ``None`` if there is none (an empty prefix, or one of U+10FFFF
    only): ``id >= prefix AND id < prefix_end(prefix)`` selects the ids with that
    prefix as one index range. Skips the surrogates, which no stored id holds."""
    chars = list(prefix)
    while chars:
        last = ord(chars.pop())
        if last < 0x10FFFF:
            following = last + 1
            if 0xD800 <= following <= 0xDFFF:
                following = 0xE000
            return "".join(chars) + chr(following)
    return None


def check_session_ids(session_ids: object) -> list[str]:
    """Check a sequence of session ids (not a str, whose characters would pass for ids):
    the ids, each validated (:func:`~stores._records.validate_session_id`)."""
    if not isinstance(session_ids, Sequence) or isinstance(session_ids, str | bytes):
        raise InvalidArgumentError(
            f"session_ids must be a sequence of ids, not {type(session_ids).__name__}"
        )
    return [validate_session_id(session_id) for session_id in session_ids]


_ABSENT = object()


def check_lease_args(owner: object, *, ttl: object = _ABSENT, holder: object = _ABSENT) -> None:
    """Check a lease call's ``owner`` token and, for the calls that take them, ``holder``
    (both :func:`check_text`) and ``ttl`` (seconds: a finite int or float >= 0)."""
    check_text(owner, "owner")
    if holder is not _ABSENT:
        check_text(holder, "holder", max_length=1024)
    if ttl is not _ABSENT and not _seconds_ok(ttl):
        raise InvalidArgumentError(f"ttl must be a finite number of seconds >= 0, not {ttl!r}")


def _seconds_ok(value: object) -> bool:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return False
    try:
        seconds = float(value)
    except OverflowError:  # an int past the largest float
        return False
    return math.isfinite(seconds) and seconds >= 0
