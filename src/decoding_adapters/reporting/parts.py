"""What each learned part adds, at matched compute: the report's ablation table.

At each compute level of the fixed-rules section (:func:`.rules.sentence_levels`), four curves read
at the same mean decodes per problem, each a per-problem answer accuracy on the evaluated problems:

- the strongest **plain rule** (chosen on validation among the rules that read no verifier);
- the strongest **rule reading the verifier** (chosen on validation among those that do): what
  the learned verifier adds to a fixed rule;
- the attempt policy **restricted to its best single sampled arm** (``"Attempt policy, best single
  arm"``: the learned weighting and the learned stop, one decoder): what the learned stop adds over
  the best rule given the same verifier signal;
- the **full attempt policy** (every arm): what choosing the decoder adds.

A learned curve is read per training seed between its two policies around the level and the seeds'
columns are pooled per problem, as the headline lines do. Each step's difference has its paired
95% interval over the problems; the table names which curve is missing where one is.
"""

from __future__ import annotations

import statistics
from typing import Mapping

from ..evaluation.methods import ANSWER_ACCURACY
from .cells import family_of
from .rules import learned_seed_curves, seed_readings, sentence_levels, strongest_rules_at
from .verdicts import paired_difference

__all__ = ["FULL_POLICY", "SINGLE_ARM_POLICY", "part_levels", "parts_section"]

FULL_POLICY, SINGLE_ARM_POLICY = "Attempt policy", "Attempt policy, best single arm"
"""The learned curves' labels (``experiments.stages_rules.attempt_entries``)."""


def _rules_only(details: Mapping, reads_verifier: bool) -> dict:
    """``details`` with the fixed-rule points that do (or do not) read the verifier only."""
    methods = {n: m for n, m in details.get("methods", {}).items()
               if family_of(m) != "fixed rule" or bool(m.get("reads_verifier")) == reads_verifier}
    return {**details, "methods": methods}


def _rule_at(details: Mapping, at: float, reads_verifier: bool) -> dict | None:
    ranked = strongest_rules_at(_rules_only(details, reads_verifier), at)
    return None if not ranked else {"name": ranked[0]["rule"], "values": ranked[0]["values"]}


def _learned_at(details: Mapping, label: str, at: float) -> dict | None:
    seeds = learned_seed_curves(details).get(label)
    if not seeds:
        return None
    readings = seed_readings(seeds, at)
    if any(found is None or abs(found[1] - at) > 1e-9 for found in readings):  # a seed's curve not reaching it
        return None
    return {"name": label, "values": [statistics.fmean(v) for v in zip(*(values for values, _ in readings))]}


def part_levels(details: Mapping | None, confidence: float = 0.95) -> list[dict]:
    """Per compute level: the four curves (None where one is missing) and each step's paired difference."""
    rows = []
    for at in sentence_levels(details):
        curves = {"plain rule": _rule_at(details or {}, at, False), "verifier rule": _rule_at(details or {}, at, True),
                  "single arm": _learned_at(details or {}, SINGLE_ARM_POLICY, at),
                  "full policy": _learned_at(details or {}, FULL_POLICY, at)}
        steps = {}
        for part, (a, b) in {"verifier": ("verifier rule", "plain rule"), "stop": ("single arm", "verifier rule"),
                             "decoder": ("full policy", "single arm"), "all": ("full policy", "plain rule")}.items():
            if curves[a] is not None and curves[b] is not None and len(curves[a]["values"]) == len(curves[b]["values"]):
                steps[part] = paired_difference(curves[a]["values"], curves[b]["values"], ANSWER_ACCURACY, confidence)
        rows.append({"at": at, "curves": curves, "steps": steps})
    return rows


def _cell(curve: dict | None) -> str:
    return "–" if curve is None else f"{statistics.fmean(curve['values']) * 100:.1f} ({curve['name']})"


def _step(c: Mapping | None) -> str:
    return "–" if c is None else f"{c['diff'] * 100:+.1f} [{c['low'] * 100:+.1f}, {c['high'] * 100:+.1f}]"


def parts_section(details: Mapping | None) -> str:
    """The report's "What each part adds" section ('' without the learned curves or the rules)."""
    confidence = (details or {}).get("config", {}).get("confidence", 0.95)
    rows = [r for r in part_levels(details, confidence) if r["steps"]]
    if not rows:
        return ""
    lines = ["| decodes / problem | strongest plain rule | strongest rule reading the verifier | policy, best single "
             "arm | policy, every arm | verifier adds | stop adds | decoder choice adds | all |",
             "| ---: | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        c, s = r["curves"], r["steps"]
        lines.append(f"| {r['at']:g} | {_cell(c['plain rule'])} | {_cell(c['verifier rule'])} | "
                     f"{_cell(c['single arm'])} | {_cell(c['full policy'])} | {_step(s.get('verifier'))} | "
                     f"{_step(s.get('stop'))} | {_step(s.get('decoder'))} | {_step(s.get('all'))} |")
    return ("Answer accuracy (%) of four curves at the same mean decodes per problem, each rule chosen on "
            "validation, each learned curve read per training seed and pooled; each part's difference with its "
            f"paired {confidence:.0%} interval over the problems (reporting/parts.py).\n\n" + "\n".join(lines))
