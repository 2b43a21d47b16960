"""Evaluation: pass@k against brute force, intervals, methods side by side on the tiny model, CLI."""

import itertools
import json
import math

import pytest
import torch

from decoding_adapters.core.stats import mean_ci, paired_ci, pass_at_k, t_quantile
from decoding_adapters.decoding.actions import GREEDY, PRESETS, DecodingAction
from decoding_adapters.evaluation import (
    EvalConfig,
    Method,
    evaluate,
    format_table,
    greedy_method,
    mixed_method,
    resolve_best_action,
    static_method,
)
from decoding_adapters.policies.networks import (
    AdapterConfig,
    SequencePolicy,
    SequencePolicyConfig,
    TokenPolicy,
    TokenPolicyConfig,
    save_adapter,
)
from helpers import HasOneTask

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


# ---- statistics -----------------------------------------------------------------------------------


def brute_pass_at_k(n, c, k):
    samples = [1] * c + [0] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in s) for s in subsets) / len(subsets)


def test_pass_at_k_matches_enumeration():
    for n in range(1, 8):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == pytest.approx(brute_pass_at_k(n, c, k), abs=1e-12)


def test_pass_at_k_rejects_bad_inputs():
    with pytest.raises(ValueError, match="at least k"):
        pass_at_k(4, 1, 5)
    for n, c, k in [(0, 0, 1), (4, 5, 1), (4, -1, 1), (4, 1, 0), (4.5, 1, 1), (True, 1, 1)]:
        with pytest.raises(ValueError):
            pass_at_k(n, c, k)


def test_t_quantile_and_mean_ci():
    assert t_quantile(0.975, 1) == pytest.approx(12.7062, abs=1e-3)
    assert t_quantile(0.975, 10) == pytest.approx(2.2281, abs=1e-3)
    assert t_quantile(0.025, 499) == pytest.approx(-1.9647, abs=1e-3)
    mean, low, high = mean_ci([1.0, 2.0, 3.0, 4.0])
    assert mean == 2.5 and low < mean < high and high - mean == pytest.approx(mean - low)
    # sd = 1.29, t_3 = 3.182 -> half width 2.054
    assert high - mean == pytest.approx(3.1824 * math.sqrt(5 / 3) / 2, rel=1e-3)
    assert mean_ci([0.7] * 5) == pytest.approx((0.7, 0.7, 0.7))
    assert math.isnan(mean_ci([1.0])[1])
    narrow = mean_ci([1.0, 2.0, 3.0, 4.0], confidence=0.5)
    assert narrow[2] - narrow[1] < high - low
    with pytest.raises(ValueError):
        mean_ci([])
    d = paired_ci([1, 2, 3], [0, 1, 2])
    assert d == pytest.approx((1.0, 1.0, 1.0))


def test_resolve_best_action(tmp_path):
    actions = list(PRESETS["math"])
    assert resolve_best_action("2", actions) == actions[2]
    assert resolve_best_action(actions[1].name, actions) == actions[1]
    assert resolve_best_action({"index": 3}, actions) == actions[3]
    assert resolve_best_action(actions[4].to_dict(), actions) == actions[4]
    f = tmp_path / "actions.json"
    f.write_text(json.dumps({"actions": [a.to_dict() for a in actions], "best_single": {"index": 5}}))
    assert resolve_best_action(str(f), actions) == actions[5]
    # select-actions writes best_single as an action dict
    f.write_text(json.dumps({"actions": [a.to_dict() for a in actions], "best_single": actions[1].to_dict(),
                             "best_single_name": actions[1].name}))
    assert resolve_best_action(str(f), actions) == actions[1]
    f.write_text(json.dumps({"actions": [a.to_dict() for a in actions]}))
    assert resolve_best_action(str(f), actions) is None
    with pytest.raises(ValueError):
        resolve_best_action("99", actions)


# ---- methods side by side ---------------------------------------------------------------------------


def seq_method(lm, use_budget):
    torch.manual_seed(1 + use_budget)
    policy = SequencePolicy(SequencePolicyConfig(embed_dim=lm.hidden_size, num_actions=4, use_budget=use_budget))
    return Method(f"Seq {'w/' if use_budget else 'w/o'} budget", "sequence", list(PRESETS["math-token"]),
                  role="w/ budget" if use_budget else "w/o budget", level="sequence", policy=policy)


def token_method(lm, features="hidden"):
    torch.manual_seed(3)
    policy = TokenPolicy(
        TokenPolicyConfig(hidden_size=lm.hidden_size, num_actions=4, features=features, token_budget=6)
    )
    return Method(
        f"Token {features}", "token", list(PRESETS["math-token"]), role="w/ budget", level="token", policy=policy
    )


@pytest.fixture(scope="module")
def evaluation(tiny_lm):
    task = HasOneTask()
    methods = [
        greedy_method(),
        static_method(DecodingAction(True, 1.25)),
        mixed_method(PRESETS["math-token"]),
        seq_method(tiny_lm, False),
        seq_method(tiny_lm, True),
        token_method(tiny_lm),
    ]
    cfg = EvalConfig(k_values=(1, 2, 4), seeds=2, token_budget=6, keep_trajectories=4)
    return evaluate(tiny_lm, task, task.load("test"), methods, cfg, batch_rows=16), methods, cfg


def test_evaluation_structure(evaluation, tmp_path):
    ev, methods, cfg = evaluation
    metrics = ["pass@1", "pass@2", "pass@4", "answer_accuracy@1", "answer_accuracy@2", "answer_accuracy@4",
               "mean_length"]
    assert list(ev.results) == [m.name for m in methods]
    for name, res in ev.results.items():
        assert list(res) == metrics
        for metric, entry in res.items():
            paper = {"binomial_halfwidth", "outcomes"} if metric.startswith("pass@") else set()
            assert set(entry) == {"mean", "ci_low", "ci_high"} | paper
            assert entry["ci_low"] <= entry["mean"] <= entry["ci_high"]
            if paper:  # 3 distinct problems, whatever the seeds
                assert entry["outcomes"] == 3 and entry["binomial_halfwidth"] >= 0
        assert 1 <= res["mean_length"]["mean"] <= cfg.token_budget
        assert len(ev.details["per_problem"][name]["pass@1"]) == 3
        assert all(len(v) == cfg.seeds for v in ev.details["per_problem"][name]["pass@1"])
        assert len(ev.details["summary"][name]["pass@1"]["seed_means"]) == cfg.seeds
        trajs = ev.details["trajectories"][name]
        assert trajs and all(len(t["tokens"]) == len(t["actions"]) == len(t["entropy"]) == t["length"] for t in trajs)
        n_actions = len(ev.details["methods"][name]["actions"])
        assert all(0 <= a < n_actions for t in trajs for a in t["actions"])
        assert sum(ev.details["action_usage"][name]) == pytest.approx(1.0)
    assert set(ev.details["sequence_choices"]) == {"Seq w/o budget", "Seq w/ budget"}
    paths = ev.write(tmp_path)
    assert json.loads(paths["results"].read_text()) == ev.results
    assert json.loads(paths["details"].read_text())["config"]["k_values"] == [1, 2, 4]
    assert "Greedy" in format_table(ev.results)


def test_greedy_is_constant_in_k_and_pass_at_k_is_monotone(evaluation):
    ev, _, cfg = evaluation
    greedy = ev.results["Greedy"]
    assert greedy["pass@1"]["mean"] == greedy["pass@2"]["mean"] == greedy["pass@4"]["mean"]
    for name in ["Greedy", "Best", "Mixed", "Seq w/o budget", "Token hidden"]:
        means = [ev.results[name][f"pass@{k}"]["mean"] for k in cfg.k_values]
        assert means == sorted(means), name
    # The token adapter used several actions within generations.
    assert len({a for t in ev.details["trajectories"]["Token hidden"] for a in t["actions"]}) > 1
    # A w/o-budget sequence adapter picks the same action for every k.
    assert all(len(set(row)) == 1 for row in ev.details["sequence_choices"]["Seq w/o budget"]["actions"])


def test_common_random_numbers_share_generations(tiny_lm):
    """A static method and a sequence adapter that always picks that action give identical results."""
    task = HasOneTask()
    action = PRESETS["math-token"][2]
    seq = seq_method(tiny_lm, False)
    with torch.no_grad():  # force the policy to always choose action 2
        last = seq.policy.head[-1]
        last.weight.zero_()
        last.bias.copy_(torch.tensor([0.0, 0.0, 10.0, 0.0]))
    cfg = EvalConfig(k_values=(1, 2), seeds=1, token_budget=5, keep_trajectories=0)
    ev = evaluate(tiny_lm, task, task.load("test"), [static_method(action, name="T1"), seq], cfg)
    assert ev.details["per_problem"]["T1"] == ev.details["per_problem"][seq.name]
    assert ev.details["lengths"]["T1"] == ev.details["lengths"][seq.name]


def test_methods_validate():
    with pytest.raises(ValueError):
        Method("x", "static", [GREEDY, GREEDY])
    with pytest.raises(ValueError):
        Method("x", "token", [GREEDY])
    with pytest.raises(ValueError):
        EvalConfig(k_values=(0, 2))


# ---- CLI ---------------------------------------------------------------------------------------------


def cli_main(monkeypatch, argv):
    """``decoding_adapters.cli.main`` with only the sub-commands under test wired (the others may
    belong to modules still being written)."""
    from decoding_adapters import cli

    monkeypatch.setattr(cli, "COMMANDS", {k: v for k, v in cli.COMMANDS.items() if k in ("evaluate", "report")})
    return cli.main(argv)


def test_cli_evaluate_end_to_end(tmp_path, tiny_lm, capsys, monkeypatch):

    model_dir = tmp_path / "model"
    tiny_lm.model.save_pretrained(model_dir)
    tiny_lm.tokenizer.save_pretrained(model_dir)
    actions = [a.to_dict() for a in PRESETS["math-token"]]
    seq = SequencePolicy(SequencePolicyConfig(embed_dim=tiny_lm.hidden_size, num_actions=4))
    save_adapter(
        tmp_path / "seq", seq, AdapterConfig("sequence", seq.config.__dict__, actions, "tiny", tiny_lm.fingerprint())
    )
    tok = TokenPolicy(TokenPolicyConfig(hidden_size=tiny_lm.hidden_size, num_actions=4, token_budget=4))
    save_adapter(
        tmp_path / "tok", tok, AdapterConfig("token", tok.config.__dict__, actions, "tiny", tiny_lm.fingerprint())
    )
    out = tmp_path / "eval"
    code = cli_main(
        monkeypatch,
        [
            "evaluate",
            "--model",
            str(model_dir),
            "--task",
            "arithmetic",
            "--max-problems",
            "2",
            "--adapter",
            str(tmp_path / "seq"),
            "--adapter",
            f"mine={tmp_path / 'tok'}",
            "--k",
            "1,2",
            "--seeds",
            "1",
            "--token-budget",
            "4",
            "--best-action",
            "auto",
            "--best-problems",
            "2",
            "--no-progress",
            "--out",
            str(out),
        ],
    )
    assert code == 0
    results = json.loads((out / "results.json").read_text())
    # the token table's rows: per-token Mixed (the paper's token-level Mixed) and the best token action
    best_token = next(n for n in results if n.startswith("Best token action ("))
    assert set(results) == {"Greedy", "Best", "Mixed", "Mixed (per token)", best_token, "Seq w/ budget", "mine"}
    assert set(results["mine"]) == {"pass@1", "pass@2", "answer_accuracy@1", "answer_accuracy@2", "mean_length"}
    details = json.loads((out / "eval_details.json").read_text())
    assert details["config"]["num_problems"] == 2 and details["methods"]["mine"]["kind"] == "token"
    assert details["methods"]["Mixed (per token)"]["per_token"] is True
    assert details["methods"][best_token]["role"] == "best token action"
    printed = capsys.readouterr().out
    assert "pass@2" in printed and "Seq w/ budget" in printed
    # auto: Best chosen per k among --actions and greedy
    assert set(details["methods"]["Best"]["k_actions"]) == {"1", "2"}
    assert "cost" in details and details["cost"]["methods"]["Greedy"]["rows"] == 2
    # select-actions' actions.json with best_per_k: the Best row takes each k from its own action
    T1 = PRESETS["math-token"][2]
    chosen = {"actions": actions, "best_single": GREEDY.to_dict(),
              "best_per_k": {"k_values": [1, 2], "best": {"1": "greedy", "2": T1.name},
                             "scores": {"greedy": [0.5, 0.5], T1.name: [0.4, 0.6]}, "samples": 2, "problems": 2,
                             "actions": {"greedy": GREEDY.to_dict(), T1.name: T1.to_dict()}}}
    (tmp_path / "actions.json").write_text(json.dumps(chosen))
    out2 = tmp_path / "eval2"
    assert cli_main(monkeypatch, ["evaluate", "--model", str(model_dir), "--task", "arithmetic", "--max-problems", "2",
                                  "--k", "1,2", "--seeds", "1", "--token-budget", "4", "--baselines", "greedy,best",
                                  "--actions", str(tmp_path / "actions.json"), "--no-progress",
                                  "--out", str(out2)]) == 0
    details2 = json.loads((out2 / "eval_details.json").read_text())
    assert details2["methods"]["Best"]["k_actions"] == {"1": "greedy", "2": T1.name}
    per = details2["per_problem"]
    assert per["Best"]["pass@1"] == per["Greedy"]["pass@1"]


def test_token_level_mixed_draws_an_action_at_every_token(tiny_lm):
    """The token-level Mixed is a uniform draw over the token actions at every token (the
    per-sequence mixture keeps one action per sample and has its own row)."""
    from decoding_adapters.evaluation import token_mixed_method

    actions = list(PRESETS["math-token"])
    per_token, per_seq = token_mixed_method(actions), mixed_method(actions, name="Mixed per sequence")
    cfg = EvalConfig(k_values=(1, 2), seeds=1, token_budget=12, keep_trajectories=6)
    ev = evaluate(tiny_lm, HasOneTask(), HasOneTask().load("test"), [per_token, per_seq], cfg)
    switching = [len(set(t["actions"])) for t in ev.details["trajectories"]["Mixed (per token)"] if t["length"] > 4]
    assert switching and max(switching) > 1
    assert all(len(set(t["actions"])) == 1 for t in ev.details["trajectories"]["Mixed per sequence"])
    assert ev.details["methods"]["Mixed (per token)"]["level"] == "token"
    usage = ev.details["action_usage"]["Mixed (per token)"]
    assert len(usage) == 4 and abs(sum(usage) - 1) < 1e-9


def test_policy_mode_both_reports_sample_and_argmax_rows(tmp_path, tiny_lm):
    """`evaluate --policy-mode both` gives one row per mode; a sampling sequence adapter draws
    its action per seed (argmax: the same action in every seed)."""
    from decoding_adapters.cli.evaluate import load_adapter_methods

    actions = [a.to_dict() for a in PRESETS["math-token"]]
    torch.manual_seed(0)
    seq = SequencePolicy(SequencePolicyConfig(embed_dim=tiny_lm.hidden_size, num_actions=4, temperature=5.0))
    save_adapter(tmp_path / "seq", seq, AdapterConfig("sequence", seq.config.__dict__, actions, "tiny",
                                                       tiny_lm.fingerprint()))
    methods = load_adapter_methods([str(tmp_path / "seq")], tiny_lm, "both")
    assert [(m.name, m.policy_mode) for m in methods] == [
        ("Seq w/ budget [sample]", "sample"), ("Seq w/ budget [argmax]", "argmax")
    ]
    assert [m.policy_mode for m in load_adapter_methods([str(tmp_path / "seq")], tiny_lm)] == ["argmax"]
    with pytest.raises(ValueError, match="policy-mode"):
        load_adapter_methods([str(tmp_path / "seq")], tiny_lm, "greedy")
    cfg = EvalConfig(k_values=(1,), seeds=4, token_budget=2, keep_trajectories=0)
    problems = HasOneTask().load("test")
    ev = evaluate(tiny_lm, HasOneTask(), problems, methods, cfg)
    assert ev.details["methods"]["Seq w/ budget [sample]"]["policy_mode"] == "sample"
    from decoding_adapters.evaluation.plans import sequence_choices

    prompts = [tiny_lm.encode_chat([HasOneTask().prompt(p)])[0] for p in problems]
    sampled = sequence_choices(methods[0], tiny_lm, prompts, cfg, problems)
    argmax = sequence_choices(methods[1], tiny_lm, prompts, cfg, problems)
    assert all(per_seed == argmax[0] for per_seed in argmax)
    assert any(per_seed != sampled[0] for per_seed in sampled)  # a flat policy (T=5) draws differently


def test_evaluate_refuses_to_score_an_adapter_on_its_training_problems(tmp_path, tiny_lm):
    """An adapter that recorded its training problems is not scored on them unless
    allow_train_overlap, and then the details and the report say so. An adapter.json without that
    record loads and is not refused."""
    from decoding_adapters.evaluation import adapter_method
    from decoding_adapters.reporting.report import write_report
    from decoding_adapters.tasks import problems_record

    task = HasOneTask()
    problems = task.load("test")
    tok = TokenPolicy(TokenPolicyConfig(hidden_size=tiny_lm.hidden_size, num_actions=4, token_budget=2))
    actions = [a.to_dict() for a in PRESETS["math-token"]]
    config = AdapterConfig("token", tok.config.__dict__, actions, "tiny", tiny_lm.fingerprint(),
                           trained_on=problems_record(problems[:2]))
    save_adapter(tmp_path / "tok", tok, config)
    cfg = EvalConfig(k_values=(1,), seeds=1, token_budget=2, keep_trajectories=0)
    method = adapter_method(tmp_path / "tok", tiny_lm)
    with pytest.raises(ValueError, match="trained or selected on: Token w/ budget: 2 of 3 problems"):
        evaluate(tiny_lm, task, problems, [method], cfg)
    evaluate(tiny_lm, task, problems[2:], [method], cfg)  # disjoint problems: fine
    ev = evaluate(tiny_lm, task, problems, [greedy_method(), method], cfg, allow_train_overlap=True)
    assert ev.details["config"]["allow_train_overlap"] is True
    assert ev.details["config"]["train_overlap"] == {"Token w/ budget": 2}
    report = write_report(tmp_path / "r", ev.results, ev.details).read_text()
    assert "--allow-train-overlap was given" in report and "Token w/ budget on 2 problem(s)" in report
    old = json.loads((tmp_path / "tok" / "adapter.json").read_text())
    for key in ("trained_on", "selected_on", "policy_mode"):
        old.pop(key)
    (tmp_path / "tok" / "adapter.json").write_text(json.dumps(old))
    assert adapter_method(tmp_path / "tok", tiny_lm).seen_hashes == set()
