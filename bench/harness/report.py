"""The results as a markdown table and as JSON."""

from __future__ import annotations

import math
from typing import Any

from .runner import CaseResult, RowResult

__all__ = ["format_ratio", "format_value", "markdown_table", "to_json"]

HEADER = ("Workload", "System", "Value", "Unit", "Reference", "Ratio", "Target", "Status")


def format_value(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "-"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.3f}" if abs(value) < 1 else f"{value:.2f}"


def format_ratio(ratio: float | None, round_ratios: list[float]) -> str:
    """The ratio (the median of the rounds' paired ratios) and, when the rounds differ,
    their range: ``0.86x (0.75-0.98)``."""
    if ratio is None:
        return "-"
    low, high = (
        (f"{min(round_ratios):.2f}", f"{max(round_ratios):.2f}") if round_ratios else ("", "")
    )
    return f"{ratio:.2f}x" if low == high else f"{ratio:.2f}x ({low}-{high})"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown_table(results: list[RowResult]) -> str:
    """One line per row; a missed target is shown as **MISSED**."""
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    for r in results:
        status = f"**{r.status}**" if r.status in ("MISSED", "ERROR") else r.status
        cells = (
            r.row.label,
            r.system,
            format_value(r.value),
            r.row.unit,
            r.reference_system or "-",
            format_ratio(r.ratio, r.round_ratios),
            "-" if r.row.target is None else r.row.target.describe(r.row.unit),
            status,
        )
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines)


def _num(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) else value


def to_json(
    meta: dict[str, Any], results: list[RowResult], cases: dict[str, CaseResult]
) -> dict[str, Any]:
    """A JSON-ready document: run metadata, rows, and every case's per-round metrics."""
    return {
        "meta": meta,
        "rows": [
            {
                "workload": r.row.workload,
                "label": r.row.label,
                "case": r.row.case,
                "system": r.system,
                "metric": r.row.metric,
                "value": _num(r.value),
                "unit": r.row.unit,
                "rounds": [_num(v) for v in r.rounds],
                "reference": None
                if r.reference_key is None
                else {
                    "case": r.reference_key[0],
                    "metric": r.reference_key[1],
                    "system": r.reference_system,
                    "value": _num(r.reference_value),
                    "best_of": [list(k) for k in r.row.best_of] or None,
                },
                "ratio": _num(r.ratio),
                "round_ratios": r.round_ratios,
                "ratio_of_medians": _num(r.ratio_of_medians),
                "target": None
                if r.row.target is None
                else {
                    "on": r.row.target.on,
                    "op": r.row.target.op,
                    "bound": r.row.target.bound,
                    "text": r.row.target.describe(r.row.unit),
                },
                "status": r.status,
            }
            for r in results
        ],
        "cases": {
            key: {
                "system": c.system,
                "rounds": [
                    None if m is None else {k: _num(v) for k, v in m.items()} for m in c.rounds
                ],
                "errors": c.errors,
                "missing": c.missing,
            }
            for key, c in cases.items()
        },
    }
