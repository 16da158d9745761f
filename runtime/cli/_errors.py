"""The command's failures: exit statuses, and one-line messages that speak in the
command's terms (its flags and arguments, never Python keyword arguments)."""

from __future__ import annotations

import re
import sys
from typing import TYPE_CHECKING

from runtime import (
    InvalidArgumentError,
    InvalidSessionIdError,
    ReadOnlyError,
    SessionExistsError,
    SessionNotFoundError,
    SessionOwnedError,
    SnapshotExpiredError,
    StoreBusyError,
    StoreCorruptError,
    StoreIOError,
    TidelogError,
    UnsupportedFormatError,
)

if TYPE_CHECKING:
    from runtime.agents import ForkPointError

__all__ = [
    "EXIT_FOUND",
    "EXIT_INTERRUPTED",
    "EXIT_USAGE",
    "CliError",
    "Interrupted",
    "explain",
    "in_flags",
    "leaf",
]

#: Exit status when the command ran but found something wrong (``check`` problems,
#: ``import`` conflicts, ``prune`` skips of sessions it was asked to remove).
EXIT_FOUND = 1
#: Exit status for a problem with the arguments, the file or the session.
EXIT_USAGE = 2
#: Exit status after Ctrl-C / SIGTERM stopped a command (what it did is complete).
EXIT_INTERRUPTED = 130


class CliError(TidelogError):
    """A problem to report as one line on stderr, with exit status ``code`` (a
    :class:`~stores.TidelogError` like every error tidelog raises)."""

    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        """Report ``message``; exit with ``code``."""
        super().__init__(message)
        self.message = message
        self.code = code


class Interrupted(Exception):
    """Ctrl-C or SIGTERM reached a long command at a point where nothing is half-done;
    ``done`` says what was completed. Not a :class:`~stores.TidelogError`: it is the
    user's stop, like ``KeyboardInterrupt``, not a failure of tidelog's."""

    def __init__(self, done: str) -> None:
        """Stop; ``done`` is the one-line summary of what was completed."""
        super().__init__(done)
        self.done = done


def leaf(exc: BaseException) -> BaseException:
    """The single exception inside nested one-member exception groups, else ``exc``."""
    # (runtime.agents.unwrap_group, without loading the agent layer for every failure)
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


#: The library's argument names that reach a message, and the flags users type instead.
_FLAGS = {
    "allow_open_run=True": "--allow-open-run",
    "allow_open_run": "--allow-open-run",
    "at_seq": "--at",
    "keep_entries": "--keep",
    "since_seq": "--since",
    "until_seq": "--until",
    "older_than": "--older-than",
    "keep_last_runs": "--keep-last-runs",
}
_KEYWORD = re.compile("|".join(rf"\b{re.escape(name)}" for name in _FLAGS))
#: Argument names that lead a message of the argument checks (``"prefix must be ..."``).
_LEADING = ("prefix", "limit", "after")


def in_flags(message: str) -> str:
    """``message`` with the library's keyword arguments named as the command's flags."""
    message = _KEYWORD.sub(lambda match: _FLAGS[match.group(0)], message)
    for name in _LEADING:
        if message.startswith(name + " "):
            return f"--{message}"
    return message


def _fork_point(exc: ForkPointError) -> str:
    calls = ", ".join(exc.pending)
    return (
        f"tidelog: seq {exc.at_seq} of {exc.session_id!r} falls inside a run whose tool "
        f"calls {calls} have no result yet; fork at another --at SEQ, or pass "
        "--allow-open-run to fork there anyway"
    )


def explain(exc: TidelogError, path: str) -> str:
    """The one-line message for a tidelog error met by a command on database ``path``."""
    if isinstance(exc, SessionNotFoundError):
        return f"tidelog: no session {exc.session_id!r} in {path}"
    if isinstance(exc, UnsupportedFormatError):
        return f"tidelog: {path}: {exc}"
    if isinstance(exc, StoreCorruptError):
        return f"tidelog: {path}: corrupt file, or not a database at all ({exc})"
    if isinstance(exc, SessionExistsError):
        return f"tidelog: session {exc.session_id!r} already exists in {path}"
    if isinstance(exc, SessionOwnedError):
        holder = exc.owner or "another writer"
        return (
            f"tidelog: session {exc.session_id!r} is being written by {holder}; "
            "try again once that writer has closed it"
        )
    # An agent-layer error exists only once a command loaded that layer: the others
    # (ls, show, check...) fail without loading it (a third of their start-up).
    if "runtime.agents" in sys.modules and isinstance(exc, InvalidArgumentError):
        from runtime.agents import ForkPointError

        if isinstance(exc, ForkPointError):
            return _fork_point(exc)
    if isinstance(exc, ReadOnlyError):
        return f"tidelog: {path} is opened read-only here: {exc}"
    if isinstance(exc, StoreBusyError):
        return f"tidelog: {path} stayed locked by another writer; try again ({exc})"
    if isinstance(exc, StoreIOError):
        return f"tidelog: {path}: {exc}"
    if isinstance(exc, SnapshotExpiredError):
        return (
            f"tidelog: session {exc.session_id!r} was cut or deleted while it was read "
            "(its events after the cut are gone); run the command again"
        )
    if isinstance(exc, InvalidSessionIdError | InvalidArgumentError):
        return f"tidelog: {in_flags(str(exc))}"
    return f"tidelog: {path}: {type(exc).__name__}: {exc}"
