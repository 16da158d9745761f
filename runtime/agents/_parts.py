"""Message parts: the text, images and files a user message or a tool result carries.

A :class:`~runtime.agents.UserMessage` (and a :class:`~runtime.agents.ToolResult`) has
its ``text`` and, after it, ``parts``: a tuple of

* :class:`TextPart` -- more text (``{"type": "text", "text": ...}``);
* :class:`ImagePart` -- an image by ``url`` (http or https), or its bytes (``data``) with
  an ``image/*`` ``media_type``; ``detail`` (``"auto"``, ``"low"``, ``"high"``,
  ``"original"``) is the OpenAI vision detail, ignored by Anthropic;
* :class:`FilePart` -- a document by its bytes (``data``, with a ``media_type``), a
  ``url``, or a provider's ``file_id``; ``name`` is its file name.

Every part is an ``attrs.frozen`` value checked at construction: a part that exists can
be stored. Its JSON form (the ``parts`` list of the event data) holds bytes as standard
base64 (``"data"``), and only the fields that are set::

    {"type": "image", "data": "iVBO...", "media_type": "image/png"}
    {"type": "image", "url": "https://...", "detail": "low"}
    {"type": "file", "file_id": "file-abc", "name": "report.pdf"}

Bad input raises :class:`~stores.InvalidArgumentError` naming the part and the field
(both ``url`` and ``data``, neither, bytes that are empty or not ``bytes``, a media type
that is not ``type/subtype`` or, for an image, not ``image/*``).
"""

from __future__ import annotations

import base64
import binascii
import mimetypes
import re
from collections.abc import Iterable
from typing import Any, Final, TypeAlias
from urllib.parse import urlsplit

import attrs

from stores import MAX_EVENT_BYTES, InvalidArgumentError, InvalidEventError, encode_json

__all__ = [
    "DETAILS",
    "FilePart",
    "ImagePart",
    "MessageTooLargeError",
    "Part",
    "TextPart",
    "check_parts",
    "check_size",
    "data_url",
    "file_name",
    "parts_from_json",
    "parts_of",
    "parts_to_json",
]

#: The image detail levels (OpenAI's ``detail``).
DETAILS: Final = frozenset({"auto", "low", "high", "original"})

# RFC 6838 type/subtype, lowercase, no parameters.
_MEDIA_TYPE = re.compile(r"[a-z0-9][a-z0-9!#$&^_.+-]{0,126}/[a-z0-9][a-z0-9!#$&^_.+-]{0,126}")
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def _fail(owner: str, field: str, problem: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"{owner}.{field} {problem}")


def _check_text(owner: str, field: str, value: object, *, empty: bool = True) -> str:
    if not isinstance(value, str):
        raise _fail(owner, field, f"must be a str, not {type(value).__name__}")
    if not empty and not value:
        raise _fail(owner, field, "must be a non-empty str, not ''")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise _fail(owner, field, "contains lone surrogates") from None
    return value


def _check_token(owner: str, field: str, value: object) -> None:
    """A non-empty one-line str (names, ids, URLs)."""
    text = _check_text(owner, field, value, empty=False)
    if _CONTROL.search(text):
        raise _fail(owner, field, f"contains control characters: {text!r}")


def _check_bytes(owner: str, value: object) -> bytes:
    if not isinstance(value, bytes):
        raise _fail(owner, "data", f"must be bytes, not {type(value).__name__}")
    if not value:
        raise _fail(owner, "data", "must not be empty")
    return value


def _check_media_type(owner: str, value: object, family: str | None) -> None:
    if not isinstance(value, str) or not _MEDIA_TYPE.fullmatch(value):
        raise _fail(
            owner,
            "media_type",
            f"must be a lowercase type/subtype such as 'image/png', not {value!r}",
        )
    if family is not None and value.split("/", 1)[0] != family:
        raise _fail(owner, "media_type", f"must be {family}/*, not {value!r}")


def _check_url(owner: str, value: object) -> None:
    _check_token(owner, "url", value)
    assert isinstance(value, str)
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise _fail(
            owner,
            "url",
            f"must be an http(s) URL, not {value!r} (pass bytes as data= with media_type=)",
        )


def _one_of(owner: str, given: dict[str, object]) -> None:
    named = [name for name, value in given.items() if value is not None]
    if len(named) != 1:
        choices = " or ".join(f"{name}=" for name in given)
        found = "neither" if not named else "both " + " and ".join(f"{n}=" for n in named)
        raise InvalidArgumentError(f"{owner} needs exactly one of {choices}, not {found}")


def _size(data: bytes | None) -> str:
    return "None" if data is None else f"<{len(data)} bytes>"


def _encoded(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


@attrs.frozen
class TextPart:
    """Text among a message's parts (any ``str`` without lone surrogates)."""

    text: str

    def __attrs_post_init__(self) -> None:
        _check_text("TextPart", "text", self.text)


@attrs.frozen(kw_only=True)
class ImagePart:
    """An image: ``url`` (http or https; ``media_type`` optional) or ``data`` (non-empty
    ``bytes``, with an ``image/*`` ``media_type``), exactly one of them. ``detail``:
    ``None`` or one of :data:`DETAILS` (OpenAI's; Anthropic ignores it)."""

    url: str | None = None
    data: bytes | None = attrs.field(default=None, repr=_size)
    media_type: str | None = None
    detail: str | None = None
    _base64: str | None = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        _one_of("ImagePart", {"url": self.url, "data": self.data})
        if self.url is not None:
            _check_url("ImagePart", self.url)
        else:
            _check_bytes("ImagePart", self.data)
            if self.media_type is None:
                raise _fail("ImagePart", "media_type", "is required with data=")
        if self.media_type is not None:
            _check_media_type("ImagePart", self.media_type, "image")
        if self.detail is not None and self.detail not in DETAILS:
            raise _fail("ImagePart", "detail", f"must be one of {sorted(DETAILS)}: {self.detail!r}")
        object.__setattr__(self, "_base64", _encoded(self.data))

    @property
    def base64(self) -> str | None:
        """``data`` as standard base64 text (``None`` for an image by URL)."""
        return self._base64


@attrs.frozen(kw_only=True)
class FilePart:
    """A file: ``data`` (non-empty ``bytes``, with a ``media_type``), ``url`` (http or
    https) or ``file_id`` (a provider's id of an uploaded file), exactly one of them.
    ``name``: its file name (``None``: unnamed). ``media_type``: a ``type/subtype``,
    required with ``data``."""

    data: bytes | None = attrs.field(default=None, repr=_size)
    url: str | None = None
    file_id: str | None = None
    name: str | None = None
    media_type: str | None = None
    _base64: str | None = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        _one_of("FilePart", {"data": self.data, "url": self.url, "file_id": self.file_id})
        if self.data is not None:
            _check_bytes("FilePart", self.data)
            if self.media_type is None:
                raise _fail("FilePart", "media_type", "is required with data=")
        elif self.url is not None:
            _check_url("FilePart", self.url)
        else:
            _check_token("FilePart", "file_id", self.file_id)
        if self.media_type is not None:
            _check_media_type("FilePart", self.media_type, None)
        if self.name is not None:
            _check_token("FilePart", "name", self.name)
        object.__setattr__(self, "_base64", _encoded(self.data))

    @property
    def base64(self) -> str | None:
        """``data`` as standard base64 text (``None`` for a file by URL or id)."""
        return self._base64


#: One part of a message.
Part: TypeAlias = TextPart | ImagePart | FilePart

_PART_TYPES = (TextPart, ImagePart, FilePart)


def check_parts(value: object, owner: str) -> tuple[Part, ...]:
    """``value`` (an iterable of parts, not a str) as a tuple; raises
    :class:`InvalidArgumentError` naming the first element that is not a part."""
    if isinstance(value, str | bytes | dict) or not isinstance(value, Iterable):
        raise InvalidArgumentError(
            f"{owner}.parts must be a sequence of TextPart, ImagePart or FilePart, "
            f"not {type(value).__name__}"
        )
    parts = tuple(value)
    for index, part in enumerate(parts):
        if not isinstance(part, _PART_TYPES):
            raise InvalidArgumentError(
                f"{owner}.parts[{index}] must be a TextPart, ImagePart or FilePart, "
                f"not {type(part).__name__}"
            )
    return parts


def parts_of(value: object) -> tuple[str, tuple[Part, ...]] | None:
    """What a tool returned, as a result's output and parts, if it returned parts: a
    part, or a list or tuple holding at least one part (its ``str`` elements count as
    text). A leading text becomes the output. ``None`` for anything else (it is text or
    JSON). Raises :class:`InvalidArgumentError` for a list mixing parts with other values."""
    if isinstance(value, _PART_TYPES):
        items: list[object] = [value]
    elif isinstance(value, list | tuple) and any(isinstance(v, _PART_TYPES) for v in value):
        items = list(value)
    else:
        return None
    parts: list[Part] = []
    for item in items:
        if isinstance(item, str):
            parts.append(TextPart(item))
        elif isinstance(item, _PART_TYPES):
            parts.append(item)
        else:
            raise InvalidArgumentError(
                "a tool returned parts mixed with a value that is not a part nor a str: "
                f"{type(item).__name__}"
            )
    if parts and isinstance(parts[0], TextPart):
        return parts[0].text, tuple(parts[1:])
    return "", tuple(parts)


def data_url(part: ImagePart | FilePart) -> str:
    """``data:<media_type>;base64,<data>`` for a part holding bytes."""
    assert part.base64 is not None
    return f"data:{part.media_type};base64,{part.base64}"


def file_name(part: FilePart) -> str:
    """The part's name, or ``file`` plus its media type's usual extension (``file.pdf``)
    for a provider that needs one."""
    if part.name is not None:
        return part.name
    extension = mimetypes.guess_extension(part.media_type or "") or ""
    return "file" + extension


# --- JSON form ----------------------------------------------------------------------------


def _part_json(part: Part, payload: bool) -> dict[str, Any]:
    """The JSON form; without ``payload`` the base64 text is left empty (to size it)."""
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    out: dict[str, Any] = {"type": "image" if isinstance(part, ImagePart) else "file"}
    if part.base64 is not None:
        out["data"] = part.base64 if payload else ""
    names: tuple[str, ...] = ("url", "media_type", "detail")
    if isinstance(part, FilePart):
        names = ("url", "file_id", "name", "media_type")
    for name in names:
        value = getattr(part, name)
        if value is not None:
            out[name] = value
    return out


def parts_to_json(parts: tuple[Part, ...]) -> list[Any]:
    """The parts' JSON form (a fresh list)."""
    return [_part_json(part, True) for part in parts]


_KEYS = {
    "text": ({"text"}, set()),
    "image": (set(), {"url", "data", "media_type", "detail"}),
    "file": (set(), {"url", "data", "file_id", "name", "media_type"}),
}


def _part_from_json(obj: object, what: str) -> Part:
    if not isinstance(obj, dict):
        raise InvalidArgumentError(f"{what} must be a JSON object, not {type(obj).__name__}")
    kind = obj.get("type")
    if not isinstance(kind, str) or kind not in _KEYS:
        raise InvalidArgumentError(f"{what}.type must be 'text', 'image' or 'file', not {kind!r}")
    required, optional = _KEYS[kind]
    fields = {key: value for key, value in obj.items() if key != "type"}
    missing = sorted(required - set(fields))
    extra = sorted(set(fields) - required - optional)
    if missing or extra:
        problem = f"is missing {missing}" if missing else f"has unexpected key(s) {extra}"
        raise InvalidArgumentError(f"{what} ({kind}) {problem}")
    if kind == "text":
        return TextPart(fields["text"])
    if "data" in fields:
        text = fields["data"]
        if not isinstance(text, str):
            problem = f"must be base64 text, not {type(text).__name__}"
            raise InvalidArgumentError(f"{what}.data {problem}")
        try:
            fields["data"] = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidArgumentError(f"{what}.data is not standard base64") from None
    return ImagePart(**fields) if kind == "image" else FilePart(**fields)


def parts_from_json(value: object, what: str) -> tuple[Part, ...]:
    """Parts from their JSON form (a list); raises :class:`InvalidArgumentError` naming
    the element and field that is wrong."""
    if not isinstance(value, list):
        raise InvalidArgumentError(f"{what} must be a JSON list, not {type(value).__name__}")
    return tuple(_part_from_json(obj, f"{what}[{index}]") for index, obj in enumerate(value))


# --- size -----------------------------------------------------------------------------------


class MessageTooLargeError(InvalidEventError):
    """A user message or tool result with parts would be an event larger than
    :data:`~stores.MAX_EVENT_BYTES` (its JSON data, bytes as base64). Raised when the
    entry is built, so before anything is written; send a large file by ``url=`` or
    ``file_id=`` instead. ``size`` is the event's JSON size in bytes, ``limit`` the
    limit. An :class:`~stores.InvalidEventError` (as for any event over the limit)."""

    def __init__(self, kind: str, size: int, limit: int) -> None:
        self.index = None
        self.kind = kind
        self.size = size
        self.limit = limit
        self.reason = (
            f"a {kind} event with these parts would be {size} bytes of JSON, more than "
            f"MAX_EVENT_BYTES ({limit}); send large files by url= or file_id= instead"
        )
        InvalidArgumentError.__init__(self, self.reason)


def check_size(kind: str, data: dict[str, Any], parts: tuple[Part, ...]) -> None:
    """Raise :class:`MessageTooLargeError` if ``data`` (the event data without
    ``"parts"``) plus ``parts`` would be over the event size limit. Cheap: the base64
    payloads are counted, not encoded (they need no JSON escaping)."""
    payload = sum(len(p.base64 or "") for p in parts if not isinstance(p, TextPart))
    texts = [v for v in data.values() if isinstance(v, str)]
    texts += [p.text for p in parts if isinstance(p, TextPart)]
    # JSON escapes a character in at most 6 bytes; each part's keys take < 200.
    if payload + 6 * sum(map(len, texts)) + 200 * (len(parts) + 2) <= MAX_EVENT_BYTES:
        return
    skeleton = dict(data, parts=[_part_json(part, False) for part in parts])
    size = len(encode_json(skeleton).encode("utf-8")) + payload
    if size > MAX_EVENT_BYTES:
        raise MessageTooLargeError(kind, size, MAX_EVENT_BYTES)
