"""The accuracy-per-compute view of the report, on synthetic eval details: points, the table with
decodes and tokens per problem, who wins at each compute level, and the figure."""

from __future__ import annotations

import random

from decoding_adapters.evaluation import EvalConfig
from decoding_adapters.evaluation.runner import _summarise
from decoding_adapters.reporting.report import (
    compute_points,
    compute_section,
    compute_table,
    compute_verdicts,
    method_info,
    write_report,
)

KS = (1, 2, 4)
# name: (kind, role, success probability per problem shift, decodes per k, tokens per k)
METHODS = {
    "Greedy": ("greedy", "greedy", 0.0, {1: 1, 2: 1, 4: 1}, {1: 30, 2: 30, 4: 30}),
    "Stop at first answer": ("greedy", "stop at first answer", 0.08, {1: 1, 2: 1, 4: 1}, {1: 20, 2: 20, 4: 20}),
    "Best": ("static", "best", -0.05, {1: 1, 2: 2, 4: 4}, {1: 30, 2: 64, 4: 128}),
    "Draft-gated": ("custom", "draft-gated", 0.6, {1: 1.4, 2: 2.4, 4: 4.4}, {1: 44, 2: 76, 4: 140}),
}


def synthetic(problems: int = 40, seeds: int = 2, with_compute: bool = True):
    rng = random.Random(0)
    cfg = EvalConfig(k_values=KS, seeds=seeds, token_budget=48)
    base = [rng.uniform(0.1, 0.7) for _ in range(problems)]
    results, details = {}, {"config": {"k_values": list(KS), "seeds": seeds, "confidence": 0.95},
                            "problems": [{"id": f"p{i}"} for i in range(problems)], "methods": {},
                            "per_problem": {}, "summary": {}}
    for name, (kind, role, shift, decodes, tokens) in METHODS.items():
        deterministic = kind == "greedy"
        per_problem = {}
        for k in KS:
            rows = []
            for i in range(problems):
                p = min(max(base[i] + shift, 0.0), 1.0)
                if deterministic:
                    rows.append([float(rng.random() < p)] * seeds)
                else:
                    rows.append([1.0 - (1.0 - p) ** k if rng.random() < 0.9 else 0.0 for _ in range(seeds)])
            per_problem[f"pass@{k}"] = rows
        per_problem["mean_length"] = [[float(tokens[1])] * seeds for _ in range(problems)]
        results[name], details["summary"][name] = _summarise(per_problem, cfg)
        details["per_problem"][name] = per_problem
        details["methods"][name] = {"kind": kind, "role": role, "level": "static", "actions": ["greedy"]}
        if with_compute:
            details["methods"][name]["decodes_per_problem"] = {str(k): float(v) for k, v in decodes.items()}
            details["methods"][name]["tokens_per_problem"] = {str(k): float(v) for k, v in tokens.items()}
    return results, details


def test_points_and_table_carry_the_compute_of_every_method_and_k():
    results, details = synthetic()
    points = compute_points(results, details)
    assert len(points) == len(METHODS) * len(KS)
    draft = {p["k"]: p for p in points if p["method"] == "Draft-gated"}
    assert draft[1]["decodes"] == 1.4 and draft[4]["tokens"] == 140.0
    assert draft[2]["mean"] == results["Draft-gated"]["pass@2"]["mean"]
    table = compute_table(results, details)
    assert "decodes / problem (k = 1 · 2 · 4)" in table and "tokens / problem (k = 1 · 2 · 4)" in table
    assert "| Best |" in table and "1.00 · 2.00 · 4.00" in table and "30.0 · 64.0 · 128.0" in table
    assert "1.40 · 2.40 · 4.40" in table


def test_the_winner_at_each_level_spends_no_more_than_the_level():
    results, details = synthetic()
    lines = compute_verdicts(results, details)
    levels = sorted({d for (_, _, _, decodes, _) in METHODS.values() for d in decodes.values()})
    assert len(lines) == len(levels)
    points = compute_points(results, details)
    for level, line in zip(levels, lines):
        affordable = [p for p in points if p["decodes"] <= level + 1e-9]
        top = max(p["mean"] for p in affordable)
        winner = line.split(": ", 1)[1].split("**")[0]
        assert max(p["mean"] for p in affordable if p["method"] == winner) == top, (level, line)
        assert line.startswith(f"- **≤ {level:g} decodes / problem")
        assert "paired 95% CI" in line
    # at one decode the two-pass method (1.4 decodes) is not allowed; from 1.4 on it is
    assert "Draft-gated" not in lines[0]
    assert "**≤ 1.4 decodes / problem: Draft-gated**" in lines[1]
    assert "a significant lead" in lines[1]  # about +40 points on 40 problems


def test_nothing_is_claimed_without_measured_compute(tmp_path):
    results, details = synthetic(with_compute=False)
    assert compute_points(results, details) == [] and compute_table(results, details) == ""
    assert compute_verdicts(results, details) == [] and compute_section(results, details) == ""
    report = write_report(tmp_path, results, details).read_text()
    assert "## Accuracy per compute" not in report and not (tmp_path / "pass_vs_compute.png").exists()


def test_report_has_the_section_and_the_figure(tmp_path):
    results, details = synthetic()
    report = write_report(tmp_path, results, details).read_text()
    assert "## Accuracy per compute" in report and "![Accuracy per compute](pass_vs_compute.png)" in report
    assert (tmp_path / "pass_vs_compute.png").stat().st_size > 10_000
    assert method_info(results, None)["Stop at first answer"]["role"] == "stop at first answer"


def test_best_line_says_when_stopping_was_a_candidate():
    from decoding_adapters.reporting.report import best_line

    results, details = synthetic()
    details["methods"]["Best"]["k_actions"] = {"1": "greedy, stop at first answer", "2": "T=1", "4": "T=1"}
    assert "(every candidate and greedy)" in best_line(results, details)
    details["methods"]["Best"]["stop_candidate"] = True
    line = best_line(results, details)
    assert "greedy stopped at its first answer" in line and "Pass@1 `greedy, stop at first answer`" in line
