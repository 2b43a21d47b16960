"""The thin-table warning of the attempt policy: it counts the training problems with both a right
and a wrong attempt (the only ones that say which attempt to trust), fires under
``THIN_TABLE_PROBLEMS`` of them in one line that names what the strongest rule reaches on
validation, and is silent on a table with enough."""

import numpy as np

from decoding_adapters.evaluation.attempt import (
    THIN_TABLE_PROBLEMS,
    informative_problems,
    planted_attempt_table,
    rule_baselines,
    strongest_on_validation,
    thin_table_warning,
)
from decoding_adapters.evaluation.rules import greedy_then, tune_rules

RULES = ("self_consistency", "esc")


def _baselines():
    validation, _ = planted_attempt_table(60, seed=2)
    test, _ = planted_attempt_table(40, seed=3)
    return validation, rule_baselines(validation, test, RULES)


def test_informative_problems_count_right_and_mixed_attempts():
    table, _ = planted_attempt_table(30, seed=1)
    right = np.concatenate([table.correct[:, 0, :1], table.correct[:, 1, :]], axis=1)  # greedy once, the samples
    solved, mixed = informative_problems(table)
    assert solved == int(right.any(1).sum()) and mixed == int((right.any(1) & ~right.all(1)).sum())
    assert 0 < mixed <= solved <= 30


def test_the_strongest_rule_on_validation_is_the_best_validation_point_of_any_rule():
    validation, baselines = _baselines()
    name, accuracy, decodes = strongest_on_validation(baselines)
    draws = greedy_then(validation, 1)
    tuned = tune_rules(draws, draws, rules=RULES)
    best = max(p["validation"]["accuracy"] for curve in tuned.values() for p in curve["points"])
    assert accuracy == best and name.split(" (")[0] in RULES and 1.0 <= decodes <= 9.0


def test_the_warning_fires_on_a_thin_table_and_not_on_a_normal_one():
    _, baselines = _baselines()
    thin, _ = planted_attempt_table(60, seed=1)
    assert informative_problems(thin)[1] < THIN_TABLE_PROBLEMS
    line = thin_table_warning(thin, baselines, "more --train-problems give it more")
    name, accuracy, decodes = strongest_on_validation(baselines)
    assert line is not None and "\n" not in line and "too few" in line
    assert f"{name}, {100 * accuracy:.1f}% at {decodes:.2f} decodes" in line and line.endswith("give it more")
    normal, _ = planted_attempt_table(400, seed=1)
    assert informative_problems(normal)[1] >= THIN_TABLE_PROBLEMS
    assert thin_table_warning(normal, baselines, "") is None
