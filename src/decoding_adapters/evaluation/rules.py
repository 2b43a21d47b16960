"""The fixed answer rules people use to spend more samples only where they help, scored from a
stored table of samples (``evaluation.sample_table``) instead of decoding. The rules themselves are
pure functions in ``policies.fixed_rules`` (re-exported here), where the ``rule`` adapter kind runs
them live; this module holds the draws of a table, the grids and the tuning.

A rule reads a **sequence** of draws per problem (``Draws``: the order in which it would decode;
e.g. the stopped greedy first, then the samples of one sampled arm), decides after each draw whether
to stop, and returns one answer per problem without a verifier. Every rule is a small pure function
over ``[P, S]`` arrays (``P`` problems, ``S`` draws in sequence order) that returns a ``RuleResult``:
per problem the answer id it picks, the decodes it spent (draws read) and their generated tokens;
``Draws.score`` adds whether the answer is right. Nothing loops over problems: votes are one-hot
tensors ``[P, S, K]`` (``K`` distinct answers) summed along the sequence.

Votes and ties (all rules): an answer id of -1 (no answer) casts no vote; the leader is the answer
with the most votes (or weight), ties broken by the answer drawn first in the sequence; with no vote
at all the answer is -1 (wrong).

The rules (their papers, settings and what they report: ``docs/rules.md``):
- ``self_consistency``: majority over the first ``n`` draws (Wang et al. 2023).
- ``esc``: draws in windows of ``w``; stop after the first window whose answers all agree (and are
  answers), at most ``max_draws``; the answer is the majority over every draw read (Li et al. 2024).
- ``adaptive_consistency``: after each draw, with ``v1 >= v2`` the two largest vote counts, stop
  when ``P(p1 > p2) = P(X > 1/2), X ~ Beta(v1 + 1, v2 + 1)`` exceeds ``threshold`` (Aggarwal et al.
  2023's Beta criterion), at most ``max_draws``.
- ``deepconf_offline``: the first ``n`` draws, keep the ``eta`` % most confident (at least one) and
  take their confidence-weighted vote (eta = 100: the plain weighted vote) (Fu et al. 2025).
- ``deepconf_online``: ``warmup`` draws set the bar ``s`` (the ``100 - eta`` percentile of their
  confidence); a later draw whose confidence falls below ``s`` is dropped (it still costs a decode;
  its tokens are counted in full, an upper bound: the table keeps the trace's lowest group
  confidence, not where it was first crossed); stop when the leader holds ``consensus`` of the kept
  weight, at most ``max_draws`` (Fu et al. 2025's online mode).
- ``reasc``: answer from the first draw when its confidence is at least ``single_threshold``; else
  accumulate confidence-weighted votes and stop when the Beta criterion on the two largest weights
  exceeds ``threshold``, at most ``max_draws`` (Kim et al. 2026).
- ``cges``: a posterior over the answers seen (uniform prior; a draw with answer ``r`` and calibrated
  confidence ``c`` has likelihood ``c`` under "r is right" and ``(1 - c) / (K - 1)`` under any other
  answer, ``K`` the answers seen plus one unseen); stop when an answer's posterior reaches
  ``threshold``, at most ``max_draws`` (Aghazadeh et al. 2025).
- ``confidence_threshold``: keep the first draw (the greedy draft) when its confidence is at least
  ``threshold``; else read the next ``redecodes`` draws and answer their majority (with the draft's
  vote too when ``with_draft``).

``tune_rules`` scores every rule at every setting of its grid on a validation ``Draws``, picks per
compute level (mean decodes per problem) the setting with the best validation answer accuracy within
that level, and scores it on the test ``Draws``: each rule's curve of answer accuracy against mean
decodes (and tokens) per problem.
"""

from __future__ import annotations

import itertools
import math
from typing import Callable, Sequence

import numpy as np

from ..policies.fixed_rules import (  # re-exported: defined here before the rule adapter kind needed them
    LOWER_IS_CONFIDENT,
    RULE_LABELS,
    RULES,
    Calibration,
    Draws,
    RuleResult,
    RuleSetting,
    Scored,
    adaptive_consistency,
    beta_exceeds_half,
    cges,
    confidence_threshold,
    deepconf_offline,
    deepconf_online,
    draw_correct,
    esc,
    prefix_leaders,
    reasc,
    score_setting,
    self_consistency,
    setting_from_dict,
    vote,
)

_draw_correct = draw_correct

__all__ = [
    "Draws",
    "RuleResult",
    "Scored",
    "LOWER_IS_CONFIDENT",
    "draws_from_table",
    "greedy_then",
    "vote",
    "prefix_leaders",
    "beta_exceeds_half",
    "self_consistency",
    "esc",
    "adaptive_consistency",
    "deepconf_offline",
    "deepconf_online",
    "reasc",
    "cges",
    "confidence_threshold",
    "Calibration",
    "RuleSetting",
    "rule_grid",
    "score_setting",
    "tune_rules",
    "fit_calibrations",
    "setting_from_dict",
    "RULE_LABELS",
    "RULES",
    "COMPUTE_LEVELS",
]

COMPUTE_LEVELS = (1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0)
"""Mean decodes per problem at which ``tune_rules`` picks each rule's setting."""


def draws_from_table(table, sequence: Sequence[tuple[str | int, int]], label: str = "") -> Draws:
    """The draws of ``sequence`` (``(arm, sample index)`` pairs in draw order) from ``table``.
    ``greedy_then(table, arm)`` builds the usual one."""
    arms = [table.arm(a) for a, _ in sequence]
    samples = [int(j) for _, j in sequence]
    distinct = table.distinct
    for a, j in zip(arms, samples):
        if not 0 <= j < int(distinct[a]):
            raise ValueError(f"arm {table.arm_names[a]} has {distinct[a]} distinct samples, not a sample {j}")
    return Draws(table.answers[:, arms, samples], table.tokens[:, arms, samples],
                 table.confidence[:, arms, samples], tuple(table.confidence_names), table.answer_correct(), label)


def greedy_then(table, arm: str | int, first: str | int | None = "greedy") -> Draws:
    """The stopped greedy (``first``; None: none) then every distinct sample of ``arm`` in order."""
    index = table.arm(arm)
    sequence = ([(first, 0)] if first is not None else []) + [(index, j) for j in range(int(table.distinct[index]))]
    name = table.arm_names[index]
    return draws_from_table(table, sequence, label=(f"{first}, then {name}" if first is not None else name))


# ---- grids and tuning -------------------------------------------------------------------------------


DEEPCONF_FEATURES = ("group_conf_min", "group_conf_bottom10", "tail_conf")
THRESHOLD_FEATURES = ("max_prob_mean", "max_prob_min", "entropy_mean", "logprob_mean", "group_conf_min",
                      "group_conf_bottom10", "tail_conf", "answer_logprob")


def _settings(rule: str, **grid) -> list[RuleSetting]:
    names = list(grid)
    return [RuleSetting(rule, tuple(zip(names, values))) for values in itertools.product(*grid.values())]


def rule_grid(draws: Draws, rules: Sequence[str] = RULES) -> list[RuleSetting]:
    """Every setting each rule is tuned over, for sequences of ``draws.length`` draws. Confidence
    thresholds are quantiles of the first draw's confidence on ``draws`` (the validation table)."""
    s = draws.length
    names = set(draws.feature_names)
    out: list[RuleSetting] = []
    quantiles = (0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.01)
    for rule in rules:
        if rule == "self_consistency":
            out += _settings(rule, n=range(1, s + 1))
        elif rule == "esc":
            out += [x for x in _settings(rule, window=(2, 3, 4, 5), max_draws=range(2, s + 1))
                    if dict(x.knobs)["max_draws"] % dict(x.knobs)["window"] == 0]
        elif rule == "adaptive_consistency":
            out += _settings(rule, threshold=(0.6, 0.7, 0.8, 0.9, 0.95, 0.99), max_draws=range(2, s + 1))
        elif rule == "deepconf_offline":
            out += _settings(rule, feature=[f for f in DEEPCONF_FEATURES if f in names], n=range(1, s + 1),
                             eta=(10, 30, 50, 90, 100))
        elif rule == "deepconf_online":
            grid = _settings(rule, feature=[f for f in DEEPCONF_FEATURES if f in names], warmup=(1, 2, 4),
                             eta=(10, 50, 90), consensus=(0.8, 0.95, 1.0), max_draws=range(2, s + 1))
            out += [x for x in grid if dict(x.knobs)["warmup"] <= dict(x.knobs)["max_draws"]]
        elif rule == "reasc":
            feature = "group_conf_bottom10" if "group_conf_bottom10" in names else draws.feature_names[0]
            first = draws.confidence(feature)[:, 0]
            taus = sorted({float(np.quantile(first, q)) if q <= 1 else math.inf for q in quantiles})
            out += _settings(rule, feature=(feature,), single_threshold=taus, threshold=(0.7, 0.9, 0.95),
                             max_draws=range(2, s + 1))
        elif rule == "cges":
            out += _settings(rule, feature=[f for f in ("group_conf_bottom10", "max_prob_mean", "answer_logprob")
                                            if f in names], threshold=(0.6, 0.8, 0.9, 0.95, 0.99),
                             max_draws=range(2, s + 1))
        elif rule == "confidence_threshold":
            for feature in [f for f in THRESHOLD_FEATURES if f in names]:
                first = draws.confidence(feature)[:, 0]
                taus = sorted({float(np.quantile(first, q)) if q <= 1 else math.inf for q in quantiles})
                out += _settings(rule, feature=(feature,), threshold=taus, redecodes=range(1, s),
                                 with_draft=(False, True))
        else:
            raise ValueError(f"no rule {rule!r}; choose from {RULES}")
    return out


def fit_calibrations(validation: Draws) -> dict[str, Calibration]:
    """Per confidence column, the calibration CGES and ReASC read, fitted on the validation draws
    (what ``tune_rules`` uses; score a tuned setting on test with these to reproduce its point)."""
    return {name: Calibration.fit(validation.confidence(name), _draw_correct(validation))
            for name in validation.feature_names}


def tune_rules(validation: Draws, test: Draws, rules: Sequence[str] = RULES,
               levels: Sequence[float] = COMPUTE_LEVELS, tolerance: float = 0.0,
               on_rule: Callable[[str], None] | None = None) -> dict:
    """Each rule's curve: per compute level ``L``, the setting with the best validation answer
    accuracy among those spending at most ``L * (1 + tolerance)`` mean decodes on validation (ties:
    fewer decodes), scored on ``test``. Returns ``{rule: {"points": [...], "settings": n}}``; a
    point holds the level, the setting, its validation and test accuracy, decodes and tokens."""
    calibrations = fit_calibrations(validation)
    out: dict = {}
    for rule in rules:
        grid = rule_grid(validation, [rule])
        val_scores = [validation.score(score_setting(x, validation, calibrations)) for x in grid]
        points = []
        for level in levels:
            fits = [i for i, sc in enumerate(val_scores) if sc.decodes <= level * (1 + tolerance) + 1e-9]
            if not fits:
                continue
            best = max(fits, key=lambda i: (val_scores[i].accuracy, -val_scores[i].decodes))
            test_scored = test.score(score_setting(grid[best], test, calibrations))
            if points and points[-1]["setting"] == grid[best].as_dict():
                continue  # the same setting as a lower level: one point
            points.append({"level": level, "setting": grid[best].as_dict(),
                           "validation": {"accuracy": val_scores[best].accuracy, "decodes": val_scores[best].decodes,
                                          "tokens": val_scores[best].tokens},
                           "test": {"accuracy": test_scored.accuracy, "decodes": test_scored.decodes,
                                    "tokens": test_scored.tokens}})
        out[rule] = {"points": points, "settings": len(grid)}
        if on_rule is not None:
            on_rule(rule)
    return out
