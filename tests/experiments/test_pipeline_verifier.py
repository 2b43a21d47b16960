"""The study's verifier stage and Best chosen on more validation problems: the verifier's rules join
the plain rules' points marked reads_verifier (a rerun of either stage keeps the other's), with the
verifier's quality per family; and Best is the one the larger problem set says, among the finalists
the coverage problems screen."""

import json
from dataclasses import replace

from decoding_adapters.decoding.actions import GREEDY, DecodingAction
from decoding_adapters.evaluation import EvalConfig, greedy_method
from decoding_adapters.experiments import pipeline, stages_rules
from decoding_adapters.experiments.study_config import RulesConfig, SelectionConfig, StudyConfig, VerifierStageConfig
from decoding_adapters.policies.fixed_rules import VERIFIER_RULES
from decoding_adapters.policies.verifier import load_verifier
from decoding_adapters.selection.coverage import OutcomeTable
from decoding_adapters.tasks import get_task


def test_verifier_stage_adds_its_rules_beside_the_plain_ones(tmp_path, tiny_lm):
    cfg = StudyConfig(token_budget=4, seeds=2, batch_rows=6, eval=EvalConfig(k_values=(1, 2)), eval_problems=3,
                      rules=RulesConfig(enabled=True, samples=2, problems=4),
                      verifier=VerifierStageConfig(enabled=True, train_problems=4,
                                                   rules=("verifier_cges", "verifier_best_of_k")))
    task = get_task("arithmetic")
    problems = task.load("test")[: cfg.eval_problems]
    evaluation = pipeline.evaluate_methods(tiny_lm, task, problems, [greedy_method()], cfg, tmp_path / "eval",
                                           meta={}, progress=False)
    ruled = stages_rules.fixed_rules(tiny_lm, task, cfg, tmp_path / "rules", evaluation, problems)
    verified = stages_rules.verifier_stage(tiny_lm, task, cfg, tmp_path / "verifier", tmp_path / "rules", ruled,
                                           problems)
    methods = verified.details["methods"]
    reading = {n: m for n, m in methods.items() if m.get("reads_verifier")}
    assert {m["rule"] for m in reading.values()} <= set(VERIFIER_RULES) and reading
    assert set(ruled.details["methods"]) < set(methods)  # every plain point is kept
    assert all(m["family"] == "fixed rule" for m in reading.values())
    load_verifier(tmp_path / "verifier" / "verifier")  # saved, loadable on its own
    quality = json.loads((tmp_path / "verifier" / "verifier_rules.json").read_text())["quality"]
    families = {p.meta["family"] for p in task.load("validation")[:4]}
    assert set(quality["validation"]) == {"all"} | families
    again = stages_rules.fixed_rules(tiny_lm, task, cfg, tmp_path / "rules", verified, problems)
    assert set(again.details["methods"]) == set(methods)  # the rules' rerun keeps the verifier's points


def _table(rewards: dict) -> OutcomeTable:
    table = OutcomeTable()
    for name, per_problem in rewards.items():
        for i, r in enumerate(per_problem):
            for s in range(2):
                table.add(f"p{i}", name, s, r, 3)
    return table


def test_best_is_chosen_on_more_problems_among_the_finalists(tmp_path):
    hot, warm = DecodingAction(temperature=1.0), DecodingAction(temperature=0.7)
    pool = [GREEDY, warm, hot]
    # on the first 2 problems T=1 is best; on all 10 greedy is
    rewards = {GREEDY.name: [0, 0] + [1] * 8, warm.name: [0, 1] + [0] * 8, hot.name: [1, 1] + [0] * 8}
    small = _table({n: r[:2] for n, r in rewards.items()})
    assert [a.name for a in pipeline.best_finalists(small, pool, (1,), 1)] == [GREEDY.name, hot.name]
    meta = {"task": "t", "split": "validation", "problems": 2, "samples": 2, "k": 2, "token_budget": 4, "seed": 0}
    pipeline.write_selection(tmp_path / "a", pool, small, 2, meta, (1,))
    assert json.loads((tmp_path / "a" / "actions.json").read_text())["best_single_name"] == hot.name
    finalists = [GREEDY.name, hot.name]
    larger = _table({n: r for n, r in rewards.items() if n in finalists})
    pipeline.write_selection(tmp_path / "b", pool, small, 2, meta, (1,), best_table=larger)
    chosen = json.loads((tmp_path / "b" / "actions.json").read_text())
    assert chosen["best_single_name"] == GREEDY.name and chosen["names"] == json.loads(
        (tmp_path / "a" / "actions.json").read_text())["names"]  # coverage still reads the first problems


def test_best_problems_is_checked_and_counted():
    sel = SelectionConfig(problems=32, samples=4, best_problems=400, best_finalists=2)
    assert sel.choice_problems == 400 and sel.finalist_rows(17, 3) == 7 * 368 * 4
    assert replace(sel, best_problems=None).choice_problems == 32
    try:
        SelectionConfig(problems=32, best_problems=16)
    except ValueError as err:
        assert "best_problems" in str(err)
    else:
        raise AssertionError("best_problems below problems was accepted")
