"""The plain-text table of an evaluation's results (``evaluate`` prints it)."""

from __future__ import annotations

from typing import Sequence

from ..core.stats import format_interval
from .methods import ANSWER_ACCURACY

__all__ = ["format_table"]


def _cell(entry: dict | None, metric: str) -> str:
    if entry is None:
        return "-"
    scale = 100.0 if metric.startswith(("pass@", ANSWER_ACCURACY)) else 1.0
    low, high = entry.get("ci_low"), entry.get("ci_high")
    return format_interval(
        entry["mean"] * scale, None if low is None else low * scale, None if high is None else high * scale
    )


def format_table(results: dict, metrics: Sequence[str] | None = None) -> str:
    """Plain-text table: one row per method, pass@k in percent (mean ± CI half-width, or mean [low, high]
    where the interval was clipped to [0, 100])."""
    metrics = list(metrics or next(iter(results.values())).keys())
    header = ["method"] + [m + (" (%)" if m.startswith(("pass@", ANSWER_ACCURACY)) else "") for m in metrics]
    rows = [[name] + [_cell(res.get(m), m) for m in metrics] for name, res in results.items()]
    widths = [max(len(r[c]) for r in [header] + rows) for c in range(len(header))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in rows]
    return "\n".join(lines)
