"""The attempt policy: after each attempt, stop and answer, or make one more attempt with an arm.

The fixed answer rules (self-consistency, ESC, Adaptive-Consistency, DeepConf, ReASC, CGES, a
confidence threshold) each read one or two signals of the attempts so far in a fixed way. This
policy reads them all and learns how to combine them:

    attempt 1 = the stopped greedy (as the draft-gated adapter's draft)
    after attempt k: state s_k = what the attempts so far show
        -> pi(stop | s_k) or pi(one more attempt with arm a | s_k)
    at the stop: the answer is argmax over answers of sum_{attempts i with that answer} w(f_i),
                 w >= 0 a learned weight from attempt i's own features (ties: the answer drawn first)

Per attempt ``f_i`` (``ATTEMPT_FEATURE_SETS``, chosen by ``AttemptPolicyConfig.features``):
``confidence`` (the confidence summary's trace columns, standardised, and its length as a fraction
of the token budget), ``answer_probs`` (the answer tokens' log-probability and least probability),
``hidden`` (a learned linear projection of its standardised mean hidden state, when the table has
them); always whether it holds an answer and which arm drew it. The state ``s_k``: the mean, the
latest and the first attempt's ``f``; with ``agreement`` the leader's vote share, the distinct
answers per attempt, whether the latest and the first attempt agree with the leader, the share of
attempts without an answer and the leader's share of the learned weight; always the attempts made
and left (as fractions of ``max_attempts``) and each arm's draws so far.

**The state lattice.** Attempts of an arm are read in order (its n-th attempt is its n-th sample),
so which attempts have been made is fixed by the count of draws per arm, and the state by those
counts and the arm drawn last. ``AttemptLattice`` enumerates every reachable (counts, last arm)
once; every state's features, action probabilities and stop value are computed for all problems
in one pass over ``[P, S, ...]`` tensors (cumulative sums per arm give any state's sums), the
probability of reaching each state is a sum over its predecessors (``reach``), and the policy's
expected reward on a table is exact (``expected_reward``). ``walk`` follows the most probable
action from the first attempt (how the policy is used).

The draft-gated adapter (``policies.draft``) is the one-step case: one sampled arm,
``max_attempts = 2``, the answer the re-decode's (a weight of 0 on the draft) or the draft's.

Layering: this module reads a sample table through its attributes (``AttemptInputs.from_table``)
and never imports ``evaluation``; the table's confidence column names are passed in. The glue of
a new adapter kind (``save_attempt_adapter`` / ``load_attempt_adapter``, its model card lines) is
at the end, kept apart for the adapter-kind interface.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from torch import nn

from ..decoding.actions import DEFAULT_TOKEN_BUDGET
from ..decoding.protocol import STOP_AT_ANSWER
from .adapter_files import AdapterConfig, load_adapter, save_adapter

__all__ = [
    "ATTEMPT_FEATURE_SETS",
    "ANSWER_PROB_COLUMNS",
    "AttemptPolicyConfig",
    "AttemptInputs",
    "AttemptLattice",
    "MAX_LATTICE_STATES",
    "lattice_states",
    "AttemptPolicy",
    "LatticeOutputs",
    "AttemptOutcome",
    "PolicyDecider",
    "expected_reward",
    "walk",
    "ATTEMPT_KIND",
    "save_attempt_adapter",
    "load_attempt_adapter",
    "attempt_card_lines",
]

ATTEMPT_FEATURE_SETS = ("confidence", "hidden", "agreement", "answer_probs")
"""What the policy may read (module docstring)."""

ANSWER_PROB_COLUMNS = ("answer_logprob", "answer_prob_min")
"""The confidence columns read only with the ``answer_probs`` feature set (the answer's own tokens)."""

MAX_LATTICE_STATES = 50_000
"""Most states an attempt policy's lattice may have: every state's features are computed for every
problem at each decision, so the arms' ``distinct`` counts and ``max_attempts`` are bounded by it."""

_AGREEMENT = 6  # leader share, distinct share, latest agrees, first agrees, no-answer share, weighted leader share


@dataclass(frozen=True)
class AttemptPolicyConfig:
    """The attempt policy's shape and what it reads (saved in ``adapter.json``)."""

    arms: tuple[str, ...]
    """The arms' action names, in the table's order (the policy's outputs 1..A)."""
    first_arm: int
    """Index of the arm of the first attempt (the stopped greedy)."""
    distinct: tuple[int, ...]
    """Distinct attempts per arm (1 for greedy, N for a sampled arm): an arm is not drawn past them."""
    confidence_names: tuple[str, ...]
    """The table's confidence columns, in order."""
    features: tuple[str, ...] = ("confidence", "agreement")
    """Feature sets read (``ATTEMPT_FEATURE_SETS``)."""
    max_attempts: int = 9
    """Attempts per problem at most (the first included)."""
    hidden_size: int = 0
    """Width of the table's mean hidden state (0: none)."""
    hidden_proj: int = 8
    """Width of the learned projection of the hidden state (features with ``hidden``)."""
    width: int = 64
    """Hidden width of the stop network and of the weight network."""
    token_budget: int = DEFAULT_TOKEN_BUDGET
    """Token budget of the attempts (the length feature is a fraction of it)."""
    stop_bias: float = 0.0
    """Initial bias of the stop logit (0: stop and each arm equally likely at the start)."""

    def __post_init__(self) -> None:
        unknown = [f for f in self.features if f not in ATTEMPT_FEATURE_SETS]
        if unknown:
            raise ValueError(f"unknown attempt features {unknown}; choose from {list(ATTEMPT_FEATURE_SETS)}")
        if len(self.arms) != len(self.distinct) or not 0 <= self.first_arm < len(self.arms):
            raise ValueError("one distinct count per arm, and the first arm among them")
        if self.max_attempts < 1 or any(d < 1 for d in self.distinct):
            raise ValueError("max_attempts and every arm's distinct count must be >= 1")
        if "hidden" in self.features and self.hidden_size < 1:
            raise ValueError("the hidden feature set needs hidden_size >= 1 (a table with hidden states)")
        if self.width < 1 or self.hidden_proj < 1 or self.token_budget < 1:
            raise ValueError("width, hidden_proj and token_budget must be >= 1")
        _check_lattice(self.distinct, self.first_arm, self.max_attempts)

    @property
    def trace_columns(self) -> tuple[int, ...]:
        """Indices of the confidence columns read with ``confidence``."""
        return tuple(i for i, n in enumerate(self.confidence_names) if n not in ANSWER_PROB_COLUMNS)

    @property
    def answer_columns(self) -> tuple[int, ...]:
        """Indices of the confidence columns read with ``answer_probs``."""
        return tuple(i for i, n in enumerate(self.confidence_names) if n in ANSWER_PROB_COLUMNS)

    @property
    def attempt_dim(self) -> int:
        """Width of one attempt's feature vector ``f``."""
        d = 1 + len(self.arms)  # has an answer, the arm's one-hot
        if "confidence" in self.features:
            d += len(self.trace_columns) + 1  # and the length fraction
        if "answer_probs" in self.features:
            d += len(self.answer_columns)
        if "hidden" in self.features:
            d += self.hidden_proj
        return d

    @property
    def num_actions(self) -> int:
        """The stop network's outputs: stop, then one per arm (``AdapterConfig`` checks it)."""
        return 1 + len(self.arms)

    @classmethod
    def from_dict(cls, policy: dict) -> "AttemptPolicyConfig":
        """From ``adapter.json``'s ``policy`` (lists read back as tuples); a missing or unknown field
        raises TypeError."""
        fields_ = dict(policy)
        for name in ("arms", "distinct", "confidence_names", "features"):
            if name in fields_ and isinstance(fields_[name], list):
                fields_[name] = tuple(fields_[name])
        return cls(**fields_)

    @property
    def state_dim(self) -> int:
        d = 3 * self.attempt_dim + 2 + len(self.arms)
        return d + (_AGREEMENT if "agreement" in self.features else 0)


@dataclass
class AttemptInputs:
    """A table's attempts as tensors, ``P`` problems, ``A`` arms, ``N`` samples."""

    answers: torch.Tensor
    """``[P, A, N]`` long answer id (-1: none)."""
    confidence: torch.Tensor
    """``[P, A, N, C]`` float confidence summary (NaN allowed: an answer column without an answer)."""
    tokens: torch.Tensor
    """``[P, A, N]`` float generated tokens."""
    hidden: torch.Tensor | None = None
    """``[P, A, N, H]`` float mean hidden state, or None."""
    answer_correct: torch.Tensor | None = None
    """``[P, K]`` bool: answer id k is right (training and scoring; None when unknown)."""

    @classmethod
    def from_table(cls, table) -> "AttemptInputs":
        """From a ``SampleTable`` (read through its attributes: this layer does not import it)."""
        hidden = None if table.hidden is None else torch.as_tensor(np.asarray(table.hidden, dtype=np.float32))
        return cls(torch.as_tensor(np.asarray(table.answers, dtype=np.int64)),
                   torch.as_tensor(np.asarray(table.confidence, dtype=np.float32)),
                   torch.as_tensor(np.asarray(table.tokens, dtype=np.float32)), hidden,
                   torch.as_tensor(np.asarray(table.answer_correct(), dtype=bool)))

    @property
    def problems(self) -> int:
        return self.answers.shape[0]

    def rows(self, index: Sequence[int] | torch.Tensor) -> "AttemptInputs":
        index = torch.as_tensor(index, dtype=torch.long)
        def pick(x):
            return (None if x is None else x[index])
        return AttemptInputs(self.answers[index], self.confidence[index], self.tokens[index], pick(self.hidden),
                             pick(self.answer_correct))


def lattice_states(distinct: Sequence[int], first_arm: int, max_attempts: int, cap: int = MAX_LATTICE_STATES) -> int:
    """How many states ``AttemptLattice`` has (``cap + 1`` when it has more), counted without
    enumerating them. A state is the start (one draw of the first arm) or draws per arm ``c`` (the
    first arm's at least once, arm a's at most ``distinct[a]``, at most ``max_attempts`` in all)
    with a last arm L drawn in it (L the first arm: drawn twice). Per L, the count of such ``c`` is
    the sum of the coefficients up to ``max_attempts`` of a product of one polynomial per arm
    (``x^lo + ... + x^distinct``), taken from prefix and suffix products, saturated at the cap."""
    m, a = int(max_attempts), len(distinct)
    if m < 1 or a == 0:
        return 1

    def arm_poly(arm: int, low: int) -> np.ndarray:
        poly = np.zeros(m + 1)
        poly[min(low, m + 1):min(int(distinct[arm]), m) + 1] = 1.0
        return poly

    def times(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.minimum(np.convolve(x, y)[: m + 1], cap + 1.0)

    one = np.zeros(m + 1)
    one[0] = 1.0
    base = [arm_poly(arm, int(arm == first_arm)) for arm in range(a)]
    prefix, suffix = [one], [one]
    for arm in range(a):
        prefix.append(times(prefix[-1], base[arm]))
        suffix.append(times(suffix[-1], base[a - 1 - arm]))
    total = 1.0
    for last in range(a):
        others = times(prefix[last], suffix[a - 1 - last])
        total += times(others, arm_poly(last, int(last == first_arm) + 1)).sum()
        if total > cap:
            return cap + 1
    return int(total)


def _check_lattice(distinct: Sequence[int], first_arm: int, max_attempts: int,
                   cap: int = MAX_LATTICE_STATES) -> None:
    """One line naming the limit when the lattice of these arms would have more than ``cap`` states."""
    if lattice_states(distinct, first_arm, max_attempts, cap) > cap:
        raise ValueError(f"an attempt policy over distinct {list(distinct)} with max_attempts {max_attempts} has "
                         f"more than {cap:,} lattice states (the most allowed): lower max_attempts or distinct")


class AttemptLattice:
    """Every reachable state (draws per arm, arm drawn last) from the first attempt, in order of the
    attempts made: ``counts [S, A]``, ``last [S]``, ``level [S]`` (attempts made - 1), ``succ [S, A]``
    (the state after one more draw of arm a; -1 where the arm is used up or no attempt is left)."""

    @classmethod
    def of(cls, config: "AttemptPolicyConfig") -> "AttemptLattice":
        """The lattice a policy of ``config`` walks (its arms' distinct attempts, first arm, most attempts)."""
        return cls(config.distinct, config.first_arm, config.max_attempts)

    def __init__(self, distinct: Sequence[int], first_arm: int, max_attempts: int,
                 max_states: int = MAX_LATTICE_STATES):
        _check_lattice(distinct, first_arm, max_attempts, max_states)  # before enumerating any
        a = len(distinct)
        start = tuple(1 if i == first_arm else 0 for i in range(a))
        keys = [(start, first_arm)]
        index = {keys[0]: 0}
        succ: list[list[int]] = []
        i = 0
        while i < len(keys):
            counts, _ = keys[i]
            row = [-1] * a
            if sum(counts) < max_attempts:
                for arm in range(a):
                    if counts[arm] < distinct[arm]:
                        nxt = tuple(c + (arm == j) for j, c in enumerate(counts))
                        key = (nxt, arm)
                        if key not in index:
                            if len(keys) >= max_states:
                                raise ValueError(f"more than {max_states} attempt states: lower max_attempts")
                            index[key] = len(keys)
                            keys.append(key)
                        row[arm] = index[key]
            succ.append(row)
            i += 1
        # breadth-first from one start: states come in order of their level
        self.counts = torch.tensor([k[0] for k in keys], dtype=torch.long)
        self.last = torch.tensor([k[1] for k in keys], dtype=torch.long)
        self.level = self.counts.sum(1) - 1
        self.succ = torch.tensor(succ, dtype=torch.long)
        self.arms = a
        self.max_attempts = max_attempts
        edges = (self.succ >= 0).nonzero()  # [E, 2] (src, arm)
        self.edge_src, self.edge_arm = edges[:, 0], edges[:, 1]
        self.edge_dst = self.succ[self.edge_src, self.edge_arm]

    def __len__(self) -> int:
        return len(self.last)


def _cum(x: torch.Tensor) -> torch.Tensor:
    """``[P, A, N, ...]`` -> ``[P, A, N + 1, ...]`` sums of the first n samples of each arm."""
    zero = torch.zeros_like(x[:, :, :1])
    return torch.cat([zero, x.cumsum(2)], dim=2)


def _at_counts(cum: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """Sum over arms of ``cum[:, a, counts[s, a]]``: ``[P, S, ...]`` for a lattice's ``counts [S, A]``."""
    p, a = cum.shape[:2]
    out = 0
    for arm in range(a):
        out = out + cum[:, arm, counts[:, arm]]
    return out


def _mlp(sizes: list[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(nn.Tanh())
    return nn.Sequential(*layers)


@dataclass
class LatticeOutputs:
    """The policy on every state of a lattice, for ``P`` problems."""

    logits: torch.Tensor
    """``[P, S, 1 + A]`` masked action logits (0: stop; -inf: not allowed)."""
    scores: torch.Tensor
    """``[P, S, K]`` each answer's summed weight at each state (0 where the answer is not among them)."""
    votes: torch.Tensor
    """``[P, S, K]`` each answer's count of attempts at each state."""
    weights: torch.Tensor
    """``[P, A, N]`` each attempt's weight."""


class AttemptPolicy(nn.Module):
    """The stop network over states, the weight network over attempts, the hidden projection and the
    standardisation of the inputs (buffers saved with the weights)."""

    def __init__(self, config: AttemptPolicyConfig):
        super().__init__()
        self.config = config
        c = len(config.confidence_names)
        self.register_buffer("conf_mean", torch.zeros(c))
        self.register_buffer("conf_std", torch.ones(c))
        h = max(1, config.hidden_size)
        self.register_buffer("hidden_mean", torch.zeros(h))
        self.register_buffer("hidden_std", torch.ones(h))
        self.hidden_proj = nn.Linear(h, config.hidden_proj, bias=False)
        self.stop_net = _mlp([config.state_dim, config.width, config.width, 1 + len(config.arms)])
        self.weight_net = _mlp([config.attempt_dim, config.width, 1])
        self.vote_sharpness = nn.Parameter(torch.tensor(2.0))
        with torch.no_grad():
            last = self.stop_net[-1]
            last.weight.mul_(0.1)
            last.bias.zero_()
            last.bias[0] = config.stop_bias

    def set_standardisation(self, inputs: AttemptInputs) -> None:
        """Means and scales of the confidence columns and hidden states over the training attempts
        (the distinct ones: a greedy arm's repeated slots counted once)."""
        distinct = torch.tensor(self.config.distinct)
        mask = torch.arange(inputs.answers.shape[2])[None, :] < distinct[:, None]  # [A, N]
        conf = inputs.confidence[:, mask]  # [P, M, C]
        conf = conf.reshape(-1, conf.shape[-1])
        finite = torch.isfinite(conf)
        count = finite.sum(0).clamp(min=1)
        mean = torch.where(finite, conf, 0.0).sum(0) / count
        var = torch.where(finite, (conf - mean) ** 2, 0.0).sum(0) / count
        self.conf_mean.copy_(mean)
        self.conf_std.copy_(var.sqrt().clamp(min=1e-6))
        if inputs.hidden is not None and self.config.hidden_size:
            hid = inputs.hidden[:, mask].reshape(-1, inputs.hidden.shape[-1])
            self.hidden_mean.copy_(hid.mean(0))
            self.hidden_std.copy_(hid.std(0).clamp(min=1e-6))

    def attempt_features(self, inputs: AttemptInputs) -> torch.Tensor:
        """``[P, A, N, F]`` each attempt's feature vector ``f``."""
        cfg = self.config
        p, a, n = inputs.answers.shape
        conf = (inputs.confidence - self.conf_mean) / self.conf_std
        conf = torch.nan_to_num(conf, nan=0.0, posinf=0.0, neginf=0.0).clamp(-8, 8)
        parts = [(inputs.answers >= 0).float().unsqueeze(-1),
                 torch.eye(a)[None, :, None, :].expand(p, a, n, a)]
        if "confidence" in cfg.features:
            parts.append(conf[..., list(cfg.trace_columns)])
            parts.append((inputs.tokens / cfg.token_budget).unsqueeze(-1))
        if "answer_probs" in cfg.features:
            parts.append(conf[..., list(cfg.answer_columns)])
        if "hidden" in cfg.features:
            if inputs.hidden is None:
                raise ValueError("this attempt policy reads hidden states: the table has none")
            hid = (inputs.hidden.float() - self.hidden_mean) / self.hidden_std
            parts.append(self.hidden_proj(hid))
        return torch.cat(parts, dim=-1)

    def on_lattice(self, inputs: AttemptInputs, lattice: AttemptLattice) -> LatticeOutputs:
        """The policy on every state of ``lattice`` for every problem of ``inputs``."""
        cfg = self.config
        p, a, n = inputs.answers.shape
        f = self.attempt_features(inputs)  # [P, A, N, F]
        weights = nn.functional.softplus(self.weight_net(f).squeeze(-1))  # [P, A, N]
        k = max(1, int(inputs.answers.max()) + 1)
        hot = (inputs.answers.unsqueeze(-1) == torch.arange(k)).float()  # [P, A, N, K]
        counts, last = lattice.counts, lattice.last
        attempts = (lattice.level + 1).float()  # [S]
        votes = _at_counts(_cum(hot), counts)  # [P, S, K]
        scores = _at_counts(_cum(hot * weights.unsqueeze(-1)), counts)  # [P, S, K]
        mean_f = _at_counts(_cum(f), counts) / attempts[None, :, None]  # [P, S, F]
        latest_f = f[:, last, counts[torch.arange(len(last)), last] - 1]  # [P, S, F]
        first_f = f[:, cfg.first_arm, 0].unsqueeze(1).expand_as(latest_f)
        progress = [(attempts / cfg.max_attempts).expand(p, -1).unsqueeze(-1),
                    ((cfg.max_attempts - attempts) / cfg.max_attempts).expand(p, -1).unsqueeze(-1),
                    (counts.float() / torch.tensor(cfg.distinct, dtype=torch.float)).expand(p, -1, -1)]
        parts = [mean_f, latest_f, first_f] + progress
        if "agreement" in cfg.features:
            top = votes.max(-1).values  # [P, S]
            latest_answer = inputs.answers[:, last, counts[torch.arange(len(last)), last] - 1]  # [P, S]
            first_answer = inputs.answers[:, cfg.first_arm, 0].unsqueeze(1).expand_as(latest_answer)

            def agrees(ans: torch.Tensor) -> torch.Tensor:
                count = votes.gather(-1, ans.clamp(min=0).unsqueeze(-1)).squeeze(-1)
                return ((ans >= 0) & (count >= top) & (top > 0)).float()

            total = scores.sum(-1)
            parts += [torch.stack([top / attempts, (votes > 0).sum(-1) / attempts, agrees(latest_answer),
                                   agrees(first_answer), 1 - votes.sum(-1) / attempts,
                                   scores.max(-1).values / total.clamp(min=1e-6)], dim=-1)]
        state = torch.cat(parts, dim=-1)  # [P, S, D]
        logits = self.stop_net(state)  # [P, S, 1 + A]
        allowed = torch.cat([torch.ones(len(last), 1, dtype=torch.bool), lattice.succ >= 0], dim=1)  # [S, 1 + A]
        logits = logits.masked_fill(~allowed, float("-inf"))
        return LatticeOutputs(logits, scores, votes, weights)

    def answer_probs(self, out: LatticeOutputs) -> torch.Tensor:
        """``[P, S, K]`` the smoothed answer choice at each state (softmax of the sharpened summed
        weights over the answers present; all zero without an answer): what training differentiates.
        Used, the answer is the argmax (``walk``)."""
        present = out.votes > 0
        logits = (self.vote_sharpness * out.scores).masked_fill(~present, float("-inf"))
        probs = torch.softmax(logits, dim=-1)
        return torch.nan_to_num(probs, nan=0.0) * present.any(-1, keepdim=True)


def expected_reward(policy: AttemptPolicy, inputs: AttemptInputs, lattice: AttemptLattice, price: float,
                    entropy_coef: float = 0.0) -> dict[str, torch.Tensor]:
    """The exact expected reward per problem on the table, ``E[correct - price * attempts]`` under the
    policy's action probabilities and its smoothed answer choice, differentiable. Returns ``objective``
    (with ``entropy_coef`` times the expected entropy of the decisions), ``reward``, ``correct`` and
    ``attempts``, each ``[P]``."""
    if inputs.answer_correct is None:
        raise ValueError("the expected reward needs each answer's correctness")
    out = policy.on_lattice(inputs, lattice)
    probs = torch.softmax(out.logits, dim=-1)  # [P, S, 1 + A]
    p, s = probs.shape[:2]
    reach = [torch.ones(p, 1)]
    level = lattice.level
    starts = [int((level < v).sum()) for v in range(int(level.max()) + 2)]  # state index where each level starts
    for v in range(len(starts) - 2):
        lo, hi = starts[v], starts[v + 1]
        edges = (lattice.edge_src >= lo) & (lattice.edge_src < hi)
        src, arm, dst = lattice.edge_src[edges], lattice.edge_arm[edges], lattice.edge_dst[edges]
        flow = reach[v][:, src - lo] * probs[:, src, 1 + arm]  # [P, E_v]
        nxt = torch.zeros(p, starts[v + 2] - hi).index_add(1, dst - hi, flow)
        reach.append(nxt)
    reach_all = torch.cat(reach, dim=1)  # [P, S]
    k = inputs.answer_correct.shape[1]
    correct_k = inputs.answer_correct.float()
    choice = policy.answer_probs(out)  # [P, S, K']
    kk = min(k, choice.shape[-1])
    q = (choice[..., :kk] * correct_k[:, None, :kk]).sum(-1)  # [P, S] expected correctness on stopping at s
    stop = reach_all * probs[..., 0]  # [P, S] probability of stopping at s
    attempts = (level + 1).float()
    correct = (stop * q).sum(1)
    spent = (stop * attempts).sum(1)
    reward = correct - price * spent
    logp = torch.log_softmax(out.logits, dim=-1)
    entropy = -(probs * torch.where(probs > 0, logp, 0.0)).sum(-1)  # [P, S]
    objective = reward + entropy_coef * (reach_all * entropy).sum(1)
    return {"objective": objective, "reward": reward, "correct": correct, "attempts": spent}


@dataclass
class AttemptOutcome:
    """How the policy used each problem (``walk``)."""

    answers: np.ndarray
    """``[P]`` the answer id (-1: none)."""
    attempts: np.ndarray
    """``[P]`` attempts made (decodes)."""
    tokens: np.ndarray
    """``[P]`` generated tokens of those attempts."""
    paths: list[list[int]]
    """Per problem, the arm of each attempt in order (the first included)."""
    stopped_by: list[str]
    """Per problem, 'policy' (it chose to stop) or 'budget' (no attempt or arm was left)."""
    correct: np.ndarray | None = None
    """``[P]`` bool: the answer is right (when the inputs know)."""


def walk(policy: AttemptPolicy, inputs: AttemptInputs, lattice: AttemptLattice) -> AttemptOutcome:
    """Use the policy: from the first attempt follow the most probable action until it stops; the
    answer is the largest summed weight, ties to the answer drawn first."""
    with torch.no_grad():
        out = policy.on_lattice(inputs, lattice)
    logits = out.logits.numpy()
    weights = out.weights.numpy()
    answers_in = inputs.answers.numpy()
    tokens_in = inputs.tokens.numpy()
    succ = lattice.succ.numpy()
    last = lattice.last.numpy()
    counts = lattice.counts.numpy()
    p = inputs.problems
    chosen, attempts, tokens, paths, stopped_by = [], [], [], [], []
    for i in range(p):
        s = 0
        path = [policy.config.first_arm]
        while True:
            action = int(np.argmax(logits[i, s]))
            if action == 0:
                stopped_by.append("budget" if (succ[s] < 0).all() else "policy")
                break
            s = int(succ[s, action - 1])
            path.append(action - 1)
        order: list[tuple[int, int]] = []
        seen = [0] * lattice.arms
        for arm in path:
            order.append((arm, seen[arm]))
            seen[arm] += 1
        assert tuple(seen) == tuple(counts[s]) and path[-1] == last[s]
        score: dict[int, float] = {}
        for arm, j in order:
            ans = int(answers_in[i, arm, j])
            if ans >= 0:
                score[ans] = score.get(ans, 0.0) + float(weights[i, arm, j])
        if score:
            top = max(score.values())
            best = next(a for a in score if score[a] >= top - 1e-9 * max(1.0, abs(top)))  # dicts keep first-drawn order
        else:
            best = -1
        chosen.append(best)
        attempts.append(len(order))
        tokens.append(float(sum(tokens_in[i, arm, j] for arm, j in order)))
        paths.append(path)
    answers = np.array(chosen, dtype=np.int64)
    correct = None
    if inputs.answer_correct is not None:
        ac = inputs.answer_correct.numpy()
        padded = np.concatenate([ac, np.zeros((p, 1), bool)], axis=1)
        correct = padded[np.arange(p), np.where(answers >= 0, answers, ac.shape[1])]
    return AttemptOutcome(answers, np.array(attempts), np.array(tokens), paths, stopped_by, correct)


class PolicyDecider:
    """The policy as the decider of live sequential attempts (``decoding.attempts``): after each
    round the most probable action at each problem's lattice state (stop: reason ``"policy"``), at the
    stop the answer with the largest summed weight (ties: the answer drawn first), as ``walk``."""

    def __init__(self, policy: AttemptPolicy):
        self.policy = policy
        self.lattice = AttemptLattice.of(policy.config)
        self.index = {(tuple(c.tolist()), int(last)): s
                      for s, (c, last) in enumerate(zip(self.lattice.counts, self.lattice.last))}

    def _outputs(self, state) -> LatticeOutputs:
        hidden = state.hidden if self.policy.config.hidden_size else None
        # the policy's confidence columns, by name, from the summary the attempts were read with
        columns = [state.confidence_names.index(n) for n in self.policy.config.confidence_names]
        inputs = AttemptInputs(state.answers, state.confidence[..., columns], state.tokens, hidden)
        with torch.no_grad():
            return self.policy.on_lattice(inputs, self.lattice)

    def decide(self, state, rows: list[int]) -> list[tuple[int | None, str]]:
        logits = self._outputs(state).logits
        out = []
        for i in rows:
            s = self.index[(tuple(state.counts(i, self.lattice.arms)), state.order[i][-1][0])]
            choice = int(logits[i, s].argmax())
            out.append((None, "policy") if choice == 0 else (choice - 1, ""))
        return out

    def answer(self, state, rows: list[int]) -> list[int]:
        weights = self._outputs(state).weights
        chosen = []
        for i in rows:
            score: dict[int, float] = {}
            for arm, j in state.order[i]:
                k = int(state.answers[i, arm, j])
                if k >= 0:
                    score[k] = score.get(k, 0.0) + float(weights[i, arm, j])
            top = max(score.values()) if score else 0.0
            chosen.append(next((k for k in score if score[k] >= top - 1e-9 * max(1.0, abs(top))), -1))
        return chosen


# ---- the adapter kind's glue: files and model card ------------------------------------------------------

ATTEMPT_KIND = "attempt"
"""The ``kind`` in an attempt adapter's ``adapter.json`` (``policies.kind_attempt``)."""


def save_attempt_adapter(directory: str | Path, policy: AttemptPolicy, actions: Sequence[dict],
                         training: dict | None = None, base_model: str = "", task: str = "",
                         task_options: dict | None = None, stop_at_answer: bool = STOP_AT_ANSWER) -> Path:
    """Write the adapter through ``adapter_files.save_adapter``: ``adapter.safetensors`` (weights and
    standardisation), ``adapter.json`` (kind ``attempt``, the policy's config as ``policy``, the arms'
    actions, ``stop_at_answer``: whether its attempts end at their first answer, as the tables it was
    trained on were decoded) and the model card; ``Adapter.from_pretrained`` / ``load_adapter`` load it."""
    cfg = policy.config
    fingerprint = {"hidden_size": cfg.hidden_size} if cfg.hidden_size else {}
    config = AdapterConfig(kind=ATTEMPT_KIND, policy=json.loads(json.dumps(asdict(cfg))), actions=list(actions),
                           base_model=base_model, base_fingerprint=fingerprint, token_budget=cfg.token_budget,
                           task=task, task_options=task_options, training=dict(training or {}),
                           stop_at_answer=stop_at_answer)
    return save_adapter(directory, policy, config)


def load_attempt_adapter(directory: str | Path) -> tuple[AttemptPolicy, dict]:
    """The policy (in eval mode) and the ``adapter.json`` fields of an attempt adapter."""
    policy, config = load_adapter(directory)
    if not isinstance(policy, AttemptPolicy):
        raise ValueError(f"{directory} holds a {config.kind!r} adapter, not an attempt policy")
    return policy, asdict(config)


def attempt_card_lines(config) -> str:
    """What an attempt adapter's policy decides from (the model card's one clause)."""
    cfg = config.policy
    arms = cfg.get("arms", [])
    first = arms[cfg.get("first_arm", 0)] if arms else "?"
    return (f"after each attempt (the first: `{first}`, the stopped greedy), from what the attempts so far show "
            f"({', '.join(cfg.get('features', []))}): stop and answer with a learned weighting of the answers so "
            f"far, or make one more attempt with one of its arms; at most {cfg.get('max_attempts')} attempts")
