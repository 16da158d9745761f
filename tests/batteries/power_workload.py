"""The workload and the checks of the power battery (``test_battery_power.py``).

:func:`run` drives a real store (one thread, so a cut taken inside a seam call is an exact
instant) through appends, group commits across sessions, groups (all or nothing),
truncates, replaces (a rewind), forks, deletes, leases taken and released (a JSONL writer
leaving saves its sidecar, so cuts find sidecars over unsynced batches), flush barriers
and WAL checkpoints, and
keeps a :class:`Model`: per session, every state it went through (what a read would
return after each op) and the last *acknowledged* one -- the state as of the last
returned ``sync()`` (a flush barrier), or of the last returned commit with
``synchronous="full"``. The op being executed has its state recorded *before* the call,
so a cut during it may find it or not.

After a cut, :func:`check_cut` opens a store on the disk the cut left and checks the
promises, naming the one that broke:

* **opens**: the store opens and reads every session (no error);
* **durable**: each session reads as one of the states it went through at or after its
  acknowledged one -- so every event acknowledged by a flush or a FULL commit is there,
  exactly once, with its data, and what was committed but not acknowledged is a whole
  later state (for appends: a prefix of the unflushed events, no holes, no reordering);
* **accepted only**: no session and no event that the workload never sent;
* **atomic groups**: a group's sessions all show it or none does;
* **checks**: the store's own integrity check passes, and so does ``tidelog check``'s
  (``run_check``: lineage of every fork, leases, run checkpoints; run with ``quick``, as
  the integrity check ran already);
* **writable**: a writer appends to every session and reads it back without a gap (a torn
  tail is repaired).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import attrs
import trio

from runtime.cli._check import run_check
from stores import NewEvent, SqliteStore, StoreCorruptError
from stores._contract import AppendOp, GroupOp, ReplaceOp, TruncateOp
from stores._records import prepare_events
from stores._urls import StoreKind

__all__ = ["Model", "PromiseBroken", "Snapshot", "check_cut", "run", "text"]

#: A session's content: its events as ``[kind, data]`` JSON texts, or None (absent).
Content = tuple[str, ...] | None


def text(kind: str, data: Any) -> str:
    """An event as compared by the checks: its kind and data as one JSON text."""
    return json.dumps([kind, data], sort_keys=True, ensure_ascii=False)


@attrs.define
class Model:
    """What the workload did (see the module doc)."""

    full: bool
    states: dict[str, list[tuple[int, Content]]] = attrs.Factory(dict)
    floor: dict[str, int] = attrs.Factory(dict)
    #: (op number, sessions) of every group op.
    groups: list[tuple[int, tuple[str, ...]]] = attrs.Factory(list)
    op: int = 0

    def content(self, sid: str) -> Content:
        history = self.states.get(sid)
        return None if not history else history[-1][1]

    def begin(self, changes: Mapping[str, Content]) -> None:
        """Record the states the op about to run leaves its sessions in."""
        self.op += 1
        for sid, content in changes.items():
            history = self.states.setdefault(sid, [(0, None)])
            self.floor.setdefault(sid, 0)
            history.append((self.op, content))

    def returned(self, sids: list[str]) -> None:
        """The op returned (with FULL: its commit is acknowledged)."""
        if self.full:
            self.acknowledge(sids)

    def acknowledge(self, sids: list[str] | None = None) -> None:
        for sid in self.states if sids is None else sids:
            self.floor[sid] = len(self.states[sid]) - 1

    def snapshot(self) -> Snapshot:
        allowed = {
            sid: [(op, c) for op, c in history[self.floor[sid] :]]
            for sid, history in self.states.items()
        }
        acked = {sid: history[self.floor[sid]][1] for sid, history in self.states.items()}
        return Snapshot(allowed, acked, list(self.groups))


@attrs.frozen
class Snapshot:
    """The model at the instant of a cut."""

    allowed: dict[str, list[tuple[int, Content]]]
    acknowledged: dict[str, Content]
    groups: list[tuple[int, tuple[str, ...]]]

    @property
    def acknowledged_events(self) -> int:
        return sum(len(c) for c in self.acknowledged.values() if c)


def run(store: Any, model: Model, rng: random.Random, ops: int, pad: int) -> None:
    """Run ``ops`` random operations on ``store`` (see the module doc)."""
    counter = 0
    sessions = [f"s{i}" for i in range(4)] + list(model.states)
    forks = 0

    def events(n: int) -> list[NewEvent]:
        nonlocal counter
        out = []
        for _ in range(n):
            counter += 1
            size = rng.choice((10, 200, pad, 2 * pad))
            filler = rng.randbytes(size // 2).hex()
            out.append(NewEvent(rng.choice(("user", "tool")), {"n": counter, "pad": filler}))
        return out

    def texts(evs: list[NewEvent]) -> tuple[str, ...]:
        return tuple(text(e.kind, e.data) for e in evs)

    def live() -> list[str]:
        return [s for s in sessions if model.content(s) is not None]

    def step(changes: Mapping[str, Content], call: Callable[..., object], *args: Any) -> None:
        model.begin(changes)
        call(*args)
        model.returned(list(changes))

    for _ in range(ops):
        roll = rng.random()
        if roll < 0.35:
            sid = rng.choice(sessions)
            evs = events(rng.randint(1, 4))
            step({sid: (model.content(sid) or ()) + texts(evs)}, store.append, sid, evs)
        elif roll < 0.47:
            picked = rng.sample(sessions, 3)
            batch = {sid: events(rng.randint(1, 3)) for sid in picked}
            wops = [AppendOp(sid, tuple(prepare_events(evs))) for sid, evs in batch.items()]
            changes = {sid: (model.content(sid) or ()) + texts(evs) for sid, evs in batch.items()}
            step(changes, _batch, store, wops)
        elif roll < 0.55:
            a, b = rng.sample(sessions, 2)
            ea, eb = events(rng.randint(1, 2)), events(rng.randint(1, 2))
            group = GroupOp(
                (AppendOp(a, tuple(prepare_events(ea))), AppendOp(b, tuple(prepare_events(eb))))
            )
            changes = {
                a: (model.content(a) or ()) + texts(ea),
                b: (model.content(b) or ()) + texts(eb),
            }
            model.groups.append((model.op + 1, (a, b)))
            step(changes, _batch, store, [group])
        elif roll < 0.62 and live():
            sid = rng.choice(live())
            content = model.content(sid) or ()
            to = rng.randint(0, len(content))
            step({sid: content[:to]}, _batch, store, [TruncateOp(sid, to)])
        elif roll < 0.67 and live():
            sid = rng.choice(live())
            content = model.content(sid) or ()
            frm = rng.randint(max(0, len(content) - 3), len(content))
            evs = events(rng.randint(1, 2))
            rop = ReplaceOp(sid, frm, tuple(prepare_events(evs)))
            step({sid: content[:frm] + texts(evs)}, _batch, store, [rop])
        elif roll < 0.72 and live() and forks < 6:
            src = rng.choice(live())
            content = model.content(src) or ()
            at = rng.randint(0, len(content))
            new = f"f{forks}"
            forks += 1
            sessions.append(new)
            step({new: content[:at]}, _fork, store, src, new, at)
        elif roll < 0.75 and any(s.startswith("f") for s in live()):
            sid = rng.choice([s for s in live() if s.startswith("f")])
            step({sid: None}, store.delete, sid)
        elif roll < 0.77 and callable(getattr(store, "checkpoint_wal", None)):
            store.checkpoint_wal()  # a WAL checkpoint where the store has a WAL
        elif roll < 0.83 and live():
            # A lease taken and released: a JSONL writer leaving saves the session's
            # sidecar (index/<stem>.idx, never fsynced) over its unsynced batches.
            sid = rng.choice(live())
            store.acquire_lease(sid, "power", ttl=60, holder="battery")
            store.release_lease(sid, "power")
        else:
            store.sync()
            model.acknowledge()


def _fork(store: Any, src: str, new: str, at: int) -> None:
    store.fork(src, new, at_seq=at)


def _batch(store: Any, wops: list[Any]) -> None:
    for result in store.write_batch(wops):
        if isinstance(result, BaseException):
            raise result


def _read(store: Any, sid: str) -> Content:
    if store.stat(sid) is None:
        return None
    return tuple(text(e.kind, e.data) for e in store.read(sid))


class PromiseBroken(AssertionError):
    """A cut left a disk on which a durability promise does not hold."""


def check_cut(open_store: Callable[[], Any], snap: Snapshot, where: str) -> int:
    """Check a cut's disk (see the module doc); return the events found. Raises
    :class:`PromiseBroken` naming the promise."""

    def broken(promise: str, detail: str) -> PromiseBroken:
        return PromiseBroken(f"{where}: promise {promise!r} broken: {detail}")

    try:
        store = open_store()
    except Exception as exc:
        raise broken("opens", f"the store does not open: {exc!r}") from exc
    try:
        found: dict[str, Content] = {}
        for sid in snap.allowed:
            try:
                found[sid] = _read(store, sid)
            except StoreCorruptError as exc:
                raise broken("opens", f"session {sid!r} is refused: {exc}") from exc
        extra = {i.id for i in store.list_sessions()} - set(snap.allowed)
        if extra:
            raise broken("accepted only", f"sessions never written: {sorted(extra)}")
        chosen: dict[str, list[int]] = {}
        for sid, content in found.items():
            ops = [op for op, c in snap.allowed[sid] if c == content]
            if not ops:
                acked = snap.acknowledged[sid] or ()
                have = content or ()
                lost = [t for t in acked if t not in have]
                sent = {t for _, c in snap.allowed[sid] for t in (c or ())}
                alien = [t for t in have if t not in sent]
                promise = "durable" if lost or (content is None and acked) else "accepted only"
                if alien:
                    promise = "accepted only"
                raise broken(
                    promise,
                    f"session {sid!r} reads {len(have)} events, a state it never had since "
                    f"its acknowledged one ({len(acked)} events; lost {len(lost)}, "
                    f"never sent {len(alien)})",
                )
            chosen[sid] = ops
        for op, members in snap.groups:
            if not all(m in chosen for m in members):
                continue
            sides = [{o >= op for o in chosen[m]} for m in members]
            if not (set.intersection(*sides)):
                raise broken("atomic groups", f"group op {op} on {members} is half there")
        ok, why = store.check_integrity()
        if not ok:
            raise broken("checks", why)
        for sid, content in found.items():
            if content is None:
                continue
            head = store.append(sid, [NewEvent("after", {"cut": True})])
            if head != len(content) + 1:
                raise broken("writable", f"session {sid!r}: head {head} after one append")
            if _read(store, sid) != (*content, text("after", {"cut": True})):
                raise broken("writable", f"session {sid!r} does not read back after an append")
        kind: StoreKind = "sqlite" if isinstance(store, SqliteStore) else "jsonl"
        findings, _ = trio.run(partial(run_check, store, kind, quick=True))
        errors = [f for f in findings if f.level == "error"]
        if errors:
            raise broken("checks", f"tidelog check: {errors}")
        return sum(len(c) for c in found.values() if c)
    finally:
        store.close()
