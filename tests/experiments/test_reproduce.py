"""``reproduce --size smoke``: every stage of the full study (budget choice on validation, the
whole 180-config pool, live sequence rollouts, early-stopped token adapters, every baseline, the
report's extra sections) on the tiny model, killed midway and resumed."""

import json
from dataclasses import replace

import pytest

from decoding_adapters.cli import main
from decoding_adapters.decoding.actions import GREEDY, ActionSet, DecodingAction
from decoding_adapters.experiments import pipeline, planning, presets
from decoding_adapters.experiments.planning import estimate_minutes
from decoding_adapters.experiments.presets import FULL, REPRODUCE_SIZES
from decoding_adapters.experiments.probe import REFERENCE_PROBE_TOKENS_PER_SECOND
from decoding_adapters.experiments.report_sections import target_lines
from decoding_adapters.experiments.study_config import SelectionConfig, StudyConfig
from decoding_adapters.training.sequence import SequenceTrainConfig


def _run(out, model_dir, *extra):
    return main(["reproduce", "--size", "smoke", "--out", str(out), "--model", str(model_dir), "--no-progress", *extra])


def test_smoke_runs_every_stage_and_resumes_after_a_kill(tiny_model_dir, tmp_path, capsys, monkeypatch):
    out = tmp_path / "reproduce"
    original, calls = pipeline.train_token, {"n": 0}

    def dying(*args, **kwargs):  # killed while training the third token adapter
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return original(*args, **kwargs)

    monkeypatch.setattr(pipeline, "train_token", dying)
    assert _run(out, tiny_model_dir) != 0  # the CLI reports the interrupt and exits non-zero
    assert not (out / "eval").exists() and (out / "tok-nobudget-s0" / "adapter.json").is_file()
    table = (out / "actions" / "outcomes.jsonl").read_bytes()
    adapter_time = (out / "seq-budget-s1" / "adapter.safetensors").stat().st_mtime
    monkeypatch.setattr(pipeline, "train_token", original)
    capsys.readouterr()
    assert _run(out, tiny_model_dir, "--publish", str(tmp_path / "docs")) == 0
    printed = capsys.readouterr().out
    assert "reproduce finished" in printed and "min left" in printed
    # finished stages were reused, not redone
    assert (out / "actions" / "outcomes.jsonl").read_bytes() == table
    assert (out / "seq-budget-s1" / "adapter.safetensors").stat().st_mtime == adapter_time
    config = json.loads((out / "study_config.json").read_text())
    budget = json.loads((out / "budget" / "truncation.json").read_text())
    assert config["token_budget"] == budget["chosen"] and budget["split"] == "validation"
    assert config["token"]["token_budget"] == config["eval"]["token_budget"] == budget["chosen"]
    assert config["token"]["prior_action"] is not None  # the prior every token run started from
    minutes = json.loads((out / "stage_minutes.json").read_text())
    assert minutes["runs"] == 2 and {"select", "sequence", "evaluate", "rules"} <= set(minutes["minutes"])
    header = json.loads((out / "actions" / "outcomes.jsonl").read_text().splitlines()[0])
    rows = (out / "actions" / "outcomes.jsonl").read_text().splitlines()[1:]
    assert header["header"]["token_budget"] == budget["chosen"] and len({json.loads(r)["action"] for r in rows}) == 181
    seq_log = [json.loads(x) for x in (out / "seq-budget-s0" / "train_log.jsonl").read_text().splitlines()]
    assert all(r.get("offline_replay") is False for r in seq_log if r.get("step", 0) > 0)  # live rollouts
    tok_log = [json.loads(x) for x in (out / "tok-budget-s0" / "train_log.jsonl").read_text().splitlines()]
    assert sum("val_reward" in r for r in tok_log) >= 2
    results = json.loads((out / "eval" / "results.json").read_text())
    assert {"Greedy", "Best", "Mixed", *presets.ADAPTER_NAMES.values()} <= set(results)
    assert presets.TOKEN_MIXED in results
    assert any(name.startswith("Best token action") for name in results)
    report = (out / "report" / "report.md").read_text()
    for heading in ("Token budget and truncation", "Token training data", "Training curves", "Targets", "Cost",
                    "Fixed rules"):
        assert f"## {heading}" in report
    assert (out / "report" / "training_curves.png").is_file()
    published = {p.name for p in (tmp_path / "docs").iterdir()}
    assert {"report.md", "results.json", "eval_details.json", "truncation.json", "selection.png",
            "curves.json", "rules_vs_compute.png", "tables"} <= published
    for table in ("validation", "evaluated"):  # the samples every rule read, committed beside its curve
        header = json.loads((tmp_path / "docs" / "tables" / table / "header.json").read_text())
        assert header["split"] == {"validation": "validation", "evaluated": "test"}[table]


@pytest.mark.parametrize("command", ["reproduce", "demo"])
def test_plan_prints_an_estimate_without_running(command, capsys, tmp_path, tiny_model_dir):
    assert main([command, "--plan", "--out", str(tmp_path / "run"), "--model", str(tiny_model_dir)]) == 0
    printed = capsys.readouterr().out
    assert "total" in printed and "evaluate" in printed and "decode probe" in printed
    assert not (tmp_path / "run").exists()  # only a probe decoded, nothing written


def test_the_plan_scales_with_the_machines_speed():
    reference = estimate_minutes(FULL)
    assert estimate_minutes(FULL, REFERENCE_PROBE_TOKENS_PER_SECOND) == reference
    slower = estimate_minutes(FULL, REFERENCE_PROBE_TOKENS_PER_SECOND / 4)  # e.g. fp32 on an AVX2-only CPU
    assert slower["evaluate"] == pytest.approx(4 * reference["evaluate"]) and slower["load"] == reference["load"]


def test_estimate_grows_with_the_work():
    small, large = estimate_minutes(FULL), estimate_minutes(replace(FULL, eval_problems=2 * FULL.eval_problems))
    assert large["evaluate"] > small["evaluate"] and large["token"] == small["token"]
    # the evidence run: 1,000 problems of the sealed2 split, 3 seeds, within 120 minutes on the reference machine
    assert REPRODUCE_SIZES["full"].eval_problems >= 1000 and REPRODUCE_SIZES["full"].seeds == 3
    assert REPRODUCE_SIZES["full"].eval_split == "sealed2" and sum(small.values()) <= 120
    selection = REPRODUCE_SIZES["full"].selection  # coverage must be able to tell candidates apart
    assert selection.problems >= 64 and selection.samples >= 4
    assert REPRODUCE_SIZES["full"].sequence_rewards == "live"


def test_bad_sizes_are_rejected():
    with pytest.raises(ValueError, match="replay"):
        StudyConfig(sequence=SequenceTrainConfig(parallel_budgets=(1, 8)), selection=SelectionConfig(samples=4))
    with pytest.raises(ValueError, match="seeds"):
        StudyConfig(seeds=0)


def test_the_study_budget_and_seeds_reach_every_nested_config():
    cfg = replace(FULL, token_budget=20, seeds=2)
    assert cfg.sequence.token_budget == cfg.token.token_budget == cfg.eval.token_budget == 20
    assert cfg.eval.seeds == 2


def test_targets_read_paired_differences():
    names = ["Greedy", "Mixed (per token)", "Token w/ budget", "Token entropy-only", "Best", "Seq w/ budget",
             "Seq w/o budget"]
    solved = {"Greedy": 0.2, "Mixed (per token)": 0.2, "Token w/ budget": 0.6, "Token entropy-only": 0.3,
              "Best": 0.5, "Seq w/ budget": 0.5, "Seq w/o budget": 0.5}
    per_problem = {n: {m: [[solved[n] + (0.1 if i % 2 else -0.1)] for i in range(20)] for m in ("pass@1", "pass@8")}
                   for n in names}
    results = {n: {m: {"mean": solved[n], "ci_low": 0.0, "ci_high": 1.0} for m in ("pass@1", "pass@8")} for n in names}
    lines = target_lines(results, {"per_problem": per_problem})
    assert lines[0].startswith("- **met**") and "+40.0" in lines[0]
    assert lines[1].startswith("- **met**")  # entropy-only below the full adapter
    assert lines[3].startswith("- **not met**")  # Seq w/ budget is not above Best at pass@8


def test_the_budget_prior_is_the_best_static_action_at_pass_at_b(tmp_path):
    pool = [GREEDY, DecodingAction(temperature=0.3), DecodingAction(temperature=0.7)]
    actions = tmp_path / "actions.json"
    best = {"1": pool[0].name, "2": pool[1].name, "4": DecodingAction(temperature=1.5).name}
    actions.write_text(json.dumps({"best_single": GREEDY.to_dict(), "best_per_k": {"best": best}}))
    # B = 8 has no Best of its own and Best at pass@4 is not in the set: the largest k below with one
    assert pipeline.best_action_per_budget(actions, ActionSet(pool), (1, 2, 4, 8)) == (0, 1, 1, 1)


def test_the_demo_fits_its_sizes_to_the_minutes_on_a_slower_machine():
    default, reference = presets.SIZES["default"], REFERENCE_PROBE_TOKENS_PER_SECOND
    same, rung = planning.fit_to_minutes(default, reference, 15)  # the reference machine: nothing cut
    assert same is default and rung == (1.0, 1.0, 1.0, 1.0)
    assert planning.fit_note(default, same, 15, reference) == ""
    slow = reference * 0.6  # this project's slower sessions measured 0.59-0.67 x the reference
    assert sum(estimate_minutes(default, slow).values()) > 15
    fitted, rung = planning.fit_to_minutes(default, slow, 15)
    assert sum(estimate_minutes(fitted, slow).values()) <= 15
    earlier = planning.FIT_LADDER[: planning.FIT_LADDER.index(rung)]
    for r in earlier:
        assert sum(estimate_minutes(planning.scaled_sizes(default, *r), slow).values()) > 15
    assert earlier
    assert fitted.token.steps % default.token.val_every == 0 and fitted.token.steps < default.token.steps
    # steps, seeds and samples are cut before any problem: the problems decide every interval's width
    assert fitted.eval_problems == default.eval_problems and fitted.selection.problems == default.selection.problems
    kept = ("token_budget", "batch_rows")
    assert [getattr(fitted, f) for f in kept] == [getattr(default, f) for f in kept]
    assert fitted.token.lr == default.token.lr
    note = planning.fit_note(default, fitted, 15, slow)
    assert "fit 15 minutes" in note and f"token-training steps 12 -> {fitted.token.steps}" in note
    # far too slow: the last rung, never below one validation interval or 8 problems
    tiny, rung = planning.fit_to_minutes(default, reference / 100, 15)
    assert rung == planning.FIT_LADDER[-1] and tiny.token.steps == default.token.val_every and tiny.eval_problems == 8
    assert "still longer" in planning.fit_note(default, tiny, 15, reference / 100)
    assert "still longer" not in note and "planned" in note
    # sizes are never raised
    tiny = presets.SIZES["tiny"]
    assert planning.scaled_sizes(tiny, 0.25, 0.25).selection.problems == tiny.selection.problems


def test_the_token_plan_counts_the_steps_early_stopping_leaves():
    default = presets.SIZES["default"]  # patience 2 x validation every 4 steps: runs stop at step 8 at the earliest
    assert default.token.patience * default.token.val_every == 8
    at = {steps: estimate_minutes(replace(default, token=replace(default.token, steps=steps)))["token"]
          for steps in (8, 12, 4)}
    assert at[12] == at[8] > at[4]
    unstopped = replace(default, token=replace(default.token, steps=12, patience=0))
    assert estimate_minutes(unstopped)["token"] > at[12]


def test_targets_name_the_strongest_static_method_and_say_on_how_many_seeds_they_hold():
    names = ["Greedy", "Stop at first answer", "Best", "Draft-gated"]
    # [problem][seed]: the draft-gated adapter gains 10 points on seeds 0 and 1 and loses 10 on seed 2
    per_seed = {"Greedy": (0.3, 0.3, 0.3), "Stop at first answer": (0.4, 0.4, 0.4), "Best": (0.35, 0.35, 0.35),
                "Draft-gated": (0.5, 0.5, 0.3)}
    per_problem = {n: {"pass@1": [[per_seed[n][s] + (0.1 if i % 2 else -0.1) for s in range(3)] for i in range(40)]}
                   for n in names}
    results = {n: {"pass@1": {"mean": sum(per_seed[n]) / 3, "ci_low": 0.0, "ci_high": 1.0}} for n in names}
    methods = {"Draft-gated": {"kind": "draft", "decodes_per_problem": {"1": 1.3}}}
    [line] = target_lines(results, {"per_problem": per_problem, "methods": methods})
    assert "(Stop at first answer on this split)" in line and "1.30 decodes" in line
    assert "a target across compute, not a verdict" in line
    # with the t-interval over the three seeds: mean 3.33, sd 11.55, t_2 = 4.3027 -> half-width 28.7
    assert "per seed +10.0 / +10.0 / -10.0 (over seeds +3.3 [-25.4, +32.0]): holds on 2 of 3 seeds" in line
    assert line.startswith("- **not met**")  # +3.3 on average: below the +5 bar
    # the same gain at too much compute is not met either; at +10 on every seed and 1.3 decodes it is
    per_seed["Draft-gated"] = (0.5, 0.5, 0.5)
    per_problem["Draft-gated"] = {"pass@1": [[0.5 + (0.1 if i % 2 else -0.1)] * 3 for i in range(40)]}
    results["Draft-gated"]["pass@1"]["mean"] = 0.5
    [line] = target_lines(results, {"per_problem": per_problem, "methods": methods})
    assert line.startswith("- **met**") and "holds on every seed (3 of 3)" in line
    methods["Draft-gated"]["decodes_per_problem"]["1"] = 1.8
    assert target_lines(results, {"per_problem": per_problem, "methods": methods})[0].startswith("- **not met**")
