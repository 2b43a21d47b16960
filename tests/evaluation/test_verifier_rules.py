"""The rules that read the verifier: each hand-computed case gives what its definition says, the plain
rules' results do not change when the draws also carry the verifier's column, a study's entries mark
exactly the verifier-reading rules, and the ranking quality's figures are the textbook ones."""

import numpy as np
import pytest

from decoding_adapters.evaluation import Evaluation
from decoding_adapters.evaluation.attempt import rule_baselines
from decoding_adapters.evaluation.rules import greedy_then, tune_rules
from decoding_adapters.evaluation.sample_table import synthetic_sample_table
from decoding_adapters.evaluation.verifier import expected_calibration_error, ranking_quality
from decoding_adapters.experiments.stages_rules import add_rule_entries, rule_entries
from decoding_adapters.policies.fixed_rules import (
    RULES,
    VERIFIER_RULES,
    best_of_k,
    weighted_adaptive_consistency,
    weighted_consistency,
    weighted_esc,
)

A = np.array([[1, 2, 2, 1, 3]])
T = np.array([[10, 10, 10, 10, 10]])
V = np.array([[0.9, 0.2, 0.3, 0.1, 0.8]])


def test_weighted_consistency_and_best_of_k():
    # first 3 draws: answer 1 weighs 0.9, answer 2 weighs 0.5 -> 1 (a plain vote says 2)
    r = weighted_consistency(A, T, V, 3)
    assert r.answers.tolist() == [1] and r.decodes.tolist() == [3] and r.tokens.tolist() == [30]
    assert best_of_k(A, T, V, 5).answers.tolist() == [1]  # 0.9 is the highest
    assert best_of_k(np.array([[-1, 4]]), T[:, :2], np.array([[0.99, 0.1]]), 2).answers.tolist() == [4]


def test_weighted_esc_stops_as_esc_and_answers_by_weight():
    answers = np.array([[1, 2, 2, 2, 5, 5]])
    weights = np.array([[0.95, 0.1, 0.1, 0.1, 0.5, 0.5]])
    r = weighted_esc(answers, np.ones((1, 6)), weights, window=2, max_draws=6)
    # windows (1,2) (2,2): stops after 4 draws; weights 1: 0.95, 2: 0.3 -> 1
    assert r.decodes.tolist() == [4] and r.answers.tolist() == [1]


def test_weighted_adaptive_consistency_needs_weight_not_count():
    answers = np.array([[3, 3, 3, 3]])
    strong, weak = np.full((1, 4), 0.99), np.full((1, 4), 0.2)
    # P(Beta(1 + w, 1) > 1/2) = 1 - 0.5^(1 + w): > 0.9 once w > 2.32
    assert weighted_adaptive_consistency(answers, np.ones((1, 4)), strong, 0.9, 4).decodes.tolist() == [3]
    assert weighted_adaptive_consistency(answers, np.ones((1, 4)), weak, 0.9, 4).decodes.tolist() == [4]


def _tables():
    return synthetic_sample_table(60, seed=1), synthetic_sample_table(50, seed=2)


def _scores(table):
    rng = np.random.default_rng(0)
    return np.clip(table.correct * 0.6 + rng.uniform(0, 0.4, size=table.shape), 0, 1) * (table.answers >= 0)


def test_plain_rules_are_the_same_with_the_verifier_column():
    val, test = _tables()
    plain = tune_rules(greedy_then(val, 1), greedy_then(test, 1), rules=RULES)
    beside = tune_rules(greedy_then(val, 1, verifier=_scores(val)), greedy_then(test, 1, verifier=_scores(test)),
                        rules=RULES)
    assert plain == beside


def test_a_verifier_rule_needs_the_column():
    val, test = _tables()
    with pytest.raises(ValueError, match="verifier"):
        tune_rules(greedy_then(val, 1), greedy_then(test, 1), rules=("verifier_cges",))


def test_entries_mark_the_rules_that_read_the_verifier():
    val, test = _tables()
    plain, _ = rule_entries(val, test, ("self_consistency", "cges"))
    both, curves = rule_entries(val, test, ("self_consistency", "cges") + VERIFIER_RULES,
                                verifier=(_scores(val), _scores(test)))
    assert set(curves) == {"self_consistency", "cges", *VERIFIER_RULES}
    for entry in both.values():
        assert entry["method"].get("reads_verifier", False) == (entry["method"]["rule"] in VERIFIER_RULES)
    assert {n: e for n, e in both.items() if n in plain} == plain  # the plain points are unchanged
    evaluation = Evaluation({}, {"methods": {}, "per_problem": {}, "compute": {}})
    reading = {n: e for n, e in both.items() if e["method"].get("reads_verifier")}
    added = add_rule_entries(add_rule_entries(evaluation, plain), reading, verifier=True)
    again = add_rule_entries(added, plain)  # a rerun of the plain rules keeps the verifier's points
    assert set(again.details["methods"]) == set(plain) | set(reading)


def test_ranking_quality_figures():
    table = synthetic_sample_table(40, seed=3)
    perfect = ranking_quality(table.correct.astype(float) * (table.answers >= 0), table)
    assert perfect["all"]["auc"] == 1.0 and perfect["all"]["brier"] == 0.0
    by_family = ranking_quality(_scores(table), table, ["a", "b"] * 20)
    assert set(by_family) == {"all", "a", "b"}
    assert by_family["a"]["attempts"] + by_family["b"]["attempts"] == by_family["all"]["attempts"]
    # two bins: 0.25 holds 2 attempts (one right), 0.75 holds 2 (both right): 0.5 * 0.25 + 0.5 * 0.25
    assert expected_calibration_error(np.array([0.25, 0.25, 0.75, 0.75]), np.array([0, 1, 1, 1])) == 0.25


def test_the_attempt_policys_baselines_can_include_the_verifier_rules():
    val, test = _tables()
    curves = rule_baselines(val, test, ("cges", "verifier_cges", "verifier_best_of_k"), (_scores(val), _scores(test)))
    assert {c.name.split(" (")[0] for c in curves} == {"cges", "verifier_cges", "verifier_best_of_k"}
