"""training.reinforce: the REINFORCE loss's value and gradient, its clipped (PPO) form, and the two
baselines."""

from __future__ import annotations

import pytest
import torch

from decoding_adapters.training.reinforce import clipped_loss, ema_update, group_advantages, reinforce_loss


def test_loss_gradient_is_the_score_function_estimate():
    """d loss / d logits = -(A * (onehot(a) - p)) / N for a softmax policy, without the entropy bonus."""
    torch.manual_seed(0)
    logits = torch.randn(5, 4, requires_grad=True)
    actions = torch.tensor([0, 3, 1, 1, 2])
    advantages = torch.tensor([1.0, -0.5, 0.0, 2.0, -1.0])
    loss, _ = reinforce_loss(torch.log_softmax(logits, -1), actions, advantages, entropy_coef=0.0)
    loss.backward()
    p = torch.softmax(logits.detach(), -1)
    expected = -(advantages[:, None] * (torch.nn.functional.one_hot(actions, 4) - p)) / 5
    assert torch.allclose(logits.grad, expected, atol=1e-6)


def test_entropy_is_per_row_and_its_bonus_lowers_the_loss():
    logp = torch.log(torch.tensor([[0.25, 0.25, 0.25, 0.25], [1.0, 1e-12, 1e-12, 1e-12]]))
    actions, advantages = torch.tensor([0, 0]), torch.zeros(2)
    plain, entropy = reinforce_loss(logp, actions, advantages, entropy_coef=0.0)
    bonus, _ = reinforce_loss(logp, actions, advantages, entropy_coef=0.1)
    assert torch.allclose(entropy, torch.distributions.Categorical(logits=logp).entropy(), atol=1e-6)
    assert entropy[0] == pytest.approx(torch.log(torch.tensor(4.0)).item()) and entropy[1] < 1e-9
    assert plain.item() == 0.0 and bonus.item() == pytest.approx(-0.1 * entropy.mean().item())


def test_normalizer_divides_the_sum_so_shares_add_up():
    """A share of the rows normalised by the whole batch's N gives its share of the whole loss."""
    torch.manual_seed(1)
    logp = torch.log_softmax(torch.randn(6, 3), -1)
    actions, advantages = torch.randint(0, 3, (6,)), torch.randn(6)
    whole, _ = reinforce_loss(logp, actions, advantages, 0.01)
    first, _ = reinforce_loss(logp[:2], actions[:2], advantages[:2], 0.01, normalizer=6)
    rest, _ = reinforce_loss(logp[2:], actions[2:], advantages[2:], 0.01, normalizer=6)
    assert torch.allclose(first + rest, whole, atol=1e-6)
    empty, _ = reinforce_loss(logp[:0], actions[:0], advantages[:0], 0.01, normalizer=0)  # no decisions: 0, not NaN
    assert empty.item() == 0.0


def _grad(loss_fn, logits):
    logits = logits.detach().clone().requires_grad_(True)
    loss_fn(torch.log_softmax(logits, -1)).backward()
    return logits.grad


def test_clipped_loss_on_its_first_epoch_has_reinforces_gradient():
    torch.manual_seed(2)
    logits, actions, advantages = torch.randn(6, 3), torch.randint(0, 3, (6,)), torch.randn(6)
    old = torch.log_softmax(logits, -1).gather(-1, actions[:, None]).squeeze(-1)  # drawn from this very policy
    plain = _grad(lambda logp: reinforce_loss(logp, actions, advantages, 0.01)[0], logits)
    as_ppo = _grad(lambda logp: clipped_loss(logp, actions, advantages, old_logp=old, entropy_coef=0.01)[0], logits)
    no_old = _grad(lambda logp: clipped_loss(logp, actions, advantages, entropy_coef=0.01)[0], logits)
    assert torch.allclose(as_ppo, plain, atol=1e-6) and torch.allclose(no_old, plain, atol=1e-6)


def test_clipping_stops_the_push_past_the_trust_region():
    logits = torch.tensor([[2.0, 0.0]])
    taken = torch.log_softmax(logits, -1)[0, 0]
    far = taken - 1.0  # the action was much less likely when drawn: ratio e > 1.2
    grad = _grad(lambda logp: clipped_loss(logp, torch.tensor([0]), torch.tensor([1.0]), old_logp=far.reshape(1))[0],
                 logits)
    assert torch.equal(grad, torch.zeros_like(grad))  # positive advantage, ratio above 1 + clip: no gradient
    against = _grad(lambda logp: clipped_loss(logp, torch.tensor([0]), torch.tensor([-1.0]),
                                              old_logp=far.reshape(1))[0], logits)
    assert against.abs().sum() > 0  # a negative advantage is never clipped away from the ratio's side


def test_kl_term_is_the_divergence_to_the_prior():
    prior = torch.log(torch.tensor([0.5, 0.25, 0.25]))
    logp = torch.log(torch.tensor([[0.5, 0.25, 0.25], [0.8, 0.1, 0.1]]))
    loss, stats = clipped_loss(logp, torch.tensor([0, 0]), torch.zeros(2), kl_coef=0.5, prior_logp=prior)
    expected = (logp.exp() * (logp - prior)).sum(-1)
    assert torch.allclose(stats["kl"], expected) and stats["kl"][0].abs() < 1e-7 and stats["kl"][1] > 0
    assert loss.item() == pytest.approx(0.5 * expected.mean().item())
    _, off = clipped_loss(logp, torch.tensor([0, 0]), torch.zeros(2), kl_coef=0.0, prior_logp=prior)
    assert torch.equal(off["kl"], torch.zeros(2))


def test_group_advantages_centre_each_prompts_rollouts():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0])  # 2 prompts x G=4, prompt-major
    adv = group_advantages(rewards, 4)
    assert adv.tolist() == [0.5, -0.5, -0.5, 0.5, 0.5, 0.5, -0.5, -0.5]
    assert torch.equal(group_advantages(torch.ones(6), 3), torch.zeros(6))  # all solved: nothing to learn
    with pytest.raises(RuntimeError):
        group_advantages(torch.ones(5), 2)  # not a whole number of groups


def test_ema_baseline_starts_at_the_first_value_then_decays():
    base, nxt = ema_update(None, 0.8, decay=0.9)
    assert (base, nxt) == (0.8, pytest.approx(0.8))
    base, nxt = ema_update(nxt, 0.0, decay=0.9)
    assert base == pytest.approx(0.8) and nxt == pytest.approx(0.72)
    assert ema_update(0.5, 1.0, decay=0.0) == (0.5, 1.0)  # decay 0: the next baseline is the last value
