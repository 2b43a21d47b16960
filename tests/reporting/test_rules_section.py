"""The fixed-rules section from a hand-made eval_details: two rules' curves, the strongest at 1.5 and
at 4 decodes chosen on validation (interpolated), its paired interval against the runner-up, and a
learned method against the strongest rule at its own compute."""

import statistics

import pytest

from decoding_adapters.core.stats import paired_ci
from decoding_adapters.reporting.rederive import Rederivation, RunFiles, check_rules_section
from decoding_adapters.reporting.rules import (
    curve_at,
    learned_seed_curves,
    learned_verdicts,
    rule_curves,
    rules_section,
    strongest_rules_at,
)

PROBLEMS = 10


def _point(details, curve, level, decodes, correct, val_acc, val_decodes):
    name = f"{curve} (<= {level:g} decodes)"
    details["methods"][name] = {"kind": "rule", "family": "fixed rule", "curve": curve, "answer_rule": f"{curve} over "
                                "greedy, then T=0.5", "decodes_per_problem": {"answer": decodes},
                                "tokens_per_problem": {"answer": 10.0 * decodes},
                                "validation": {"accuracy": val_acc, "decodes": val_decodes, "tokens": 1.0}}
    details["per_problem"][name] = {"answer_accuracy": [[float(c)] for c in correct]}
    return name


def _details():
    details = {"config": {"confidence": 0.95}, "methods": {}, "per_problem": {}}
    # rule A: strong at little compute (validation 0.60 at 1.5), flat after 2 decodes
    _point(details, "Rule A", 1, 1.0, [1] * 5 + [0] * 5, 0.50, 1.0)
    _point(details, "Rule A", 2, 2.0, [1] * 7 + [0] * 3, 0.70, 2.0)
    # rule B: weak at little compute, strongest at 4 (validation 0.72 there, A's 0.70)
    _point(details, "Rule B", 1, 1.0, [1] * 4 + [0] * 6, 0.40, 1.0)
    _point(details, "Rule B", 2, 2.0, [1] * 5 + [0] * 5, 0.50, 2.0)
    _point(details, "Rule B", 6, 6.0, [1] * 10, 0.94, 6.0)
    # a learned method at 3 decodes per problem, scored per seed
    details["methods"]["Adapter"] = {"kind": "draft", "family": "learned", "decodes_per_problem": {"answer": 3.0}}
    details["per_problem"]["Adapter"] = {"answer_accuracy": [[1.0, 1.0]] * 6 + [[0.0, 0.0]] * 4}
    return details


def test_curves_and_the_strongest_rule_on_validation():
    details = _details()
    curves = rule_curves(details)
    assert set(curves) == {"Rule A", "Rule B"} and [p["decodes"] for p in curves["Rule B"]] == [1.0, 2.0, 6.0]
    assert curve_at([1.0, 2.0], [0.5, 0.7], 1.5) == (pytest.approx(0.6), 1.5)
    assert curve_at([1.0, 2.0], [0.5, 0.7], 4.0) == (0.7, 2.0)  # ends below: its last point
    assert curve_at([2.0], [0.5], 1.0) is None  # starts above: does not reach
    at_15 = strongest_rules_at(details, 1.5)
    # validation: A 0.60, B 0.45 at 1.5 -> A; test: A 0.6 (5 -> 7 halfway), B 0.45
    assert [r["rule"] for r in at_15] == ["Rule A", "Rule B"]
    assert at_15[0]["accuracy"] == pytest.approx(0.6) and at_15[1]["accuracy"] == pytest.approx(0.45)
    at_4 = strongest_rules_at(details, 4.0)
    # validation: B 0.72 (0.5 -> 0.94 halfway), A 0.70 at its last point (2 decodes)
    assert [r["rule"] for r in at_4] == ["Rule B", "Rule A"]
    assert at_4[0]["accuracy"] == pytest.approx(0.75) and at_4[1]["decodes"] == 2.0


def test_section_names_the_strongest_rule_with_its_paired_interval(tmp_path):
    details = _details()
    text = rules_section({"Adapter": {}}, details, tmp_path)
    assert (tmp_path / "rules_vs_compute.png").is_file() and "rules_vs_compute.png" in text
    line_15 = next(line for line in text.splitlines() if line.startswith("- At **1.5 decodes"))
    line_4 = next(line for line in text.splitlines() if line.startswith("- At **4 decodes"))
    assert "is **Rule A**" in line_15 and "Runner-up: Rule B" in line_15
    assert "is **Rule B**" in line_4 and "Runner-up: Rule A" in line_4
    # the paired interval of the strongest against the runner-up at 1.5, by hand
    a = [1.0] * 5 + [0.5, 0.5] + [0.0] * 3
    b = [1.0] * 4 + [0.5] + [0.0] * 5
    diff, low, high = paired_ci(a, b)
    assert f"difference {diff * 100:+.1f} points [{low * 100:+.1f}, {high * 100:+.1f}]" in line_15
    # the curve table: Rule A at 8 decodes stands at its last point (2 decodes)
    row_a = next(line for line in text.splitlines() if line.startswith("| Rule A"))
    assert "70.0 (at 2.00)" in row_a
    # the learned method against the strongest rule at its 3 decodes (A: 0.70 on validation, B: 0.61)
    learned = next(line for line in text.splitlines() if line.startswith("- Adapter"))
    strongest = strongest_rules_at(details, 3.0)[0]
    assert strongest["rule"] == "Rule A" and "Rule A (its curve ends at 2.00)" in learned
    assert f"{statistics.fmean(strongest['values']) * 100:.1f}" in learned


def test_no_rules_no_section(tmp_path):
    assert rules_section({}, {"methods": {"Greedy": {"kind": "greedy"}}, "per_problem": {}}, tmp_path) == ""


def test_a_tie_on_validation_is_never_broken_by_the_evaluated_problems():
    details = {"config": {"confidence": 0.95}, "methods": {}, "per_problem": {}}
    _point(details, "First", 1, 1.0, [0] * PROBLEMS, 0.5, 1.0)
    _point(details, "Second", 1, 1.0, [1] * PROBLEMS, 0.5, 1.0)  # better on test, equal on validation
    assert [r["rule"] for r in strongest_rules_at(details, 1.0)] == ["First", "Second"]


def _attempt_point(details, price, decodes_by_seed, correct_by_seed):
    """A learned curve's point: one policy per training seed, each with its own decodes per problem."""
    name = f"Attempt policy (price {price:g})"
    details["methods"][name] = {"kind": "attempt", "family": "learned", "curve": "Attempt policy",
                                "decodes_per_problem": {"answer": statistics.fmean(decodes_by_seed)}}
    details["per_problem"][name] = {"answer_accuracy": [[float(c[i]) for c in correct_by_seed]
                                                        for i in range(PROBLEMS)]}
    details["compute"] = details.get("compute", {})
    details["compute"][name] = {"decodes": {"answer": [statistics.fmean(decodes_by_seed)] * PROBLEMS,
                                            "by_seed": [list(decodes_by_seed)] * PROBLEMS}}


def _with_attempt_curve():
    details = _details()
    del details["methods"]["Adapter"], details["per_problem"]["Adapter"]
    # seed 0: 1.0 and 2.0 decodes; seed 1: 1.2 and 1.4 decodes (its curve ends below 1.5)
    _attempt_point(details, 0.2, [1.0, 1.2], [[1] * 6 + [0] * 4, [1] * 5 + [0] * 5])
    _attempt_point(details, 0.1, [2.0, 1.4], [[1] * 9 + [0], [1] * 8 + [0] * 2])
    return details


def test_learned_curves_read_each_seed_at_the_level_against_the_strongest_rule():
    details = _with_attempt_curve()
    seeds = learned_seed_curves(details)["Attempt policy"]
    assert [[p["decodes"] for p in points] for points in seeds] == [[1.0, 2.0], [1.2, 1.4]]
    at_15 = next(r for r in learned_verdicts(details) if r["at"] == 1.5)
    assert at_15["against"] == "Rule A"  # chosen on validation, as in the section's sentence
    s0, s1 = at_15["per_seed"]
    # seed 0 halfway between its two policies: problems 0-5 right in both, 6-8 right in one (0.5)
    mine0 = [1.0] * 6 + [0.5] * 3 + [0.0]
    rule = [1.0] * 5 + [0.5, 0.5] + [0.0] * 3
    assert s0["decodes"] == 1.5 and s0["accuracy"] == pytest.approx(0.75)
    assert (s0["diff"], s0["low"], s0["high"]) == pytest.approx(paired_ci(mine0, rule))
    # seed 1's curve ends at 1.4 decodes: it stands at its last point, spending less than allowed
    assert s1["decodes"] == 1.4 and s1["accuracy"] == pytest.approx(0.8)
    mine1 = [1.0] * 8 + [0.0] * 2
    pooled = paired_ci([(a + b) / 2 for a, b in zip(mine0, mine1)], rule)
    assert (at_15["pooled"]["diff"], at_15["pooled"]["low"]) == pytest.approx(pooled[:2])
    assert at_15["across_seeds"][0] == pytest.approx((s0["diff"] + s1["diff"]) / 2)
    # +15 and +20 points, but with 10 problems seed 0's interval reaches below 0: not met
    assert s0["low"] < 0 and at_15["holds"] is False


def test_learned_target_holds_only_when_every_seed_is_ahead(tmp_path):
    details = _with_attempt_curve()
    # a curve that never reaches 1.5 from below on one seed does not reach the level there
    details["compute"]["Attempt policy (price 0.2)"]["decodes"]["by_seed"] = [[1.0, 1.6]] * PROBLEMS
    details["compute"]["Attempt policy (price 0.1)"]["decodes"]["by_seed"] = [[2.0, 1.8]] * PROBLEMS
    at_15 = next(r for r in learned_verdicts(details) if r["at"] == 1.5)
    assert at_15["per_seed"][1] is None and at_15["pooled"] is None and at_15["holds"] is False
    text = rules_section({}, details, tmp_path)
    assert "does not reach" in text and "Target (>= +3 points, interval above 0, every seed): **not met**" in text


def test_learned_curve_against_the_draft_gated_adapter_at_its_compute(tmp_path):
    details = _with_attempt_curve()
    details["methods"]["Draft-gated"] = {"kind": "draft", "family": "learned", "decodes_per_problem": {"answer": 1.3}}
    details["per_problem"]["Draft-gated"] = {"answer_accuracy": [[1.0, 0.0]] * 3 + [[0.0, 1.0]] * 7}
    # a control of the gate (a fixed rule decoded as a draft-gated method) is not what the line compares with
    details["methods"]["Random gate"] = {"kind": "draft", "family": "fixed rule",
                                         "decodes_per_problem": {"answer": 1.3}}
    details["per_problem"]["Random gate"] = details["per_problem"]["Draft-gated"]
    (r,) = learned_verdicts(details, versus="Draft-gated")
    assert r["at"] == 1.3 and r["against"] == "Draft-gated"
    # seed 1 at 1.3: halfway between its 1.2 and 1.4 points, against the draft's seed-1 column
    mine1 = [1.0] * 5 + [0.5] * 3 + [0.0] * 2
    theirs1 = [0.0] * 3 + [1.0] * 7
    assert (r["per_seed"][1]["diff"], r["per_seed"][1]["low"]) == pytest.approx(paired_ci(mine1, theirs1)[:2])
    text = rules_section({}, details, tmp_path)
    assert "And against the draft-gated adapter at its own compute" in text and "Random gate's compute" not in text


def test_the_section_verdicts_rederive_from_the_per_problem_values_and_a_changed_value_shows(tmp_path):
    details = _with_attempt_curve()
    text = rules_section({}, details, tmp_path)
    out = Rederivation()
    check_rules_section(out, RunFiles(details), text)
    assert len(out.checks) == 4 and not out.mismatches  # the strongest rule and the learned curve at each level
    details["per_problem"]["Attempt policy (price 0.1)"]["answer_accuracy"][9] = [1.0, 1.0]  # a committed value edited
    changed = Rederivation()
    check_rules_section(changed, RunFiles(details), text)
    assert changed.mismatches
