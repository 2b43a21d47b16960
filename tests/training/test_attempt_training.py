"""The attempt trainer: on a small planted attempt world it recovers most of the oracle's margin over
the strongest fixed rule at its own compute (the full figure: ``benchmarks/planted.py --attempt``);
it is resumable step for step; keep-best never saves a policy that validates below its start."""

import json

import pytest
import torch

from decoding_adapters.evaluation.attempt import (
    crossfit_score,
    planted_attempt_table,
    rule_baselines,
    run_planted_attempt,
)
from decoding_adapters.policies.attempt import AttemptInputs, load_attempt_adapter
from decoding_adapters.training.attempt import AttemptTrainConfig, AttemptTrainer, policy_config_from_table

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def test_the_trainer_recovers_most_of_the_oracle_margin_on_a_small_planted_world():
    r = run_planted_attempt(0, price=0.01, sizes=(240, 120, 240), steps=80)
    assert r["oracle"] - r["rule_accuracy"] > 0.1  # the world leaves the fixed rules a margin to lose
    assert r["recovered"] >= 0.7, r
    assert r["difference"][1] > 0  # paired interval over problems above the strongest rule
    assert r["rule_shares"]["policy"] > max(v for k, v in r["rule_shares"].items() if k != "policy")


def _trainer(tmp_path, name, steps, **overrides):
    train, _ = planted_attempt_table(60, seed=1)
    validation, _ = planted_attempt_table(30, seed=2)
    config = AttemptTrainConfig(steps=steps, val_every=2, checkpoint_every=1, problems_per_step=16,
                                features=("confidence", "hidden", "agreement"), **overrides)
    return AttemptTrainer(config, policy_config_from_table(train, config), AttemptInputs.from_table(train),
                          AttemptInputs.from_table(validation), tmp_path / name, actions=train.header["actions"])


def test_a_resumed_run_ends_where_an_uninterrupted_one_does(tmp_path):
    straight = _trainer(tmp_path, "straight", 4)
    straight.train()
    first = _trainer(tmp_path, "resumed", 2)
    first.train()
    resumed = _trainer(tmp_path, "resumed", 4)
    resumed.train(resume=True)
    for (name, a), b in zip(straight.policy.state_dict().items(), resumed.policy.state_dict().values()):
        assert torch.equal(a, b), name
    log = [json.loads(line) for line in (tmp_path / "resumed" / "train_log.jsonl").open()]
    assert [r["step"] for r in log] == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="--resume"):
        _trainer(tmp_path, "resumed", 4).train()


def test_keep_best_saves_a_policy_no_worse_than_its_start_on_validation(tmp_path):
    trainer = _trainer(tmp_path, "kb", 6, lr=0.5)  # a step size that may well make things worse
    trainer.train()
    log = [json.loads(line) for line in (tmp_path / "kb" / "train_log.jsonl").open()]
    start = log[0]["val_reward"]
    best = max(r["val_reward"] for r in log if "val_reward" in r)
    policy, meta = load_attempt_adapter(tmp_path / "kb")
    kept = meta["training"]["val_accuracy"] - meta["training"]["price"] * meta["training"]["val_attempts"]
    assert kept >= start - 1e-9 and kept == pytest.approx(best)


def test_crossfitting_scores_every_training_problem_once_in_order():
    train, _ = planted_attempt_table(40, seed=4)
    validation, _ = planted_attempt_table(20, seed=5)
    baselines = rule_baselines(validation, train, rules=("self_consistency",))
    config = AttemptTrainConfig(steps=2, val_every=1, features=("confidence", "agreement"))
    scored = crossfit_score(train, validation, config, 3, baselines)
    outcome = scored.outcome
    assert len(outcome.paths) == 40 and all(path[0] == 0 for path in outcome.paths)
    truth = train.answer_correct()
    expected = [bool(truth[i, a]) if a >= 0 else False for i, a in enumerate(outcome.answers)]
    assert outcome.correct.tolist() == expected  # pooled in the table's order
    assert scored.decodes == pytest.approx(outcome.attempts.mean())


def test_training_runs_on_one_thread_whatever_the_callers_count(tmp_path, monkeypatch):
    # a float reduction's order can follow the thread count, and the kept step with it: training
    # must see one thread (as the verifier's does) and leave the caller's count as it was
    seen = []
    trainer = _trainer(tmp_path, "threads", 2)
    step = trainer.train_step
    monkeypatch.setattr(trainer, "train_step", lambda: (seen.append(torch.get_num_threads()), step())[1])
    torch.set_num_threads(2)
    try:
        trainer.train()
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(1)
    assert seen == [1, 1]
