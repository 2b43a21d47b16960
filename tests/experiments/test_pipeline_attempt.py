"""The pipeline's attempt-policy stage on the tiny model: after the fixed rules, a table of training
problems, one policy per price trained on it and scored on the rules' evaluation table, added to the
evaluation as ``learned`` entries that the report's fixed-rules section sets against the strongest
rule at their own compute; the rules' entries stay."""

import json
from dataclasses import replace
from pathlib import Path

import pytest

from decoding_adapters.evaluation import EvalConfig, greedy_method
from decoding_adapters.experiments import pipeline, stages_rules
from decoding_adapters.experiments.study_config import AttemptStageConfig, RulesConfig, StudyConfig
from decoding_adapters.policies.networks import load_adapter
from decoding_adapters.reporting.rules import rules_section
from decoding_adapters.tasks import get_task


def _cfg(**attempt):
    return StudyConfig(token_budget=4, seeds=2, batch_rows=6, eval=EvalConfig(k_values=(1,)), eval_problems=3,
                       rules=RulesConfig(enabled=True, samples=2, problems=4, rules=("self_consistency", "esc")),
                       attempt=AttemptStageConfig(enabled=True, train_problems=5, steps=2, **attempt))


def test_the_attempt_stage_needs_the_rules_tables():
    with pytest.raises(ValueError, match="rules"):
        replace(_cfg(), rules=RulesConfig(enabled=False))
    with pytest.raises(ValueError, match="hidden"):
        _cfg(features=("confidence", "hidden"))


def test_attempt_stage_adds_one_learned_entry_per_price_with_a_policy_per_training_seed(tmp_path, tiny_lm):
    cfg, task = _cfg(prices=(0.01, 0.5)), get_task("arithmetic")
    problems = task.load("test")[: cfg.eval_problems]
    evaluation = pipeline.evaluate_methods(tiny_lm, task, problems, [greedy_method()], cfg, tmp_path / "eval",
                                           meta={}, progress=False)
    ruled = stages_rules.fixed_rules(tiny_lm, task, cfg, tmp_path / "rules", evaluation, problems)
    done = stages_rules.attempt_stage(tiny_lm, task, cfg, tmp_path / "attempt", tmp_path / "rules", ruled, problems)
    methods = done.details["methods"]
    learned = {n: m for n, m in methods.items() if m.get("family") == "learned"}
    assert sorted(learned) == ["Attempt policy (price 0.01)", "Attempt policy (price 0.5)"]
    rules = [n for n, m in methods.items() if m.get("family") == "fixed rule"]
    assert rules and rules == [n for n, m in ruled.details["methods"].items() if m.get("family") == "fixed rule"]
    train = stages_rules.SampleTable.load(tmp_path / "attempt" / "train")
    assert train.problem_ids == [p.id for p in task.load("train")[:5]]
    for name, m in learned.items():
        rows = done.details["per_problem"][name]["answer_accuracy"]
        decodes = done.details["compute"][name]["decodes"]
        assert len(rows) == len(problems) and all(len(r) == cfg.seeds for r in rows)  # [problem][training seed]
        assert all(1 <= d <= 3 for per_seed in decodes["by_seed"] for d in per_seed)
        assert decodes["answer"] == [sum(r) / len(r) for r in decodes["by_seed"]]
        assert m["decodes_per_problem"]["answer"] == pytest.approx(sum(decodes["answer"]) / len(problems))
        assert [run["seed"] for run in m["per_seed"]] == [0, 1] and 0.0 <= m["seed_agreement"] <= 1.0
        for j, run in enumerate(m["per_seed"]):
            _, config = load_adapter(run["source"])  # each policy it scored, loadable as an adapter
            assert config.kind == "attempt" and config.training["price"] == m["price"]
            assert config.training["seed"] == j and run["source"].endswith(f"price-{m['price']:g}-seed-{j}")
    text = rules_section(done.results, done.details, tmp_path / "report")
    assert "Attempt policy (price 0.01)" in text and "strongest fixed rule at that compute" in text
    # a second run reads the tables and the trained policies back
    again = stages_rules.attempt_stage(tiny_lm, task, cfg, tmp_path / "attempt", tmp_path / "rules", ruled, problems)
    assert again.details["per_problem"] == done.details["per_problem"]


def test_with_several_sampled_arms_the_stage_adds_the_best_single_arm_policy(tmp_path, tiny_lm):
    selected = Path(__file__).resolve().parents[2] / "docs" / "reproduce" / "actions.json"
    cfg = replace(_cfg(prices=(0.05, 0.3)), seeds=1)
    cfg = replace(cfg, rules=replace(cfg.rules, decoders=str(selected), decoder_count=3))
    task = get_task("arithmetic")
    problems = task.load("test")[: cfg.eval_problems]
    evaluation = pipeline.evaluate_methods(tiny_lm, task, problems, [greedy_method()], cfg, tmp_path / "eval",
                                           meta={}, progress=False)
    ruled = stages_rules.fixed_rules(tiny_lm, task, cfg, tmp_path / "rules", evaluation, problems)
    done = stages_rules.attempt_stage(tiny_lm, task, cfg, tmp_path / "attempt", tmp_path / "rules", ruled, problems)
    assert stages_rules.SampleTable.load(tmp_path / "attempt" / "train").arm_names == [a.name for a in cfg.rules.arms]
    learned = {n: m for n, m in done.details["methods"].items() if m.get("family") == "learned"}
    single = "Attempt policy, best single arm"
    assert sorted(learned) == ["Attempt policy (price 0.05)", "Attempt policy (price 0.3)", f"{single} (price 0.05)",
                               f"{single} (price 0.3)"]
    assert learned["Attempt policy (price 0.05)"]["parts"] == ["verifier", "stop", "decoder"]
    assert learned[f"{single} (price 0.05)"]["parts"] == ["verifier", "stop"]
    (ablation,) = json.loads((tmp_path / "attempt" / "curve.json").read_text())["ablations"]
    assert ablation["name"] == "decoder choice" and len(ablation["rows"]) == 2
    assert ablation["rows"][0]["best_arm"] in [a.name for a in cfg.rules.arms[1:]]
    for run in learned[f"{single} (price 0.05)"]["per_seed"]:  # every policy it scored is kept, loadable
        _, config = load_adapter(run["source"])
        assert config.kind == "attempt" and len(config.training["features"]) and "single-arm" in run["source"]
    kept = sorted(p.name for p in (tmp_path / "attempt" / "single-arm").iterdir())
    assert len(kept) == 3 * 2 and all(name.startswith("arm-") for name in kept)  # 3 arms x 2 prices x 1 seed


def test_the_studys_own_selection_gives_the_arms_once_it_ran(tmp_path):
    with pytest.raises(ValueError, match="decoder_count"):
        RulesConfig(enabled=True, decoders="selection")
    rules = RulesConfig(enabled=True, decoders="selection", decoder_count=3, samples=8)
    assert rules.rows_per_problem == 1 + 3 * 8  # planned before the selection exists
    with pytest.raises(ValueError, match="selection ran"):
        rules.arms  # noqa: B018
    cfg = replace(_cfg(), rules=rules)
    selected = Path(__file__).resolve().parents[2] / "docs" / "reproduce" / "actions.json"
    resolved = cfg.with_selected_decoders(selected)
    assert [a.name for a in resolved.rules.arms] == json.loads(selected.read_text())["names"][:4]
    assert resolved.with_selected_decoders(tmp_path / "other.json") == resolved
    assert _cfg().with_selected_decoders(selected) == _cfg()


def test_the_stage_warns_once_when_its_training_table_is_too_thin(tmp_path, tiny_lm, caplog, monkeypatch):
    cfg, task = replace(_cfg(prices=(0.05, 0.3)), seeds=1), get_task("arithmetic")
    problems = task.load("test")[: cfg.eval_problems]
    evaluation = pipeline.evaluate_methods(tiny_lm, task, problems, [greedy_method()], cfg, tmp_path / "eval",
                                           meta={}, progress=False)
    ruled = stages_rules.fixed_rules(tiny_lm, task, cfg, tmp_path / "rules", evaluation, problems)
    caplog.set_level("WARNING")
    stages_rules.attempt_stage(tiny_lm, task, cfg, tmp_path / "attempt", tmp_path / "rules", ruled, problems)
    warned = [r.getMessage() for r in caplog.records if "too few" in r.getMessage()]
    assert len(warned) == 1  # once, not once per price
    assert "the strongest on validation: " in warned[0] and "--attempt.train-problems" in warned[0]
    assert json.loads((tmp_path / "attempt" / "curve.json").read_text())["warning"] == warned[0]

    from decoding_adapters.evaluation import attempt

    monkeypatch.setattr(attempt, "THIN_TABLE_PROBLEMS", 0)  # the same 5 problems counted as enough
    caplog.clear()
    stages_rules.attempt_stage(tiny_lm, task, cfg, tmp_path / "attempt", tmp_path / "rules", ruled, problems)
    assert "too few" not in caplog.text
    assert "warning" not in json.loads((tmp_path / "attempt" / "curve.json").read_text())
