"""Battery 8: power loss. Cut the power at random points of a real store's work and check
that every acknowledged event survives (``docs/reliability.md``).

A kill battery cannot test this: SIGKILL leaves the kernel's page cache, so a missing or
misplaced fsync goes unnoticed. Here a simulated disk under the real store records every
write, fsync, rename, link and unlink -- the JSONL store's I/O seam (``power_disk.py``), an
apsw VFS under SQLite (``power_vfs.py``) -- and at a cut writes out the files as a disk
could have left them: what was synced, plus any subset of what was not. The workload and
the checks are in ``power_workload.py``; a failure names the promise that broke.

CI: 32 cuts per backend (SQLite, JSONL plain, JSONL zstd; half with
``synchronous="normal"`` and flush barriers, half with ``"full"``); soak: 1,000.
"""

from __future__ import annotations

import random
import shutil
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, Literal

import pytest
from battery_support import record, size
from power_disk import Mode, recording
from power_vfs import recording_default_vfs
from power_workload import Model, Snapshot, check_cut, run, text

from stores import JsonlStore, SqliteStore

CUTS = size(16, 500)  # per backend and synchronous mode
OPS = size(40, 120)
#: The chance that a seam call is a cut point.
RATE = 0.2
FIXTURES = Path(__file__).parents[1] / "stores" / "fixtures"
FIXTURE = FIXTURES / "jsonl-format1"
MODES: tuple[Mode, ...] = ("none", "all", "some", "some", "some")
#: A cut: its directory, the model then, its mode.
Cut = tuple[Path, Snapshot, str]


def _read_all(store: Any, model: Model) -> None:
    for info in store.list_sessions():
        events = store.read(info.id)
        content = tuple(text(e.kind, e.data) for e in events)
        model.states[info.id] = [(0, content)]
        model.floor[info.id] = 0


def _cuts(
    tmp_path: Path,
    cuts: int,
    seed: int,
    workload: Callable[[Path, random.Random, list[Cut]], None],
    open_store: Callable[[Path], Any],
    battery: str,
) -> None:
    rng = random.Random(seed)
    taken: list[Cut] = []
    total = {"cuts": 0, "acknowledged": 0, "found": 0, "runs": 0}
    by_mode: dict[str, int] = {}
    while total["cuts"] < cuts:
        work = tmp_path / f"run{total['runs']}"
        total["runs"] += 1
        taken.clear()
        workload(work, rng, taken)
        for dest, snap, mode in taken[: cuts - total["cuts"]]:
            where = f"{battery} {dest.name} ({mode})"
            found = check_cut(partial(open_store, dest), snap, where)
            total["cuts"] += 1
            total["acknowledged"] += snap.acknowledged_events
            total["found"] += found
            by_mode[mode] = by_mode.get(mode, 0) + 1
            shutil.rmtree(dest)
        shutil.rmtree(work)
    assert total["cuts"] >= cuts
    assert total["acknowledged"] > 0
    record(battery, **total, modes=by_mode)


def _jsonl_workload(compress: bool, full: bool) -> Callable[..., None]:
    def workload(work: Path, rng: random.Random, taken: list[Cut]) -> None:
        root = work / "store"
        shutil.copytree(FIXTURE, root)  # a format 1 store: the first writes migrate it
        model = Model(full=full)
        sync: Literal["normal", "full"] = "full" if full else "normal"
        store = JsonlStore(root, synchronous=sync, compress=compress)
        try:
            _read_all(store, model)
        finally:
            store.close()
        with recording(str(root)) as disk:

            def on_call(n: int) -> None:
                if rng.random() >= RATE:
                    return
                mode = rng.choice(MODES)
                dest = work / f"cut{n}"
                disk.cut(str(dest), rng, mode)
                taken.append((dest, model.snapshot(), mode))

            disk.on_call = on_call
            store = JsonlStore(root, synchronous=sync, compress=compress)
            try:
                run(store, model, rng, OPS, pad=1500)
            finally:
                disk.on_call = None
                store.close()

    return workload


@pytest.mark.parametrize("cuts", [CUTS])
@pytest.mark.parametrize("sync", ["normal", "full"])
@pytest.mark.parametrize("compress", [False, True], ids=["plain", "zstd"])
def test_jsonl_power_cuts_keep_every_acknowledged_event(
    tmp_path: Path, cuts: int, sync: Literal["normal", "full"], compress: bool
) -> None:
    """Power cuts at random seam calls of a JSONL store: each leaves a store that opens,
    holds every acknowledged event once, and nothing that was not sent."""
    _cuts(
        tmp_path,
        cuts,
        seed=(2 if compress else 1) * (7 if sync == "full" else 3),
        workload=_jsonl_workload(compress, sync == "full"),
        open_store=lambda d: JsonlStore(d, compress=compress),
        battery=f"power-jsonl-{'zstd' if compress else 'plain'}-{sync}",
    )


def _sqlite_workload(full: bool) -> Callable[..., None]:
    def workload(work: Path, rng: random.Random, taken: list[Cut]) -> None:
        db = work / "store" / "s.db"
        db.parent.mkdir(parents=True)
        shutil.copyfile(FIXTURES / "sqlite-format3.db", db)  # opening it migrates it
        model = Model(full=full)
        sync: Literal["normal", "full"] = "full" if full else "normal"
        probe = work / "probe.db"
        shutil.copyfile(db, probe)
        store = SqliteStore(probe)
        try:
            _read_all(store, model)
        finally:
            store.close()
        with recording_default_vfs(str(db.parent)) as vfs:

            def on_call(n: int) -> None:
                if rng.random() >= RATE:
                    return
                mode = rng.choice(MODES)
                dest = work / f"cut{n}"
                vfs.cut(str(dest), rng, mode)
                taken.append((dest, model.snapshot(), mode))

            vfs.on_call = on_call
            store = SqliteStore(db, synchronous=sync)
            try:
                run(store, model, rng, OPS, pad=1500)
            finally:
                vfs.on_call = None
                store.close()

    return workload


@pytest.mark.parametrize("cuts", [CUTS])
@pytest.mark.parametrize("sync", ["normal", "full"])
def test_sqlite_power_cuts_keep_every_acknowledged_event(
    tmp_path: Path, cuts: int, sync: Literal["normal", "full"]
) -> None:
    """Power cuts at random VFS calls of a SQLite store (a format 3 file migrated at
    open): each leaves a database that opens, holds every acknowledged event once, and
    nothing that was not sent."""
    _cuts(
        tmp_path,
        cuts,
        seed=11 if sync == "full" else 13,
        workload=_sqlite_workload(sync == "full"),
        open_store=lambda d: SqliteStore(d / "s.db"),
        battery=f"power-sqlite-{sync}",
    )
