"""Event data's JSON, both ways: a compiled codec (msgspec) under tidelog's exactness rules.

**Writing.** Data must be *exactly* JSON: the types themselves (``dict``, ``list``,
``str``, ``int``, ``float``, ``bool``, ``None``), finite floats, ``str`` keys, text without
lone surrogates, at most :data:`MAX_NESTING` levels deep. A compiled encoder accepts more
than that (it writes NaN as ``null``, encodes tuples, enums, dataclasses, datetimes...), so
:func:`json_text` first checks the types in one walk over the value, and hands the encoder
only a value made of exactly those types; the encoder itself refuses lone surrogates and
integers past Python's digit limit. Anything else -- a value the walk does not pass, or
one the encoder refuses -- goes to :func:`stdlib_json_text`, the stdlib encoder with the
checks tidelog has always made, which accepts or refuses it exactly as before (and names
the reason). The fast path therefore never decides a refusal, and accepts exactly what the
stdlib path accepts (``tests/stores/test_codec.py`` checks both with hypothesis).

**Reading.** :func:`decode` (and :func:`decode_bytes`) reads with the compiled decoder,
and gives any text it refuses (text written by no tidelog: NaN, a number past a double's
range, other encodings, damage) to the stdlib decoder, which reads or refuses it as
before. Both give equal values of the same types for any text tidelog writes: integers of
any size stay integers, ``-0.0`` stays ``-0.0``, and a duplicate key keeps its last value.
The two encoders may spell a float differently (``1e-7`` where the stdlib writes
``1e-07``): nothing in tidelog depends on the bytes of stored data, only on the values (a
resent event is compared by its text, which one process encoded once).

**Why msgspec.** It and orjson both encode and decode the payloads of ``bench/`` in a fifth
to a third of the stdlib's instructions, and ship prebuilt wheels. msgspec reads and writes
integers of any size (up to Python's 4300-digit limit, where it refuses as the stdlib
does); orjson refuses to encode integers past 64 bits and, worse, *decodes* them as floats
without an error, so every read would need a scan of the text for long digit runs.
Encoders and decoders keep no state between calls (each call builds its own), so the
module's one encoder and one decoder serve every thread. msgspec is imported by the first
encode or decode of event data, not with this module: its import (with the datetime,
decimal, uuid and typing_extensions it loads) is about a tenth of ``import trio``, which a
command that reads no event data (``tidelog ls``) need not pay.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from ._errors import InvalidEventError

__all__ = [
    "MAX_NESTING",
    "decode",
    "decode_bytes",
    "decode_small",
    "encode_plain",
    "fast_encode",
    "json_text",
    "plain",
    "stdlib_json_text",
]

#: The deepest nesting of arrays and objects accepted in event data. Deeper values are
#: refused at write time: every accepted value must also read back, in any thread.
MAX_NESTING = 200


def _load_codec() -> None:
    """Import msgspec and put its encoder and decoder in place of the loaders below (from
    then on every call goes straight to them). Two threads may both get here first: each
    puts an equal pair in place."""
    global fast_encode, _FAST_DECODE
    import msgspec

    fast_encode = msgspec.json.Encoder().encode
    _FAST_DECODE = msgspec.json.Decoder().decode


def _first_encode(value: object) -> bytes:
    _load_codec()
    return fast_encode(value)


def _first_decode(text: str | bytes) -> Any:
    _load_codec()
    return _FAST_DECODE(text)


#: msgspec's compact encoder once loaded (the first call loads it): JSON as UTF-8 bytes,
#: with no checks of tidelog's (:func:`plain` first). Read it through the module
#: (``_codec.fast_encode``), since the first call rebinds it.
fast_encode: Callable[[object], bytes] = _first_encode
_FAST_DECODE: Callable[[str | bytes], Any] = _first_decode
_STDLIB_DECODE: Callable[[str], Any] = json.JSONDecoder().decode

#: What the fast encoder may be given without a look inside (floats are checked apart).
_LEAVES: frozenset[type] = frozenset((str, int, bool, type(None)))


def plain(
    value: Any,
    depth: int,
    # Bound once, read as locals: the walk runs for every value of every event.
    _leaves: frozenset[type] = _LEAVES,
    _type: type[type] = type,
    _dict: type = dict,
    _list: type = list,
    _str: type = str,
    _float: type = float,
) -> bool:
    """Is ``value`` (at nesting level ``depth``) made only of the exact JSON types, with
    finite floats and ``str`` keys, nested at most :data:`MAX_NESTING` levels? (Recursive:
    a value this walk passes nests at most :data:`MAX_NESTING` levels.) ``x - x`` is
    ``0.0`` for a finite float and NaN for NaN and the infinities. The parameters after
    ``depth`` are never passed."""
    kind = _type(value)
    if kind is _dict:
        for key, item in value.items():
            if _type(key) is not _str:
                return False
            item_kind = _type(item)
            if item_kind is _str or item_kind in _leaves:  # (str, the usual leaf, first)
                continue
            if item_kind is _float:
                if item - item != 0.0:
                    return False
            elif depth >= MAX_NESTING or not plain(item, depth + 1):
                return False
        return True
    if kind is _list:
        for item in value:
            item_kind = _type(item)
            if item_kind is _str or item_kind in _leaves:
                continue
            if item_kind is _float:
                if item - item != 0.0:
                    return False
            elif depth >= MAX_NESTING or not plain(item, depth + 1):
                return False
        return True
    if kind is _float:
        return bool(value - value == 0.0)
    return kind in _leaves


def json_text(value: object, index: int | None, kind: object) -> tuple[str, int]:
    """The canonical JSON text of ``value`` and its size in UTF-8 bytes; raises
    :class:`InvalidEventError` (``index``, ``kind``) for a value that is not exactly JSON,
    with the reason :func:`stdlib_json_text` gives."""
    try:
        if plain(value, 1):
            raw = fast_encode(value)
            return raw.decode("utf-8"), len(raw)
    except (TypeError, ValueError, RecursionError):
        pass  # a lone surrogate, an int past the digit limit, a deep stack: see below
    return stdlib_json_text(value, index, kind)


def encode_plain(value: object) -> str:
    """JSON text of a value known to be exactly JSON without lone surrogates (a list of
    validated session ids): no walk."""
    return fast_encode(value).decode("utf-8")


def decode(text: str) -> Any:
    """Decode JSON text, as :meth:`json.JSONDecoder.decode` would (a ``TypeError`` for
    anything but a ``str``, as the stdlib's: a stored value of another type is damage).

    Raises ``ValueError`` (:class:`json.JSONDecodeError`) or ``RecursionError`` for text
    the stdlib cannot read either."""
    if type(text) is not str:
        return _STDLIB_DECODE(text)  # raises TypeError (a str subclass reads as a str)
    try:
        return _FAST_DECODE(text)
    except (ValueError, RecursionError):  # msgspec.DecodeError is a ValueError
        return _STDLIB_DECODE(text)  # not tidelog's JSON: the stdlib reads or refuses it


def decode_small(text: str) -> Any:
    """Decode JSON text with the stdlib's decoder alone, to the same value :func:`decode`
    gives: for the few small texts read apart from event data (a session header), so that
    reading them does not load the compiled codec. Raises as :func:`decode`."""
    return _STDLIB_DECODE(text)


def decode_bytes(data: bytes) -> Any:
    """Decode JSON text in bytes (a JSONL record), as :func:`json.loads` would.

    Raises ``ValueError`` (:class:`json.JSONDecodeError`, ``UnicodeDecodeError``) or
    ``RecursionError`` for text the stdlib cannot read either."""
    try:
        return _FAST_DECODE(data)
    except (ValueError, RecursionError):  # msgspec.DecodeError is a ValueError
        return json.loads(data)  # not tidelog's JSON: the stdlib reads or refuses it


# -- the stdlib path: what decides every value the fast path does not take -----------------

_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
_C_MAKE_ENCODER: Callable[..., Callable[[object, int], Iterable[str]]] | None = getattr(
    json.encoder, "c_make_encoder", None
)
#: One C encoder for every thread: built without circular-reference markers, so it keeps
#: no state between calls. A cycle then recurses until ``RecursionError``, which refuses
#: the value as "nested too deeply" -- as any value past :data:`MAX_NESTING` is refused.
_RUN = (
    None
    if _C_MAKE_ENCODER is None
    else _C_MAKE_ENCODER(
        None, _ENCODER.default, json.encoder.encode_basestring, None, ":", ",",
        False, False, False,
    )
)  # fmt: skip

_SCALAR_TYPES = frozenset((str, int, float, bool, type(None)))
_SHALLOW_TEXT = 2 * MAX_NESTING


def stdlib_json_text(value: object, index: int | None, kind: object) -> tuple[str, int]:
    """:func:`json_text` with the stdlib's encoder and tidelog's checks around it (the path
    every write took before the compiled codec, and the one that decides what the fast
    path does not take).

    The C encoder refuses NaN/inf, cycles and foreign types, but silently turns tuples
    into arrays and int/None/bool keys into strings, and lets lone surrogates through;
    a structural pass catches the first two, a UTF-8 encode the last. A text with at most
    :data:`MAX_NESTING` brackets (or at most twice as many characters) cannot nest deeper,
    so the pass over such a value needs no depth bookkeeping.
    """
    try:
        text = _ENCODER.encode(value) if _RUN is None else "".join(_RUN(value, 0))
    except (TypeError, ValueError) as exc:
        raise InvalidEventError(index, kind, f"data is not JSON: {exc}") from None
    except RecursionError:
        raise InvalidEventError(
            index, kind, "data is nested too deeply (or contains itself)"
        ) from None
    if type(value) not in _SCALAR_TYPES:
        # Each level of nesting takes two characters, so a short text is shallow too.
        if len(text) <= _SHALLOW_TEXT or text.count("[") + text.count("{") <= MAX_NESTING:
            problem = _shallow_problem(value)
        else:
            problem = _exactness_problem(value)
        if problem is not None:
            raise InvalidEventError(index, kind, f"data is not exactly JSON: {problem}")
    if text.isascii():  # O(1) in CPython: a flag of the str object
        return text, len(text)
    try:
        return text, len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidEventError(index, kind, "data contains lone surrogates") from None


def _exactness_problem(value: object) -> str | None:
    """Find what the C encoder would silently convert -- a tuple (becomes an array) or a
    dict key that is not a ``str`` (becomes a string) -- or nesting deeper than
    :data:`MAX_NESTING`. Runs after encoding succeeded, so the value has no cycles and
    only JSON-encodable types; iterative, so the check itself never recurses."""
    scalar = _SCALAR_TYPES
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        current, depth = stack.pop()
        if depth > MAX_NESTING:
            return f"nested deeper than {MAX_NESTING} levels"
        if isinstance(current, dict):
            for key, item in current.items():
                if type(key) is not str and not isinstance(key, str):
                    return f"dict key {key!r} is not a str"
                if type(item) not in scalar:
                    stack.append((item, depth + 1))
        elif isinstance(current, list):
            stack.extend((item, depth + 1) for item in current if type(item) not in scalar)
        elif isinstance(current, tuple):
            return "a tuple is not JSON (use a list)"
    return None


def _shallow_problem(value: Any) -> str | None:
    """:func:`_exactness_problem` for values known to nest at most :data:`MAX_NESTING`
    levels (recursive, which is faster for the usual small values); anything but exact
    ``dict``/``list``/``tuple`` containers goes to the general walk."""
    kind = type(value)
    if kind is dict:
        for key in value:
            if type(key) is not str and not isinstance(key, str):
                return f"dict key {key!r} is not a str"
        items = value.values()
    elif kind is list:
        items = value
    elif kind is tuple:
        return "a tuple is not JSON (use a list)"
    else:
        return _exactness_problem(value)
    for item in items:
        if type(item) not in _SCALAR_TYPES:
            problem = _shallow_problem(item)
            if problem is not None:
                return problem
    return None
