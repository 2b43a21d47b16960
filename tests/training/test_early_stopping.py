"""Early stopping of the token trainer on validation reward: it stops after ``patience``
validations without improvement, saves the best validated weights, and a resumed run that had
stopped stays stopped (and one killed before the stop stops at the same step)."""

import pytest
import torch
from test_training_token import make_trainer

from decoding_adapters.policies.networks import load_adapter
from decoding_adapters.training.common import EarlyStopping, Validation
from decoding_adapters.training.token import TokenTrainConfig, TokenTrainer
from helpers import killed_at_step

CURVE = [0.0, 0.2, 0.5, 0.4, 0.5, 0.3, 0.9, 0.9, 0.9]  # steps 0..8: best at step 2; steps 3 and 4 do not beat it


def scripted_validation(monkeypatch, snapshots: dict, curve=CURVE):
    def validate(self):
        snapshots[self.step] = {k: v.clone() for k, v in self.policy.state_dict().items()}
        return curve[self.step]

    monkeypatch.setattr(TokenTrainer, "validate", validate)


def test_stops_after_patience_and_keeps_the_best_weights(tmp_path, monkeypatch):
    snapshots = {}
    scripted_validation(monkeypatch, snapshots)
    trainer = make_trainer(tmp_path, steps=8, val_every=1, patience=2, checkpoint_every=100)
    trainer.train()
    log = trainer.log.read()
    assert log[-1]["step"] == 4 and log[-1]["early_stop"] == {"best_step": 2, "best_val_reward": 0.5}
    assert [r.get("kept_step") for r in log] == [0, 1, 2, 2, 2]  # steps 0..4, each validated
    assert not any("early_stop" in r for r in log[:-1])
    policy, _ = load_adapter(tmp_path)
    for k, v in policy.state_dict().items():
        torch.testing.assert_close(v, snapshots[2][k])
    assert any(not torch.equal(snapshots[2][k], snapshots[4][k]) for k in snapshots[2])  # it did train past 2
    # a resumed run that had stopped does not train again
    again = make_trainer(tmp_path, steps=8, val_every=1, patience=2, checkpoint_every=100)
    again.train(resume=True)
    assert again.log.read()[-1]["step"] == 4


def test_without_patience_every_step_runs(tmp_path, monkeypatch):
    scripted_validation(monkeypatch, {})
    trainer = make_trainer(tmp_path, steps=6, val_every=1)
    trainer.train()
    assert trainer.log.read()[-1]["step"] == 6


def test_min_improvement_counts_small_gains_as_none(tmp_path, monkeypatch):
    scripted_validation(monkeypatch, {})
    trainer = make_trainer(tmp_path, steps=8, val_every=1, patience=2, min_improvement=0.35)
    trainer.train()
    # 0.2 does not beat the start (0.0) by more than 0.35, 0.5 does; 0.4 and 0.5 then do not beat
    # 0.5: stopped at step 4 with step 2 the best
    assert trainer.log.read()[-1]["early_stop"]["best_step"] == 2 and trainer.step == 4


def test_a_run_killed_before_the_stop_stops_at_the_same_step(tmp_path, monkeypatch):
    scripted_validation(monkeypatch, {})
    options = dict(steps=8, val_every=1, patience=2, checkpoint_every=1)
    reference = make_trainer(tmp_path / "ref", **options)
    reference.train()
    with killed_at_step(TokenTrainer, 4):
        make_trainer(tmp_path / "run", **options).train()
    resumed = make_trainer(tmp_path / "run", **options)
    resumed.train(resume=True)
    assert resumed.step == reference.step == 4
    for k, v in reference.policy.state_dict().items():
        torch.testing.assert_close(resumed.policy.state_dict()[k], v)


def test_the_start_is_kept_when_no_validation_beats_it(tmp_path, monkeypatch):
    snapshots = {}
    scripted_validation(monkeypatch, snapshots, curve=[0.6, 0.5, 0.2, 0.55, 0.4])
    trainer = make_trainer(tmp_path, steps=4, val_every=1)
    trainer.train()
    log = trainer.log.read()
    assert log[0]["step"] == 0 and log[0]["val_reward"] == 0.6  # validated before any update
    assert [r["kept_step"] for r in log if "val_reward" in r] == [0] * 5  # what the report shows
    policy, _ = load_adapter(tmp_path)
    for k, v in policy.state_dict().items():
        torch.testing.assert_close(v, snapshots[0][k])
    assert any(not torch.equal(snapshots[0][k], snapshots[4][k]) for k in snapshots[0])  # it did train


def test_a_gain_within_one_paired_standard_error_is_not_better():
    early, policy = EarlyStopping(), torch.nn.Linear(2, 2)
    start = Validation(torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0]))
    early.observe(start, 0, policy, 0, 0.0, 1.0)
    noisy = Validation(torch.tensor([1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0]))  # +1/8, paired SE about 0.13
    early.observe(noisy, 1, policy, 0, 0.0, 1.0)
    assert early.best_step == 0
    clear = Validation(torch.tensor([1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0]))  # +3/8, paired SE about 0.18
    early.observe(clear, 2, policy, 0, 0.0, 1.0)
    assert early.best_step == 2 and early.best == 7 / 8


def test_nan_validation_never_counts_as_better():
    early, policy = EarlyStopping(), torch.nn.Linear(2, 2)
    assert not early.observe(float("nan"), 1, policy, 2, 0.0)
    assert early.observe(float("nan"), 2, policy, 2, 0.0) and early.best_policy is None


def test_bad_settings_are_rejected():
    with pytest.raises(ValueError, match="patience"):
        TokenTrainConfig(patience=-1)
