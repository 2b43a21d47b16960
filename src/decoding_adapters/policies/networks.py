"""The decoding adapters: small policies over a frozen LM's features.

- ``SequencePolicy`` (contextual bandit, paper Alg. "Sequence-Level Decoding Adapter"):
  x = [e ; g(B)] with e the prompt embedding and g a 2-layer MLP on the parallel-sampling budget B
  ("w/ budget"), or x = e ("w/o budget"); an MLP maps x to logits over K actions.
- ``TokenPolicy`` (POMDP, Alg. "Token-Level Decoding Adapter"): x_t = [h_t ; phi(b_t)] with h_t the
  LM's last hidden state and phi a small encoding of the remaining token budget; a 3-layer SiLU MLP
  with dropout 0.1. Variants: w/o budget (x_t = h_t) and the entropy-only ablation, which observes
  only the entropy of the base distribution (x_t = [H_t]).
- ``UniformChooser``: the token-level Mixed baseline, a uniform draw over the token action set at
  every token.

Both return ``softmax(logits / T)`` with a policy temperature T, and ``select`` returns the argmax
(deterministic) or a sample plus the probabilities. The adapter file format (``AdapterConfig``,
``save_adapter`` / ``load_adapter``) lives in ``adapter_files``; its names are re-exported here, so one
import gives a policy and the loader of its files.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from ..decoding.actions import (  # the counter generator's mixing
    _GOLDEN,
    DEFAULT_TOKEN_BUDGET,
    _int64,
    _mix64,
    _shift_right,
)
from ..decoding.loop import StepFeatures
from .adapter_files import (  # the file format, re-exported (see the module docstring)
    POLICY_MODES,
    AdapterConfig,
    add_evaluation,
    check_compatible,
    default_policy_mode,
    load_adapter,
    read_adapter_config,
    resolve_policy_mode,
    save_adapter,
)

__all__ = [
    "SequencePolicyConfig",
    "SequencePolicy",
    "TokenPolicyConfig",
    "TokenPolicy",
    "TokenPolicyChooser",
    "UniformChooser",
    "AdapterConfig",
    "POLICY_MODES",
    "default_policy_mode",
    "resolve_policy_mode",
    "save_adapter",
    "add_evaluation",
    "load_adapter",
    "read_adapter_config",
    "check_compatible",
    "categorical_from_uniform",
    "prior_distribution",
]


def _mlp(sizes: list[int], dropout: float) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers += [nn.SiLU(), nn.Dropout(dropout)]
    return nn.Sequential(*layers)


DROPOUT_STREAM = 2
"""Stream id of the token policy's dropout masks (``actions``' token and action draws use 0 and 1)."""


def counter_dropout_keep(seeds: torch.Tensor, steps: torch.Tensor, layer: int, width: int, p: float) -> torch.Tensor:
    """Dropout keep-mask ``[N, width]`` (bool) for rows keyed by (row seed ``seeds [N]``, decode step
    ``steps [N]``) at dropout layer ``layer``: a pure function of those keys (splitmix64 counters, as
    ``actions.counter_uniform``), so a rollout and a later recomputation of the same step draw the
    identical mask, whatever the batch."""
    key = _mix64(seeds.long() + _int64(DROPOUT_STREAM * _GOLDEN))
    key = _mix64(key + (steps.long() + 1) * _int64(_GOLDEN))
    key = _mix64(key + _int64((layer + 1) * _GOLDEN)).unsqueeze(-1)
    cols = (torch.arange(width, device=key.device, dtype=torch.long) + 1) * _int64(_GOLDEN)
    uniform = _shift_right(_mix64(key + cols), 40).float() * 2.0**-24  # [N, width] in [0, 1)
    return uniform >= p


def categorical_from_uniform(probs: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF draw: one category per row of ``probs [B, K]`` from ``uniform [B]``."""
    cdf = probs.cumsum(-1)
    return (
        torch.searchsorted(cdf, uniform.unsqueeze(-1).to(cdf.dtype) * cdf[:, -1:])
        .squeeze(-1)
        .clamp(max=probs.shape[-1] - 1)
    )


def prior_distribution(num_actions: int, action: int | None, mass: float) -> tuple[float, ...] | None:
    """A prior over ``num_actions`` actions that puts ``mass`` on ``action`` and spreads the rest
    evenly (None when ``action`` is None: no prior). ``mass`` in (0, 1); with one action, (1.0,)."""
    if action is None:
        return None
    if not 0 <= action < num_actions:
        raise ValueError(f"prior action {action} is not one of the {num_actions} actions")
    if not 0 < mass < 1 and num_actions > 1:
        raise ValueError(f"prior mass must be in (0, 1), got {mass}")
    if num_actions == 1:
        return (1.0,)
    rest = (1 - mass) / (num_actions - 1)
    return tuple(mass if a == action else rest for a in range(num_actions))


def _checked_distribution(prior, num_actions: int) -> tuple[float, ...]:
    prior = tuple(float(x) for x in prior)
    if len(prior) != num_actions or not all(0 < x <= 1 for x in prior) or abs(sum(prior) - 1) > 1e-6:  # NaN too
        raise ValueError(f"prior must be {num_actions} positive probabilities summing to 1, got {prior}")
    return prior


def _check_prior(config) -> None:
    """Validate ``config.prior`` (a distribution over the actions, or None) and store it as a tuple."""
    if config.prior is not None:
        object.__setattr__(config, "prior", _checked_distribution(config.prior, config.num_actions))


class _PolicyBase(nn.Module):
    """Logits are the head's output plus ``log_prior`` (zero without a prior). With a prior the
    head's last layer starts at zero, so the initial policy IS the prior (at policy temperature 1)
    and what training learns is the deviation from it."""

    temperature: float

    def _init_prior(self, prior: tuple[float, ...] | None, num_actions: int, head: nn.Sequential,
                    starts_at_prior: bool | None = None) -> None:
        """``starts_at_prior`` (default: a ``prior`` is given) zeroes the head's last layer, so
        that the logits start as the log prior (a per-budget prior counts too)."""
        # A buffer, not a parameter: it is fixed, and rebuilt from the config on load (not in the
        # weights file), so adapters without a prior keep loading as before.
        log_prior = torch.zeros(num_actions) if prior is None else torch.tensor(prior).log()
        self.register_buffer("log_prior", log_prior, persistent=False)
        if starts_at_prior is None:
            starts_at_prior = prior is not None
        if starts_at_prior:
            nn.init.zeros_(head[-1].weight)
            nn.init.zeros_(head[-1].bias)

    def prior_log_probs(self) -> torch.Tensor | None:
        """``log prior`` ``[K]`` over the actions (at the policy temperature), or None without a prior."""
        prior = getattr(self.config, "prior", None)
        return None if prior is None else (self.log_prior / self.temperature).log_softmax(-1)

    def probs(self, *args, **kwargs) -> torch.Tensor:
        return (self(*args, **kwargs) / self.temperature).softmax(-1)

    def log_probs(self, *args, **kwargs) -> torch.Tensor:
        """``log pi(. | x)`` ``[N, K]`` (with gradients: what the REINFORCE loss differentiates)."""
        return (self(*args, **kwargs) / self.temperature).log_softmax(-1)

    def select(self, *args, deterministic: bool = False, generator: torch.Generator | None = None):
        """(action ``[N]``, probabilities ``[N, K]``): argmax if deterministic, else a sample."""
        p = self.probs(*args)
        if deterministic:
            return p.argmax(-1), p
        return torch.multinomial(p, 1, generator=generator).squeeze(-1), p


DEFAULT_POLICY_TEMPERATURE = 1.0
"""The policy's softmax temperature T when none is given (both policy configs and both trainers'
``policy_temperature``); not an action's sampling temperature (``DecodingAction.temperature``)."""


@dataclass(frozen=True)
class SequencePolicyConfig:
    """Shape of the sequence-level adapter."""

    embed_dim: int
    """Size of the prompt embedding e (the LM's hidden size)."""
    num_actions: int
    use_budget: bool = True
    """x = [e ; g(B)] when True ("w/ budget"), x = e otherwise."""
    budget_dim: int = 32
    """Width of g, the 2-layer MLP that encodes B."""
    hidden: int = 256
    layers: int = 2
    """Linear layers of the head MLP."""
    dropout: float = 0.0
    temperature: float = DEFAULT_POLICY_TEMPERATURE
    """Policy softmax temperature."""
    max_budget: int = 64
    """Budgets are encoded as log2(B) / log2(max_budget)."""
    prior: tuple[float, ...] | None = None
    """A distribution over the actions added to the logits as ``log prior`` (the policy starts at
    it and learns deviations; see ``prior_distribution``); None: no prior."""
    budget_priors: tuple[tuple[int, tuple[float, ...]], ...] | None = None
    """With ``use_budget``: ``(B, distribution)`` pairs, a prior per parallel budget that replaces
    ``prior`` (e.g. mass on the best static action at pass@B for each B). A budget between listed
    ones takes the largest listed B below it; one below them all, the smallest's."""
    input_norm: Literal["layer", "standardise"] = "layer"
    """How the context is normalised before the head. 'layer': a LayerNorm over the vector (LM
    states, whose scales are large and uneven); 'standardise': each feature centred and scaled by
    statistics of the training contexts (``set_standardisation``; buffers saved with the weights), for
    contexts that mix units (the draft's confidence summary beside hidden states), where a LayerNorm
    across a handful of features would erase what they say."""

    def __post_init__(self) -> None:
        if self.embed_dim < 1 or self.num_actions < 1 or self.layers < 1:
            raise ValueError("embed_dim, num_actions and layers must be >= 1")
        if self.input_norm not in ("layer", "standardise"):
            raise ValueError(f"input_norm must be 'layer' or 'standardise', got {self.input_norm!r}")
        if self.temperature <= 0:
            raise ValueError("policy temperature must be > 0")
        _check_prior(self)
        if self.budget_priors is not None:
            if not self.use_budget or not self.budget_priors:
                raise ValueError("budget_priors needs use_budget=True and at least one (budget, prior) pair")
            pairs = tuple(sorted((int(b), _checked_distribution(d, self.num_actions)) for b, d in self.budget_priors))
            if len({b for b, _ in pairs}) != len(pairs) or pairs[0][0] < 1:
                raise ValueError(f"budget_priors needs distinct budgets >= 1, got {[b for b, _ in pairs]}")
            object.__setattr__(self, "budget_priors", pairs)


class SequencePolicy(_PolicyBase):
    """pi(a | x, B): logits over K actions from a context vector and a parallel budget. The context
    is the prompt embedding (the paper's sequence adapter) or, for the draft-gated adapter, the
    summary of a greedy draft (``policies.draft``): one class, two contexts."""

    def __init__(self, config: SequencePolicyConfig):
        super().__init__()
        self.config = config
        self.temperature = config.temperature
        self.embed_norm = nn.LayerNorm(
            config.embed_dim, elementwise_affine=False
        )  # LM states have large, uneven scales
        if config.input_norm == "standardise":  # persistent: the statistics travel with the weights
            self.register_buffer("context_mean", torch.zeros(config.embed_dim))
            self.register_buffer("context_std", torch.ones(config.embed_dim))
        extra = 0
        if config.use_budget:
            self.budget_encoder = _mlp([1, config.budget_dim, config.budget_dim], 0.0)
            extra = config.budget_dim
        self.head = _mlp(
            [config.embed_dim + extra] + [config.hidden] * (config.layers - 1) + [config.num_actions], config.dropout
        )
        self._init_prior(config.prior, config.num_actions, self.head,
                         starts_at_prior=config.prior is not None or config.budget_priors is not None)
        if config.budget_priors is not None:  # buffers rebuilt from the config on load, like log_prior
            budgets, priors = zip(*config.budget_priors)
            self.register_buffer("prior_budgets", torch.tensor(budgets), persistent=False)  # [M], ascending
            self.register_buffer("budget_log_priors", torch.tensor(priors).log(), persistent=False)  # [M, K]

    def set_standardisation(self, contexts: torch.Tensor) -> None:
        """Store the per-feature mean and std of training contexts ``[N, embed_dim]`` (a constant
        feature keeps std 1) for ``input_norm='standardise'``."""
        if self.config.input_norm != "standardise":
            raise ValueError("set_standardisation needs input_norm='standardise'")
        std = contexts.float().std(0, unbiased=False) if len(contexts) > 1 else torch.ones(contexts.shape[1])
        self.context_mean.copy_(contexts.float().mean(0))
        self.context_std.copy_(torch.where(std > 1e-6, std, torch.ones_like(std)))

    def normalise(self, context: torch.Tensor) -> torch.Tensor:
        """``[N, embed_dim]`` context as the head sees it (see ``SequencePolicyConfig.input_norm``)."""
        if self.config.input_norm == "standardise":
            return ((context.float() - self.context_mean) / self.context_std).clamp(-10, 10)
        return self.embed_norm(context.float())

    def encode_budget(self, budget: torch.Tensor) -> torch.Tensor:
        """``[N]`` budgets -> ``[N, 1]`` scalar in [0, 1] (log scale: 1, 2, 4, 8 are evenly spaced)."""
        return (budget.float().clamp(min=1).log2() / math.log2(max(self.config.max_budget, 2))).unsqueeze(-1)

    def forward(self, embedding: torch.Tensor, budget: torch.Tensor | None = None) -> torch.Tensor:
        """Logits ``[N, K]`` for embeddings ``[N, embed_dim]`` and budgets ``[N]``."""
        x = self.normalise(embedding)
        if self.config.use_budget:
            if budget is None:
                raise ValueError("this adapter was trained with the budget as input: pass parallel budgets")
            budget = budget.to(x.device)
            x = torch.cat([x, self.budget_encoder(self.encode_budget(budget))], dim=-1)
            if self.config.budget_priors is not None:
                # row i takes the prior of the largest listed budget <= B_i (the smallest's below all)
                row = ((self.prior_budgets.unsqueeze(0) <= budget.unsqueeze(1)).sum(1) - 1).clamp(min=0)  # [N]
                return self.head(x) + self.budget_log_priors[row]
        return self.head(x) + self.log_prior

    def choose(
        self,
        embeddings: torch.Tensor,
        budgets: torch.Tensor,
        *,
        deterministic: bool = True,
        uniform: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(action ``[N]``, probabilities ``[N, K]``), on CPU, for prompt embeddings ``[N, embed_dim]``
        and parallel budgets ``[N]``: the argmax, or (``deterministic=False``) an inverse-CDF draw
        from ``uniform [N]``, one number per prompt so that a draw does not depend on the batch.
        No gradients: this is how a trained adapter (or validation) picks actions."""
        device = next(self.parameters()).device
        with torch.no_grad():
            probs = self.probs(embeddings.to(device), budgets.to(device)).float().cpu()
        if deterministic:
            return probs.argmax(-1), probs
        if uniform is None:
            raise ValueError("a sampled choice needs one uniform number per prompt")
        return categorical_from_uniform(probs, uniform), probs


@dataclass(frozen=True)
class TokenPolicyConfig:
    """Shape of the token-level adapter (paper hyper-parameter table: 3-layer MLP, SiLU, dropout 0.1)."""

    hidden_size: int
    """The LM's hidden size (input size when features='hidden')."""
    num_actions: int
    features: Literal["hidden", "entropy"] = "hidden"
    """'hidden': x_t = h_t; 'entropy': the ablation that sees only the base distribution's entropy."""
    use_budget: bool = True
    """Append phi(b_t), the remaining-budget encoding (features='hidden' only: the entropy-only
    ablation observes the entropy alone, whatever this says)."""
    token_budget: int = DEFAULT_TOKEN_BUDGET
    """b, used to scale phi(b_t)."""
    width: int = 256
    layers: int = 3
    dropout: float = 0.1
    temperature: float = DEFAULT_POLICY_TEMPERATURE
    prior: tuple[float, ...] | None = None
    """A distribution over the actions added to the logits as ``log prior`` (the policy starts at
    it and learns deviations; see ``prior_distribution``); None: no prior."""

    def __post_init__(self) -> None:
        if self.features not in ("hidden", "entropy"):
            raise ValueError(f"features must be 'hidden' or 'entropy', got {self.features!r}")
        if self.layers < 1 or self.num_actions < 1 or self.token_budget < 1:
            raise ValueError("layers, num_actions and token_budget must be >= 1")
        if self.temperature <= 0:
            raise ValueError("policy temperature must be > 0")
        _check_prior(self)

    @property
    def sees_budget(self) -> bool:
        """Whether x_t includes phi(b_t): w/ budget with hidden states (never for entropy-only)."""
        return self.use_budget and self.features == "hidden"

    @property
    def input_dim(self) -> int:
        base = self.hidden_size if self.features == "hidden" else 1
        return base + (2 if self.sees_budget else 0)


class TokenPolicy(_PolicyBase):
    """pi(a_t | x_t) over the action set, one forward per decode step for the whole batch."""

    def __init__(self, config: TokenPolicyConfig):
        super().__init__()
        self.config = config
        self.temperature = config.temperature
        base = config.hidden_size if config.features == "hidden" else 1
        self.norm = nn.LayerNorm(base, elementwise_affine=False) if config.features == "hidden" else nn.Identity()
        self.mlp = _mlp(
            [config.input_dim] + [config.width] * (config.layers - 1) + [config.num_actions], config.dropout
        )
        self._init_prior(config.prior, config.num_actions, self.mlp)

    def observation(self, hidden: torch.Tensor, entropy: torch.Tensor, remaining: torch.Tensor) -> torch.Tensor:
        """x_t ``[..., input_dim]`` from hidden ``[..., H]``, entropy ``[...]``, remaining budget ``[...]``."""
        parts = [self.norm(hidden.float())] if self.config.features == "hidden" else [entropy.float().unsqueeze(-1)]
        if self.config.sees_budget:
            frac = remaining.float() / self.config.token_budget
            # phi(b_t): linear and log fractions of the budget left, so both ends are resolved.
            parts += [
                frac.unsqueeze(-1),
                (torch.log1p(remaining.float()) / math.log1p(self.config.token_budget)).unsqueeze(-1),
            ]
        return torch.cat(parts, dim=-1)

    def forward(
        self, observation: torch.Tensor, dropout_key: tuple[torch.Tensor, torch.Tensor] | None = None
    ) -> torch.Tensor:
        """Logits ``[N, K]``. With ``dropout_key = (row seeds [N], steps [N])`` the dropout layers use
        counter-based masks keyed by (seed, step, layer) whatever the module's mode (training: the
        rollout and the loss see the same dropped-out policy); without it, ``nn.Dropout`` as usual
        (on in train mode, off in eval mode)."""
        if dropout_key is None or self.config.dropout == 0:
            return self.mlp(observation) + self.log_prior
        seeds, steps = (k.to(observation.device) for k in dropout_key)
        x, p = observation, self.config.dropout
        for i, layer in enumerate(self.mlp):
            if isinstance(layer, nn.Dropout):
                x = x * counter_dropout_keep(seeds, steps, i, x.shape[-1], p).to(x.dtype) / (1 - p)
            else:
                x = layer(x)
        return x + self.log_prior


class TokenPolicyChooser:
    """Wraps a ``TokenPolicy`` as the decode loop's per-step chooser (no grad).

    The action draw uses the loop's per-row uniforms, so it is reproducible and independent of the
    batch. ``deterministic`` takes the argmax instead. ``training_dropout``: the training rollouts'
    behaviour policy, with dropout masks keyed by (row seed, step) (``TokenPolicy.forward``'s
    ``dropout_key``), the masks the loss recomputes; off, the policy runs as its module mode says
    (eval: no dropout, the served policy)."""

    def __init__(self, policy: TokenPolicy, deterministic: bool = False, training_dropout: bool = False):
        self.policy, self.deterministic, self.training_dropout = policy, deterministic, training_dropout

    def __call__(self, f: StepFeatures) -> torch.Tensor:
        device = next(self.policy.parameters()).device
        obs = self.policy.observation(f.hidden.to(device), f.entropy.to(device), f.remaining_budget.to(device))
        key = None
        if self.training_dropout:
            if f.seeds is None:
                raise ValueError("training dropout needs the rows' seeds in the step features")
            key = (f.seeds, torch.full_like(f.seeds, f.step))
        with torch.no_grad():
            probs = self.policy.probs(obs, dropout_key=key) if key is not None else self.policy.probs(obs)
        if self.deterministic:
            return probs.argmax(-1)
        return categorical_from_uniform(probs, f.uniform.to(device))


class UniformChooser:
    """The token-level Mixed baseline as a chooser: each token's action uniform over K, from the row's
    own uniform draw (reproducible, independent of the batch)."""

    def __init__(self, num_actions: int):
        if num_actions < 1:
            raise ValueError("a uniform chooser needs at least one action")
        self.k = num_actions

    def __call__(self, f: StepFeatures) -> torch.Tensor:
        return (f.uniform * self.k).long().clamp(max=self.k - 1)
