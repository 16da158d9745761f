"""A JSONL store's directory: its marker file, its sub-directories, the change log.

The directory holds ``tidelog-jsonl.json`` (the marker: ``{"tidelog":"jsonl-store",
"format":1}``), ``sessions/`` (one ``<stem>.jsonl`` file per session), ``locks/`` (one lock
file per session, see :mod:`stores.jsonl._files`), ``bases/`` (the hard links through
which forks read their prefix), ``projections/`` (projection checkpoints, a cache),
``intents/`` (group writes in progress, see :mod:`stores.jsonl._group`), ``tmp/`` and
``changes`` (one byte appended per commit: what :meth:`JsonlStore.data_version` watches).

A directory that exists, is not empty and has no marker is foreign: it is refused
(:class:`~stores._errors.UnsupportedFormatError`) and left untouched, as is a marker of a
newer format -- unless all it holds is what a creation killed before writing the marker
leaves (the sub-directories, empty, and the marker's temporary file): the next writable
open completes that creation.
"""

from __future__ import annotations

import contextlib
import json
import os

from .._errors import (
    InvalidArgumentError,
    StoreCorruptError,
    StoreIOError,
    UnsupportedFormatError,
)
from ._files import fsync_dir, publish
from ._group import step

__all__ = ["MARKER", "STORE_FORMAT", "check_root", "open_root"]

MARKER = "tidelog-jsonl.json"
#: The store-level format this code writes (the marker's ``"format"``).
STORE_FORMAT = 1
_SUBDIRS = ("sessions", "locks", "bases", "projections", "intents", "tmp", "migrated", "index")


def check_root(root: object) -> str:
    """The store directory's path (``str`` or ``os.PathLike``), absolute."""
    if not isinstance(root, str | os.PathLike):
        raise InvalidArgumentError(f"root must be a str or PathLike, not {type(root).__name__}")
    name = os.fspath(root)
    if not isinstance(name, str) or not name or "\x00" in name:
        raise InvalidArgumentError(f"root must name a directory, not {name!r}")
    return os.path.abspath(name)


def _read_marker(path: str) -> None:
    try:
        with open(os.open(path, os.O_RDONLY | os.O_NOFOLLOW), "rb") as f:
            value = json.loads(f.read(4096))
    except (ValueError, UnicodeDecodeError):
        value = None
    if not isinstance(value, dict) or value.get("tidelog") != "jsonl-store":
        raise UnsupportedFormatError(f"{path}: not a tidelog JSONL store marker")
    version = value.get("format")
    if type(version) is not int or not 1 <= version <= STORE_FORMAT:
        raise UnsupportedFormatError(
            f"{path}: store format {version!r}; this tidelog reads formats 1..{STORE_FORMAT}"
        )


def _half_created(root: str) -> bool:
    """Is ``root`` empty, or what a creation killed before its marker leaves: only (some
    of) the store's sub-directories, real and empty, but for the marker's temporary file
    in ``tmp/``? Creation then completes it (nothing in it can be anybody's data)."""
    with os.scandir(root) as entries:
        for entry in entries:
            if entry.name not in _SUBDIRS or not entry.is_dir(follow_symlinks=False):
                return False
            inside = os.listdir(entry.path)
            if entry.name == "tmp":
                inside = [name for name in inside if not name.endswith(".tmp")]
            if inside:
                return False
    return True


def _no_links(root: str) -> None:
    """Refuse a store whose own names (marker, sub-directories, change log) are symbolic
    links: tidelog never writes outside its directory through one."""
    for name in (MARKER, *_SUBDIRS, "changes"):
        path = os.path.join(root, name)
        if os.path.islink(path):
            raise StoreCorruptError(
                f"{path}: a symbolic link where tidelog keeps its own "
                f"{'file' if name in (MARKER, 'changes') else 'directory'}: refused (tidelog "
                "never writes through one); remove the link"
            )


def open_root(root: str, *, read_only: bool) -> None:
    """Check (and, unless ``read_only``, create) the store directory ``root``."""
    marker = os.path.join(root, MARKER)
    try:
        if os.path.exists(root) and not os.path.isdir(root):
            raise InvalidArgumentError(f"{root!r} is not a directory")
        if os.path.lexists(marker):
            _no_links(root)
            _read_marker(marker)
            if not read_only:
                for sub in _SUBDIRS:
                    os.makedirs(os.path.join(root, sub), mode=0o755, exist_ok=True)
            return
        if read_only:
            raise UnsupportedFormatError(f"{root}: not a tidelog JSONL store (no {MARKER})")
        os.makedirs(root, mode=0o755, exist_ok=True)
        if not _half_created(root):
            raise UnsupportedFormatError(
                f"{root}: a directory that is not a tidelog JSONL store (not empty, no "
                f"{MARKER}); left untouched"
            )
        for sub in _SUBDIRS:
            os.makedirs(os.path.join(root, sub), mode=0o755, exist_ok=True)
        step("store directories made")
        body = json.dumps({"tidelog": "jsonl-store", "format": STORE_FORMAT}).encode() + b"\n"
        with contextlib.suppress(FileExistsError):  # another creator won: same content
            publish(os.path.join(root, "tmp"), marker, body, replace=False)
        fsync_dir(root)
        _read_marker(marker)
    except OSError as exc:
        raise StoreIOError(f"{root}: cannot open the store directory ({exc})") from exc
