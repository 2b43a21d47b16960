"""Tables for mixed-domain training and out-of-distribution evaluation, from several
evaluations of the same adapters.

Input everywhere: ``evaluations``, a mapping ``"task:split"`` -> ``(results, details)`` as
``evaluate`` writes them (``results.json``, ``eval_details.json``), where ``details["config"]["ood"]``
holds each adapter's training task (``evaluation.ood``). Methods are matched across evaluations by
what they are (level, variant, and whether they were trained on the evaluated domain alone, on a
mix containing it, or on something else), not by name.

- :func:`mixed_domain_table`: the paper's mixed-domain table side by side: for each domain's own
  test split, Best, Mixed, the single-domain adapters and the mixed-domain adapters, with the
  difference to Best and its paired 95% interval;
- :func:`gain_table`: single-domain gain vs mixed gain over Best, and mixed minus single (paired);
- :func:`ood_table`: every OOD evaluation of an adapter (held-out families, another task), its gain
  over Best there and its in-distribution gain for comparison;
- :func:`pattern_notes`: whether the paper's pattern holds (mixed gains smaller than single-domain
  gains; OOD gains kept), counted over the cells above.

Every figure is computed from the evaluations; nothing is fixed in advance.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Mapping, NamedTuple, Sequence

from ..core.stats import format_interval
from ..evaluation.ood import training_domains
from .verdicts import compare

__all__ = [
    "Evaluations",
    "AdapterRow",
    "adapter_rows",
    "mixed_domain_table",
    "gain_table",
    "ood_table",
    "pattern_notes",
    "domains_markdown",
    "load_evaluations",
    "PAPER_MIXED",
    "paper_mixed_table",
]

Evaluations = Mapping[str, tuple[Mapping, Mapping]]
"""``"task:split"`` -> ``(results, details)``."""

VARIANT_ORDER = {"sequence": 0, "token": 1}
ROLE_ORDER = {"w/o budget": 0, "w/ budget": 1, "entropy-only": 2}


class AdapterRow(NamedTuple):
    """One adapter column of an evaluation, described by what it is."""

    name: str
    """Method name in the evaluation."""
    level: str
    """``sequence`` or ``token``."""
    role: str
    """``w/ budget``, ``w/o budget`` or ``entropy-only``."""
    train_task: str
    """What it was trained on (``adapter.json`` ``task``)."""
    trained: str
    """``single`` (on the evaluated task alone), ``mix`` (a mix containing it) or ``other``."""
    ood: bool | None
    """Whether this evaluation is out of distribution for it."""
    label: str
    """``train task -> eval task[:split]``."""


def load_evaluations(directory: str | Path) -> dict[str, tuple[dict, dict]]:
    """The evaluations of a domains study directory (its ``results.json`` and ``eval_details.json``,
    both keyed ``"task:split"``), e.g. ``docs/domains``, for :func:`domains_markdown`."""
    directory = Path(directory)
    results = json.loads((directory / "results.json").read_text())
    details = json.loads((directory / "eval_details.json").read_text())
    missing = sorted(set(results) - set(details))
    if missing:
        raise ValueError(f"{directory}: eval_details.json has no details for {missing}")
    return {key: (results[key], details[key]) for key in results}


def _split_key(key: str) -> tuple[str, str]:
    task, _, split = key.rpartition(":")
    return (task, split) if task else (key, "test")


def adapter_rows(key: str, details: Mapping) -> list[AdapterRow]:
    """The adapters of the evaluation ``key`` (``"task:split"``), in table order."""
    task, _ = _split_key(key)
    labels = (details.get("config") or {}).get("ood") or {}
    methods = details.get("methods") or {}
    rows = []
    for name, label in labels.items():
        info = methods.get(name, {})
        train = label.get("train_task", "")
        domains = training_domains(train)
        trained = "single" if domains == [task] else "mix" if task in domains else "other"
        rows.append(
            AdapterRow(name, info.get("level", "sequence"), info.get("role", ""), train, trained, label.get("ood"),
                       label.get("label", ""))
        )
    return sorted(rows, key=lambda r: (VARIANT_ORDER.get(r.level, 9), ROLE_ORDER.get(r.role, 9), r.trained))


def _metrics(evaluations: Evaluations, metrics: Sequence[str] | None) -> list[str]:
    if metrics:
        return list(metrics)
    results = next(iter(evaluations.values()))[0]
    return [m for m in next(iter(results.values())) if m.startswith("pass@")]


def _value(results: Mapping, name: str, metric: str) -> str:
    entry = results.get(name, {}).get(metric)
    if entry is None:
        return "-"
    low, high = entry.get("ci_low"), entry.get("ci_high")
    return format_interval(
        entry["mean"] * 100, None if low is None else low * 100, None if high is None else high * 100
    )


def _delta(results, details, name: str, baseline: str, metric: str) -> dict | None:
    if name not in results or baseline not in results:
        return None
    conf = (details.get("config") or {}).get("confidence", 0.95)
    return compare(results, details, name, baseline, metric, conf)


def _delta_text(c: Mapping | None) -> str:
    if c is None:
        return "-"
    text = f"{c['diff'] * 100:+.1f}"
    if not math.isnan(c["low"]):
        text += f" [{c['low'] * 100:+.1f}, {c['high'] * 100:+.1f}]"
    if not math.isnan(c["low"]) and c["low"] > 0:
        text += " ✔"
    elif not math.isnan(c["high"]) and c["high"] < 0:
        text += " ✘"
    return text


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _variant(r: AdapterRow) -> str:
    return f"{'Seq' if r.level == 'sequence' else 'Token'} {r.role}"


def _in_domain(evaluations: Evaluations, domains: Sequence[str]) -> list[tuple[str, str]]:
    """``(domain, key)`` of each domain's own test evaluation present in ``evaluations``."""
    return [(d, f"{d}:test") for d in domains if f"{d}:test" in evaluations]


def _row_keys(evaluations: Evaluations, cells: list[tuple[str, str]]) -> list[tuple[str, str, str]]:
    keys: dict[tuple[str, str, str], None] = {}
    for _, key in cells:
        for r in adapter_rows(key, evaluations[key][1]):
            if r.trained in ("single", "mix"):
                keys[(r.level, r.role, r.trained)] = None
    return sorted(keys, key=lambda k: (VARIANT_ORDER.get(k[0], 9), ROLE_ORDER.get(k[1], 9), k[2] != "single"))


def _find(evaluations: Evaluations, key: str, level: str, role: str, trained: str) -> AdapterRow | None:
    for r in adapter_rows(key, evaluations[key][1]):
        if (r.level, r.role, r.trained) == (level, role, trained):
            return r
    return None


def mixed_domain_table(
    evaluations: Evaluations, domains: Sequence[str], metrics: Sequence[str] | None = None, baseline: str = "Best"
) -> str:
    """Markdown: per metric, Best / Mixed / single-domain / mixed-domain adapters on each domain's own
    test split, value ± CI and Δ vs ``baseline`` with its paired interval. "" without those evaluations."""
    cells = _in_domain(evaluations, domains)
    if not cells:
        return ""
    header = ["metric", "method", "trained on"]
    for d, _ in cells:
        header += [f"{d} (%)", f"Δ vs {baseline} [95% CI]"]
    lines = [_row(header), _row(["---", "---", "---"] + ["---:"] * (2 * len(cells)))]
    for metric in _metrics(evaluations, metrics):
        label = metric.replace("pass@", "Pass@")
        for static in ("Best", "Mixed"):
            row = [label, static, "-"]
            for _, key in cells:
                results, details = evaluations[key]
                row += [_value(results, static, metric),
                        "" if static == baseline else _delta_text(_delta(results, details, static, baseline, metric))]
            lines.append(_row(row))
        for level, role, trained in _row_keys(evaluations, cells):
            found = [(_find(evaluations, key, level, role, trained), key) for _, key in cells]
            name = _variant(AdapterRow("", level, role, "", trained, None, ""))
            where = ", ".join(dict.fromkeys(r.train_task for r, _ in found if r)) if trained == "mix" else "its domain"
            row = [label, name, f"{trained}: {where}"]
            for r, key in found:
                results, details = evaluations[key]
                row += ["-", "-"] if r is None else [
                    _value(results, r.name, metric), _delta_text(_delta(results, details, r.name, baseline, metric))
                ]
            lines.append(_row(row))
    return "\n".join(lines)


def _mix_minus_single(evaluations, key, single: AdapterRow, mix: AdapterRow, metric: str) -> dict | None:
    results, details = evaluations[key]
    return _delta(results, details, mix.name, single.name, metric)


def gain_table(
    evaluations: Evaluations, domains: Sequence[str], metrics: Sequence[str] | None = None, baseline: str = "Best"
) -> str:
    """Markdown: for each adapter variant, domain and metric, the gain over ``baseline`` of the
    single-domain adapter, of the mixed-domain adapter, and mixed minus single (paired per problem)."""
    cells = _in_domain(evaluations, domains)
    variants = {(lv, rl) for lv, rl, _ in _row_keys(evaluations, cells)}
    lines = [
        _row(["metric", "adapter", "domain", f"single − {baseline}", f"mix − {baseline}", "mix − single"]),
        _row(["---", "---", "---", "---:", "---:", "---:"]),
    ]
    count = 0
    for metric in _metrics(evaluations, metrics):
        for level, role in sorted(variants, key=lambda v: (VARIANT_ORDER.get(v[0], 9), ROLE_ORDER.get(v[1], 9))):
            for d, key in cells:
                single = _find(evaluations, key, level, role, "single")
                mix = _find(evaluations, key, level, role, "mix")
                if single is None or mix is None:
                    continue
                results, details = evaluations[key]
                lines.append(_row([
                    metric.replace("pass@", "Pass@"),
                    _variant(single),
                    d,
                    _delta_text(_delta(results, details, single.name, baseline, metric)),
                    _delta_text(_delta(results, details, mix.name, baseline, metric)),
                    _delta_text(_mix_minus_single(evaluations, key, single, mix, metric)),
                ]))
                count += 1
    return "\n".join(lines) if count else ""


PAPER_MIXED: dict[tuple[str, str], dict[str, tuple[float, float]]] = {
    ("MATH", "Pass@1"): {"single": (71.70, 72.90), "mix": (72.00, 74.20)},
    ("MATH", "Pass@8"): {"single": (76.70, 78.46), "mix": (76.30, 78.00)},
    ("CodeContests", "Pass@1"): {"single": (11.43, 14.50), "mix": (11.80, 13.70)},
    ("CodeContests", "Pass@8"): {"single": (22.80, 23.10), "mix": (14.50, 19.70)},
}
"""The paper's sequence-level numbers without CoT (its main tables, %): (Best, adapter w/ budget) of the
single-domain tables (MATH, CodeContests) and of the mixed-domain table (``table:seq-mixed``)."""


def paper_mixed_table() -> str:
    """Markdown: the paper's single-domain and mixed-domain gains of the w/-budget sequence adapter
    over Best (from :data:`PAPER_MIXED`), for side-by-side reading with :func:`gain_table`."""
    lines = [_row(["domain", "metric", "single: Best", "single: adapter", "single − Best", "mix: Best", "mix: adapter",
                   "mix − Best"]), _row(["---", "---"] + ["---:"] * 6)]
    for (domain, metric), v in PAPER_MIXED.items():
        (sb, sa), (mb, ma) = v["single"], v["mix"]
        lines.append(_row([domain, metric, f"{sb:.2f}", f"{sa:.2f}", f"{sa - sb:+.2f}", f"{mb:.2f}", f"{ma:.2f}",
                           f"{ma - mb:+.2f}"]))
    return "\n".join(lines)


def _ood_entries(evaluations: Evaluations):
    for key, (_, details) in evaluations.items():
        for r in adapter_rows(key, details):
            if r.ood:
                yield key, r


def _in_distribution_gain(
    evaluations: Evaluations, key: str, r: AdapterRow, metric: str, baseline: str
) -> dict | None:
    """The gain over ``baseline`` of the adapter ``r`` on the test split of its own training task:
    the evaluated task's when ``r`` trained on it (``arithmetic:ood``: ``arithmetic:test``), else
    the first of its training domains that was evaluated."""
    domains = training_domains(r.train_task)
    task, _ = _split_key(key)
    for d in sorted(domains, key=lambda d: d != task):
        key = f"{d}:test"
        if key not in evaluations:
            continue
        results, details = evaluations[key]
        for other in adapter_rows(key, details):
            if (other.level, other.role, other.train_task) == (r.level, r.role, r.train_task):
                return _delta(results, details, other.name, baseline, metric)
    return None


def ood_table(evaluations: Evaluations, metrics: Sequence[str] | None = None, baseline: str = "Best") -> str:
    """Markdown: every adapter evaluated out of distribution (``train -> eval``), pass@k there, its
    gain over that evaluation's ``baseline`` (paired), and its gain in distribution for comparison."""
    entries = list(_ood_entries(evaluations))
    if not entries:
        return ""
    lines = [
        _row(["metric", "OOD (train task -> eval)", "adapter", "pass@k (%)", f"{baseline} (%)",
              f"Δ vs {baseline} OOD [95% CI]", f"Δ vs {baseline} in distribution"]),
        _row(["---", "---", "---", "---:", "---:", "---:", "---:"]),
    ]
    for metric in _metrics(evaluations, metrics):
        for key, r in entries:
            results, details = evaluations[key]
            lines.append(_row([
                metric.replace("pass@", "Pass@"),
                f"`{r.label}`",
                _variant(r),
                _value(results, r.name, metric),
                _value(results, baseline, metric),
                _delta_text(_delta(results, details, r.name, baseline, metric)),
                _delta_text(_in_distribution_gain(evaluations, key, r, metric, baseline)),
            ]))
    return "\n".join(lines)


def _sign(c: Mapping | None) -> str:
    if c is None:
        return "missing"
    if not math.isnan(c["low"]) and c["low"] > 0:
        return "better"
    if not math.isnan(c["high"]) and c["high"] < 0:
        return "worse"
    return "ahead" if c["diff"] > 0 else "behind" if c["diff"] < 0 else "tie"


def _mixed_cells(evaluations: Evaluations, domains: Sequence[str], metrics, baseline: str, level: str):
    """(single − baseline, mix − baseline, mix − single) per (variant of ``level``, domain, metric)."""
    cells = _in_domain(evaluations, domains)
    for metric in _metrics(evaluations, metrics):
        for lv, role in dict.fromkeys((lv, rl) for lv, rl, _ in _row_keys(evaluations, cells)):
            if lv != level:
                continue
            for _, key in cells:
                single = _find(evaluations, key, lv, role, "single")
                mix = _find(evaluations, key, lv, role, "mix")
                if single is None or mix is None:
                    continue
                results, details = evaluations[key]
                yield (_delta(results, details, single.name, baseline, metric),
                       _delta(results, details, mix.name, baseline, metric),
                       _mix_minus_single(evaluations, key, single, mix, metric))


def _mixed_note(evaluations, domains, metrics, baseline: str, level: str) -> str | None:
    cells = list(_mixed_cells(evaluations, domains, metrics, baseline, level))
    if not cells:
        return None
    n = len(cells)
    single_gain = sum(s["diff"] > 0 for s, _, _ in cells)
    mix_gain = sum(m["diff"] > 0 for _, m, _ in cells)
    smaller = sum(m["diff"] < s["diff"] for s, m, _ in cells)
    larger = sum(m["diff"] > s["diff"] for s, m, _ in cells)
    worse = sum(_sign(d) == "worse" for _, _, d in cells)
    better = sum(_sign(d) == "better" for _, _, d in cells)
    if single_gain <= n / 2:
        verdict = (f"**cannot be confirmed**: the single-domain {level} adapters beat {baseline} in only "
                   f"{single_gain}/{n} cells, so there is little single-domain gain for the mix to shrink")
    elif smaller > n / 2 and mix_gain > n / 2:
        verdict = "**holds**"
    else:
        verdict = "**does not hold**"
    return (
        f"- **Mixed vs single-domain, {level} level** ({n} cells: variant × domain × metric): gain over {baseline} "
        f"positive in {single_gain}/{n} single-domain and {mix_gain}/{n} mixed-domain cells; the mixed gain is "
        f"smaller in {smaller}/{n} and larger in {larger}/{n} (paired mix − single significantly below zero in "
        f"{worse}, above zero in {better}). The paper's pattern (mixed gains positive but smaller than "
        f"single-domain gains) {verdict} here."
    )


def _ood_note(evaluations, metrics, baseline: str) -> str | None:
    cells = []
    for metric in _metrics(evaluations, metrics):
        for key, r in _ood_entries(evaluations):
            results, details = evaluations[key]
            ood = _delta(results, details, r.name, baseline, metric)
            if ood is not None:
                cells.append((ood, _in_distribution_gain(evaluations, key, r, metric, baseline)))
    if not cells:
        return None
    n = len(cells)
    with_gain = [(o, i) for o, i in cells if i is not None and i["diff"] > 0]
    kept = sum(o["diff"] >= 0 for o, _ in with_gain)
    nonneg = sum(o["diff"] >= 0 for o, _ in cells)
    better = sum(_sign(o) == "better" for o, _ in cells)
    worse = sum(_sign(o) == "worse" for o, _ in cells)
    if not with_gain:
        verdict = "**cannot be tested**: no adapter had an in-distribution gain to keep"
    elif kept > len(with_gain) / 2 and not any(_sign(o) == "worse" for o, _ in with_gain):
        verdict = "**holds**"
    else:
        verdict = "**does not hold**"
    return (
        f"- **Out of distribution** ({n} cells: adapter × OOD evaluation × metric): gain over {baseline} ≥ 0 in "
        f"{nonneg}/{n} (significantly better in {better}, significantly worse in {worse}). Of the {len(with_gain)} "
        f"cells whose adapter gained over {baseline} in distribution, the OOD gain stays ≥ 0 in {kept}. The "
        f"paper's pattern (OOD gains kept) {verdict} here."
    )


def pattern_notes(
    evaluations: Evaluations, domains: Sequence[str], metrics: Sequence[str] | None = None, baseline: str = "Best"
) -> list[str]:
    """The closing note: does the paper's pattern hold here? Counted over cells, per adapter level:
    (1) mixed-domain adapters gain over ``baseline``, but less than single-domain adapters (the paper's
    mixed table, sequence level); (2) adapters that gain in distribution keep a gain ≥ 0 out of
    distribution. A pattern that has nothing to act on (no single-domain gain, no in-distribution
    gain) is reported as not testable rather than as holding."""
    notes = [_mixed_note(evaluations, domains, metrics, baseline, level) for level in ("sequence", "token")]
    notes.append(_ood_note(evaluations, metrics, baseline))
    return [n for n in notes if n]


def domains_markdown(
    evaluations: Evaluations, domains: Sequence[str], metrics: Sequence[str] | None = None, baseline: str = "Best"
) -> str:
    """The mixed-domain and OOD sections of a report (headings, tables, notes), for the demo or
    reproduce report to include; "" when the evaluations hold neither."""
    parts = []
    mixed = mixed_domain_table(evaluations, domains, metrics, baseline)
    if mixed:
        parts += ["## Mixed-domain training", "", mixed, "",
                  f"Δ: adapter minus {baseline} in points, with the 95% interval of the paired per-problem difference; "
                  "✔ / ✘: the interval excludes zero. 'single' adapters were trained on the evaluated domain alone, "
                  "'mix' adapters on the balanced mixture.", ""]
        gains = gain_table(evaluations, domains, metrics, baseline)
        if gains:
            parts += ["### Single-domain vs mixed-domain gains", "", gains, ""]
        parts += ["### The paper's mixed-domain table, for comparison", "", paper_mixed_table(), "",
                  "Sequence-level adapter w/ budget, without CoT (the paper's single-domain MATH and CodeContests "
                  "tables and its mixed-domain table). Even there the mixed gain is smaller in only 2 of these 4 "
                  "cells (MATH Pass@8, CodeContests Pass@1).", ""]
    ood = ood_table(evaluations, metrics, baseline)
    if ood:
        parts += ["## Out-of-distribution evaluation", "", ood, "",
                  f"OOD: the adapter is scored on a task it was not trained on, or on held-out families (`:ood`). "
                  f"{baseline} is the best static action of the *evaluated* task's validation split where there is "
                  "one (see the setup).", ""]
    notes = pattern_notes(evaluations, domains, metrics, baseline)
    if notes:
        parts += ["## Does the paper's pattern hold?", "", *notes, ""]
    return "\n".join(parts)
