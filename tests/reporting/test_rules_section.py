"""The fixed-rules section from a hand-made eval_details: two rules' curves, the strongest at 1.5 and
at 4 decodes chosen on validation (interpolated), its paired interval against the runner-up, and a
learned method against the strongest rule at its own compute."""

import statistics

import pytest

from decoding_adapters.core.stats import paired_ci
from decoding_adapters.reporting.rules import curve_at, rule_curves, rules_section, strongest_rules_at

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
