"""Who holds a lease: the holder string, and telling a crashed local holder from a live one.

A lease names its holder as ``"pid <pid> on <host> ns <pid-namespace>"``. A lease whose
holder is a process of *this* host and PID namespace that no longer exists can be taken
over at once, without waiting for the TTL: that is what a host restarted after a crash
(SIGKILL, OOM kill) needs to resume its sessions promptly. Anything else -- another host,
another PID namespace (containers sharing a hostname and a volume), a live pid, an
unparsable holder -- waits for the TTL as usual. A recycled pid only makes the check
conservative (it looks alive), never unsafe; fencing by owner token protects the data
either way.
"""

from __future__ import annotations

import os
import re
import socket

__all__ = ["holder_is_dead", "lease_is_free", "local_holder"]

_HOLDER = re.compile(r"\Apid (\d+) on (.+) ns (\S+)\Z")


def _pid_namespace() -> str:
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return "unknown"


def local_holder() -> str:
    """The holder string of this process."""
    return f"pid {os.getpid()} on {socket.gethostname()} ns {_pid_namespace()}"


def lease_is_free(held: tuple[str, str, float], owner: str, now: float) -> bool:
    """Whether ``owner`` may take over the lease held as ``held`` -- ``(owner, holder,
    expires)``: its own, an expired one, or one whose holder is a process of this host
    that has exited (with no lease at all, it may anyway). The rule of
    :meth:`Store.acquire_lease <stores._contract.Store.acquire_lease>`."""
    held_by, holder, expires = held
    return held_by == owner or expires <= now or holder_is_dead(holder)


def holder_is_dead(holder: str) -> bool:
    """True if ``holder`` is a process of this host and PID namespace that has exited."""
    match = _HOLDER.match(holder)
    if match is None or match.group(2) != socket.gethostname():
        return False
    namespace = match.group(3)
    if namespace == "unknown" or namespace != _pid_namespace():
        return False
    pid = int(match.group(1))
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # exists, owned by someone else
    return _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    """A killed child not yet reaped still has a pid; it holds nothing any more."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            fields = f.read().rsplit(")", 1)[-1].split()
    except OSError:
        return False
    return bool(fields) and fields[0] == "Z"
