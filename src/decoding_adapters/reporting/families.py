"""The fixed-rules section's comparisons split by problem family, and the verifier's quality per family.

A task whose problems carry a family (``eval_details.json`` ``problems[i]["family"]``: the arithmetic
task's word problems and two-digit sums) gets, for each learned curve at each compute level the
section compares (:func:`.rules.sentence_levels`), the same per-problem comparison as the headline
line (the seeds' curves read at the level, against the strongest rule there, both chosen over all
problems) restricted to each family's problems, with its paired interval. The compute is matched
over all problems, not within a family: a policy may spend more on one family than the rule does.
The verifier's ranking quality per family comes from ``verifier_quality`` where the study recorded it.
"""

from __future__ import annotations

import statistics
from typing import Mapping

from ..evaluation.methods import ANSWER_ACCURACY
from .rules import _interval, _reference, learned_seed_curves, seed_readings, sentence_levels
from .verdicts import paired_difference

__all__ = ["family_indices", "family_lines", "verifier_quality_lines", "family_section"]


def family_indices(details: Mapping | None) -> dict[str, list[int]]:
    """``{family: [problem index, ...]}`` of the evaluated problems, in first-seen order ({} without families)."""
    groups: dict[str, list[int]] = {}
    for i, problem in enumerate((details or {}).get("problems") or []):
        family = problem.get("family") if isinstance(problem, Mapping) else None
        if family is None:
            return {}
        groups.setdefault(str(family), []).append(i)
    return groups


def _seed_columns(seeds: list[list[dict]], at: float, problems: int) -> list[list[float]] | None:
    readings = seed_readings(seeds, at)
    if any(found is None or len(found[0]) != problems for found in readings):
        return None
    return [values for values, _ in readings]


def family_lines(details: Mapping | None, confidence: float = 0.95) -> list[str]:
    """One line per (learned curve, compute level): its difference to the strongest rule within each
    family (module docstring); [] for one family or none."""
    groups = family_indices(details)
    if len(groups) < 2:
        return []
    lines = []
    for label, seeds in learned_seed_curves(details).items():
        for at in sentence_levels(details):
            ref = _reference(details, at, None)
            columns = None if ref is None else _seed_columns(seeds, ref["at"], len(ref["values"]))
            if not columns:
                continue
            mine = [statistics.fmean(v) for v in zip(*columns)]  # the seeds pooled, per problem
            parts = []
            for family, index in groups.items():
                ours, theirs = [mine[i] for i in index], [ref["values"][i] for i in index]
                c = paired_difference(ours, theirs, ANSWER_ACCURACY, confidence)
                parts.append(f"{family} ({len(index)} problems) {statistics.fmean(ours) * 100:.1f} vs "
                             f"{statistics.fmean(theirs) * 100:.1f}, {_interval(c)}")
            lines.append(f"- {label} at {at:g} decodes per problem against {ref['name']}: " + "; ".join(parts))
    return lines


def verifier_quality_lines(details: Mapping | None) -> list[str]:
    """The verifier's ranking quality on each table the study recorded, overall and per family."""
    lines = []
    for table, groups in ((details or {}).get("verifier_quality") or {}).items():
        parts = [f"{name} AUC {q['auc']:.3f}, ECE {q['ece']:.3f} ({q['attempts']} attempts, {q['right'] * 100:.1f}% "
                 "right)" for name, q in groups.items() if q.get("attempts")]
        if parts:
            lines.append(f"- {table}: " + "; ".join(parts))
    return lines


def family_section(details: Mapping | None) -> str:
    """The report's "By family" section ('' when the problems carry no families or nothing compares)."""
    confidence = (details or {}).get("config", {}).get("confidence", 0.95)
    compared, quality = family_lines(details, confidence), verifier_quality_lines(details)
    text = ""
    if compared:
        text += ("Each learned curve against the strongest rule at the compute levels of the fixed-rules section, "
                 "the same per-problem comparison restricted to each family's problems (answer accuracy %, the "
                 f"seeds pooled; paired {confidence:.0%} interval over the family's problems). The compute is matched "
                 "over all problems, not within a family.\n\n" + "\n".join(compared))
    if quality:
        text += ("\n\n" if text else "") + ("The verifier's ranking quality (a right attempt scored above a wrong "
                                            "one: AUC; calibration: ECE), over the distinct attempts that state an "
                                            "answer, per table and family:\n\n" + "\n".join(quality))
    return text
