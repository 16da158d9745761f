"""The harness's building blocks: the payload, measurement context, lag probe, statistics,
and the registry of cases (one system running one workload) and rows (what the table shows).

A workload family is one module under ``bench/workloads/`` that registers its cases with
:func:`case` and its table rows with :func:`rows`. A *case* is a function
``(CaseContext) -> Metrics`` that runs one measurement in a fresh temporary directory and
returns named numbers (``{"events_per_s": ..., "lag_p99_ms": ...}``). A *row* picks one
metric of one case, names its reference (another case's metric) and its target. Adding an
alternative system later means registering one more case (with ``requires=`` naming its
optional modules) and one more row.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

import trio

from runtime import JSON

__all__ = [
    "CASES",
    "PAYLOAD",
    "PAYLOAD_BYTES",
    "ROWS",
    "Case",
    "CaseContext",
    "LagProbe",
    "Metrics",
    "Row",
    "Target",
    "case",
    "encode_payload",
    "percentile",
    "rows",
]

Metrics = dict[str, float]

# -- the payload ----------------------------------------------------------------------------

_ENCODER: Final = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))

#: One agent message as users store it: ~300 bytes of JSON. Every system serializes it
#: inside the timed region, once per append.
PAYLOAD: Final[dict[str, JSON]] = {
    "role": "assistant",
    "content": (
        "The deployment finished. Three services were restarted, the cache was warmed and "
        "the health checks pass. Next: rotate the API keys."
    ),
    "model": "bench-model-1",
    "usage": {"input_tokens": 1234, "output_tokens": 321},
    "tool_calls": [{"id": "call_0001", "name": "search", "arguments": '{"q":"tidelog"}'}],
}


def encode_payload(payload: object) -> str:
    """Serialize like tidelog does (compact separators, no NaN); used by raw systems."""
    return _ENCODER.encode(payload)


PAYLOAD_BYTES: Final = len(encode_payload(PAYLOAD).encode())

# -- statistics -----------------------------------------------------------------------------


def percentile(samples: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (``p`` in 0..100); NaN for no samples."""
    if not samples:
        return math.nan
    ordered = sorted(samples)
    rank = max(1, math.ceil(p / 100.0 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


# -- measurement context --------------------------------------------------------------------


@dataclass
class CaseContext:
    """What a case gets: the scale factor and fresh temporary directories."""

    scale: float
    tmp_root: str | None = None

    def n(self, base: int, *, minimum: int = 1) -> int:
        """``base`` scaled by ``--scale``, at least ``minimum``."""
        return max(minimum, round(base * self.scale))

    @contextlib.contextmanager
    def fresh_dir(self) -> Iterator[Path]:
        """A new, empty temporary directory, removed afterwards."""
        with tempfile.TemporaryDirectory(prefix="tidelog-bench-", dir=self.tmp_root) as d:
            yield Path(d)


# -- event-loop lag probe -------------------------------------------------------------------


class LagProbe:
    """A trio task that sleeps ``interval`` seconds in a loop and records how late it woke.

    Lag = actual sleep time - requested. Run it with ``nursery.start(probe.run)`` just before
    the timed region and cancel it right after; only the samples in between are kept.
    """

    def __init__(self, interval: float = 0.001) -> None:
        self.interval = interval
        self.samples: list[float] = []

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        interval = self.interval
        clock = time.perf_counter
        samples = self.samples
        while True:
            start = clock()
            await trio.sleep(interval)
            samples.append(clock() - start - interval)

    def metrics(self, prefix: str = "lag") -> Metrics:
        """``{prefix}_p50_ms``, ``_p99_ms``, ``_max_ms`` and ``_samples``."""
        ms = [s * 1000.0 for s in self.samples]
        return {
            f"{prefix}_p50_ms": percentile(ms, 50),
            f"{prefix}_p99_ms": percentile(ms, 99),
            f"{prefix}_max_ms": max(ms) if ms else math.nan,
            f"{prefix}_samples": float(len(ms)),
        }


# -- the registry ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One system running one workload: a measurement function and what it needs."""

    key: str
    system: str
    run: Callable[[CaseContext], Metrics]
    requires: tuple[str, ...] = ()
    #: What else the case needs, checked before it runs: the missing thing, or ``None``
    #: (the PostgreSQL cases need a server).
    needs: Callable[[], str | None] | None = None

    def missing(self) -> list[str]:
        """The optional modules (or the service) this case needs that are not there."""
        absent = [m for m in self.requires if not _installed(m)]
        if not absent and self.needs is not None:
            reason = self.needs()
            if reason is not None:
                absent.append(reason)
        return absent


def _installed(module: str) -> bool:
    """True if ``module`` (dotted names too) can be imported."""
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:  # a parent package is missing
        return False


@dataclass(frozen=True)
class Target:
    """A goal for a row: ``value`` or ``ratio`` (to the row's reference) ``>=`` / ``<=``
    ``bound``."""

    on: Literal["value", "ratio"]
    op: Literal[">=", "<="]
    bound: float

    def describe(self, unit: str) -> str:
        if self.on == "ratio":
            return f"{self.op} {self.bound:g}x"
        return f"{self.op} {self.bound:g} {unit}"

    def met(self, value: float, ratio: float | None) -> bool | None:
        """True/False, or None if it cannot be judged (no ratio, NaN)."""
        x = ratio if self.on == "ratio" else value
        if x is None or math.isnan(x):
            return None
        return x >= self.bound if self.op == ">=" else x <= self.bound


@dataclass(frozen=True)
class Row:
    """One line of the results table: ``metric`` of case ``case``."""

    workload: str
    label: str
    case: str
    metric: str
    unit: str
    reference: tuple[str, str] | None = None
    target: Target | None = None
    #: Shown in the status column of a row without a target ("reference", "baseline",
    #: "bound").
    note: str = ""
    #: Shown in the reference column instead of the reference case's system name.
    reference_label: str = ""
    #: Instead of ``reference``: the best of these ``(case, metric)`` pairs in each round
    #: (the highest if ``higher_is_better``, else the lowest), skipping cases that are not
    #: installed or failed. Used for "the best alternative".
    best_of: tuple[tuple[str, str], ...] = ()
    higher_is_better: bool = True

    def __post_init__(self) -> None:
        if self.best_of and self.reference is not None:
            raise ValueError(f"row {self.label!r}: give reference or best_of, not both")

    def cases(self) -> list[str]:
        """The cases this row needs (its own and its references')."""
        keys = [self.case]
        refs = [self.reference] if self.reference is not None else list(self.best_of)
        for ref_case, _ in refs:
            if ref_case not in keys:
                keys.append(ref_case)
        return keys


#: Registered cases by key, in registration order.
CASES: dict[str, Case] = {}
#: Registered rows, in table order.
ROWS: list[Row] = []


def case(
    key: str,
    *,
    system: str,
    requires: Sequence[str] = (),
    needs: Callable[[], str | None] | None = None,
) -> Callable[[Callable[[CaseContext], Metrics]], Callable[[CaseContext], Metrics]]:
    """Decorator: register ``fn`` as case ``key`` (unique), run for ``system``; it needs the
    modules ``requires`` and whatever ``needs()`` says is missing (``None``: nothing)."""

    def register(fn: Callable[[CaseContext], Metrics]) -> Callable[[CaseContext], Metrics]:
        if key in CASES:
            raise ValueError(f"case {key!r} is registered twice")
        CASES[key] = Case(key, system, fn, tuple(requires), needs)
        return fn

    return register


def rows(*new: Row) -> None:
    """Register table rows (their cases may be registered before or after)."""
    ROWS.extend(new)
