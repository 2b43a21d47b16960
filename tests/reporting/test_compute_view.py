"""The accuracy-per-compute view of the report, on synthetic eval details: points, the table with
answer accuracy, decodes and tokens per problem, who leads at each compute level (answers at the
same compute only), verdicts at matched compute, and the figure the report leads with."""

from __future__ import annotations

import random
import statistics

import pytest

from decoding_adapters.evaluation import EvalConfig
from decoding_adapters.evaluation.aggregate import summarise
from decoding_adapters.reporting.report import (
    answer_points,
    compute_points,
    compute_section,
    compute_table,
    compute_verdicts,
    method_info,
    verdicts,
    write_report,
)
from decoding_adapters.reporting.verdicts import answer_at, matched_compare, per_problem_means

KS = (1, 2, 4)
# name: (kind, role, success probability per problem shift, decodes per k, tokens per k)
METHODS = {
    "Greedy": ("greedy", "greedy", 0.08, {1: 1, 2: 1, 4: 1}, {1: 20, 2: 20, 4: 20}),
    "Greedy to the budget": ("greedy", "greedy to the budget", 0.0, {1: 1, 2: 1, 4: 1}, {1: 30, 2: 30, 4: 30}),
    "Best": ("static", "best", -0.05, {1: 1, 2: 2, 4: 4}, {1: 30, 2: 64, 4: 128}),
    "Draft-gated": ("draft", "draft-gated", 0.6, {1: 1.4, 2: 2.4, 4: 4.4}, {1: 44, 2: 76, 4: 140}),
}


def synthetic(problems: int = 40, seeds: int = 2, with_compute: bool = True):
    rng = random.Random(0)
    cfg = EvalConfig(k_values=KS, seeds=seeds, token_budget=48)
    base = [rng.uniform(0.1, 0.7) for _ in range(problems)]
    results, details = {}, {"config": {"k_values": list(KS), "seeds": seeds, "confidence": 0.95,
                                       "stop_at_answer": True},
                            "problems": [{"id": f"p{i}"} for i in range(problems)], "methods": {},
                            "per_problem": {}, "summary": {}}
    for name, (kind, role, shift, decodes, tokens) in METHODS.items():
        deterministic = kind == "greedy"
        per_problem = {}
        for k in KS:
            rows, answers = [], []
            for i in range(problems):
                p = min(max(base[i] + shift, 0.0), 1.0)
                if deterministic:
                    rows.append([float(rng.random() < p)] * seeds)
                    answers.append(rows[-1])
                else:
                    rows.append([1.0 - (1.0 - p) ** k if rng.random() < 0.9 else 0.0 for _ in range(seeds)])
                    answers.append([float(rng.random() < min(p + 0.03 * k, 1.0)) for _ in range(seeds)])
            per_problem[f"pass@{k}"] = rows
            per_problem[f"answer_accuracy@{k}"] = answers
        per_problem["mean_length"] = [[float(tokens[1])] * seeds for _ in range(problems)]
        results[name], details["summary"][name] = summarise(per_problem, cfg)
        details["per_problem"][name] = {**per_problem, "answer_accuracy": per_problem["answer_accuracy@1"]}
        details["methods"][name] = {"kind": kind, "role": role, "level": "static", "actions": ["greedy"]}
        if with_compute:
            details["methods"][name]["decodes_per_problem"] = {
                **{str(k): float(v) for k, v in decodes.items()}, "answer": float(decodes[1])}
            details["methods"][name]["tokens_per_problem"] = {
                **{str(k): float(v) for k, v in tokens.items()}, "answer": float(tokens[1])}
    details["methods"]["Greedy to the budget"]["stop_at_answer"] = False
    return results, details


def with_rule(details, decodes: float = 1.2):
    """A fixed rule at one setting, added to eval_details only (no results entry), as the rules do."""
    rng = random.Random(1)
    rows = [[float(rng.random() < 0.9)] * 2 for _ in details["problems"]]
    details["methods"]["Rule"] = {"kind": "static", "role": "rule", "family": "fixed rule",
                                  "decodes_per_problem": {"answer": decodes}, "tokens_per_problem": {"answer": 40.0}}
    details["per_problem"]["Rule"] = {"answer_accuracy": rows}
    return details


def test_points_and_table_carry_the_compute_of_every_method_and_k():
    results, details = synthetic()
    points = compute_points(results, details)
    assert len(points) == len(METHODS) * len(KS)
    draft = {p["k"]: p for p in points if p["method"] == "Draft-gated"}
    assert draft[1]["decodes"] == 1.4 and draft[4]["tokens"] == 140.0
    assert draft[2]["mean"] == results["Draft-gated"]["pass@2"]["mean"]
    table = compute_table(results, details)
    assert "decodes / problem (B = k = 1 · 2 · 4)" in table and "tokens / problem (B = k = 1 · 2 · 4)" in table
    assert "| Method | Answer (B=1) | Answer (B=2) | Answer (B=4) | Pass@1 |" in table
    assert "| Best |" in table and "1.00 · 2.00 · 4.00" in table and "30.0 · 64.0 · 128.0" in table
    assert "1.40 · 2.40 · 4.40" in table


def test_answer_points_hold_every_method_of_the_details_a_rule_included():
    results, details = synthetic()
    details = with_rule(details)
    points = answer_points(results, details)
    rule = [p for p in points if p["method"] == "Rule"]
    assert len(rule) == 1 and rule[0]["k"] is None and rule[0]["decodes"] == 1.2 and rule[0]["line"] == "Rule"
    details["methods"]["Rule"]["curve"] = "Self-consistency"  # one setting of a rule traced as a curve
    assert [p["line"] for p in answer_points(results, details) if p["method"] == "Rule"] == ["Self-consistency"]
    best = {p["k"]: p for p in points if p["method"] == "Best"}
    assert best[4]["mean"] == results["Best"]["answer_accuracy@4"]["mean"] and best[4]["decodes"] == 4.0


def test_each_level_ranks_answers_at_the_same_compute_only():
    results, details = synthetic()
    details = with_rule(details)
    lines = compute_verdicts(results, details)
    assert [line.split(" decodes")[0] for line in lines] == \
        ["- **1.00", "- **1.20", "- **1.40", "- **2.00", "- **2.40", "- **4.00", "- **4.40"]
    for line in lines:
        level = float(line.split("**")[1].split(" ")[0])
        values = {}
        for name in [*METHODS, "Rule"]:
            found = answer_at(details, name, level)
            if found is not None:
                values[name] = statistics.fmean(found[0])
        winner = line.split(": ", 1)[1].split("**")[0]
        assert values[winner] == max(values.values()), line
    # at one decode the two-pass method (1.4 decodes) is not ranked; at 1.4 it is, against Best's curve
    # interpolated between B = 1 and B = 2; Greedy (one point, at 1 decode) is not ranked there
    assert "Draft-gated" not in lines[0] and "Rule" not in lines[0]
    assert "**1.40 decodes / problem: Draft-gated**" in lines[2] and "interpolated" in lines[2]
    assert "a significant lead" in lines[2]
    assert "Greedy" not in lines[2].replace("Greedy to the budget", "")


def test_nothing_is_claimed_without_measured_compute(tmp_path):
    results, details = synthetic(with_compute=False)
    assert compute_points(results, details) == [] and compute_table(results, details) == ""
    assert compute_verdicts(results, details) == [] and compute_section(results, details) == ""
    report = write_report(tmp_path, results, details).read_text()
    assert "## Accuracy per compute" not in report and not (tmp_path / "pass_vs_compute.png").exists()
    assert not (tmp_path / "answer_vs_compute.png").exists()


def test_report_leads_with_the_answer_figure(tmp_path):
    results, details = synthetic()
    report = write_report(tmp_path, results, details).read_text()
    lead = "![Answer accuracy per compute](answer_vs_compute.png)"
    assert lead in report and report.index(lead) < report.index("## Verdict") < report.index("## Accuracy per compute")
    assert report.count(lead) == 1
    assert (tmp_path / "answer_vs_compute.png").stat().st_size > 10_000
    assert "![Accuracy per compute](pass_vs_compute.png)" in report
    assert method_info(results, details)["Greedy to the budget"]["role"] == "greedy to the budget"
    assert method_info(results, None)["Greedy to the budget"]["role"] == ""  # nothing guessed from a name


def test_a_draft_gated_verdict_compares_only_at_matched_compute():
    results, details = synthetic()
    lines = verdicts(results, details)
    greedy = next(line for line in lines if line.startswith("- **Draft-gated is not compared with Greedy**"))
    # Greedy spends 1 decode at every k, the draft-gated adapter 1.4 / 2.4 / 4.4: nothing is matched
    assert not any("beats Greedy" in line for line in lines)
    assert "Pass@4 at 4.40 decodes against 1.00 decodes" in greedy
    assert "Answer (B=1) at 1.40 decodes against 1.00 decodes" in greedy
    # Best's answers at B = 1, 2, 4 cost 1, 2, 4 decodes: its curve is interpolated at 1.4 and 2.4 (4.4 is past it)
    found = {m: matched_compare(results, details, "Draft-gated", "Best", m, 0.95)
             for m in ("pass@1", "pass@4", "answer_accuracy@1", "answer_accuracy@2", "answer_accuracy@4")}
    assert not found["pass@1"]["matched"] and not found["pass@4"]["matched"]  # 1.4 against 1, 4.4 against 4
    assert found["answer_accuracy@1"]["matched"] and found["answer_accuracy@1"]["how"] == \
        "interpolated between its Answer (B=1) and Answer (B=2)"
    a = per_problem_means(details, "Draft-gated", "answer_accuracy@1")
    b1, b2 = (per_problem_means(details, "Best", f"answer_accuracy@{k}") for k in (1, 2))
    want = statistics.fmean(x - (0.6 * y + 0.4 * z) for x, y, z in zip(a, b1, b2))  # 1.4 is 40% of the way to 2
    assert found["answer_accuracy@1"]["diff"] == pytest.approx(want)
    assert found["answer_accuracy@2"]["how"].startswith("interpolated between its Answer (B=2)")
    assert not found["answer_accuracy@4"]["matched"] and found["answer_accuracy@4"]["span"] == (1.0, 4.0)
    # within 5% is matched compute: 1.04 decodes against 1
    details["methods"]["Draft-gated"]["decodes_per_problem"]["1"] = 1.04
    assert matched_compare(results, details, "Draft-gated", "Greedy", "pass@1", 0.95)["matched"]
    details["methods"]["Draft-gated"]["decodes_per_problem"]["1"] = 1.06
    assert not matched_compare(results, details, "Draft-gated", "Greedy", "pass@1", 0.95)["matched"]


def test_best_line_names_the_strategy_per_k():
    from decoding_adapters.reporting.report import best_line

    results, details = synthetic()
    details["methods"]["Best"]["k_actions"] = {"1": "greedy", "2": "T=1", "4": "T=1"}
    line = best_line(results, details)
    assert "(every candidate and greedy)" in line and "Pass@1 `greedy`" in line
