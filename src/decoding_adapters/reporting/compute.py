"""Accuracy per compute: each method's pass@k against the decodes and tokens it spends per
problem, who wins at each compute level, and what the evaluation itself cost."""

from __future__ import annotations

from typing import Mapping, Sequence

from ..core.stats import paired_ci
from .cells import fmt_entry, metric_label, pass_ks, signed, table_row
from .verdicts import outcome_of, per_problem_means

__all__ = ["COMPUTE_TOLERANCE", "compute_points", "compute_table", "compute_verdicts", "compute_section",
           "cost_table"]


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


def _compute_cell(values: Sequence[float], digits: int) -> str:
    return " · ".join(f"{v:.{digits}f}" for v in values)


def compute_table(results: Mapping, details: Mapping | None) -> str:
    """Markdown: every method's pass@k next to what it costs per problem at each k (decodes and
    generated tokens; ``k=1 · 2 · ...``); '' when compute was not measured."""
    points = compute_points(results, details)
    if not points:
        return ""
    ks = sorted({p["k"] for p in points})
    label = " · ".join(map(str, ks))
    lines = [table_row(["Method"] + [metric_label(f"pass@{k}") for k in ks]
                  + [f"decodes / problem (k = {label})", f"tokens / problem (k = {label})"]),
             table_row(["---"] + ["---:"] * (len(ks) + 2))]
    for name in dict.fromkeys(p["method"] for p in points):
        own = {p["k"]: p for p in points if p["method"] == name}
        cells = [fmt_entry(results[name].get(f"pass@{k}"), f"pass@{k}") if k in own else "–" for k in ks]
        decodes = _compute_cell([own[k]["decodes"] for k in ks if k in own], 2)
        tokens = _compute_cell([own[k]["tokens"] for k in ks if k in own], 1)
        lines.append(table_row([name] + cells + [decodes, tokens]))
    return "\n".join(lines)


def _point_label(p: Mapping) -> str:
    return f"{p['method']} ({metric_label(p['metric'])}, {p['decodes']:.2f} decodes, {p['tokens']:.1f} tokens)"


def compute_verdicts(results: Mapping, details: Mapping | None, confidence: float | None = None) -> list[str]:
    """One line per compute level: which method wins when every method may spend at most that
    many decodes per problem (its pass@k at the largest k it can afford), and by how much it leads
    the best other method within the same compute (paired interval over problems; a tie is said).
    Levels are the distinct decodes per problem of the evaluated points, ascending."""
    points = compute_points(results, details)
    if not points:
        return []
    confidence = confidence or (details or {}).get("config", {}).get("confidence", 0.95)
    levels = sorted({round(p["decodes"], 6) for p in points})
    order = {name: i for i, name in enumerate(results)}
    out = []
    for level in levels:
        affordable = [p for p in points if p["decodes"] <= level + COMPUTE_TOLERANCE]
        # per method, its best point within the budget (ties: the cheaper one)
        best_per_method: dict[str, dict] = {}
        for p in sorted(affordable, key=lambda p: (-p["mean"], p["decodes"], p["tokens"])):
            best_per_method.setdefault(p["method"], p)
        ranked = sorted(best_per_method.values(), key=lambda p: (-p["mean"], p["decodes"], p["tokens"],
                                                                 order.get(p["method"], 0)))
        winner = ranked[0]
        line = f"- **≤ {level:g} decodes / problem: {winner['method']}** leads with " \
               f"{winner['mean'] * 100:.1f} ({metric_label(winner['metric'])}, {winner['decodes']:.2f} decodes, " \
               f"{winner['tokens']:.1f} tokens per problem)"
        if len(ranked) == 1:
            out.append(line + "; no other method fits this compute.")
            continue
        second = ranked[1]
        a = per_problem_means(details, winner["method"], winner["metric"])
        b = per_problem_means(details, second["method"], second["metric"])
        text = f"; next: {_point_label(second)} at {second['mean'] * 100:.1f}"
        if a and b and len(a) == len(b):
            diff, low, high = paired_ci(a, b, confidence)
            low, high = max(low, -1.0), min(high, 1.0)
            c = {"diff": diff, "low": low, "high": high, "separated": 0}
            verdict = {"better": "a significant lead", "worse": "significantly behind"}.get(
                outcome_of(c), "no significant difference")
            text += (f"; difference {signed(diff * 100)} [{signed(low * 100)}, {signed(high * 100)}] "
                     f"(paired {confidence:.0%} CI): {verdict}.")
        else:
            text += "."
        out.append(line + text)
    return out


def compute_section(results: Mapping, details: Mapping | None) -> str:
    """Markdown for the accuracy-per-compute view (table and verdicts); '' when not measured."""
    table = compute_table(results, details)
    if not table:
        return ""
    return ("What each method spends per problem for its answers: a *decode* is one generated sequence for one "
            "problem (a method that drafts and then re-decodes counts both), *tokens* are the generated tokens "
            "summed over the problem's decodes (EOS included, padding and forced tokens excluded). pass@k's k "
            "answers cost k samples; a deterministic row (greedy) is decoded once, so it costs one decode at every "
            "k.\n\n" + table + "\n\nWho wins at each compute level: every method at its best pass@k within that many "
            "decodes per problem (equal or lower compute). pass@k with k > 1 counts a problem solved when any of its "
            "k answers is right, which a user only gets with a verifier to pick it.\n\n"
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
