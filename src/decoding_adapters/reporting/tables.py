"""The report's tables of scores: the paper-shaped sequence and token tables (Δ vs Best / Greedy),
every method by every metric, the paper-style binomial intervals, and the across-seed spread."""

from __future__ import annotations

from typing import Mapping

from .cells import (
    adapter_group,
    adapters_at,
    best_of,
    column_labels,
    family_of,
    first_method,
    fmt_delta,
    fmt_entry,
    header,
    method_info,
    metric_columns,
    metric_label,
    setting_label,
    table_row,
    token_mixed,
)

__all__ = ["sequence_table", "token_table", "all_methods_table", "paper_interval_table", "seed_table"]


def sequence_table(results: Mapping, details: Mapping | None = None) -> str:
    """Paper-style markdown table: Best / Mixed vs sequence-level adapters, Δ vs Best. '' if no adapter."""
    info = method_info(results, details)
    adapters = adapters_at(info, "sequence")
    if not adapters:
        return ""
    best = first_method(info, role="best") or first_method(info, role="greedy")
    mixed = first_method(info, role="mixed", level="static") or first_method(info, role="mixed")
    static = [n for n in (best, mixed) if n]
    cols = static + adapters
    labels = [f"{'Best' if n == best and info[n]['role'] == 'best' else column_labels([n], info)[0].capitalize()}"
              for n in static] + column_labels(adapters, info)
    head = ["Metric", "Setting"] + [header(lab, n) for lab, n in zip(labels, cols)]
    lines = [table_row(head), table_row(["---", "---"] + ["---:"] * len(cols))]
    for metric in metric_columns(results):
        top = best_of(results, cols, metric)
        lines.append(table_row([metric_label(metric), setting_label(details)] +
                          [fmt_entry(results[n].get(metric), metric, n in top) for n in cols]))
        if best and results[best].get(metric):
            base = results[best][metric]["mean"]
            lines.append(table_row(["", f"Δ vs {best}"] + [""] * len(static) +
                              [fmt_delta(results[n][metric]["mean"], base, metric) if results[n].get(metric) else ""
                               for n in adapters]))
    return "\n".join(lines)


def _token_statics(info) -> list[str]:
    """The token table's static columns: Greedy, per-token Mixed, best token action, the per-sequence
    mixture of the token actions, then any single token-action rows."""
    named = [
        first_method(info, role="greedy"),
        token_mixed(info),
        first_method(info, role="best token action"),
        first_method(info, role="mixed per sequence"),
    ]
    rows = [n for n, i in info.items() if i.get("role") == "token action"]
    return list(dict.fromkeys(n for n in named + rows if n))


_TOKEN_LABELS = {
    "greedy": "Greedy",
    "mixed": "Mixed (per token)",
    "best token action": "Best token action",
    "mixed per sequence": "Mixed (per sequence)",
}


def token_table(results: Mapping, details: Mapping | None = None) -> str:
    """Paper-style markdown table: Greedy / per-token Mixed / best token action vs token-level adapters,
    each adapter with a Δ vs Greedy column."""
    info = method_info(results, details)
    adapters = adapters_at(info, "token")
    if not adapters:
        return ""
    greedy = first_method(info, role="greedy")
    base = greedy or first_method(info, role="best")
    static = _token_statics(info)
    head = ["Metric", "Setting"]
    for n in static:
        label = _TOKEN_LABELS.get(info[n]["role"], n)
        if info[n]["role"] == "mixed" and (info[n].get("level") != "token" or info[n].get("per_token") is False):
            label = "Mixed (per sequence)" if info[n].get("per_token") is False else "Mixed"
        head.append(header(label, n))
    for lab, n in zip(column_labels(adapters, info), adapters):
        head += [header(lab, n), "Δ" if base else ""]
    lines = [table_row(head), table_row(["---", "---"] + ["---:"] * (len(head) - 2))]
    for metric in metric_columns(results):
        top = best_of(results, static + adapters, metric)
        cells = [metric_label(metric), setting_label(details)] + [fmt_entry(results[n].get(metric), metric, n in top)
                                                               for n in static]
        for n in adapters:
            cells.append(fmt_entry(results[n].get(metric), metric, n in top))
            ok = base and results[n].get(metric) and results[base].get(metric)
            cells.append(fmt_delta(results[n][metric]["mean"], results[base][metric]["mean"], metric) if ok else "")
        lines.append(table_row(cells))
    return "\n".join(lines)


def all_methods_table(results: Mapping, details: Mapping | None = None) -> str:
    """Every method (rows) by every metric (columns): pass@k (a verifier picks among k answers), the
    accuracy of the one answer it returns at B = k, and the mean length."""
    metrics = metric_columns(results)
    info = method_info(results, details)
    lines = [
        table_row(["Method", "Family", "Kind"] + [metric_label(m) for m in metrics]),
        table_row(["---", "---", "---"] + ["---:"] * len(metrics)),
    ]
    tops = {m: best_of(results, list(results), m) for m in metrics}
    for name, res in results.items():
        adapter = adapter_group(info[name]) is not None
        kind = info[name]["kind"] + (f" ({info[name]['role']})" if adapter and info[name].get("role") else "")
        lines.append(table_row([name, family_of(info[name]), kind]
                               + [fmt_entry(res.get(m), m, name in tops[m]) for m in metrics]))
    return "\n".join(lines)


def paper_interval_table(results: Mapping) -> str:
    """Every method by pass@k as ``mean ± h`` with h the paper-style half-width (normal-approximation
    binomial over the distinct problems, ``binomial_halfwidth`` and ``outcomes`` in results.json); ''
    when the results carry none."""
    metrics = [m for m in metric_columns(results) if m.startswith("pass@")]
    if not any("binomial_halfwidth" in (res.get(m) or {}) for res in results.values() for m in metrics):
        return ""
    lines = [table_row(["Method"] + [metric_label(m) for m in metrics] + ["Outcomes"]),
             table_row(["---"] + ["---:"] * (len(metrics) + 1))]
    for name, res in results.items():
        cells = [name]
        for m in metrics:
            e = res.get(m) or {}
            h = e.get("binomial_halfwidth")
            cells.append("–" if h is None else f"{e['mean'] * 100:.2f} ± {h * 100:.2f}")
        outcomes = next((res[m].get("outcomes") for m in metrics if res.get(m)), None)
        lines.append(table_row(cells + ["–" if outcomes is None else str(outcomes)]))
    return "\n".join(lines)


def seed_table(results: Mapping, details: Mapping | None) -> str:
    """Across-seed spread: the mean over problems computed separately for each seed."""
    summary = (details or {}).get("summary", {})
    metrics = [m for m in metric_columns(results) if m.startswith("pass@")]
    metrics = metrics[:1] + metrics[-1:] if len(metrics) > 1 else metrics
    seeds = max((len(s.get("seed_means", ())) for per in summary.values() for s in per.values()
                 if isinstance(s, Mapping)), default=0)
    if not metrics or seeds < 2:  # one seed has no spread to show
        return ""
    lines = [
        table_row(["Method"] + [f"{metric_label(m)}: per seed (sd)" for m in metrics]),
        table_row(["---"] + ["---"] * len(metrics)),
    ]
    for name in results:
        cells = [name]
        for m in metrics:
            s = summary.get(name, {}).get(m)
            cells.append(
                "–"
                if not s
                else " / ".join(f"{v * 100:.1f}" for v in s["seed_means"]) + f" (sd {s['seed_std'] * 100:.2f})"
            )
        lines.append(table_row(cells))
    return "\n".join(lines)
