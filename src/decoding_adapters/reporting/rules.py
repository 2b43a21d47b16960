"""The report's fixed-rules section: every rule's curve of answer accuracy against mean decodes per
problem on the evaluated problems (tuned on validation), the strongest rule at a compute level, and
each learned method against it at that method's own compute.

A rule's curve is the ``eval_details.json`` methods of family ``fixed rule`` that share a ``curve``
label (one entry per tuned point: its test ``decodes_per_problem["answer"]``, its per-problem
``answer_accuracy`` and its ``validation`` accuracy and decodes). The **strongest fixed rule** at
``c`` decodes per problem is the rule whose *validation* curve, interpolated at ``c``, is highest
(chosen on validation, never on the evaluated problems); its value is its *test* curve interpolated
at ``c``: per problem, the two tuned points around ``c`` weighted linearly. A curve that ends below
``c`` stands at its last point there (a rule may spend less than it is allowed); a curve that starts
above ``c`` does not reach it."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Mapping, Sequence

from ..evaluation.methods import ANSWER_ACCURACY
from . import plots
from .cells import family_of, method_info, signed, table_row
from .compute import answer_points
from .verdicts import decodes_of, paired_difference, per_problem_means

__all__ = ["RULE_COLUMNS", "SENTENCE_LEVELS", "rule_curves", "curve_at", "strongest_rules_at", "rules_section"]

RULE_COLUMNS = (1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0)
"""Mean decodes per problem at which the section's table reads every rule's curve."""
SENTENCE_LEVELS = (1.5, 4.0)
"""Compute levels at which the section names the strongest rule and its lead over the runner-up."""


def rule_curves(details: Mapping | None) -> dict[str, list[dict]]:
    """``{curve label: [point, ...]}`` of every fixed rule traced at several settings, each point
    ``{name, decodes, tokens, values (per-problem answer accuracy, averaged over seeds),
    validation (accuracy, decodes) or None, setting}``, sorted by test decodes."""
    out: dict[str, list[dict]] = {}
    for name, entry in ((details or {}).get("methods") or {}).items():
        if family_of(entry) != "fixed rule" or not entry.get("curve"):
            continue
        decodes = decodes_of(details, name, ANSWER_ACCURACY)
        values = per_problem_means(details, name, ANSWER_ACCURACY)
        if decodes is None or not values:
            continue
        tokens = (entry.get("tokens_per_problem") or {}).get("answer")
        out.setdefault(entry["curve"], []).append({
            "name": name, "decodes": decodes, "tokens": tokens, "values": values,
            "validation": entry.get("validation"), "setting": entry.get("setting")})
    return {label: sorted(points, key=lambda p: p["decodes"]) for label, points in out.items()}


def curve_at(xs: Sequence[float], ys: Sequence, at: float):
    """A curve through ``(xs[i], ys[i])`` (xs ascending; ys numbers or equal-length lists) at
    ``at``: linear between the two points around it, the last point beyond the last x, None before
    the first x. Returns ``(value, x used)`` (``at``, or the last x)."""
    if not xs or at < xs[0] - 1e-9:
        return None
    for i, x in enumerate(xs):
        if abs(x - at) <= 1e-9:
            return ys[i], x
        if x > at:
            w = (at - xs[i - 1]) / (x - xs[i - 1])
            y0, y1 = ys[i - 1], ys[i]
            if isinstance(y0, (int, float)):
                return (1 - w) * y0 + w * y1, at
            return [(1 - w) * a + w * b for a, b in zip(y0, y1)], at
    return ys[-1], xs[-1]


def _validation_at(points: list[dict], at: float) -> float | None:
    """A curve's validation accuracy at ``at`` validation decodes (None without validation numbers)."""
    known = sorted((p["validation"]["decodes"], p["validation"]["accuracy"]) for p in points if p.get("validation"))
    found = curve_at([d for d, _ in known], [a for _, a in known], at)
    return None if found is None else found[0]


def strongest_rules_at(details: Mapping | None, decodes: float) -> list[dict]:
    """The rules that reach ``decodes`` per problem, strongest first by their validation curves
    interpolated there (ties: the order the curves are listed in; never the test numbers): ``{rule, validation, values
    (per-problem test answer accuracy at that compute), accuracy (their mean), decodes (test
    decodes used: ``decodes``, or the curve's last point where it ends below)}``."""
    ranked = []
    for order, (label, points) in enumerate(rule_curves(details).items()):
        test = curve_at([p["decodes"] for p in points], [p["values"] for p in points], decodes)
        if test is None:
            continue
        validation = _validation_at(points, decodes)
        ranked.append({"rule": label, "validation": validation, "values": test[0], "decodes": test[1],
                       "accuracy": statistics.fmean(test[0]), "order": order})
    return sorted(ranked, key=lambda r: (-(r["validation"] if r["validation"] is not None else -1.0), r["order"]))


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value * 100:.1f}"


def _curve_table(curves: dict[str, list[dict]]) -> str:
    lines = [table_row(["rule", "tuned points"] + [f"{c:g}" for c in RULE_COLUMNS]
                       + ["largest decodes (its accuracy)"]),
             table_row(["---", "---:"] + ["---:"] * (len(RULE_COLUMNS) + 1))]
    cells = {}
    for label, points in curves.items():
        xs, ys = [p["decodes"] for p in points], [statistics.fmean(p["values"]) for p in points]
        cells[label] = [curve_at(xs, ys, c) for c in RULE_COLUMNS]
    top = [max((row[i][0] for row in cells.values() if row[i] is not None), default=None)
           for i in range(len(RULE_COLUMNS))]
    for label, points in curves.items():
        row = []
        for i, found in enumerate(cells[label]):
            if found is None:
                row.append("–")
                continue
            text = _pct(found[0]) + ("" if abs(found[1] - RULE_COLUMNS[i]) <= 1e-9 else f" (at {found[1]:.2f})")
            row.append(f"**{text}**" if top[i] is not None and found[0] >= top[i] - 1e-12 else text)
        last = points[-1]
        lines.append(table_row([label, len(points)] + row
                               + [f"{last['decodes']:.2f} ({_pct(statistics.fmean(last['values']))})"]))
    return "\n".join(lines)


def _strongest_sentence(details: Mapping | None, at: float, confidence: float) -> str:
    ranked = strongest_rules_at(details, at)
    if not ranked:
        return f"- At {at:g} decodes per problem no rule's curve reaches."
    first = ranked[0]
    where = "" if abs(first["decodes"] - at) <= 1e-9 else f", its curve ending at {first['decodes']:.2f} decodes"
    line = (f"- At **{at:g} decodes per problem** the strongest rule (its validation curve highest there, "
            f"{_pct(first['validation'])}) is **{first['rule']}**: {_pct(first['accuracy'])} on the evaluated "
            f"problems{where}")
    if len(ranked) < 2:
        return line + "; no other rule reaches this compute."
    second = ranked[1]
    c = paired_difference(first["values"], second["values"], ANSWER_ACCURACY, confidence)
    return (line + f". Runner-up: {second['rule']} ({_pct(second['validation'])} on validation, "
            f"{_pct(second['accuracy'])} here); difference {signed(c['diff'] * 100, 1)} points "
            f"[{signed(c['low'] * 100, 1)}, {signed(c['high'] * 100, 1)}] (paired {confidence:.0%} CI over "
            f"{len(first['values'])} problems).")


def _learned_lines(results: Mapping, details: Mapping | None, confidence: float) -> list[str]:
    """Each learned method's own answer against the strongest fixed rule at its compute."""
    info = method_info(results, details)
    # and the learned methods scored from the same sample tables (eval_details only, as the rules' points)
    info.update({n: m for n, m in (details or {}).get("methods", {}).items()
                 if n not in info and family_of(m) == "learned"})
    lines = []
    for name, entry in info.items():
        if family_of(entry) != "learned":
            continue
        mine, values = decodes_of(details, name, ANSWER_ACCURACY), per_problem_means(details, name, ANSWER_ACCURACY)
        ranked = strongest_rules_at(details, mine) if mine is not None and values else []
        if not ranked or len(ranked[0]["values"]) != len(values):
            continue
        rule = ranked[0]
        c = paired_difference(values, rule["values"], ANSWER_ACCURACY, confidence)
        at = "" if abs(rule["decodes"] - mine) <= 1e-9 else f" (its curve ends at {rule['decodes']:.2f})"
        lines.append(f"- {name} ({mine:.2f} decodes per problem): answer {_pct(statistics.fmean(values))} against "
                     f"the strongest fixed rule at that compute, {rule['rule']}{at}, {_pct(rule['accuracy'])}: "
                     f"{signed(c['diff'] * 100, 1)} points [{signed(c['low'] * 100, 1)}, "
                     f"{signed(c['high'] * 100, 1)}] (paired {confidence:.0%} CI).")
    return lines


def rules_section(results: Mapping, details: Mapping | None, out_dir: str | Path,
                  file: str = "rules_vs_compute.png") -> str:
    """Markdown: every fixed rule's curve on the evaluated problems (a table at 1-8 decodes per
    problem and the figure, written into ``out_dir``), the strongest rule at each of
    :data:`SENTENCE_LEVELS` with its paired interval against the runner-up, and each learned
    method against the strongest rule at its own compute; '' without rule curves."""
    curves = rule_curves(details)
    if not curves:
        return ""
    confidence = (details or {}).get("config", {}).get("confidence", 0.95)
    names = {p["name"] for points in curves.values() for p in points}
    points = [p for p in answer_points({}, details) if p["method"] in names]
    plots.plot_answer_vs_compute(points, Path(out_dir) / file, confidence=confidence)
    problems = len(next(iter(curves.values()))[0]["values"])
    methods = (details or {}).get("methods", {})
    first = methods.get(next(iter(curves.values()))[0]["name"], {})
    read = first.get("answer_rule", "").split(" over ", 1)
    sequence = f" Each reads {read[1]}." if len(read) == 2 else ""
    text = (f"![fixed rules: answer accuracy per compute]({file})\n\n"
            f"The fixed answer rules (docs/rules.md), each scored from one stored table of samples of the {problems} "
            "evaluated problems (common random numbers: every rule reads the same samples), its knobs tuned on a "
            "validation table for each compute level: at each level, the setting with the best validation answer "
            "accuracy among those spending at most that many mean decodes per problem." + sequence
            + " The table reads each rule's curve of answer accuracy (%) on the evaluated problems at the number of "
            "decodes per problem heading each column, linearly between its tuned points ('at d': its curve ends "
            "at d decodes; –: it does not reach); bold: the highest in the column. The table is one draw of the "
            "samples (seed 0): a rule's value is the same for every evaluation seed.\n\n" + _curve_table(curves)
            + "\n\nThe strongest rule at a compute level is chosen on validation (its validation curve interpolated "
            "there is the highest) and scored on the evaluated problems:\n\n"
            + "\n".join(_strongest_sentence(details, at, confidence) for at in SENTENCE_LEVELS))
    learned = _learned_lines(results, details, confidence)
    if learned:
        text += ("\n\nEach learned method's own answer against the strongest fixed rule at its compute (the same "
                 "problems, paired):\n\n" + "\n".join(learned))
    return text
