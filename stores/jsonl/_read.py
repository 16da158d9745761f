"""The reads of the JSONL store: per-handle file indexes, pins, lists, projections.

Reads take no lock that a writer waits for (only this handle's own thread lock): each
looks at the session file's inode and size, indexes whatever whole batches were added
since its last look (:class:`~stores.jsonl._index.FileIndex`), and decodes only the lines
it returns, checking that they hold the seqs expected -- a validated, contiguous slice.
A file replaced by a rewrite has a new inode: the index is rebuilt.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import uuid
from contextlib import AbstractContextManager
from typing import Any

from .._checks import (
    check_list_args,
    check_pin_arg,
    check_projection_args,
    check_read_args,
    check_text,
)
from .._contract import ListOrder, Pin
from .._errors import (
    ClosedError,
    SnapshotExpiredError,
    StoreCorruptError,
    StoreIOError,
    UnsupportedFormatError,
)
from .._records import SessionInfo, StoredEvent, stored_events, validate_session_id
from ._files import IO, Shared
from ._format import file_stem, stem_id
from ._group import before_group, uncommitted
from ._index import FileIndex
from ._ops import check_header_id, pieces
from ._write import Layout

__all__ = ["Reader"]

_KEEP_VIEWS = 256
#: Events decoded at a time by ``check_integrity`` (memory stays flat per session).
_CHECK_PAGE = 1000


class Reader:
    """The read half of :class:`~stores.JsonlStore`."""

    _shared: Shared | None

    def __init__(self, layout: Layout, *, read_only: bool = False) -> None:
        self._layout = layout
        self._reader_lock = threading.RLock()
        self._views: dict[str, FileIndex] = {}
        self._bases: dict[str, FileIndex] = {}
        #: A read-only handle applies the group commit rule (see :meth:`_groups`).
        self._apply_groups = read_only
        self._intents: dict[str, list[dict[str, object]]] = {}
        #: ``stem -> group`` of this read's uncommitted group members (None: not looked).
        self._uncommitted: dict[str, str] | None = None
        #: Views of members as they were before their group: ``(group, stem) -> view``.
        self._before: dict[tuple[str, str], FileIndex | None] = {}
        self._depth = 0

    def _writing(self, what: str) -> AbstractContextManager[Shared]:
        raise NotImplementedError

    # -- plumbing ----------------------------------------------------------------------

    def _reading(self, what: str) -> AbstractContextManager[None]:
        return _Reading(self, what)

    def close_views(self) -> None:
        for index in [*self._views.values(), *self._bases.values(), *self._before.values()]:
            if index is not None:
                index.close()
        self._views.clear()
        self._bases.clear()
        self._before.clear()

    def _groups(self) -> dict[str, str]:
        """``stem -> group`` of the members of group writes that have not reached their
        commit point (their intent is there): a read-only handle serves those sessions as
        they were before the group -- the rule by which the next writer rolls such a group
        back (see :mod:`stores.jsonl._group`), so a reader never reports, copies or checks
        as committed what a killed group left. Looked up once per read call."""
        if not self._apply_groups:
            return {}
        if self._uncommitted is None:
            self._uncommitted = uncommitted(self._layout.intents, self._intents)
            for key in [k for k in self._before if k[0] not in self._uncommitted.values()]:
                view = self._before.pop(key)
                if view is not None:
                    view.close()
        return self._uncommitted

    def _before_group(self, group: str, stem: str) -> FileIndex | None:
        """The view of ``stem`` as it was before uncommitted group ``group``."""
        key = (group, stem)
        if key not in self._before:
            layout = self._layout
            where = before_group(layout.intents, layout.sessions, group, stem, self._intents)
            self._before[key] = None if where is None else FileIndex.open(where[0], limit=where[1])
        return self._before[key]

    def _view(self, session_id: str, stem: str | None = None) -> FileIndex | None:
        """This handle's index of the session's file, brought up to date; None if none."""
        stem = file_stem(session_id) if stem is None else stem
        group = self._groups().get(stem)
        if group is not None:
            view = self._before_group(group, stem)
            if view is not None and session_id:
                check_header_id(view.header, session_id, view.path)
            return view
        path = self._layout.session(stem)
        view = self._views.get(stem)
        try:
            info = os.stat(path)
        except FileNotFoundError:
            if view is not None:
                self._views.pop(stem).close()
            return None
        except OSError as exc:
            raise StoreIOError(f"{path}: cannot stat ({exc})") from exc
        if view is not None and view.ino == info.st_ino:
            view.refresh(info.st_size)
            return view
        if view is not None:
            self._views.pop(stem).close()
        view = FileIndex.open(path, sidecar=self._layout.sidecar(stem))
        if view is None:
            return None
        if session_id:
            check_header_id(view.header, session_id, path)
        if len(self._views) >= _KEEP_VIEWS:
            self._views.pop(next(iter(self._views))).close()
        self._views[stem] = view
        return view

    def _base(self, name: str, hi: int) -> FileIndex:
        """The index of a fork's base link, covering at least seq ``hi``."""
        view = self._bases.get(name)
        path = self._layout.base(name)
        if view is None:
            view = FileIndex.open(path)
            if view is None:
                raise StoreCorruptError(f"{path}: a fork's base file is missing")
            self._bases[name] = view
        if view.head < hi:
            view.refresh(os.fstat(view.fd).st_size)
            if view.head < hi:
                view.check()
                raise StoreCorruptError(f"{path}: byte {view.end}: ends before seq {hi}")
        return view

    def _rows(self, session_id: str, view: FileIndex, lo: int, hi: int) -> list[StoredEvent]:
        events: list[StoredEvent] = []
        for name, plo, phi in pieces(view):
            a, b = max(lo, plo), min(hi, phi)
            if b <= a:
                continue
            source = view if name is None else self._base(name, b)
            events += stored_events(session_id, source.read_rows(session_id, a, b))
        return events

    def _info(self, session_id: str, view: FileIndex) -> SessionInfo:
        view.check()
        h = view.header
        return SessionInfo(session_id, view.head, h.created_at, view.updated_at, h.header, h.parent)

    # -- the contract's reads --------------------------------------------------------------

    def read(
        self,
        session_id: str,
        *,
        since_seq: int = 0,
        until_seq: int | None = None,
        limit: int | None = None,
        pin: Pin | None = None,
        from_end: bool = False,
    ) -> list[StoredEvent]:
        """See :meth:`Store.read`."""
        validate_session_id(session_id)
        until = check_read_args(since_seq, until_seq, limit, pin, from_end)
        with self._reading("read"):
            view = self._view(session_id)
            if pin is not None:
                _check_pin(session_id, view, pin)
            if view is None:
                return []
            view.check()
            stop = view.head if until is None else min(until, view.head)
            start = since_seq
            if limit is not None and from_end:
                start = max(start, stop - limit)
            elif limit is not None:
                stop = min(stop, since_seq + limit)
            if start >= stop:
                return []
            return self._rows(session_id, view, start, stop)

    def head(self, session_id: str) -> int:
        """See :meth:`Store.head`."""
        validate_session_id(session_id)
        with self._reading("head"):
            view = self._view(session_id)
            if view is None:
                return 0
            view.check()
            return view.head

    def stat(self, session_id: str) -> SessionInfo | None:
        """See :meth:`Store.stat`."""
        validate_session_id(session_id)
        with self._reading("stat"):
            view = self._view(session_id)
            return None if view is None else self._info(session_id, view)

    def pin(self, session_id: str) -> Pin | None:
        """See :meth:`Store.pin`."""
        validate_session_id(session_id)
        with self._reading("pin"):
            view = self._view(session_id)
            if view is None:
                return None
            view.check()
            return Pin(session_id, view.head, view.header.incarnation, view.header.epoch)

    def refresh_pin(self, pin: Pin) -> Pin:
        """See :meth:`Store.refresh_pin`."""
        check_pin_arg(pin)
        with self._reading("refresh_pin"):
            view = self._view(pin.session_id)
            _check_pin(pin.session_id, view, pin)
            assert view is not None
            view.check()
            return Pin(pin.session_id, view.head, view.header.incarnation, view.header.epoch)

    def find_run(self, session_id: str, run_id: str) -> tuple[int, int] | None:
        """See :meth:`Store.find_run`: from each file's run index."""
        validate_session_id(session_id)
        check_text(run_id, "run_id")
        with self._reading("find_run"):
            view = self._view(session_id)
            if view is None:
                return None
            view.check()
            found: list[tuple[int, int]] = []
            for name, lo, hi in pieces(view):
                source = view if name is None else self._base(name, hi)
                span = source.runs.get(run_id)
                if span is None or span[1] <= lo or span[0] > hi:
                    continue
                if span[0] <= lo or span[1] > hi:  # partly outside the range: look closer
                    seqs = [
                        s
                        for s, (_, _, r) in enumerate(source.raw_rows(lo, hi), lo + 1)
                        if r == run_id
                    ]
                    if not seqs:
                        continue
                    span = (seqs[0], seqs[-1])
                found.append(span)
        return (found[0][0], found[-1][1]) if found else None

    def list_sessions(
        self,
        *,
        limit: int | None = None,
        prefix: str | None = None,
        after: str | None = None,
        order: ListOrder = "id",
    ) -> list[SessionInfo]:
        """See :meth:`Store.list_sessions`: the files of ``sessions/`` (the id is read back
        from each file's name, or its header for a long one)."""
        check_list_args(limit, prefix, after, order)
        with self._reading("list_sessions"):
            try:
                names = os.listdir(self._layout.sessions)
            except OSError as exc:
                raise StoreIOError(f"{self._layout.sessions}: cannot list ({exc})") from exc
            infos = []
            listed = {name[: -len(".jsonl")] for name in names if name.endswith(".jsonl")}
            gone = [stem for stem in self._groups() if stem not in listed]  # deleted by one
            for name in [*names, *(f"{stem}.jsonl" for stem in gone)]:
                if not name.endswith(".jsonl"):
                    continue
                stem = name[: -len(".jsonl")]
                known = stem_id(stem)
                if known is not None and not _wanted(known, prefix, after):
                    continue  # filtered by its name alone: the file is not opened
                view = self._view(known or "", stem)
                if view is not None and _wanted(view.header.id, prefix, after):
                    infos.append(self._info(view.header.id, view))
        if order == "id":
            infos.sort(key=lambda i: i.id)
        else:
            infos.sort(key=lambda i: (-i.updated_at, i.id))
        return infos if limit is None else infos[:limit]

    def check_integrity(self) -> tuple[bool, str]:
        """Read every session file whole -- every record decoded, every batch's checksum
        and every fork's base checked: ``(True, "ok")`` or ``(False, what is wrong)``."""
        with self._reading("check_integrity"):
            try:
                names = set(os.listdir(self._layout.sessions))
            except OSError as exc:
                raise StoreIOError(f"{self._layout.sessions}: cannot list ({exc})") from exc
            groups = self._groups()
            names |= {f"{stem}.jsonl" for stem in groups}
            for name in sorted(names):
                if not name.endswith(".jsonl"):
                    continue
                path = os.path.join(self._layout.sessions, name)
                group = groups.get(name[: -len(".jsonl")])
                try:
                    if group is not None:  # as it was before its uncommitted group
                        where = before_group(
                            self._layout.intents,
                            self._layout.sessions,
                            group,
                            name[: -len(".jsonl")],
                            self._intents,
                        )
                        index = None if where is None else FileIndex.open(where[0], limit=where[1])
                    else:
                        index = FileIndex.open(path)
                    if index is None:
                        continue
                    try:
                        index.check()
                        stem = name[: -len(".jsonl")]
                        if stem_id(stem) not in (None, index.header.id):
                            return False, f"{path}: byte 0: holds session {index.header.id!r}"
                        for lo in range(0, index.head, _CHECK_PAGE):
                            hi = min(lo + _CHECK_PAGE, index.head)
                            self._rows(index.header.id, index, lo, hi)
                    finally:
                        index.close()
                except (StoreCorruptError, UnsupportedFormatError) as exc:
                    return False, str(exc)
        return True, "ok"

    def data_version(self) -> int:
        """See :meth:`Store.data_version`: the change log's inode, size and mtime."""
        with self._reading("data_version"):
            try:
                info = os.stat(self._layout.changes)
            except FileNotFoundError:
                return 0
            except OSError as exc:
                raise StoreIOError(f"data_version: cannot stat ({exc})") from exc
            return hash((info.st_ino, info.st_size, info.st_mtime_ns)) & ((1 << 63) - 1)

    # -- projection checkpoints (a cache: rewritten whole, never fsynced) ------------------

    def _projection_path(self, session_id: str) -> str:
        return os.path.join(self._layout.projections, f"{file_stem(session_id)}.json")

    def save_projection(self, pin: Pin, name: str, version: int, state_json: str) -> None:
        """See :meth:`Store.save_projection`."""
        check_pin_arg(pin)
        check_projection_args(name, version, state_json)
        with self._writing("save_projection"), self._reading("save_projection"):
            view = self._view(pin.session_id)
            if view is None or view.header.incarnation != pin.incarnation:
                return
            path = self._projection_path(pin.session_id)
            saved = _load(path)
            entries = (
                saved.get("entries", {}) if saved.get("incarnation") == pin.incarnation else {}
            )
            entries[name] = [version, pin.as_of_seq, pin.epoch, state_json]
            body = json.dumps({"incarnation": pin.incarnation, "entries": entries})
            tmp = f"{path}.{uuid.uuid4().hex}.tmp"
            try:
                flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                with open(os.open(tmp, flags, 0o644), "w", encoding="utf-8") as f:
                    f.write(body)
                IO.rename(tmp, path)
            except OSError as exc:
                with contextlib.suppress(OSError):
                    IO.unlink(tmp)
                raise StoreIOError(f"save_projection: I/O failure ({exc})") from exc

    def load_projection(self, session_id: str, name: str, version: int) -> tuple[int, str] | None:
        """See :meth:`Store.load_projection`."""
        validate_session_id(session_id)
        check_projection_args(name, version)
        with self._reading("load_projection"):
            view = self._view(session_id)
            if view is None:
                return None
            saved = _load(self._projection_path(session_id))
            entry = saved.get("entries", {}).get(name)
            if saved.get("incarnation") != view.header.incarnation or not entry:
                return None
            saved_version, seq, epoch, state = entry
            if saved_version != version:
                return None
            try:
                _check_pin(session_id, view, Pin(session_id, seq, view.header.incarnation, epoch))
            except SnapshotExpiredError:
                return None
            return int(seq), str(state)


def _load(path: str) -> dict[str, Any]:
    try:
        with open(os.open(path, os.O_RDONLY | os.O_NOFOLLOW), encoding="utf-8") as f:
            value = json.load(f)
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _check_pin(session_id: str, view: FileIndex | None, pin: Pin) -> None:
    if pin.session_id != session_id:
        raise SnapshotExpiredError(session_id, pin.as_of_seq, "pin is for another session")
    if view is None or view.header.incarnation != pin.incarnation:
        raise SnapshotExpiredError(session_id, pin.as_of_seq, "the session was deleted")
    for epoch, to_seq in view.header.cuts:
        if epoch > pin.epoch and to_seq < pin.as_of_seq:
            raise SnapshotExpiredError(
                session_id, pin.as_of_seq, f"events after seq {to_seq} were truncated"
            )


class _Reading:
    """This handle's lock for one read; :class:`ClosedError` once closed."""

    def __init__(self, reader: Reader, what: str) -> None:
        self._reader = reader
        self._what = what

    def __enter__(self) -> None:
        reader = self._reader
        reader._reader_lock.acquire()
        if reader._shared is None:
            reader._reader_lock.release()
            raise ClosedError(f"{self._what}: this JsonlStore was closed")
        if reader._depth == 0:
            reader._uncommitted = None  # each read call looks at the intents again
        reader._depth += 1

    def __exit__(self, *exc: object) -> None:
        self._reader._depth -= 1
        self._reader._reader_lock.release()


def _wanted(session_id: str, prefix: str | None, after: str | None) -> bool:
    """Does a listing with ``prefix`` and cursor ``after`` include ``session_id``?"""
    return (prefix is None or session_id.startswith(prefix)) and (
        after is None or session_id > after
    )
