"""The pipeline's fixed-rules stage on the tiny model: two sample tables built under the study (the
evaluation's table holds the evaluated problems), every rule's tuned points added to the evaluation
in its own format, killed midway and resumed with the written chunks reused, and a stored evaluation
still read back after the rules joined it."""

import json
from dataclasses import replace

import pytest

from decoding_adapters.evaluation import EvalConfig, greedy_method
from decoding_adapters.experiments import pipeline, stages_rules
from decoding_adapters.experiments.study_config import RulesConfig, StudyConfig
from decoding_adapters.policies.fixed_rules import RULE_LABELS, RULES
from decoding_adapters.reporting.compute import answer_points
from decoding_adapters.tasks import get_task


def _cfg(**rules):
    return StudyConfig(token_budget=4, seeds=2, batch_rows=6, eval=EvalConfig(k_values=(1, 2)), eval_problems=3,
                       rules=RulesConfig(enabled=True, samples=2, problems=4, **rules))


def test_rules_config_checks():
    with pytest.raises(ValueError):
        RulesConfig(rules=("nope",))
    with pytest.raises(ValueError):
        RulesConfig(temperatures=())
    assert [a.is_greedy for a in RulesConfig(temperatures=(0.5, 1.0)).arms] == [True, False, False]


def test_rules_stage_adds_every_rule_and_resumes_after_a_kill(tmp_path, tiny_lm):
    cfg, task = _cfg(), get_task("arithmetic")
    problems = task.load("test")[: cfg.eval_problems]
    evaluation = pipeline.evaluate_methods(tiny_lm, task, problems, [greedy_method()], cfg, tmp_path / "eval",
                                           meta={}, progress=False)
    calls = {"n": 0}

    def dying(done, total):  # killed after the first chunk of the validation table (2 problems of 4)
        calls["n"] += 1
        if calls["n"] == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        stages_rules.fixed_rules(tiny_lm, task, cfg, tmp_path / "rules", evaluation, problems, on_chunk=dying)
    first = tmp_path / "rules" / "validation" / "chunk-00000.npz"
    assert first.is_file() and not (tmp_path / "rules" / "test").exists()
    stamp = first.stat().st_mtime_ns
    done = stages_rules.fixed_rules(tiny_lm, task, cfg, tmp_path / "rules", evaluation, problems)
    assert first.stat().st_mtime_ns == stamp  # the chunk written before the kill was kept
    validation = stages_rules.SampleTable.load(tmp_path / "rules" / "validation")
    test = stages_rules.SampleTable.load(tmp_path / "rules" / "test")
    assert validation.shape == (4, 2, 2) and test.problem_ids == [p.id for p in problems]
    assert validation.problem_ids == [p.id for p in task.load("validation")[:4]]

    methods = done.details["methods"]
    rules = {n: m for n, m in methods.items() if m.get("family") == "fixed rule"}
    assert {m["curve"] for m in rules.values()} == {RULE_LABELS[r] for r in RULES}
    for name, m in rules.items():
        rows = done.details["per_problem"][name]["answer_accuracy"]
        assert len(rows) == len(problems) and all(len(r) == 1 for r in rows)  # one table: seed 0
        per_problem = done.details["compute"][name]["decodes"]["answer"]
        assert m["decodes_per_problem"]["answer"] == pytest.approx(sum(per_problem) / len(per_problem))
        assert 1.0 <= m["decodes_per_problem"]["answer"] <= 3.0  # greedy, then at most 2 samples
        assert m["validation"]["decodes"] <= m["compute_level"] + 1e-9  # chosen within its level on validation
    # the curve's points are scored like tune_rules scored them
    curves = json.loads((tmp_path / "rules" / "curves.json").read_text())["rules"]
    for rule, curve in curves.items():
        for point in curve["points"]:
            name = f"{RULE_LABELS[rule]} (<= {point['level']:g} decodes)"
            rows = done.details["per_problem"][name]["answer_accuracy"]
            assert sum(r[0] for r in rows) / len(rows) == pytest.approx(point["test"]["accuracy"])
    assert done.results == evaluation.results  # results.json keeps the evaluation's own rows
    lines = {p["line"] for p in answer_points(done.results, done.details)}
    assert "Greedy" in lines and "ESC" in lines  # the lead figure draws each rule as one curve

    # the evaluation with the rules in it still stands for itself (not decoded again), and the
    # stage run again replaces its points rather than adding more
    done.write(tmp_path / "eval")
    again = pipeline.evaluate_methods(tiny_lm, task, problems, [greedy_method()], cfg, tmp_path / "eval", meta={},
                                      progress=False)
    assert set(again.details["methods"]) == set(methods)
    twice = stages_rules.fixed_rules(tiny_lm, task, cfg, tmp_path / "rules", again, problems)
    assert set(twice.details["methods"]) == set(methods)


def test_rules_stage_refuses_other_problems(tmp_path, tiny_lm):
    cfg, task = _cfg(rules=("self_consistency",)), get_task("arithmetic")
    problems = task.load("test")[:2]
    evaluation = pipeline.evaluate_methods(tiny_lm, task, problems, [greedy_method()], replace(cfg, eval_problems=2),
                                           tmp_path / "eval", meta={}, progress=False)
    with pytest.raises(ValueError, match="evaluated problems"):
        stages_rules.fixed_rules(tiny_lm, task, cfg, tmp_path / "rules", evaluation, task.load("test")[1:3])


def test_a_run_started_before_the_rules_stage_resumes_with_it(tmp_path):
    from dataclasses import asdict

    from decoding_adapters.experiments.demo import OPTIONS_FILE, check_same_run
    from decoding_adapters.experiments.presets import REPRODUCE_SIZES

    cfg = REPRODUCE_SIZES["full"]
    requested = {"model": "smollm2", "minutes": None, "study": asdict(cfg)}
    older = json.loads(json.dumps(requested))
    del older["study"]["rules"]  # recorded before the stage existed
    (tmp_path / OPTIONS_FILE).write_text(json.dumps(older))
    check_same_run(tmp_path, requested)  # not a change
    with pytest.raises(ValueError, match="study.seeds"):
        check_same_run(tmp_path, {**requested, "study": asdict(replace(cfg, seeds=1))})
