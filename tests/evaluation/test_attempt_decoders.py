"""Several decoders for the attempt policy: sampled arms from a coverage selection's action set, the
exact expected reward on a lattice of three sampled arms against a Monte-Carlo replay of episodes,
the live decider making the replay's decisions, and the decoder-choice ablation."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from decoding_adapters.cli import main
from decoding_adapters.cli.common import TableOptions
from decoding_adapters.decoding.actions import GREEDY, DecodingAction
from decoding_adapters.evaluation.attempt import (
    attempt_decode,
    attempt_parts,
    price_curve,
    rule_baselines,
)
from decoding_adapters.evaluation.decoder_choice import decoder_ablation, decoder_arms, restrict_arms
from decoding_adapters.evaluation.sample_table import SampleTable, build_sample_table, synthetic_sample_table
from decoding_adapters.experiments.study_config import RulesConfig
from decoding_adapters.policies.attempt import (
    AttemptInputs,
    AttemptLattice,
    AttemptPolicy,
    expected_reward,
    walk,
)
from decoding_adapters.tasks import get_task
from decoding_adapters.training.attempt import AttemptTrainConfig, policy_config_from_table

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

ROOT = Path(__file__).resolve().parents[2]
SELECTED = ROOT / "docs" / "reproduce" / "actions.json"  # a coverage selection on the default model and task
# three sampled arms of different temperatures and truncations
ARMS = [GREEDY, DecodingAction(temperature=0.5), DecodingAction(temperature=1.0, top_k=10),
        DecodingAction(temperature=0.75, top_p=0.9, min_p=0.1)]


def _policy(table, max_attempts, features=("confidence", "agreement", "hidden"), scale=0.7, seed=0):
    config = policy_config_from_table(table, AttemptTrainConfig(features=features, max_attempts=max_attempts))
    torch.manual_seed(seed)
    policy = AttemptPolicy(config)
    policy.set_standardisation(AttemptInputs.from_table(table))
    with torch.no_grad():  # away from the near-uniform start: paths of their own probability, arms chosen unevenly
        for p in policy.stop_net.parameters():
            p.normal_(0, scale)
    return policy, AttemptLattice(config.distinct, config.first_arm, config.max_attempts)


def test_decoder_arms_are_the_selection_s_sampled_actions_in_coverage_order():
    names = json.loads(SELECTED.read_text())["names"]
    arms = decoder_arms(SELECTED, 3)
    assert [a.name for a in arms] == [n for n in names if n != "greedy"][:3]
    assert len({a.temperature for a in arms}) > 1 and len({(a.top_k, a.top_p) for a in arms}) > 1
    assert len(decoder_arms(SELECTED)) == len(names) - 1
    with pytest.raises(ValueError, match="sampled actions"):
        decoder_arms(SELECTED, len(names))
    # the table options and the study say the arms the same way; the defaults stay one T=0.5 arm
    assert TableOptions().arms == [GREEDY, DecodingAction(temperature=0.5)] == RulesConfig().arms
    options = TableOptions(decoders=str(SELECTED), decoder_count=3)
    assert options.arms == [GREEDY] + arms and options.rows_per_problem == 1 + 3 * options.samples
    assert RulesConfig(decoders=str(SELECTED), decoder_count=3).arms == [GREEDY] + arms
    with pytest.raises(ValueError, match="--decoders"):
        TableOptions(decoder_count=3)


def test_a_table_restricted_to_some_arms_keeps_their_samples():
    table = synthetic_sample_table(5, samples=4, arms=ARMS, seed=2, hidden_size=3)
    one = restrict_arms(table, ["greedy", ARMS[2].name])
    assert one.arm_names == ["greedy", ARMS[2].name] and one.shape == (5, 2, 4)
    assert (one.answers[:, 1] == table.answers[:, 2]).all() and (one.hidden[:, 1] == table.hidden[:, 2]).all()
    assert (one.answer_correct()[:, :2] <= table.answer_correct()[:, :2]).all()


def test_parts_say_whether_the_policy_chooses_the_decoder():
    table = synthetic_sample_table(3, samples=2, arms=ARMS, seed=0)
    config = AttemptTrainConfig(features=("confidence",))
    assert attempt_parts(policy_config_from_table(table, config)) == ("verifier", "stop", "decoder")
    one = restrict_arms(table, [0, 1])
    assert attempt_parts(policy_config_from_table(one, config)) == ("verifier", "stop")


def test_the_exact_expected_reward_on_three_sampled_arms_is_a_monte_carlo_replay():
    table = synthetic_sample_table(3, samples=3, arms=ARMS, seed=5, hidden_size=4)
    policy, lattice = _policy(table, max_attempts=6, scale=0.1)
    inputs = AttemptInputs.from_table(table)
    price = 0.05
    exact = {k: v.detach() for k, v in expected_reward(policy, inputs, lattice, price).items()}
    with torch.no_grad():
        out = policy.on_lattice(inputs, lattice)
        probs = torch.softmax(out.logits, -1).double().numpy()
        choice = policy.answer_probs(out).double().numpy()
    correct = inputs.answer_correct.numpy()
    k = min(choice.shape[-1], correct.shape[1])
    succ = lattice.succ.numpy()
    gen = np.random.default_rng(0)
    episodes = 20_000
    for i in range(3):
        rewards, attempts, arms_used = np.zeros(episodes), np.zeros(episodes), set()
        for e in range(episodes):
            s = 0
            while True:  # a sampled episode: the policy's action at each state, the table's next attempt
                action = gen.choice(len(probs[i, s]), p=probs[i, s] / probs[i, s].sum())
                if action == 0:
                    break
                arms_used.add(action - 1)
                s = int(succ[s, action - 1])
            q = choice[i, s, :k]
            answer = gen.choice(k, p=q / q.sum()) if q.sum() > 0 else -1  # the smoothed answer, drawn
            attempts[e] = int(lattice.level[s]) + 1
            rewards[e] = (answer >= 0 and correct[i, answer]) - price * attempts[e]
        assert arms_used == {1, 2, 3}  # every sampled arm is drawn somewhere
        se = rewards.std() / np.sqrt(episodes)
        assert float(exact["reward"][i]) == pytest.approx(rewards.mean(), abs=4 * se + 1e-6)
        assert float(exact["attempts"][i]) == pytest.approx(attempts.mean(), abs=4 * attempts.std() / np.sqrt(episodes))


def test_the_live_decider_makes_the_replay_s_decisions_over_three_sampled_arms(tiny_lm, tmp_path):
    task = get_task("arithmetic")
    problems = task.load("validation")[:6]
    table = build_sample_table(tiny_lm, task, problems, ARMS, samples=3, token_budget=6, split="validation",
                               path=tmp_path / "t", hidden=True, progress=False)
    policy, lattice = _policy(table, max_attempts=7, scale=1.0, seed=3)
    with torch.no_grad():
        policy.stop_net[-1].bias[0] = -1.5  # goes on for a while
    offline = walk(policy, AttemptInputs.from_table(table), lattice)
    live = attempt_decode(tiny_lm, task, problems, policy, ARMS, token_budget=6)
    assert live.paths == offline.paths and live.stopped_by == offline.stopped_by
    assert len({arm for path in offline.paths for arm in path[1:]}) >= 2  # it does choose among the arms
    said = [table.answer_strings[i][a] if a >= 0 else "" for i, a in enumerate(offline.answers)]
    assert live.answers == said and live.tokens == [int(t) for t in offline.tokens]


def _arm_world(problems: int, seed: int) -> SampleTable:
    """Greedy, one good sampled arm (right 80%) and two bad ones (right 5%)."""
    table = synthetic_sample_table(problems, samples=4, arms=ARMS, seed=seed)
    gen = np.random.default_rng(seed + 100)
    for arm, right in ((1, 0.8), (2, 0.05), (3, 0.05)):
        hit = gen.random((problems, 4)) < right
        table.answers[:, arm] = np.where(hit, 0, gen.integers(1, 5, size=(problems, 4)))
        table.rewards[:, arm] = hit
    return table


def test_the_decoder_ablation_finds_the_best_single_arm_and_pairs_every_policy():
    train, validation, test = _arm_world(60, 0), _arm_world(40, 1), _arm_world(40, 2)
    config = AttemptTrainConfig(features=("confidence", "agreement"), steps=4, val_every=2, problems_per_step=32)
    baselines = rule_baselines(validation, test, ("self_consistency",))
    full = price_curve(train, validation, test, config, [0.02, 0.1], [0, 1], baselines)
    assert all(s.parts == ("verifier", "stop", "decoder") for s in full)
    record = decoder_ablation(train, validation, test, config, full, baselines)
    assert record["parts"] == ["verifier", "stop", "decoder"] and record["against"] == ["verifier", "stop"]
    assert record["arms"] == [a.name for a in ARMS[1:]]
    assert [(r["seed"], r["price"]) for r in record["rows"]] == [(0, 0.02), (1, 0.02), (0, 0.1), (1, 0.1)]
    assert {r["best_arm"] for r in record["rows"]} == {ARMS[1].name}  # the good arm, chosen on validation
    for row, s in zip(record["rows"], full):
        d, lo, hi = row["difference"]
        assert lo <= d <= hi and row["policy"]["accuracy"] == s.accuracy
        assert d == pytest.approx(s.accuracy - row["single_arm"]["accuracy"], abs=1e-9)
    assert len(record["single_arm_policies"]) == 2 * 3 * 2  # seeds x arms x prices
    one = restrict_arms(train, [0, 1])
    with pytest.raises(ValueError, match="two or more sampled arms"):
        decoder_ablation(one, restrict_arms(validation, [0, 1]), restrict_arms(test, [0, 1]), config, full, baselines)


def test_train_attempt_cli_runs_the_decoder_ablation_on_stored_tables(tmp_path, capsys):
    _arm_world(40, 0).save(tmp_path / "train")
    _arm_world(30, 1).save(tmp_path / "val")
    out = tmp_path / "out"
    args = ["train-attempt", "--out", str(out), "--table", str(tmp_path / "train"), "--val-table",
            str(tmp_path / "val"), "--train-problems", "40", "--val-problems", "30", "--prices", "0.05",
            "--steps", "2", "--val-every", "1", "--rules", "self_consistency", "--features", "confidence",
            "--decoder-ablation"]
    assert main(args) == 0
    curve = json.loads((out / "curve.json").read_text())
    assert curve["policies"][0]["parts"] == ["verifier", "stop", "decoder"]
    (ablation,) = curve["ablations"]
    assert ablation["name"] == "decoder choice" and len(ablation["rows"]) == 1
    assert "choosing the decoder" in capsys.readouterr().out


def test_rules_cli_builds_tables_of_the_selected_decoders(tiny_model_dir, tmp_path):
    args = ["rules", "--model", str(tiny_model_dir), "--task", "arithmetic", "--token-budget", "4",
            "--max-problems", "2", "--samples", "2", "--decoders", str(SELECTED),
            "--decoder-count", "3", "--table", str(tmp_path / "test"), "--validation-table", str(tmp_path / "val"),
            "--out", str(tmp_path / "out"), "--rules", "self_consistency"]
    assert main(args) == 0
    for table in ("test", "val"):
        assert SampleTable.load(tmp_path / table).arm_names == ["greedy"] + [a.name for a in decoder_arms(SELECTED, 3)]
