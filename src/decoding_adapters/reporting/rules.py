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

from ..core.stats import seed_interval
from ..evaluation.methods import ANSWER_ACCURACY
from . import plots
from .cells import adapter_group, family_of, method_info, signed, table_row
from .compute import answer_points
from .verdicts import decodes_of, paired_difference, per_problem_means

__all__ = ["RULE_COLUMNS", "SENTENCE_LEVELS", "EARLIER_LEVELS", "sentence_levels", "TARGET_GAIN", "rule_curves",
           "curve_at", "seed_readings", "strongest_rules_at",
           "learned_seed_curves", "learned_verdicts", "learned_verdict_lines", "verdict_lines", "rules_section"]

RULE_COLUMNS = (1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0)
"""Mean decodes per problem at which the section's table reads every rule's curve."""
SENTENCE_LEVELS = (1.5, 2.5, 4.0)
"""Compute levels at which the section names the strongest rule and its lead over the runner-up, and
sets each learned curve against it; a study records them in ``eval_details`` (``sentence_levels``)."""
EARLIER_LEVELS = (1.5, 4.0)
"""The levels of an ``eval_details`` that records none (written before they were recorded)."""


def sentence_levels(details: Mapping | None) -> tuple[float, ...]:
    """The compute levels ``details`` records (:data:`EARLIER_LEVELS` where it records none)."""
    return tuple((details or {}).get("sentence_levels") or EARLIER_LEVELS)
TARGET_GAIN = 0.03
"""A learned curve's target at each of :data:`SENTENCE_LEVELS`: at least this much answer accuracy
over the strongest fixed rule there, its paired interval above 0, on every training seed."""


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


def learned_seed_curves(details: Mapping | None) -> dict[str, list[list[dict]]]:
    """``{curve label: [points of training seed 0, of seed 1, ...]}`` of every learned method traced
    at several settings (family ``learned`` with a ``curve`` label: the attempt policy's prices), each
    point ``{name, decodes (that seed's mean decodes per problem), values (that seed's per-problem
    answer accuracy)}``, sorted by decodes. A seed's decodes are ``compute[name]["decodes"]["by_seed"]``
    where recorded (each seed's policy spends its own), else the method's."""
    out: dict[str, list[list[dict]]] = {}
    for name, entry in ((details or {}).get("methods") or {}).items():
        if family_of(entry) != "learned" or not entry.get("curve"):
            continue
        rows = (details.get("per_problem", {}).get(name) or {}).get(ANSWER_ACCURACY)
        by_seed = ((details.get("compute", {}).get(name) or {}).get("decodes") or {}).get("by_seed")
        mean_decodes = decodes_of(details, name, ANSWER_ACCURACY)
        if not rows or mean_decodes is None:
            continue
        seeds = out.setdefault(entry["curve"], [[] for _ in rows[0]])
        for j in range(min(len(seeds), len(rows[0]))):
            decodes = statistics.fmean(r[j] for r in by_seed) if by_seed else mean_decodes
            seeds[j].append({"name": name, "decodes": decodes, "values": [float(r[j]) for r in rows]})
    return {label: [sorted(points, key=lambda p: p["decodes"]) for points in seeds] for label, seeds in out.items()}


def seed_readings(seeds: Sequence[list[dict]], at: float) -> list[tuple[list[float], float] | None]:
    """Each training seed's curve (:func:`learned_seed_curves`' points) read at ``at`` decodes per
    problem (:func:`curve_at`: its per-problem values and the decodes used), None where it starts above."""
    return [curve_at([p["decodes"] for p in points], [p["values"] for p in points], at) for points in seeds]


def _reference(details: Mapping | None, at: float | None, versus: str | None) -> dict | None:
    """What a learned curve is set against: the strongest fixed rule at ``at`` decodes, or the method
    ``versus`` (its per-problem answer, one column per seed, at its own mean decodes)."""
    if versus is None:
        ranked = strongest_rules_at(details, at)
        if not ranked:
            return None
        r = ranked[0]
        return {"name": r["rule"], "at": at, "decodes": r["decodes"], "columns": None, "values": r["values"]}
    rows = (details or {}).get("per_problem", {}).get(versus, {}).get(ANSWER_ACCURACY)
    decodes = decodes_of(details, versus, ANSWER_ACCURACY)
    if not rows or decodes is None:
        return None
    return {"name": versus, "at": decodes, "decodes": decodes, "columns": [[float(v) for v in r] for r in rows],
            "values": [statistics.fmean(r) for r in rows]}


def learned_verdicts(details: Mapping | None, levels: Sequence[float] | None = None, versus: str | None = None,
                     confidence: float = 0.95) -> list[dict]:
    """Each learned curve (:func:`learned_seed_curves`) against the strongest fixed rule at each of
    ``levels`` decodes per problem (chosen on validation, :func:`strongest_rules_at`), or against the
    method ``versus`` at that method's own compute (seed j's curve against its seed-j column). Each
    seed's curve is read at the level between its two points around it (per problem, linearly: the
    expected answer of a mixture of the two policies that spends exactly that compute), as the rules'
    are; a curve that starts above the level does not reach it. Returns one record per (curve, level):
    ``{curve, at, against, against_accuracy, against_decodes, per_seed: [{seed, decodes, accuracy,
    diff, low, high} or None], pooled (the seeds' mean per problem against it, paired interval),
    across_seeds (mean, low, high over the seeds' differences), holds}``; ``holds``: every seed
    reaches the level, at least :data:`TARGET_GAIN` ahead with its paired interval above 0. ``levels``
    None: those ``details`` records (:func:`sentence_levels`)."""
    levels = sentence_levels(details) if levels is None else levels
    records = []
    for label, seeds in learned_seed_curves(details).items():
        for at in ([None] if versus is not None else levels):
            ref = _reference(details, at, versus)
            if ref is None:
                continue
            per_seed, columns = [], []
            for j, found in enumerate(seed_readings(seeds, ref["at"])):
                theirs = ref["values"] if ref["columns"] is None else [r[j] for r in ref["columns"]]
                if found is None or len(found[0]) != len(theirs):
                    per_seed.append(None)
                    continue
                values, used = found
                c = paired_difference(values, theirs, ANSWER_ACCURACY, confidence)
                per_seed.append({"seed": j, "decodes": used, "accuracy": statistics.fmean(values),
                                 "diff": c["diff"], "low": c["low"], "high": c["high"]})
                columns.append(values)
            reached = [s for s in per_seed if s is not None]
            pooled = across = None
            if reached and len(reached) == len(per_seed):
                means = [statistics.fmean(v) for v in zip(*columns)]
                pooled = paired_difference(means, ref["values"], ANSWER_ACCURACY, confidence)
                across = seed_interval([s["diff"] for s in reached], confidence)
            holds = bool(reached) and len(reached) == len(per_seed) and all(
                s["diff"] >= TARGET_GAIN - 1e-12 and s["low"] > 0 for s in reached)
            records.append({"curve": label, "at": ref["at"], "against": ref["name"],
                            "against_accuracy": statistics.fmean(ref["values"]), "against_decodes": ref["decodes"],
                            "per_seed": per_seed, "pooled": pooled, "across_seeds": across, "holds": holds})
    return records


def _interval(c: Mapping) -> str:
    return f"{signed(c['diff'] * 100, 1)} [{signed(c['low'] * 100, 1)}, {signed(c['high'] * 100, 1)}]"


def learned_verdict_lines(details: Mapping | None, confidence: float = 0.95, versus: str | None = None) -> list[str]:
    """One line per :func:`learned_verdicts` record: each seed's difference with its paired interval,
    the seeds pooled, the interval across seeds, and whether the target holds."""
    lines = []
    for r in learned_verdicts(details, versus=versus, confidence=confidence):
        seeds = " / ".join("does not reach" if s is None else f"{_interval(s)} ({_pct(s['accuracy'])} at "
                           f"{s['decodes']:.2f})" for s in r["per_seed"])
        if versus is None:
            ends = ("" if abs(r["against_decodes"] - r["at"]) <= 1e-9
                    else f", its curve ending at {r['against_decodes']:.2f}")
            where = (f"at **{r['at']:g} decodes per problem** against the strongest fixed rule there, {r['against']} "
                     f"({_pct(r['against_accuracy'])}{ends})")
        else:
            where = (f"at {r['against']}'s compute ({r['at']:.2f} decodes per problem) against it "
                     f"({_pct(r['against_accuracy'])})")
        line = f"- {r['curve']} {where}: per training seed {seeds}"
        if r["pooled"] is not None:
            a = r["across_seeds"]
            line += (f"; seeds pooled {_interval(r['pooled'])} (paired {confidence:.0%} CI over problems); across "
                     f"seeds {signed(a[0] * 100, 1)} [{signed(a[1] * 100, 1)}, {signed(a[2] * 100, 1)}]")
        if versus is None:
            line += (f". Target (>= +{TARGET_GAIN * 100:g} points, interval above 0, every seed): "
                     f"**{'holds' if r['holds'] else 'not met'}**.")
        else:
            line += "."
        lines.append(line)
    return lines


def verdict_lines(details: Mapping | None, confidence: float = 0.95) -> tuple[list[str], list[str], list[str]]:
    """The section's verdict lines, each computed from ``eval_details`` alone (``benchmarks/rederive.py``
    recomputes them from the committed file): the strongest rule at each of :data:`SENTENCE_LEVELS`,
    each learned curve there, and each learned curve against every draft-gated method at its compute."""
    strongest = [_strongest_sentence(details, at, confidence) for at in sentence_levels(details)]
    levels = learned_verdict_lines(details, confidence)
    # the learned draft gates, not their controls (fixed rules decoded as draft-gated methods)
    draft = [n for n, m in ((details or {}).get("methods") or {}).items() if adapter_group(m) == "draft"]
    against_draft = [line for name in draft for line in learned_verdict_lines(details, confidence, versus=name)]
    return strongest, levels, against_draft


def rules_section(results: Mapping, details: Mapping | None, out_dir: str | Path,
                  file: str = "rules_vs_compute.png") -> str:
    """Markdown: every fixed rule's curve on the evaluated problems (a table at 1-8 decodes per
    problem, and the figure, written into ``out_dir``, with the learned curves beside the rules'),
    the strongest rule at each of :data:`SENTENCE_LEVELS` with its paired interval against the
    runner-up, and each learned method against the strongest rule at its own compute; '' without
    rule curves."""
    curves = rule_curves(details)
    if not curves:
        return ""
    confidence = (details or {}).get("config", {}).get("confidence", 0.95)
    names = {p["name"] for points in curves.values() for p in points}
    names |= {p["name"] for seeds in learned_seed_curves(details).values() for points in seeds for p in points}
    points = [p for p in answer_points({}, details) if p["method"] in names]  # the rules' and learned curves
    plots.plot_answer_vs_compute(points, Path(out_dir) / file, confidence=confidence)
    problems = len(next(iter(curves.values()))[0]["values"])
    methods = (details or {}).get("methods", {})
    first = methods.get(next(iter(curves.values()))[0]["name"], {})
    read = first.get("answer_rule", "").split(" over ", 1)
    sequence = f" Each reads {read[1]}." if len(read) == 2 else ""
    text = (f"![fixed rules and learned curves: answer accuracy per compute]({file})\n\n"
            f"The fixed answer rules (docs/rules.md), each scored from one stored table of samples of the {problems} "
            "evaluated problems (common random numbers: every rule reads the same samples), its knobs tuned on a "
            "validation table for each compute level: at each level, the setting with the best validation answer "
            "accuracy among those spending at most that many mean decodes per problem." + sequence
            + " The table reads each rule's curve of answer accuracy (%) on the evaluated problems at the number of "
            "decodes per problem heading each column, linearly between its tuned points ('at d': its curve ends "
            "at d decodes; –: it does not reach); bold: the highest in the column. The table is one draw of the "
            "samples (seed 0): a rule's value is the same for every evaluation seed.\n\n" + _curve_table(curves)
            + "\n\nThe strongest rule at a compute level is chosen on validation (its validation curve interpolated "
            "there is the highest) and scored on the evaluated problems:\n\n")
    strongest, levels, against_draft = verdict_lines(details, confidence)
    text += "\n".join(strongest)
    if levels:
        text += ("\n\nEach learned curve (one policy per price and training seed) at the compute levels above, "
                 "each seed's curve read between its two policies around the level:\n\n" + "\n".join(levels))
    if against_draft:
        text += ("\n\nAnd against the draft-gated adapter at its own compute (the same problems, seed j's curve "
                 "against its seed j):\n\n" + "\n".join(against_draft))
    learned = _learned_lines(results, details, confidence)
    if learned:
        text += ("\n\nEach learned method's own answer against the strongest fixed rule at its compute (the same "
                 "problems, paired):\n\n" + "\n".join(learned))
    return text
