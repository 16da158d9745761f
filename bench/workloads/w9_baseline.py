"""W9 baseline: the lag probe on an idle trio loop (nothing else running).

It shows the floor of the measurement on this machine: a 1 ms ``trio.sleep`` wakes late
by the timer resolution and scheduling noise even with no work. W9 rows during W2 and W4
are registered by those workload modules.
"""

from __future__ import annotations

import trio

from ..harness.core import CaseContext, LagProbe, Metrics, Row, case, rows

__all__ = ["idle_loop"]


async def _idle(duration: float) -> Metrics:
    probe = LagProbe()
    async with trio.open_nursery() as nursery:
        await nursery.start(probe.run)
        await trio.sleep(duration)
        nursery.cancel_scope.cancel()
    return probe.metrics()


@case("W9/idle", system="idle trio loop (probe only)")
def idle_loop(ctx: CaseContext) -> Metrics:
    return trio.run(_idle, max(0.1, 1.0 * ctx.scale))


rows(
    Row("W9", "W9 loop lag, idle baseline: p99", "W9/idle", "lag_p99_ms", "ms", note="baseline"),
    Row("W9", "W9 loop lag, idle baseline: max", "W9/idle", "lag_max_ms", "ms", note="baseline"),
)
