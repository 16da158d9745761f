"""W11: the cost of one awaited append on the trio thread.

The program of :mod:`bench.probes.per_append`: a runtime over a MemoryStore (no storage, no
thread hop), one session, :data:`APPENDS` awaited appends of one event (the payload)
after a warm-up. The reference is the floor of any awaited append of the payload on a
trio thread: encoding it and one checkpoint.

* ``W11/tidelog`` and ``W11/floor``: us per append (wall clock, one run each).
* ``W11/tidelog-instructions`` and ``W11/floor-instructions``: instructions per append
  counted by callgrind (two runs, of 0 and of :data:`CALLGRIND_APPENDS` appends; their
  difference over the count), which unlike time does not drift with the machine's load.
  They take about a minute each, so below scale 0.5, or without valgrind, they measure
  nothing ("no data").

Target: at most 100,000 (the speed issue's; the first target, half of the 303k measured
before the per-append work, was 151,000).
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Callable

import trio

from ..harness.core import CaseContext, Metrics, Row, Target, case, rows
from ..probes.per_append import callgrind_per_append, floor_loop, tidelog_loop

__all__ = ["APPENDS", "CALLGRIND_APPENDS"]

#: Timed appends per measurement at scale 1.
APPENDS = 20_000
#: Appends of the larger callgrind run.
CALLGRIND_APPENDS = 1000


def _timed(system: str) -> Callable[[CaseContext], Metrics]:
    loop = tidelog_loop if system == "tidelog" else floor_loop

    def run(ctx: CaseContext) -> Metrics:
        n = ctx.n(APPENDS, minimum=100)
        elapsed = trio.run(loop, n)
        return {"us_per_append": elapsed / n * 1e6, "appends": float(n)}

    return run


def _counted(system: str) -> Callable[[CaseContext], Metrics]:
    def run(ctx: CaseContext) -> Metrics:
        if ctx.scale < 0.5 or shutil.which("valgrind") is None:
            return {"instructions_per_append": math.nan}  # "no data"
        return {"instructions_per_append": callgrind_per_append(system, CALLGRIND_APPENDS)}

    return run


case("W11/tidelog", system="tidelog, MemoryStore runtime")(_timed("tidelog"))
case("W11/floor", system="encode the payload + one trio checkpoint")(_timed("floor"))
case("W11/tidelog-instructions", system="tidelog, MemoryStore runtime (callgrind)")(
    _counted("tidelog")
)
case("W11/floor-instructions", system="encode the payload + one trio checkpoint (callgrind)")(
    _counted("floor")
)

_LABEL = "W11 one awaited append of 1 event on the trio thread (MemoryStore runtime)"
rows(
    Row("W11", f"{_LABEL}: time", "W11/floor", "us_per_append", "us", note="reference",
        higher_is_better=False),
    Row("W11", f"{_LABEL}: time", "W11/tidelog", "us_per_append", "us",
        reference=("W11/floor", "us_per_append"), higher_is_better=False),
    Row("W11", f"{_LABEL}: instructions", "W11/floor-instructions", "instructions_per_append",
        "instructions", note="reference", higher_is_better=False),
    Row("W11", f"{_LABEL}: instructions", "W11/tidelog-instructions",
        "instructions_per_append", "instructions",
        reference=("W11/floor-instructions", "instructions_per_append"),
        target=Target("value", "<=", 100_000), higher_is_better=False),
)  # fmt: skip
