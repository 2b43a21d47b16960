"""Which method is which, and how a report writes one table cell: method roles and levels (from
``eval_details.json`` or guessed from the names), metric columns and labels, ``mean ± h`` entries,
differences in points, and Markdown rows. Every table, verdict and section builds on these."""

from __future__ import annotations

from typing import Mapping, Sequence

from ..core.stats import format_interval
from ..evaluation.methods import ANSWER_ACCURACY, MethodKind, method_kind

__all__ = [
    "ROLE_ORDER",
    "method_info",
    "kind_of",
    "family_of",
    "adapter_group",
    "is_static",
    "first_method",
    "adapters_at",
    "column_labels",
    "token_mixed",
    "percent_scale",
    "fmt_entry",
    "fmt_delta",
    "signed",
    "metric_label",
    "metric_columns",
    "is_rate",
    "answer_metric",
    "answer_ks",
    "pass_ks",
    "best_of",
    "setting_label",
    "header",
    "table_row",
]


ROLE_ORDER = {"w/o budget": 0, "w/ budget": 1, "entropy-only": 2}
"""The order of an adapter level's columns by role (other roles after these, in results order)."""


_UNKNOWN = {"kind": "", "role": "", "level": "", "actions": []}
"""What the report knows of a method eval_details does not describe (never guessed from its name)."""


def method_info(results: Mapping, details: Mapping | None) -> dict[str, dict]:
    """``{method: {kind, role, level, actions}}`` as eval_details records them; a method it does not
    describe (results without details) is of no known kind, role or level: a static column."""
    known = (details or {}).get("methods", {})
    return {name: {**_UNKNOWN, **known.get(name, {})} for name in results}


def kind_of(entry: Mapping) -> MethodKind | None:
    """The method kind object of an info entry (:func:`evaluation.methods.method_kind`); None for a
    kind this library does not know (results written elsewhere)."""
    try:
        return method_kind(str(entry.get("kind", "")))
    except ValueError:
        return None


def family_of(entry: Mapping) -> str:
    """``static``, ``fixed rule`` or ``learned`` (``eval_details.json`` ``family``; without it:
    learned for an adapter kind, static otherwise)."""
    if entry.get("family"):
        return str(entry["family"])
    kind = kind_of(entry)
    return kind.family if kind is not None else "static"


def adapter_group(entry: Mapping) -> str | None:
    """Which verdicts an adapter gets (its kind's ``report_group``: ``sequence``, ``token`` or
    ``draft``); None for a baseline or a fixed rule (a ``rule`` adapter kind's points are of family
    ``fixed rule``)."""
    kind = kind_of(entry)
    if kind is None or family_of(entry) != "learned":  # a fixed rule's points: no verdicts
        return None
    return kind.report_group


def is_static(entry: Mapping) -> bool:
    """A static method (no learned policy, no rule over samples): Greedy, Best, Mixed, a static action."""
    return family_of(entry) == "static" and adapter_group(entry) is None


def first_method(info, **match) -> str | None:
    """The first method whose info has every ``key=value`` of ``match``; None if none has."""
    for name, i in info.items():
        if all(i.get(k) == v for k, v in match.items()):
            return name
    return None


def adapters_at(info, group: str) -> list[str]:
    """The adapters of ``group`` (:func:`adapter_group`: ``sequence``, ``token`` or ``draft``), in
    column order (``ROLE_ORDER``, then as listed)."""
    names = [n for n, i in info.items() if adapter_group(i) == group]
    return sorted(names, key=lambda n: (ROLE_ORDER.get(info[n]["role"], 9), list(info).index(n)))


def column_labels(names: Sequence[str], info) -> list[str]:
    """Each column's role as its label where the role is unique among ``names``, else the method's name."""
    roles = [info[n]["role"] for n in names]
    return [roles[i] if roles.count(roles[i]) == 1 and roles[i] else n for i, n in enumerate(names)]


def token_mixed(info) -> str | None:
    """The token table's Mixed: the per-token mixture (``per_token`` in eval_details), else a mixture
    of the token level, else any Mixed (for results that carry no ``per_token``)."""
    return (
        first_method(info, role="mixed", level="token", per_token=True)
        or first_method(info, role="mixed", level="token")
        or first_method(info, role="mixed")
    )


def is_rate(metric: str) -> bool:
    """pass@k or answer accuracy: a share of problems (printed in percent, higher is better)."""
    return metric.startswith(("pass@", ANSWER_ACCURACY))


def answer_metric(k: int) -> str:
    """The answer accuracy at B = k (``answer_accuracy@k``)."""
    return f"{ANSWER_ACCURACY}@{k}"


def answer_ks(metrics) -> list[int]:
    """The k of every ``answer_accuracy@k`` among ``metrics``, ascending."""
    return sorted(int(m.split("@")[1]) for m in metrics if m.startswith(ANSWER_ACCURACY + "@"))


def percent_scale(metric: str) -> float:
    """100 for pass@k and answer accuracy (printed in percent), 1 for other metrics."""
    return 100.0 if is_rate(metric) else 1.0


def fmt_entry(entry: Mapping | None, metric: str, bold: bool = False) -> str:
    """One cell: ``mean ± half-width`` of a results entry ('–' when absent), bold when asked."""
    if not entry:
        return "–"
    sc = percent_scale(metric)
    low, high = entry.get("ci_low"), entry.get("ci_high")
    text = format_interval(entry["mean"] * sc, None if low is None else low * sc, None if high is None else high * sc)
    return f"**{text}**" if bold else text


def fmt_delta(value: float, base: float, metric: str) -> str:
    """The absolute difference (points for pass@k). No relative gain: on a small base it reads as a
    large effect (+100% for 12.5 -> 25.0) whether or not the verdict finds the difference significant."""
    diff = (value - base) * percent_scale(metric)
    if not is_rate(metric):
        return signed(diff, 1)
    arrow = "▲" if round(diff, 2) > 0 else "▼" if round(diff, 2) < 0 else "="
    return f"{arrow} {signed(diff)}"


def signed(x: float, digits: int = 2) -> str:
    """``+1.23`` / ``-1.23``, and ``+0.00`` rather than ``-0.00``."""
    return f"{round(x, digits) + 0.0:+.{digits}f}"


def metric_label(metric: str) -> str:
    """A metric's column label: ``Pass@k``, ``Answer (B=k)``, or ``Mean length (tokens)``."""
    if metric.startswith("pass@"):
        return metric.replace("pass@", "Pass@")
    if metric.startswith(ANSWER_ACCURACY + "@"):
        return f"Answer (B={metric.split('@')[1]})"
    if metric == ANSWER_ACCURACY:
        return "Answer"
    return "Mean length (tokens)"


def metric_columns(results: Mapping) -> list[str]:
    """The metrics of the first method's results: pass@k by ascending k, answer accuracy by
    ascending k, then the others."""
    first = next(iter(results.values()), {})
    return ([f"pass@{k}" for k in pass_ks(first)] + [answer_metric(k) for k in answer_ks(first)]
            + [m for m in first if not is_rate(m)])


def pass_ks(metrics) -> list[int]:
    """The k of every ``pass@k`` among ``metrics``, ascending."""
    return sorted(int(m.split("@")[1]) for m in metrics if m.startswith("pass@"))


def best_of(results, names, metric) -> set[str]:
    """The columns with the highest mean (pass@k only: a longer generation is not better)."""
    cands = [n for n in names if results.get(n, {}).get(metric)]
    if not is_rate(metric) or not cands:
        return set()
    top = max(results[n][metric]["mean"] for n in cands)
    return {n for n in cands if results[n][metric]["mean"] >= top - 1e-12}


def setting_label(details: Mapping | None) -> str:
    """The tables' Setting cell from the evaluation's CoT ratio ('' when not recorded)."""
    ratio = (details or {}).get("config", {}).get("cot_ratio")
    if ratio is None:
        return ""
    return "w/o CoT" if ratio == 0 else "CoT" if ratio == 1 else f"mix CoT ({ratio:g})"


def header(label: str, name: str) -> str:
    """A column header: the short label, and the method's own name where it says more (plain Markdown)."""
    return name if name.startswith(label) else f"{label} ({name})"


def table_row(cells: Sequence[str]) -> str:
    """One Markdown table row (``|`` inside a cell escaped)."""
    return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"
