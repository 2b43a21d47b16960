"""Accuracy per compute: each method's answer accuracy (the one answer it returns, no verifier)
and pass@k against the decodes and tokens it spends per problem, who leads at each compute level
(answer accuracy at matched compute only), and what the evaluation itself cost."""

from __future__ import annotations

import math
import statistics
from typing import Mapping, Sequence

from ..core.stats import mean_ci
from .cells import answer_metric, fmt_entry, is_static, method_info, metric_label, pass_ks, table_row
from .verdicts import COMPUTE_MATCH, answer_at, answer_curve, outcome_of, paired_difference, per_problem_means

__all__ = ["COMPUTE_TOLERANCE", "compute_points", "answer_points", "compute_table", "compute_verdicts",
           "compute_section", "cost_table"]


COMPUTE_TOLERANCE = 1e-6
"""Decodes per problem within this of each other count as equal compute."""


def compute_points(results: Mapping, details: Mapping | None) -> list[dict]:
    """One point per (method, pass@k) whose compute was measured (``eval_details.json``
    ``methods[name]["decodes_per_problem"]`` / ``["tokens_per_problem"]``): ``{method, k, metric,
    mean, low, high, decodes, tokens}``; [] for an evaluation that did not measure it."""
    known = (details or {}).get("methods", {})
    points = []
    for name, res in results.items():
        decodes, tokens = known.get(name, {}).get("decodes_per_problem"), known.get(name, {}).get("tokens_per_problem")
        if not decodes or not tokens:
            continue
        for k in pass_ks(res):
            entry = res.get(f"pass@{k}")
            if entry and str(k) in decodes and str(k) in tokens:
                points.append({"method": name, "k": k, "metric": f"pass@{k}", "mean": entry["mean"],
                               "low": entry.get("ci_low"), "high": entry.get("ci_high"),
                               "decodes": float(decodes[str(k)]), "tokens": float(tokens[str(k)])})
    return points


def answer_points(results: Mapping, details: Mapping | None) -> list[dict]:
    """One point per (method, B) of the answer each method returns: ``{method, line (the entry's
    ``curve`` label: the settings of one rule drawn as one line; else the method), k (B; None for a
    method with one setting), metric, mean, low, high, decodes, tokens}``, for every method of
    ``eval_details.json`` (a fixed rule added there without a results entry included; its
    interval from its per-problem values); [] where compute was not measured."""
    known = (details or {}).get("methods", {})
    confidence = (details or {}).get("config", {}).get("confidence", 0.95)
    points = []
    for name in dict.fromkeys([*results, *known]):
        tokens = known.get(name, {}).get("tokens_per_problem") or {}
        for decodes, metric in answer_curve(details, name):
            entry = results.get(name, {}).get(metric)
            if not entry:
                values = per_problem_means(details, name, metric)
                mean, low, high = mean_ci(values, confidence) if len(values) > 1 else (values[0], None, None)
                entry = {"mean": mean, "ci_low": low, "ci_high": high}
            key = metric.split("@")[1] if "@" in metric else "answer"
            points.append({"method": name, "line": known.get(name, {}).get("curve") or name,
                           "k": int(key) if key != "answer" else None, "metric": metric,
                           "mean": entry["mean"], "low": entry.get("ci_low"), "high": entry.get("ci_high"),
                           "decodes": decodes, "tokens": float(tokens.get(key, math.nan))})
    return points


def _compute_cell(values: Sequence[float], digits: int) -> str:
    return " · ".join(f"{v:.{digits}f}" for v in values)


def compute_table(results: Mapping, details: Mapping | None) -> str:
    """Markdown: every method's answer accuracy and pass@k next to what it costs per problem at
    each B = k (decodes and generated tokens; ``k=1 · 2 · ...``); '' when compute was not measured."""
    points = compute_points(results, details)
    if not points:
        return ""
    ks = sorted({p["k"] for p in points})
    answers = [k for k in ks if any(answer_metric(k) in results[p["method"]] for p in points)]
    label = " · ".join(map(str, ks))
    lines = [table_row(["Method"] + [metric_label(answer_metric(k)) for k in answers]
                       + [metric_label(f"pass@{k}") for k in ks]
                       + [f"decodes / problem (B = k = {label})", f"tokens / problem (B = k = {label})"]),
             table_row(["---"] + ["---:"] * (len(answers) + len(ks) + 2))]
    for name in dict.fromkeys(p["method"] for p in points):
        own = {p["k"]: p for p in points if p["method"] == name}
        cells = [fmt_entry(results[name].get(answer_metric(k)), answer_metric(k)) for k in answers]
        cells += [fmt_entry(results[name].get(f"pass@{k}"), f"pass@{k}") if k in own else "–" for k in ks]
        decodes = _compute_cell([own[k]["decodes"] for k in ks if k in own], 2)
        tokens = _compute_cell([own[k]["tokens"] for k in ks if k in own], 1)
        lines.append(table_row([name] + cells + [decodes, tokens]))
    return "\n".join(lines)


def compute_verdicts(results: Mapping, details: Mapping | None, confidence: float | None = None) -> list[str]:
    """One line per compute level: which method's answer leads at that many decodes per problem,
    every method taken at the same compute (its own point within ``verdicts.COMPUTE_MATCH``, or its
    answer curve interpolated there; a method whose curve does not reach that compute is left out),
    and by how much it leads the next (paired interval over problems). Levels are the distinct
    decodes per problem of the answer points, ascending. pass@k, which needs a verifier, is not
    ranked here."""
    points = answer_points(results, details)
    if not points:
        return []
    confidence = confidence or (details or {}).get("config", {}).get("confidence", 0.95)
    levels: list[float] = []
    for d in sorted(p["decodes"] for p in points):
        if not levels or d > levels[-1] * (1 + COMPUTE_MATCH):
            levels.append(d)
    order = {name: i for i, name in enumerate(dict.fromkeys(p["method"] for p in points))}
    out = []
    for level in levels:
        at = {}
        for name in order:
            found = answer_at(details, name, level)
            if found is not None and found[0]:
                at[name] = found
        if not at:
            continue
        ranked = sorted(at, key=lambda n: (-statistics.fmean(at[n][0]), order[n]))
        winner = ranked[0]
        line = (f"- **{level:.2f} decodes / problem: {winner}** leads with "
                f"{statistics.fmean(at[winner][0]) * 100:.1f} ({_used(at[winner])})")
        if len(ranked) == 1:
            out.append(line + "; no other method's answer reaches this compute.")
            continue
        second = ranked[1]
        text = f"; next: {second} at {statistics.fmean(at[second][0]) * 100:.1f} ({_used(at[second])})"
        if len(at[winner][0]) == len(at[second][0]) and len(at[winner][0]) > 1:
            c = paired_difference(at[winner][0], at[second][0], "answer_accuracy", confidence)
            verdict = {"better": "a significant lead", "worse": "significantly behind"}.get(
                outcome_of(c), "no significant difference")
            text += (f"; difference {c['diff'] * 100:+.2f} [{c['low'] * 100:+.2f}, {c['high'] * 100:+.2f}] "
                     f"(paired {confidence:.0%} CI): {verdict}.")
        else:
            text += "."
        out.append(line + text)
    return out


def _used(found) -> str:
    """What a method's value at a compute level is: its point (and that point's decodes) or an interpolation."""
    _, decodes, what = found
    return what if what.startswith("interpolated") else f"{metric_label(what)}, {decodes:.2f} decodes"


def compute_section(results: Mapping, details: Mapping | None) -> str:
    """Markdown for the accuracy-per-compute view (table and matched-compute levels); '' when not measured."""
    table = compute_table(results, details)
    if not table:
        return ""
    statics = [n for n, i in method_info(results, details).items() if is_static(i)]
    return ("What each method's answer scores and what it spends per problem: the *answer* is the one answer the "
            "method returns without a verifier (B = 1: its sample; B > 1: a majority vote over its B samples; a "
            "draft-gated method: the draft where kept); pass@k counts a problem solved when any of k answers is "
            "right, which a user only gets with a verifier to pick it. A *decode* is one generated sequence for one "
            "problem (a method that drafts and then re-decodes counts both), *tokens* are the generated tokens "
            "summed over the problem's decodes (EOS included, padding and forced tokens excluded); B samples cost "
            "B decodes, a deterministic row (greedy) one at every B.\n\n" + table
            + "\n\nWho leads at each compute level: every method's answer accuracy at the same compute (decodes "
            f"within {COMPUTE_MATCH:.0%}, or its curve interpolated there); a method whose curve does not reach a "
            f"level is not ranked there (static methods: {', '.join(statics) or 'none'}).\n\n"
            + "\n".join(compute_verdicts(results, details)))


def cost_table(details: Mapping | None) -> str:
    """Markdown: what each method cost to evaluate (``eval_details.json`` ``cost``); '' without it."""
    cost = (details or {}).get("cost")
    if not cost:
        return ""
    lines = [table_row(["Method", "rows decoded", "tokens", "seconds (alone)", "seconds (share)"]),
             table_row(["---", "---:", "---:", "---:", "---:"])]
    for name, c in cost["methods"].items():
        lines.append(table_row([name, c["rows"], c["tokens"], f"{c['seconds_alone']:.1f}",
                                f"{c['seconds_share']:.1f}"]))
    lines.append(table_row(["**all (decoded once)**", cost["decoded_rows"], cost["decoded_tokens"],
                       f"{cost['decode_seconds']:.1f}", f"{cost['decode_seconds']:.1f}"]))
    return ("Rows each method's numbers come from that were decoded (a row shared by several methods, or a "
            "deterministic row standing for every sample and seed, is decoded once), their generated tokens and "
            "decode seconds: *alone* counts shared rows in full (the method evaluated by itself), *share* splits "
            f"them among the methods that use them. Evaluation wall time: {cost['wall_seconds']:.1f} s.\n\n"
            + "\n".join(lines))
