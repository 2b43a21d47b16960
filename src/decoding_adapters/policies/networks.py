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
(deterministic) or a sample plus the probabilities. Adapters are saved as safetensors + JSON
(``save_adapter`` / ``load_adapter``) with everything needed to use them again.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Literal

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from ..core.files import atomic_write, write_json
from ..decoding.actions import (  # the counter generator's mixing
    _GOLDEN,
    DEFAULT_TOKEN_BUDGET,
    DecodingAction,
    _int64,
    _mix64,
    _shift_right,
)
from ..decoding.loop import StepFeatures
from ..decoding.protocol import STOP_AT_ANSWER, STOP_OF_UNMARKED_FILES
from .bounds import check_adapter_fields, parse_json
from .kinds import POLICY_MODES, adapter_kind
from .model_card import EVALUATIONS_FILE, evaluation_label, read_evaluations, read_results, write_model_card

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


# ---- save / load ---------------------------------------------------------------------------------


def default_policy_mode(kind: str) -> str:
    """The mode an adapter of ``kind`` is evaluated and served with unless told otherwise.

    The paper's pseudocode (``SeqSelectStrategy`` / ``TokSelectStrategy``) offers both (a
    ``deterministic`` flag) and does not say which its tables use; we follow what each level's text
    describes and what REINFORCE optimises:

    - token adapters: ``sample``. REINFORCE maximises the expected reward of the *stochastic* policy
      (every training rollout draws s_t ~ Categorical(p_t)); its argmax is a different policy that
      was never trained nor validated. The paper's token-level analysis describes how the learned
      policy *allocates* stochasticity across tokens, i.e. its distribution over actions.
    - sequence adapters: ``argmax``. The paper's sequence-level adapter "commits to a single decoding
      strategy per prompt" for a given parallel budget; validation during training takes the argmax.

    ``evaluate``, ``generate``, ``serve``, ``AdaptiveGenerator`` and ``Adapter`` all default to the
    adapter's stored ``policy_mode`` (this default when none is stored), so the number a report
    prints describes what a user gets by default. Draft-gated adapters (a sequence policy over the
    draft's summary) follow sequence adapters."""
    return adapter_kind(kind).default_policy_mode


def resolve_policy_mode(mode: str | None, kind: str) -> str:
    """``mode`` checked against :data:`POLICY_MODES`, or the default of ``kind`` when None."""
    if mode is None:
        return default_policy_mode(kind)
    if mode not in POLICY_MODES:
        raise ValueError(f"policy_mode must be one of {list(POLICY_MODES)}, got {mode!r}")
    return mode


@dataclass
class AdapterConfig:
    """Everything needed to use a trained adapter again (saved as ``adapter.json``)."""

    kind: str
    """A registered adapter kind (``policies.kinds``): 'sequence', 'token' or 'draft'."""
    policy: dict
    """The SequencePolicyConfig (sequence and draft adapters) / TokenPolicyConfig fields."""
    actions: list[dict]
    """The action set, as DecodingAction dicts, in policy-output order (draft adapters: the
    re-decode actions, outputs 1.. of the policy; output 0 keeps the draft)."""
    base_model: str
    """ModelSpec.name_or_path of the frozen LM it was trained on."""
    base_fingerprint: dict
    """hidden_size and vocab size of that LM: loading onto a mismatched LM fails clearly."""
    embedding: dict = field(default_factory=lambda: {"pooling": "mean"})
    """How prompt embeddings are made (sequence adapters)."""
    parallel_budgets: list[int] = field(default_factory=list)
    """Parallel budgets B seen in training (sequence adapters)."""
    token_budget: int | None = None
    """Token budget b of training (every kind: the rollouts its rewards came from were decoded at it)."""
    task: str = ""
    task_options: dict | None = None
    """The ``get_task`` options of ``task`` it was trained with (``tasks.task_record``: data paths
    absolute, the fields or question template, the instruction, the verifier), so that its generator
    rebuilds the task (the answer check) without them being typed again; None: the task's defaults."""
    training: dict = field(default_factory=dict)
    lm_dtype: str | None = None
    """dtype of the frozen LM's weights in training (e.g. ``bfloat16``): the policy's input features
    were computed in it, so using the adapter with another dtype warns (once). None: the
    ``base_fingerprint``'s dtype, when that has one."""
    policy_mode: str | None = None
    """'sample' or 'argmax': the mode it is evaluated and served with (None: the kind's default,
    :func:`default_policy_mode`)."""
    trained_on: dict | None = None
    """``tasks.problems_record`` (count, digest, content hashes) of the problems it was trained on."""
    selected_on: dict | None = None
    """Sequence adapters: ``problems_record`` of the problems its action set was selected on."""
    draft: dict | None = None
    """Draft-gated adapters: the ``policies.draft.DraftContextConfig`` fields (which summary of the
    greedy draft the policy reads, and the draft's token budget)."""
    stop_at_answer: bool = STOP_AT_ANSWER
    """Each sample it decodes (a draft-gated adapter: its draft and re-decodes) ends at the task's
    first complete answer (``Task.answer_complete``), as it was trained and is served and evaluated
    (the protocol's default, ``decoding.protocol.STOP_AT_ANSWER``). An ``adapter.json`` without the
    field (written before the stop was the protocol) reads ``STOP_OF_UNMARKED_FILES`` (False): it
    decodes to the budget, as it was trained."""

    def __post_init__(self) -> None:
        kind = adapter_kind(self.kind)
        kind.check(self)
        for name, typ in (("policy", dict), ("actions", list), ("base_fingerprint", dict), ("base_model", str)):
            if not isinstance(getattr(self, name), typ):
                raise ValueError(f"adapter field {name!r} must be a {typ.__name__}, got {getattr(self, name)!r}")
        if self.lm_dtype is None:
            self.lm_dtype = self.base_fingerprint.get("dtype")
        try:
            shape = kind.policy_config(self.policy)
        except TypeError as err:  # a missing or unknown policy field
            raise ValueError(f"adapter 'policy' does not describe a {self.kind} policy: {err}") from None
        actions = self.action_list  # validates every action
        if shape.num_actions != kind.outputs(len(actions)):  # a draft policy's output 0 keeps the draft
            raise ValueError(f"adapter policy has {shape.num_actions} outputs but {len(actions)} actions are listed")
        kind.check_fingerprint(self)
        self.policy_mode = resolve_policy_mode(self.policy_mode, self.kind)

    @property
    def adapter_kind(self):
        """The kind object (``policies.kinds``) that says how this adapter decodes, is scored and served."""
        return adapter_kind(self.kind)

    @property
    def seen_hashes(self) -> set[str]:
        """Content hashes of every problem it was trained or selected on (empty when not recorded)."""
        return {h for rec in (self.trained_on, self.selected_on) if rec for h in rec.get("content_hashes", [])}

    @classmethod
    def from_dict(cls, data: dict) -> "AdapterConfig":
        """Read ``adapter.json``. Anything but an object with exactly the known fields (the required
        ones present) is a ValueError."""
        if not isinstance(data, dict):
            raise ValueError(f"expected a JSON object of adapter fields, got {type(data).__name__}")
        check_adapter_fields(data)  # types and bounds of every number, before anything is built from them
        known = {f.name: f for f in fields(cls)}
        missing = [n for n, f in known.items() if n not in data and f.default is MISSING
                   and f.default_factory is MISSING]
        data = _legacy_stop(data)
        unknown = sorted(set(data) - set(known))
        if unknown or missing:
            raise ValueError(
                "adapter fields do not match"
                + (f"; unknown: {unknown}" if unknown else "") + (f"; missing: {missing}" if missing else "")
            )
        return cls(**data)

    @property
    def action_list(self) -> list[DecodingAction]:
        return [DecodingAction.from_dict(a) for a in self.actions]

    def build_policy(self) -> SequencePolicy | TokenPolicy:
        return self.adapter_kind.build_policy(self.policy)


def _legacy_stop(data: dict) -> dict:
    """``adapter.json`` fields with the stop read as the file meant it: no ``stop_at_answer`` is
    False (the adapter decoded to the budget), except a draft-gated adapter whose draft context
    carries the two flags it once had (draft and re-decodes), which must agree."""
    if "stop_at_answer" in data:
        return data
    data = dict(data)
    draft = data.get("draft")
    legacy = ("draft_stop_at_answer", "redecode_stop_at_answer")
    if isinstance(draft, dict) and any(k in draft for k in legacy):
        flags = {bool(draft.get(k, False)) for k in legacy}
        if len(flags) > 1:
            given = ", ".join(f"{k}={draft.get(k)}" for k in legacy)
            raise ValueError(f"this draft-gated adapter stops its draft and its re-decodes differently ({given}): "
                             "one stop_at_answer now covers both")
        data["draft"] = {k: v for k, v in draft.items() if k not in legacy}
        data["stop_at_answer"] = flags.pop()
    else:
        data["stop_at_answer"] = STOP_OF_UNMARKED_FILES
    return data


def save_adapter(directory: str | Path, policy: nn.Module, config: AdapterConfig) -> Path:
    """Write ``adapter.safetensors`` and ``adapter.json`` atomically into ``directory``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().contiguous() for k, v in policy.state_dict().items()}
    atomic_write(directory / "adapter.safetensors", lambda tmp: save_file(state, str(tmp)))
    write_json(directory / "adapter.json", asdict(config))  # last: its presence marks a complete adapter
    write_model_card(directory, config)  # README.md beside adapter.json: the directory describes itself
    return directory


def add_evaluation(adapter_dir: str | Path, eval_dir_or_results: str | Path | Mapping) -> Path:
    """Add an evaluation to the model card of ``adapter_dir`` (an ``evaluate`` output directory, a
    ``results.json`` path, or the results mapping). Evaluations are kept per task and split
    (``evaluations.json`` beside the card): a later one on another task or split is added as its own
    table, labelled with its size; one on the same task and split replaces the earlier."""
    adapter_dir = Path(adapter_dir)
    config = read_adapter_config(adapter_dir)
    key, label = evaluation_label(eval_dir_or_results)
    store = read_evaluations(adapter_dir)
    store[key] = {"label": label, "results": dict(read_results(eval_dir_or_results))}
    write_json(adapter_dir / EVALUATIONS_FILE, store)
    return write_model_card(adapter_dir, config, evaluations=store)


def load_adapter(directory: str | Path, lm=None) -> tuple[nn.Module, AdapterConfig]:
    """Load an adapter; with ``lm`` (a FrozenLM), check that it matches the adapter's base model."""
    directory = Path(directory)
    if not (directory / "adapter.json").is_file():
        raise FileNotFoundError(
            f"{directory} holds no adapter.json: point at a directory written by train-token / train-sequence "
            "or Adapter.save_pretrained."
        )
    config = read_adapter_config(directory)
    if lm is not None:
        check_compatible(config, lm)
    policy = config.build_policy()
    weights = directory / "adapter.safetensors"
    try:
        state = load_file(str(weights))
    except FileNotFoundError:
        raise FileNotFoundError(f"{weights} not found: the adapter directory is incomplete") from None
    except Exception as err:  # safetensors raises its own error type on a truncated or corrupt file
        raise ValueError(f"{weights}: unreadable weights ({err}); the file is truncated or corrupt") from None
    try:
        policy.load_state_dict(state)
    except RuntimeError as err:  # missing, unexpected or mis-shaped tensors
        first = str(err).strip().splitlines()[0]
        raise ValueError(f"{weights} does not fit the policy {directory / 'adapter.json'} describes: {first}") from None
    return policy.eval(), config


def read_adapter_config(directory: str | Path) -> AdapterConfig:
    """``DIR/adapter.json`` as an ``AdapterConfig``; any problem is a one-line ValueError naming the file."""
    path = Path(directory) / "adapter.json"
    try:
        return AdapterConfig.from_dict(parse_json(path.read_text(encoding="utf-8"), path.name))
    except (ValueError, TypeError, UnicodeDecodeError) as err:  # JSONDecodeError is a ValueError
        raise ValueError(f"{path}: {err}") from None


_DTYPE_WARNED: set[tuple[str, str, str]] = set()


def check_compatible(config: AdapterConfig, lm) -> None:
    """Refuse an LM whose hidden or vocabulary size differs from the adapter's base model; warn
    (once per base model and dtype pair) when its dtype differs from the one used in training."""
    want, have = config.base_fingerprint, lm.fingerprint()
    dtype = have.get("dtype")
    if config.lm_dtype and dtype and dtype != config.lm_dtype:
        key = (config.base_model, config.lm_dtype, dtype)
        if key not in _DTYPE_WARNED:
            _DTYPE_WARNED.add(key)
            warnings.warn(
                f"adapter for {config.base_model!r} was trained with the LM in {config.lm_dtype} and is used with "
                f"{dtype}: its input features shift slightly, so its choices may differ (use --dtype "
                f"{config.lm_dtype} to match)",
                stacklevel=2,
            )
    for key in ("hidden_size", "vocab_size"):
        if key in want and want[key] != have[key]:
            raise ValueError(
                f"adapter was trained on {config.base_model!r} ({key}={want[key]}) "
                f"but the given model has {key}={have[key]}: load it onto its own base model."
            )
