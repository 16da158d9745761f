"""The child of the damaged-file battery (``test_battery_files.py``).

Usage: ``python battery_files_worker.py PRISTINE WORKDIR MODE SEED TRIALS``

``MODE`` is ``flips`` (flip random bytes in random pages) or ``cuts`` (truncate the file at
a random offset). For every trial the child damages a fresh copy of ``PRISTINE`` and then

1. opens it with ``SqliteStore(..., integrity_check_on_open=True)``; if that succeeds,
   lists, stats and reads every session and runs ``check_integrity()``;
2. opens another copy with ``open_runtime(path)`` (no integrity check), lists and reads
   every session, takes a snapshot of each, appends to a new session and flushes.

It prints ``start <n>`` before each trial (so the parent can name a trial that hangs)
and one JSON line with the outcomes after it. An outcome is ``"ok"``, the name of a tidelog
error, or ``"OTHER <type>: <message>"`` for anything else (never acceptable).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import sys
from pathlib import Path
from typing import Any

import trio

from runtime import NewEvent, SqliteStore, TidelogError, open_runtime

PAGE = 4096


def describe(exc: BaseException) -> str:
    if isinstance(exc, TidelogError):
        return type(exc).__name__
    return f"OTHER {type(exc).__name__}: {str(exc)[:200]}"


def digest(path: Path) -> str | None:
    if not path.exists():
        return None
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def damage(path: Path, mode: str, rng: random.Random) -> list[int]:
    data = bytearray(path.read_bytes())
    if mode == "cuts":
        cut = rng.choice(
            [
                rng.randrange(1, 100),  # inside the header
                rng.randrange(100, len(data)),
                PAGE * rng.randrange(1, len(data) // PAGE),  # at a page boundary
                len(data) - rng.randrange(1, PAGE),
            ]
        )
        path.write_bytes(bytes(data[:cut]))
        return [cut]
    pages = len(data) // PAGE
    flipped = []
    for _ in range(rng.randint(1, 8)):
        page = 0 if rng.random() < 0.1 else rng.randrange(pages)
        offset = page * PAGE + rng.randrange(PAGE)
        data[offset] ^= rng.randrange(1, 256)
        flipped.append(offset)
    path.write_bytes(bytes(data))
    return flipped


def exercise_store(path: Path) -> dict[str, Any]:
    before = digest(path)
    result: dict[str, Any] = {}
    try:
        store = SqliteStore(path, integrity_check_on_open=True)
    except BaseException as exc:
        result["check_open"] = describe(exc)
        result["refused_unchanged"] = digest(path) == before and not Path(f"{path}-wal").exists()
        return result
    result["check_open"] = "ok"
    try:
        ok, _ = store.check_integrity()
        result["integrity"] = ok
        outcomes = set()
        try:
            infos = store.list_sessions()
        except BaseException as exc:
            outcomes.add(describe(exc))
            infos = []
        for info in infos:
            for call in (lambda i=info: store.stat(i.id), lambda i=info: store.read(i.id)):
                try:
                    call()
                    outcomes.add("ok")
                except BaseException as exc:
                    outcomes.add(describe(exc))
        result["check_reads"] = sorted(outcomes)
    finally:
        store.close()
    return result


async def exercise_runtime(path: Path) -> dict[str, Any]:
    outcomes: set[str] = set()
    try:
        with trio.fail_after(20):
            async with open_runtime(path) as rt:
                try:
                    infos = await rt.list_sessions()
                except TidelogError as exc:
                    outcomes.add(describe(exc))
                    infos = []
                for info in infos:
                    try:
                        async with rt.open_session(info.id, mode="read") as r:
                            await r.read()
                        async with rt.snapshot(info.id) as snap:
                            await snap.read()
                        outcomes.add("ok")
                    except TidelogError as exc:
                        outcomes.add(describe(exc))
                try:
                    async with rt.open_session("after-damage") as w:
                        w.append_nowait([NewEvent("k", {"i": 0})])
                        await w.append([NewEvent("k", {"i": 1})])
                        await w.flush()
                    outcomes.add("ok")
                except TidelogError as exc:
                    outcomes.add(describe(exc))
    except trio.TooSlowError:
        outcomes.add("OTHER hang: the runtime did not finish within 20 s")
    except BaseException as exc:  # anything escaping the runtime (open, close, groups)
        outcomes.add(describe(exc))
    return {"runtime": sorted(outcomes)}


def main() -> None:
    pristine, workdir, mode = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    seed, trials = int(sys.argv[4]), int(sys.argv[5])
    rng = random.Random(seed)
    for n in range(trials):
        print(f"start {n}", flush=True)
        a, b = workdir / f"t{n}a.db", workdir / f"t{n}b.db"
        shutil.copyfile(pristine, a)
        where = damage(a, mode, rng)
        shutil.copyfile(a, b)
        result: dict[str, Any] = {"trial": n, "mode": mode, "where": where}
        result.update(exercise_store(a))
        result.update(trio.run(exercise_runtime, b))
        print(json.dumps(result), flush=True)
        for path in (a, b):
            for suffix in ("", "-wal", "-shm"):
                if os.path.exists(f"{path}{suffix}"):
                    os.remove(f"{path}{suffix}")


if __name__ == "__main__":
    main()
