"""The REINFORCE core both trainers share: the loss and the baselines.

``reinforce_loss`` is the score-function objective with an entropy bonus,
``-(sum_i A_i * log pi(a_i | x_i) + beta * H(pi(. | x_i))) / N``, over N decisions: the sequence
trainer's decisions are prompts (N = the batch, a mean), the token trainer's are unmasked decode
steps (N = the decision steps of the *whole* batch, so a share of the rows, on one DDP rank or
in a micro-batch, gives its share of the gradient). Advantages are reward minus a baseline:
``group_advantages`` (the mean of the same prompt's G rollouts) or an exponential moving average.

``clipped_loss`` is the token trainer's generalisation: the same objective with PPO's clipped
ratio ``min(rho * A, clip(rho, 1 - eps, 1 + eps) * A)``, ``rho = pi(a | x) / pi_old(a | x)``, so
a rollout batch can be reused for several epochs, and a KL penalty ``KL(pi || prior)`` toward a
fixed prior. On the first epoch ``pi = pi_old`` and its gradient is exactly ``reinforce_loss``'s.
"""

from __future__ import annotations

import torch

__all__ = ["reinforce_loss", "clipped_loss", "group_advantages", "ema_update"]


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


def clipped_loss(
    logp: torch.Tensor,
    actions: torch.Tensor,
    advantages: torch.Tensor,
    *,
    old_logp: torch.Tensor | None = None,
    clip: float = 0.2,
    entropy_coef: float = 0.0,
    kl_coef: float = 0.0,
    prior_logp: torch.Tensor | None = None,
    normalizer: int | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """(loss, per-decision stats ``{entropy, kl, ratio}`` each ``[N]``).

    ``logp [N, K]`` log pi over the actions, ``actions [N]`` taken, ``advantages [N]``;
    ``old_logp [N]`` the log-prob each action was drawn with (None: the ratio is 1 with the
    gradient of ``log pi``, i.e. plain REINFORCE); ``prior_logp [K]`` the prior the KL term pulls
    toward (None or ``kl_coef = 0``: no KL). The summed objective is divided by ``normalizer``
    (default: N)."""
    taken = logp.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
    if old_logp is None:  # REINFORCE: A * log pi (the ratio's gradient at 1, and reinforce_loss's value)
        ratio = torch.ones_like(taken)
        surrogate = advantages * taken
    else:
        ratio = (taken - old_logp).exp()
        surrogate = torch.minimum(ratio * advantages, ratio.clamp(1 - clip, 1 + clip) * advantages)
    probs = logp.exp()
    entropy = -(probs * logp).sum(-1)
    objective = surrogate + entropy_coef * entropy
    kl = torch.zeros_like(entropy)
    if prior_logp is not None and kl_coef > 0:
        kl = (probs * (logp - prior_logp)).sum(-1)
        objective = objective - kl_coef * kl
    loss = -objective.sum() / max(normalizer if normalizer is not None else len(objective), 1)
    return loss, {"entropy": entropy.detach(), "kl": kl.detach(), "ratio": ratio.detach()}


def group_advantages(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """r - mean(r of the same prompt's group); rows are laid out prompt-major."""
    groups = rewards.view(-1, group_size)
    return (groups - groups.mean(1, keepdim=True)).reshape(-1)


def ema_update(baseline: float | None, value: float, decay: float) -> tuple[float, float]:
    """(the baseline to use now, the next one): the first value initialises the average."""
    base = value if baseline is None else baseline
    return base, decay * base + (1 - decay) * value
