"""The fixed answer rules people use to spend more samples only where they help, scored from a
stored table of samples (``evaluation.sample_table``) instead of decoding. The rules themselves are
pure functions in ``policies.fixed_rules``, where the ``rule`` adapter kind runs them live; this
module holds the draws of a table, the grids and the tuning.

What a rule reads and returns, how votes and ties count, and each rule's definition with its paper:
``policies.fixed_rules`` (settings and what the papers report: ``docs/rules.md``).

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

from ..policies.fixed_rules import (
    RULES,
    VERIFIER,
    VERIFIER_RULES,
    Calibration,
    Draws,
    RuleSetting,
    draw_correct,
    score_setting,
)

__all__ = ["draws_from_table", "greedy_then", "rule_grid", "tune_rules", "fit_calibrations",
           "COMPUTE_LEVELS"]

COMPUTE_LEVELS = (1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0)
"""Mean decodes per problem at which ``tune_rules`` picks each rule's setting."""


def draws_from_table(table, sequence: Sequence[tuple[str | int, int]], label: str = "",
                     verifier: np.ndarray | None = None) -> Draws:
    """The draws of ``sequence`` (``(arm, sample index)`` pairs in draw order) from ``table``.
    ``greedy_then(table, arm)`` builds the usual one. ``verifier`` (``[P, A, N]``, the verifier's
    score of each of the table's samples) adds the column ``VERIFIER`` the verifier rules read."""
    arms = [table.arm(a) for a, _ in sequence]
    samples = [int(j) for _, j in sequence]
    distinct = table.distinct
    for a, j in zip(arms, samples):
        if not 0 <= j < int(distinct[a]):
            raise ValueError(f"arm {table.arm_names[a]} has {distinct[a]} distinct samples, not a sample {j}")
    features, names = table.confidence[:, arms, samples], tuple(table.confidence_names)
    if verifier is not None:
        scores = np.asarray(verifier, dtype=features.dtype)[:, arms, samples]
        features, names = np.concatenate([features, scores[..., None]], axis=-1), names + (VERIFIER,)
    return Draws(table.answers[:, arms, samples], table.tokens[:, arms, samples], features, names,
                 table.answer_correct(), label)


def greedy_then(table, arm: str | int, first: str | int | None = "greedy", verifier: np.ndarray | None = None) -> Draws:
    """The stopped greedy (``first``; None: none) then every distinct sample of ``arm`` in order
    (``verifier``: as ``draws_from_table``)."""
    index = table.arm(arm)
    sequence = ([(first, 0)] if first is not None else []) + [(index, j) for j in range(int(table.distinct[index]))]
    name = table.arm_names[index]
    return draws_from_table(table, sequence, label=(f"{first}, then {name}" if first is not None else name),
                            verifier=verifier)


# ---- grids and tuning -------------------------------------------------------------------------------


DEEPCONF_FEATURES = ("group_conf_min", "group_conf_bottom10", "tail_conf")
THRESHOLD_FEATURES = ("max_prob_mean", "max_prob_min", "entropy_mean", "logprob_mean", "group_conf_min",
                      "group_conf_bottom10", "tail_conf", "answer_logprob")


def _settings(rule: str, **grid) -> list[RuleSetting]:
    names = list(grid)
    return [RuleSetting(rule, tuple(zip(names, values))) for values in itertools.product(*grid.values())]


def rule_grid(draws: Draws, rules: Sequence[str] = RULES) -> list[RuleSetting]:
    """Every setting each rule is tuned over, for sequences of ``draws.length`` draws. Confidence
    thresholds are quantiles of the first draw's confidence on ``draws`` (the validation table). A
    verifier rule (``VERIFIER_RULES``) needs draws with the ``VERIFIER`` column."""
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
        elif rule in VERIFIER_RULES:
            out += _verifier_grid(draws, rule, quantiles)
        else:
            raise ValueError(f"no rule {rule!r}; choose from {RULES + VERIFIER_RULES}")
    return out


def _verifier_grid(draws: Draws, rule: str, quantiles: Sequence[float]) -> list[RuleSetting]:
    """A verifier rule's settings: its plain rule's grid with the ``VERIFIER`` column as the one
    feature (thresholds: quantiles of the first draw's verifier score on ``draws``); the vote
    rules' variants over their plain knobs."""
    if VERIFIER not in draws.feature_names:
        raise ValueError(f"{rule} reads the verifier: the draws have no {VERIFIER!r} column (give a verifier)")
    s = draws.length
    first = draws.confidence(VERIFIER)[:, 0]
    taus = sorted({float(np.quantile(first, q)) if q <= 1 else math.inf for q in quantiles})
    feature = (VERIFIER,)
    if rule in ("verifier_self_consistency", "verifier_best_of_k"):
        return _settings(rule, feature=feature, n=range(1, s + 1))
    if rule == "verifier_esc":
        return [x for x in _settings(rule, feature=feature, window=(2, 3, 4, 5), max_draws=range(2, s + 1))
                if dict(x.knobs)["max_draws"] % dict(x.knobs)["window"] == 0]
    if rule == "verifier_adaptive_consistency":
        return _settings(rule, feature=feature, threshold=(0.6, 0.7, 0.8, 0.9, 0.95, 0.99), max_draws=range(2, s + 1))
    if rule == "verifier_deepconf_offline":
        return _settings(rule, feature=feature, n=range(1, s + 1), eta=(10, 30, 50, 90, 100))
    if rule == "verifier_deepconf_online":
        grid = _settings(rule, feature=feature, warmup=(1, 2, 4), eta=(10, 50, 90), consensus=(0.8, 0.95, 1.0),
                         max_draws=range(2, s + 1))
        return [x for x in grid if dict(x.knobs)["warmup"] <= dict(x.knobs)["max_draws"]]
    if rule == "verifier_reasc":
        return _settings(rule, feature=feature, single_threshold=taus, threshold=(0.7, 0.9, 0.95),
                         max_draws=range(2, s + 1))
    if rule == "verifier_cges":
        return _settings(rule, feature=feature, threshold=(0.6, 0.8, 0.9, 0.95, 0.99), max_draws=range(2, s + 1))
    return _settings(rule, feature=feature, threshold=taus, redecodes=range(1, s), with_draft=(False, True))


def fit_calibrations(validation: Draws) -> dict[str, Calibration]:
    """Per confidence column, the calibration CGES and ReASC read, fitted on the validation draws
    (what ``tune_rules`` uses; score a tuned setting on test with these to reproduce its point)."""
    return {name: Calibration.fit(validation.confidence(name), draw_correct(validation))
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
