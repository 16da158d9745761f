"""Run the selected cases round by round and reduce them to table rows.

Every round runs every selected case once, each in a fresh child process (``python -m
bench.harness.worker case``: nothing a case imported or allocated -- an alternative
library, a million-event fold -- is in the process that measures the next one) and a fresh
temporary directory; the start of the order rotates by one case per round, so no system
always runs first or last on a machine whose speed drifts. Values are medians over the
rounds. A ratio is paired by round: the median over rounds of (this round's value / the
reference's value in the same round), which cancels drift between rounds; the JSON also
keeps the ratio of the medians.
"""

from __future__ import annotations

import gc
import math
import re
import statistics
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .core import CASES, ROWS, CaseContext, Metrics, Row
from .procs import Args, run_worker, worker

__all__ = [
    "CaseResult",
    "RowResult",
    "evaluate",
    "run_cases",
    "select_rows",
    "workloads",
]


@dataclass
class CaseResult:
    """All rounds of one case."""

    key: str
    system: str
    #: One entry per round: its metrics, or None if the case failed (or did not run).
    rounds: list[Metrics | None] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    def value(self, round_index: int, metric: str) -> float | None:
        """One round's value, None if missing or NaN."""
        if round_index >= len(self.rounds):
            return None
        metrics = self.rounds[round_index]
        value = None if metrics is None else metrics.get(metric)
        return None if value is None or math.isnan(value) else value

    def values(self, metric: str) -> list[float]:
        return [m[metric] for m in self.rounds if m is not None and metric in m]

    def median(self, metric: str) -> float | None:
        values = [v for v in self.values(metric) if not math.isnan(v)]
        return statistics.median(values) if values else None


@dataclass(frozen=True)
class RowResult:
    """One evaluated table row."""

    row: Row
    system: str
    value: float | None
    rounds: list[float]
    reference_system: str | None
    reference_value: float | None
    ratio: float | None
    status: str
    #: The unpaired ratio (median value / median reference value), kept in the JSON.
    ratio_of_medians: float | None = None
    #: The reference's ``(case, metric)``: the row's own, or the best one of ``best_of``.
    reference_key: tuple[str, str] | None = None
    #: The paired ratio of each round that has one (``ratio`` is their median), in round
    #: order: the table shows their range, the spread a single median hides.
    round_ratios: list[float] = field(default_factory=list)


def _workload_key(name: str) -> tuple[str, int, str]:
    """Natural order: W2 < W4 < W10."""
    match = re.fullmatch(r"([^\d]*)(\d*)(.*)", name)
    assert match is not None
    prefix, number, rest = match.groups()
    return prefix.upper(), int(number) if number else -1, rest


def _ordered_rows() -> list[Row]:
    return sorted(ROWS, key=lambda r: _workload_key(r.workload))


def workloads() -> list[str]:
    """Workload names that have rows, in table order."""
    return list(dict.fromkeys(r.workload for r in _ordered_rows()))


def select_rows(only: Sequence[str] | None) -> list[Row]:
    """The rows of the ``only`` workloads (all if None). Raises ValueError for an unknown
    workload or a row naming an unregistered case."""
    known = workloads()
    if only:
        wanted = {w.strip().upper() for w in only if w.strip()}
        unknown = wanted - {w.upper() for w in known}
        if unknown:
            raise ValueError(
                f"unknown workload(s) {', '.join(sorted(unknown))}; known: {', '.join(known)}"
            )
        selected = [r for r in _ordered_rows() if r.workload.upper() in wanted]
    else:
        selected = _ordered_rows()
    for row in selected:
        for key in row.cases():
            if key not in CASES:
                raise ValueError(f"row {row.label!r} names unregistered case {key!r}")
    return selected


#: Seconds one case measurement may take in its child process.
CASE_TIMEOUT = 900.0


@worker("case")
def _case_in_child(args: Args) -> Metrics:
    """The child's side of an isolated case: ``{"key": ..., "scale": ...}``."""
    return CASES[args["key"]].run(CaseContext(float(args["scale"])))


def _run_one(key: str, scale: float, isolate: bool) -> Metrics:
    if isolate:
        return run_worker("case", {"key": key, "scale": scale}, timeout=CASE_TIMEOUT)
    gc.collect()
    return CASES[key].run(CaseContext(scale))


def run_cases(
    keys: Sequence[str],
    *,
    scale: float,
    rounds: int,
    isolate: bool = True,
    log: Callable[[str], None] = lambda s: print(s, file=sys.stderr, flush=True),
) -> dict[str, CaseResult]:
    """Run ``keys`` for ``rounds`` rounds, interleaved, each measurement in a child
    process of its own (``isolate``; else in this process, for debugging). A failing case
    is recorded (its traceback is logged) and the run goes on."""
    results = {k: CaseResult(k, CASES[k].system) for k in keys}
    runnable: list[str] = []
    for key in keys:
        missing = CASES[key].missing()
        if missing:
            results[key].missing = missing
            log(f"skip {key}: not installed ({', '.join(missing)})")
        else:
            runnable.append(key)
    for r in range(rounds):
        shift = r % len(runnable) if runnable else 0
        order = runnable[shift:] + runnable[:shift]
        for key in order:
            result = results[key]
            try:
                metrics = _run_one(key, scale, isolate)
            except Exception as exc:
                result.errors.append(f"round {r + 1}: {type(exc).__name__}: {exc}")
                result.rounds.append(None)
                log(f"round {r + 1}/{rounds} {key}: ERROR\n{traceback.format_exc()}")
                continue
            result.rounds.append(metrics)
            log(f"round {r + 1}/{rounds} {key}: {_summary(metrics)}")
    return results


def _summary(metrics: Metrics) -> str:
    shown = [k for k in metrics if not k.endswith(("_samples", "elapsed_s"))][:5]
    return ", ".join(f"{k}={metrics[k]:.4g}" for k in shown)


def evaluate(selected: Sequence[Row], results: dict[str, CaseResult]) -> list[RowResult]:
    """Medians, ratios and target status for every selected row."""
    out: list[RowResult] = []
    for row in selected:
        result = results[row.case]
        value = result.median(row.metric)
        ref_system = ref_value = ratio = ratio_of_medians = None
        ref_key: tuple[str, str] | None = row.reference
        round_ratios: list[float] = []
        if row.best_of:
            ref_key, ref_result, ref_rounds = _best_of(row, results)
            if ref_key is not None and ref_result is not None:
                ref_system = f"best alternative: {ref_result.system}"
                ref_value = ref_result.median(ref_key[1])
            round_ratios = _round_ratios(result, row.metric, ref_rounds)
        elif row.reference is not None:
            ref_result = results[row.reference[0]]
            ref_system = row.reference_label or ref_result.system
            ref_value = ref_result.median(row.reference[1])
            ref_rounds = [
                ref_result.value(i, row.reference[1])
                for i in range(max(len(result.rounds), len(ref_result.rounds)))
            ]
            round_ratios = _round_ratios(result, row.metric, ref_rounds)
        if round_ratios:
            ratio = statistics.median(round_ratios)
        if value is not None and ref_value:
            ratio_of_medians = value / ref_value
        if result.missing:
            status = "not installed"
        elif result.errors and value is None:
            status = "ERROR"
        elif row.best_of and ref_key is None:
            status = "n/a (no alternative installed)"
        elif row.target is None:
            status = row.note or "-"
        elif value is None:
            status = "no data"
        else:
            met = row.target.met(value, ratio)
            status = "n/a (no reference)" if met is None else "met" if met else "MISSED"
        out.append(
            RowResult(
                row,
                result.system,
                value,
                result.values(row.metric),
                ref_system,
                ref_value,
                ratio,
                status,
                ratio_of_medians,
                ref_key,
                round_ratios,
            )
        )
    return out


def _best_of(
    row: Row, results: dict[str, CaseResult]
) -> tuple[tuple[str, str] | None, CaseResult | None, list[float | None]]:
    """For a ``best_of`` row: the pair whose median is best (for the table), and the best
    value among the candidates in each round (for the paired ratio)."""
    pick = max if row.higher_is_better else min
    candidates = [
        (key, results[key[0]])
        for key in row.best_of
        if not results[key[0]].missing and results[key[0]].median(key[1]) is not None
    ]
    if not candidates:
        return None, None, []
    best_key, best_result = pick(candidates, key=lambda c: c[1].median(c[0][1]) or 0.0)
    rounds = max(len(r.rounds) for _, r in candidates)
    per_round: list[float | None] = []
    for i in range(rounds):
        values = [v for (_, m), r in candidates if (v := r.value(i, m)) is not None]
        per_round.append(pick(values) if values else None)
    return best_key, best_result, per_round


def _round_ratios(
    result: CaseResult, metric: str, references: Sequence[float | None]
) -> list[float]:
    """value / ``references[round]`` for every round that has both (the paired ratios)."""
    ratios = []
    for i, ref in enumerate(references):
        value = result.value(i, metric)
        if value is not None and ref:
            ratios.append(value / ref)
    return ratios
