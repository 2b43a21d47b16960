"""The token trainer's safeguards, one test each: the policy starts at the prior (and the saved
adapter keeps it), PPO's first epoch is exactly REINFORCE (ratio 1, same gradient), the clipped
loss with a KL term is still invariant to micro-batching, the validated policy mode is the one
stored, and the sequence trainer's group baseline compares a prompt's own draws."""

import dataclasses
import json

import pytest
import torch
from test_training_token import H, T, _batch, make_trainer

from decoding_adapters.decoding.loop import StepFeatures
from decoding_adapters.policies.networks import (
    SequencePolicy,
    SequencePolicyConfig,
    TokenPolicy,
    TokenPolicyConfig,
    load_adapter,
    prior_distribution,
)
from decoding_adapters.training.common import Validation
from decoding_adapters.training.token import TokenTrainer, rollout_log_probs, token_loss


def test_prior_distribution_puts_the_mass_on_the_action():
    torch.testing.assert_close(torch.tensor(prior_distribution(4, 1, 0.7)), torch.tensor([0.1, 0.7, 0.1, 0.1]))
    assert prior_distribution(4, None, 0.7) is None


def test_a_policy_with_a_prior_starts_at_it():
    prior = prior_distribution(3, 2, 0.8)
    token = TokenPolicy(TokenPolicyConfig(hidden_size=H, num_actions=3, prior=prior))
    obs = token.observation(torch.randn(50, H), torch.rand(50), torch.randint(1, T, (50,)))
    torch.testing.assert_close(token.eval().probs(obs), torch.tensor(prior).expand(50, 3))
    seq = SequencePolicy(SequencePolicyConfig(embed_dim=H, num_actions=3, prior=prior))
    torch.testing.assert_close(seq.eval().probs(torch.randn(7, H), torch.ones(7)), torch.tensor(prior).expand(7, 3))
    # without a prior the start is the usual random network, not a constant
    plain = TokenPolicy(TokenPolicyConfig(hidden_size=H, num_actions=3))
    assert plain.eval().probs(obs).std(0).max() > 1e-4


def test_the_saved_adapter_keeps_the_prior(tmp_path):
    trainer = make_trainer(tmp_path, steps=2, prior_action=2, prior_mass=0.9, val_every=1)
    trainer.train()
    policy, config = load_adapter(tmp_path)
    assert config.policy["prior"] == list(prior_distribution(3, 2, 0.9))
    obs = policy.observation(torch.randn(20, H), torch.rand(20), torch.randint(1, T, (20,)))
    torch.testing.assert_close(policy.probs(obs), trainer.policy.eval().probs(obs))
    assert config.training["prior_action"] == 2


def test_a_sequence_policy_starts_at_its_prior_for_each_budget():
    at_1, at_4 = prior_distribution(3, 0, 0.5), prior_distribution(3, 2, 0.5)
    config = SequencePolicyConfig(embed_dim=H, num_actions=3, budget_priors=((4, at_4), (1, at_1)), max_budget=8)
    seq = SequencePolicy(config).eval()
    budgets = torch.tensor([1, 2, 3, 4, 8, 1])
    expected = torch.tensor([at_1, at_1, at_1, at_4, at_4, at_1])  # the largest listed budget <= B
    torch.testing.assert_close(seq.probs(torch.randn(6, H), budgets), expected)
    # what adapter.json stores (lists) builds the same policy
    again = SequencePolicyConfig(**json.loads(json.dumps(dataclasses.asdict(config))))
    assert again == config
    with pytest.raises(ValueError, match="use_budget"):
        SequencePolicyConfig(embed_dim=H, num_actions=3, use_budget=False, budget_priors=((1, at_1),))


def test_ppo_epoch_one_is_reinforce(tmp_path):
    trainer = make_trainer(tmp_path, dropout=0.1, prior_action=0)
    batch = _batch(trainer)
    trainer.policy.train()
    batch.old_logp = rollout_log_probs(trainer.policy, batch)
    loss, stats = token_loss(trainer.policy, batch, batch.num_decisions, 0.01, clip=0.2)
    assert stats["clipped"] == 0.0
    ppo_grads = torch.autograd.grad(loss, list(trainer.policy.parameters()))
    plain = type(batch)(**{**batch.__dict__, "old_logp": None})
    reinforce, _ = token_loss(trainer.policy, plain, plain.num_decisions, 0.01)
    for a, b in zip(ppo_grads, torch.autograd.grad(reinforce, list(trainer.policy.parameters()))):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_rollout_log_probs_are_the_ones_the_actions_were_drawn_with(tmp_path):
    trainer = make_trainer(tmp_path, dropout=0.1)
    trainer.prepare()
    seen = {}
    original = trainer.rollouts.run

    def recording_run(request, chooser=None, **kwargs):
        def choose(f: StepFeatures):
            obs = trainer.policy.observation(f.hidden, f.entropy, f.remaining_budget)
            with torch.no_grad():
                logp = trainer.policy.log_probs(obs, dropout_key=(f.seeds, torch.full_like(f.seeds, f.step)))
            action = chooser(f)
            for seed, lp in zip(f.seeds.tolist(), logp.gather(1, action[:, None])[:, 0].tolist()):
                seen[(seed, f.step)] = lp
            return action
        return original(request, choose, **kwargs)

    trainer.rollouts.run = recording_run
    batch, _, _ = trainer.rollout(0)
    logp = rollout_log_probs(trainer.policy.train(), batch)
    take = batch.decision
    expected = torch.tensor([seen[(s, t)] for s, t in zip(batch.seed[take].tolist(), batch.step[take].tolist())])
    torch.testing.assert_close(logp[take], expected, atol=1e-5, rtol=0)


def test_clipped_loss_with_kl_does_not_depend_on_micro_batching(tmp_path):
    trainer = make_trainer(tmp_path, prior_action=1, kl_coef=0.1)
    batch = _batch(trainer)
    trainer.policy.train()
    batch.old_logp = rollout_log_probs(trainer.policy, batch) + 0.3 * torch.randn(len(batch.actions))  # clipped rows

    def grads(parts):
        trainer.policy.zero_grad()
        for rows in batch.row.unique().chunk(parts):
            loss, _ = token_loss(trainer.policy, batch.select_rows(rows), batch.num_decisions, 0.01, kl_coef=0.1)
            loss.backward()
        return [p.grad.clone() for p in trainer.policy.parameters()]

    for a, b in zip(grads(1), grads(3)):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_the_kl_term_is_zero_at_the_prior_and_pulls_back_to_it(tmp_path):
    trainer = make_trainer(tmp_path, prior_action=1, kl_coef=1.0, entropy_coef=0.0)
    batch = _batch(trainer)
    zero_adv = type(batch)(**{**batch.__dict__, "advantage": torch.zeros_like(batch.advantage)})
    _, stats = token_loss(trainer.policy, zero_adv, zero_adv.num_decisions, 0.0, kl_coef=1.0)
    assert abs(stats["kl"]) < 1e-6
    with torch.no_grad():
        trainer.policy.mlp[-1].bias.add_(torch.tensor([2.0, 0.0, 0.0]))  # move away from the prior
    loss, stats = token_loss(trainer.policy, zero_adv, zero_adv.num_decisions, 0.0, kl_coef=1.0)
    assert stats["kl"] > 0.1
    loss.backward()
    assert trainer.policy.mlp[-1].bias.grad[0] > 0  # gradient descent lowers the logit it raised


def test_the_validated_policy_mode_is_stored(tmp_path, monkeypatch):
    curve = {0: ("sample", 0.3), 1: ("argmax", 0.9), 2: ("sample", 0.5)}

    def validate(self):
        mode, value = curve[self.step]
        return Validation(torch.full((64,), value, dtype=torch.float64), mode=mode,
                          by_mode={mode: value, "other": value - 0.1})

    monkeypatch.setattr(TokenTrainer, "validate", validate)
    trainer = make_trainer(tmp_path, steps=2, val_every=1)
    trainer.train()
    _, config = load_adapter(tmp_path)
    assert config.policy_mode == "argmax"
    log = trainer.log.read()
    assert [r["val_mode"] for r in log] == ["sample", "argmax", "sample"] and "val_se" in log[0]


def test_validation_reports_both_modes_and_a_standard_error(tmp_path):
    trainer = make_trainer(tmp_path, val_problems=16, val_samples=3)
    trainer.prepare()
    v = trainer.validate()
    assert set(v.by_mode) == {"sample", "argmax"} and v.mode in v.by_mode
    assert len(v.scores) == 16 and v.mean == max(v.by_mode.values())
    assert abs(v.se - float(v.scores.std()) / 4) < 1e-9
