"""A published study's trained parts re-score from its committed files: the verifier's quality and
every attempt policy's per-problem answers and decodes (the single-arm ones included) come out of
the published weights and tables as the study reported them, and a changed weight is caught."""

import json
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

from decoding_adapters.cli.study import publish
from decoding_adapters.core.files import write_json
from decoding_adapters.evaluation import EvalConfig, greedy_method
from decoding_adapters.evaluation.rescore import rescore
from decoding_adapters.experiments import pipeline, stages_rules
from decoding_adapters.experiments.study_config import (
    AttemptStageConfig,
    RulesConfig,
    StudyConfig,
    VerifierStageConfig,
)
from decoding_adapters.tasks import get_task

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

SELECTED = Path(__file__).resolve().parents[2] / "docs" / "reproduce" / "actions.json"


@pytest.fixture(scope="module")
def published(tmp_path_factory, tiny_lm):
    out = tmp_path_factory.mktemp("run")
    cfg = StudyConfig(token_budget=4, seeds=2, batch_rows=8, eval=EvalConfig(k_values=(1,)), eval_problems=4,
                      rules=RulesConfig(enabled=True, samples=2, problems=4, rules=("self_consistency",),
                                        decoders=str(SELECTED), decoder_count=2),
                      verifier=VerifierStageConfig(enabled=True, train_problems=5, rules=("verifier_best_of_k",)),
                      attempt=AttemptStageConfig(enabled=True, train_problems=5, steps=2, prices=(0.05, 0.3)))
    task = get_task("arithmetic")
    problems = task.load("test")[: cfg.eval_problems]
    evaluation = pipeline.evaluate_methods(tiny_lm, task, problems, [greedy_method()], cfg, out / "eval",
                                           meta={}, progress=False)
    evaluation = stages_rules.fixed_rules(tiny_lm, task, cfg, out / "rules", evaluation, problems)
    evaluation = stages_rules.verifier_stage(tiny_lm, task, cfg, out / "verifier", out / "rules", evaluation,
                                             problems, train_table=out / "attempt" / "train")
    evaluation = stages_rules.attempt_stage(tiny_lm, task, cfg, out / "attempt", out / "rules", evaluation,
                                            problems, verifier_dir=out / "verifier" / "verifier")
    (out / "report").mkdir()
    write_json(out / "eval" / "eval_details.json", evaluation.details)
    target = tmp_path_factory.mktemp("published")
    publish(out, target)
    return target


def test_every_trained_part_re_scores_to_the_published_figures(published):
    checks = rescore(published)
    assert checks and all(c.ok for c in checks), [c for c in checks if not c.ok]
    names = {c.where.split(", seed")[0] for c in checks}
    assert "Attempt policy (price 0.05)" in names and "Attempt policy, best single arm (price 0.3)" in names
    assert any(c.where.startswith("verifier") and c.where.endswith("auc") for c in checks)
    assert (published / "policies" / "single-arm").is_dir() and not list(published.rglob("checkpoint*"))


def test_a_changed_weight_or_a_missing_policy_is_caught(published, tmp_path):
    import shutil

    folder = tmp_path / "copy"
    shutil.copytree(published, folder)
    first = sorted((folder / "policies").glob("price-*"))[0]
    weights = load_file(str(first / "adapter.safetensors"))
    weights = {k: (v * -3.0 if v.is_floating_point() and v.ndim == 2 else v) for k, v in weights.items()}
    save_file(weights, str(first / "adapter.safetensors"))
    verifier = load_file(str(folder / "verifier" / "verifier.safetensors"))
    save_file({k: v.flip(0) if v.is_floating_point() and v.ndim == 2 else v for k, v in verifier.items()},
              str(folder / "verifier" / "verifier.safetensors"))
    shutil.rmtree(sorted((folder / "policies" / "single-arm").iterdir())[0])
    bad = [c for c in rescore(folder) if not c.ok]
    assert any(c.where.startswith("verifier") for c in bad)
    assert any("gap" in c.derived for c in bad)
    details = json.loads((folder / "eval_details.json").read_text())
    assert details["sentence_levels"] == [1.5, 2.5, 4.0]
    assert {p["family"] for p in details["problems"]} <= {"add_word", "add_2digit", "add_1digit", "mul_1digit"}
