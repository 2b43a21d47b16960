"""The REINFORCE core both trainers share: the loss and the baselines.

``reinforce_loss`` is the score-function objective with an entropy bonus,
``-(sum_i A_i * log pi(a_i | x_i) + beta * H(pi(. | x_i))) / N``, over N decisions: the sequence
trainer's decisions are prompts (N = the batch, a mean), the token trainer's are unmasked decode
steps (N = the decision steps of the *whole* batch, so a share of the rows, on one DDP rank or
in a micro-batch, gives its share of the gradient). Advantages are reward minus a baseline:
``group_advantages`` (the mean of the same prompt's G rollouts) or an exponential moving average.
"""

from __future__ import annotations

import torch

__all__ = ["reinforce_loss", "group_advantages", "ema_update"]


def reinforce_loss(logp: torch.Tensor, actions: torch.Tensor, advantages: torch.Tensor, entropy_coef: float,
                   normalizer: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, entropy ``[N]``) from log-probabilities ``logp [N, K]`` over the actions, the taken
    ``actions [N]`` and their ``advantages [N]``. ``normalizer`` divides the summed objective
    (default: the mean over the N rows)."""
    taken = logp.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
    entropy = -(logp.exp() * logp).sum(-1)
    objective = advantages * taken + entropy_coef * entropy
    loss = -objective.mean() if normalizer is None else -objective.sum() / max(normalizer, 1)
    return loss, entropy


def group_advantages(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """r - mean(r of the same prompt's group); rows are laid out prompt-major."""
    groups = rewards.view(-1, group_size)
    return (groups - groups.mean(1, keepdim=True)).reshape(-1)


def ema_update(baseline: float | None, value: float, decay: float) -> tuple[float, float]:
    """(the baseline to use now, the next one): the first value initialises the average."""
    base = value if baseline is None else baseline
    return base, decay * base + (1 - decay) * value
