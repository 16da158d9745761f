"""Conformance cases: random batches of every kind of op, against the reference store.

Each example draws steps over three sessions: batches of appends (with no expected head,
the right one or a wrong one), groups of appends, truncates, replaces, deletes and
restores (a dump's events with their own times, creating the session -- as a fork that
shares its parent's prefix, or not -- where it is missing), each op but a restore with no
lease token, the token of the lease taken in the example or another one, each batch with
or without ``sync``; leases taken and released, and forks, between the batches; and the
last batch's appends and replaces sent again with ``retry=True`` (a caller resending after
an error must not duplicate). Each batch goes through one of two handles on the store
under test (it and a clone: another connection or handle on the same data). It applies
each step to that store and to a fresh :class:`~stores.MemoryStore` and requires the same
results (a head, or the same error class) and then the same logs, read through both
handles: each event's seq, kind, data and run id (and a restored event's time), and each
session's header and parent.
The expected heads are taken from the reference just before each batch, so a second op
on one session in a batch, or a group after a failed op, exercises the paths where an
op fails alone and what the batch did before it must stand.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import attrs
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from stores import (
    AppendOp,
    BatchResult,
    DeleteOp,
    GroupOp,
    MemoryStore,
    PreparedEvent,
    ReplaceOp,
    RestoreOp,
    SessionInfo,
    Store,
    StoredEvent,
    TidelogError,
    TruncateOp,
    WriteOp,
)
from stores.conformance._support import _QUICK, ConformanceBase, _prepared

__all__ = ["BATCHES", "Handle", "ModelCases", "model_steps", "replay"]

_WHO = st.integers(min_value=0, max_value=2)
#: Which handle writes a batch: the store under test, or a clone of it (another connection
#: or handle on the same data; see :meth:`~stores.Store.clone`).
_VIA = st.integers(min_value=0, max_value=1)


def model_steps(
    *, owners: bool = True, min_size: int = 1, max_size: int = 8
) -> SearchStrategy[list[Any]]:
    """The steps of an example as :func:`replay` takes them: a batch of ops (and its
    ``sync`` flag, and which of two handles on the store writes it), a lease taken or
    released (``"me"`` or ``"you"``) or a fork between batches, or the last batch resent
    (through either handle). ``owners``: ops name a lease token (none, the example's
    lease's or another) -- without, none does (where the second handle shares no leases,
    a token would only ever be refused)."""
    owner = st.sampled_from([None, None, "me", "you"] if owners else [None])
    # (who, events, expect, owner): an append to session ``who`` of that many events, with
    # no expected head (None), the reference's head (True) or a wrong one (False)
    append = st.tuples(
        _WHO, st.integers(min_value=1, max_value=3), st.sampled_from([None, True, False]), owner
    )
    op = st.one_of(
        st.tuples(st.just("append"), append),
        st.tuples(st.just("group"), st.lists(append, min_size=1, max_size=3)),
        st.tuples(st.just("truncate"), st.tuples(_WHO, st.integers(0, 5), owner)),
        st.tuples(st.just("replace"), st.tuples(_WHO, st.integers(0, 5), st.integers(0, 2), owner)),
        st.tuples(st.just("delete"), st.tuples(_WHO, owner)),
        # (who, events, the reference's head (mostly) or a wrong one, and none or a parent
        # -- another of the sessions, 1 or 2 places on -- its seq, and whether that prefix
        # is shared): a restore names no lease token
        st.tuples(
            st.just("restore"),
            st.tuples(
                _WHO,
                st.integers(min_value=0, max_value=2),
                st.sampled_from([True, True, False]),
                st.one_of(
                    st.none(), st.tuples(st.integers(1, 2), st.integers(0, 5), st.booleans())
                ),
            ),
        ),
    )
    return st.lists(
        st.one_of(
            st.tuples(st.just("batch"), st.lists(op, min_size=1, max_size=4), st.booleans(), _VIA),
            st.tuples(st.sampled_from(["lease", "release"]), _WHO, st.sampled_from(["me", "you"])),
            st.tuples(st.just("fork"), _WHO, _WHO, st.one_of(st.none(), st.integers(0, 5))),
            st.tuples(st.just("resend"), _VIA),
        ),
        min_size=min_size,
        max_size=max_size,
    )


#: The steps of the conformance cases' examples (:func:`model_steps`).
BATCHES = model_steps()


def _outcome(result: BatchResult) -> object:
    return result if isinstance(result, int) else type(result).__name__


def _call(store: Handle, action: str, session_id: str, arg: str, *at_seq: int | None) -> object:
    """Take or release lease token ``arg``'s lease on the session, or fork it to session
    ``arg`` (at ``at_seq``); the fork's head and parent, ``None``, or the error's class."""
    try:
        if action == "lease":
            store.acquire_lease(session_id, arg, ttl=3600, holder="model")
        elif action == "release":
            store.release_lease(session_id, arg)
        else:
            info = store.fork(session_id, arg, at_seq=at_seq[0])
            return info.head, info.parent
    except TidelogError as exc:
        return type(exc).__name__
    return None


def _log(store: Handle, session_id: str) -> tuple[object, ...]:
    """The session's head, header and parent, and its events (a restored one with its
    time: the others' times are each store's own clock)."""
    info = store.stat(session_id)
    lineage = None if info is None else (info.header, info.parent)
    events = [
        (e.seq, e.kind, e.data, e.run_id, e.ts if e.kind == "restored" else None)
        for e in store.read(session_id)
    ]
    return store.head(session_id), lineage, events


class Handle(Protocol):
    """What :func:`replay` uses of a store handle (every :class:`~stores.Store` is one)."""

    def write_batch(self, ops: Sequence[WriteOp], *, sync: bool = False) -> list[BatchResult]:
        """As :meth:`Store.write_batch <stores.Store.write_batch>`."""
        ...

    def acquire_lease(self, session_id: str, owner: str, *, ttl: float, holder: str) -> None:
        """As :meth:`Store.acquire_lease <stores.Store.acquire_lease>`."""
        ...

    def release_lease(self, session_id: str, owner: str) -> None:
        """As :meth:`Store.release_lease <stores.Store.release_lease>`."""
        ...

    def fork(self, source_id: str, new_id: str, *, at_seq: int | None = None) -> SessionInfo:
        """As :meth:`Store.fork <stores.Store.fork>`."""
        ...

    def read(self, session_id: str) -> list[StoredEvent]:
        """As :meth:`Store.read <stores.Store.read>`."""
        ...

    def head(self, session_id: str) -> int:
        """As :meth:`Store.head <stores.Store.head>`."""
        ...

    def stat(self, session_id: str) -> SessionInfo | None:
        """As :meth:`Store.stat <stores.Store.stat>`."""
        ...

    def clone(self) -> Handle:
        """As :meth:`Store.clone <stores.Store.clone>`."""
        ...

    def close(self) -> None:
        """As :meth:`Store.close <stores.Store.close>`."""
        ...


class ModelCases(ConformanceBase):
    """Random batches of every kind of op give the reference store's results and logs."""

    @_QUICK
    @given(batches=BATCHES)
    def test_random_batches_match_the_reference(self, store: Store, batches: list[Any]) -> None:
        """Any batches of appends (right, wrong or no expected head), groups, truncates,
        replaces, deletes and restores, through the store and a clone of it, give the
        reference's per-op results and leave the same logs."""
        replay(store, batches, self._fresh_id("m"))


def _clone(store: Handle) -> Handle:
    return store.clone()


def replay(
    store: Handle,
    batches: list[Any],
    prefix: str,
    *,
    second: Callable[[Handle], Handle] = _clone,
    shares_leases: bool = True,
    reopen: Callable[[Handle], Handle] | None = None,
    at: frozenset[int] = frozenset(),
    check: Callable[[Handle], None] | None = None,
) -> None:
    """Apply ``batches`` (drawn from :data:`BATCHES`) to sessions ``prefix``-0..2 of
    ``store`` and of a second handle on the same data, ``second(store)`` (a clone, unless
    told otherwise), and to a fresh reference, comparing as the module doc says, the logs
    as read through both handles. After each step whose index is in ``at``,
    ``reopen(store)`` returns the store to go on with (the second handle is closed first,
    then made again). A lease lasts as long as the handle (or process, or connection)
    that took it, which differs between backends: before a reopen both sides give up the
    example's leases, and before each batch through the second handle too unless
    ``shares_leases`` (a handle in another process does not share this one's).
    ``check(store)``, if given, runs after each step's comparison (a backend's own
    invariants)."""
    names = [f"{prefix}-{i}" for i in range(3)]
    names = [f"{prefix}-{i}" for i in range(3)]
    reference = MemoryStore()
    tag = 0

    def append(spec: tuple[int, int, bool | None, str | None]) -> AppendOp:
        nonlocal tag
        who, count, expect, owner = spec
        head = reference.head(names[who])
        expected = None if expect is None else head if expect else head + 7
        tag += 1
        events = _prepared(count, f"t{tag}")
        return AppendOp(names[who], events, expected_head=expected, owner=owner)

    def restore(spec: tuple[int, int, bool, tuple[int, int, bool] | None]) -> RestoreOp:
        nonlocal tag
        who, count, right, lineage = spec
        exists = reference.stat(names[who]) is not None
        head = reference.head(names[who])
        parent = None
        share = lineage is not None and lineage[2]
        if lineage is not None:  # at most the parent's head: a missing parent is the error
            parent_id = names[(who + lineage[0]) % 3]
            parent = (parent_id, min(lineage[1], reference.head(parent_id)))
        if not exists and share and parent is not None:
            head = parent[1]  # a fork's head before the restored events
        tag += 1
        events = tuple(
            PreparedEvent("restored", f'{{"tag":"r{tag}","i":{i}}}', None) for i in range(count)
        )
        return RestoreOp(
            names[who],
            events,
            tuple(1000.0 + tag + i / 8 for i in range(count)),
            head if right else head + 3,
            header_json=f'{{"restored":{tag}}}',
            created_at=500.0 + tag,
            updated_at=2000.0 + tag,
            parent=parent,
            share_prefix=share,
        )

    def batch(specs: list[tuple[str, Any]]) -> list[WriteOp]:
        nonlocal tag
        ops: list[WriteOp] = []
        for kind, spec in specs:
            if kind == "append":
                ops.append(append(spec))
            elif kind == "group":
                ops.append(GroupOp(tuple(append(member) for member in spec)))
            elif kind == "truncate":
                ops.append(TruncateOp(names[spec[0]], spec[1], owner=spec[2]))
            elif kind == "replace":
                who, from_seq, count, owner = spec
                tag += 1
                events = _prepared(count, f"t{tag}")
                ops.append(ReplaceOp(names[who], from_seq, events, owner=owner))
            elif kind == "restore":
                ops.append(restore(spec))
            else:
                ops.append(DeleteOp(names[spec[0]], owner=spec[1]))
        return ops

    def give_up_leases() -> None:
        for name in names:
            for token in ("me", "you"):
                handles[0].release_lease(name, token)
                reference.release_lease(name, token)

    handles = [store, second(store)]
    last: list[WriteOp] = []
    try:
        for i, step in enumerate(batches):
            if step[0] in ("batch", "resend"):
                if not shares_leases and step[-1] == 1:
                    give_up_leases()
                if step[0] == "batch":  # ops, sync, the handle that writes them
                    ops, sync, via = batch(step[1]), step[2], step[3]
                    last = ops
                else:  # the last batch's appends and replaces again, as resends
                    ops = [
                        attrs.evolve(op, retry=True)
                        for op in last
                        if isinstance(op, AppendOp | ReplaceOp)
                    ]
                    sync, via = False, step[1]
                expected = [_outcome(r) for r in reference.write_batch(ops, sync=sync)]
                results = handles[via].write_batch(ops, sync=sync)
                assert [_outcome(r) for r in results] == expected, ops
            else:  # a lease or a fork between batches
                action, who, arg, *at_seq = step
                target = names[arg] if action == "fork" else arg
                assert _call(handles[0], action, names[who], target, *at_seq) == _call(
                    reference, action, names[who], target, *at_seq
                ), step
            if reopen is not None and i in at:
                give_up_leases()
                handles[1].close()
                handles[0] = reopen(handles[0])
                handles[1] = second(handles[0])
            for name in names:
                expected_log = _log(reference, name)
                assert _log(handles[0], name) == expected_log, name
                assert _log(handles[1], name) == expected_log, name
            if check is not None:
                check(handles[0])
    finally:
        handles[1].close()
