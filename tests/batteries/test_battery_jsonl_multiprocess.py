"""Battery 5 on a JSONL store: four processes contend for the same session files.

The children of ``test_battery_multiprocess.py`` (``battery_mp_worker.py``) churn on a
JSONL store directory -- open a random shared session for writing, write a few batches,
close -- while the parent tails every session; one child is SIGKILLed and replaced, and
one is frozen (SIGSTOP) while it holds a session: on JSONL the session's kernel lock
stays with the frozen process (a live holder keeps its lease whatever its ttl), so the
parent's write open is refused for as long as it is frozen, and the child goes on once
resumed. Checked as in the SQLite battery: no error reached a caller, every session
gapless, every batch whole and stored once, every acknowledged batch at its seqs, the
killed child's sessions taken over, every tail saw exactly the final log.

CI: one ~5 s round. Soak (``TIDELOG_SOAK=1``): four rounds.
"""

from __future__ import annotations

import contextlib
import random
import signal
import time
from collections import defaultdict
from pathlib import Path

import pytest
import trio
from battery_mp_children import Churner, spawn_churner
from battery_support import record, size
from test_battery_multiprocess import SESSIONS, check_logs

from runtime import SessionOwnedError, StoredEvent, open_runtime
from stores import JsonlStore

pytestmark = pytest.mark.slow

LEASE_TTL = 1.0
ROUND_SECONDS = 5.0


async def one_round(
    tmp: Path, root: Path, rnd: int, rng: random.Random, earlier: list[Churner]
) -> dict[str, int]:
    stopfile = tmp / f"stop{rnd}"
    children: list[Churner] = []
    tails: dict[str, list[StoredEvent]] = {sid: [] for sid in SESSIONS}
    async with open_runtime(root, lease_ttl=LEASE_TTL) as rt:
        for sid in SESSIONS:
            async with rt.open_session(sid):
                pass
        async with trio.open_nursery() as nursery:

            async def tail(sid: str, since: int) -> None:
                async for event in rt.tail(sid, since_seq=since):
                    tails[sid].append(event)

            heads = {sid: (await rt.stat(sid)).head for sid in SESSIONS}  # type: ignore[union-attr]
            for sid in SESSIONS:
                nursery.start_soon(tail, sid, heads[sid])
            async with contextlib.AsyncExitStack() as stack:
                for i in range(4):
                    children.append(
                        await stack.enter_async_context(
                            spawn_churner(
                                nursery,
                                tmp,
                                root,
                                f"j{rnd}x{i}",
                                seed=rng.randrange(1 << 30),
                                stopfile=stopfile,
                                sessions=",".join(SESSIONS),
                                lease_ttl=LEASE_TTL,
                            )
                        )
                    )
                start = time.monotonic()
                await trio.sleep(rng.uniform(0.8, 1.5))
                victim = children[0]
                victim.proc.kill()
                killed_at = time.monotonic()
                assert await victim.proc.wait() == -signal.SIGKILL
                orphan = victim.holding[0] if victim.holding else None
                children.append(
                    await stack.enter_async_context(
                        spawn_churner(
                            nursery,
                            tmp,
                            root,
                            f"j{rnd}x4",
                            seed=rng.randrange(1 << 30),
                            stopfile=stopfile,
                            sessions=",".join(SESSIONS),
                            lease_ttl=LEASE_TTL,
                        )
                    )
                )
                stale = children[1]
                with trio.fail_after(20):
                    while stale.holding is None:
                        await stale.changed.wait()
                stale.proc.send_signal(signal.SIGSTOP)
                held = stale.holding
                await trio.sleep(LEASE_TTL + 0.3)  # its ttl passed; the kernel lock did not
                if held is not None and stale.holding == held:
                    with pytest.raises(SessionOwnedError):
                        async with rt.open_session(held[0], mode="write"):
                            raise AssertionError("took a frozen live holder's session")
                stale.proc.send_signal(signal.SIGCONT)
                await trio.sleep(max(0.0, ROUND_SECONDS - (time.monotonic() - start)))
                stopfile.touch()
                with trio.fail_after(30):
                    for child in children[1:]:
                        await child.finish()  # exits 0 with a clean stderr
            store = JsonlStore(root, read_only=True)
            try:
                logs = {s: store.read(s) for s in SESSIONS}
                assert store.check_integrity() == (True, "ok")
            finally:
                store.close()
            with trio.fail_after(10):
                while any(len(tails[s]) < len(logs[s]) - heads[s] for s in SESSIONS):  # noqa: ASYNC110
                    await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
    for s in SESSIONS:
        assert [(e.seq, e.data) for e in tails[s]] == [(e.seq, e.data) for e in logs[s][heads[s] :]]
    earlier.extend(children)
    counts = check_logs(logs, earlier)
    if orphan is not None:
        assert any(t > killed_at and s == orphan for c in children[1:] for t, s in c.opened_at)
    return counts


@pytest.mark.parametrize("rounds", [size(1, 4)])
async def test_four_processes_contend_for_jsonl_files(tmp_path: Path, rounds: int) -> None:
    """Four contending processes on a JSONL store, a SIGKILL and a frozen holder: no
    error reached a caller, nothing lost, nothing torn, a frozen live holder kept its lock."""
    root = tmp_path / "mp.jsonl"
    root.mkdir()
    rng = random.Random(4243)
    totals: dict[str, int] = defaultdict(int)
    children: list[Churner] = []
    for rnd in range(rounds):
        for key, value in (await one_round(tmp_path, root, rnd, rng, children)).items():
            totals[key] = value if key in ("batches", "acked", "fenced") else totals[key] + value
    record("multiprocess-jsonl", rounds=rounds, kills=rounds, **totals, events_lost=0)
