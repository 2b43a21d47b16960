"""Evaluation: pass@k of static baselines and decoding adapters, side by side, with confidence intervals.

Methods (each a :class:`Method`), evaluated on the same problems and seeds:

- ``Greedy``: the greedy action. Deterministic, so it is decoded once per problem and its single
  outcome stands for all ``n`` samples (``c = n`` or ``0``): pass@k is the same for every k.
- ``Best``: one static action (the best single action on validation: ``best_single`` of
  ``select-actions``' ``actions.json``, or :func:`select_best_action`).
- ``Mixed``: every sample draws its action uniformly from an action set (seeded, per sample).
- sequence adapters (w/ and w/o budget): for each ``k`` the policy picks an action deterministically
  from (prompt embedding, ``B = k``); ``n`` samples under that action give pass@k. A w/o-budget
  adapter picks the same action for every k.
- token adapters (w/ budget, w/o budget, entropy-only): ``n`` samples with
  ``TokenPolicyChooser(policy)`` (actions sampled from the policy at every token).

``n = max(k_values)`` samples per problem and seed; pass@k uses the unbiased estimator
:func:`pass_at_k` on those ``n``. ``mean_length`` is the mean number of generated tokens (EOS
included); for a sequence adapter it is averaged over the k values, each k weighing its own action.

Common random numbers: sample ``j`` of problem ``p`` in seed ``s`` always uses the row seed
``row_seed(config.seed, s, p.id, j, "eval")``, whatever the method. Since a row's output depends only
on its prompt, seed and action(s) (see ``decoding``), two methods that use the same action for a
sample get the *same* generation: static rows are keyed by (action, seed, problem, sample), decoded
once and shared (Best, Mixed and the sequence adapters reuse each other's generations, and greedy
rows are shared across seeds). Comparisons between methods are therefore paired and less noisy.

Uncertainty (``mean_ci``): for each method and metric we average each problem's value over the
seeds, then report the mean over problems with a two-sided Student-t interval (``confidence``,
default 95%) computed from the spread of those per-problem values: mean ± t_{P-1} · sd / sqrt(P).
This counts problem-to-problem variation as well as sampling noise, the right interval when the
problems are a sample of a larger population. It is wider than a binomial interval over all
``P × seeds`` Bernoulli runs: the paper's ±1.2 at ~72% on 500 problems × 3 runs matches
sqrt(p(1-p)/1500), a binomial standard error; ``eval_details.json`` gives that number too
(``binomial_se``), along with the across-seed spread (``seed_means``, ``seed_std``: the mean over
problems computed separately for each seed). With one problem the interval is undefined (null). Intervals of pass@k are clipped to [0, 1]
(then no longer symmetric: tables print ``mean [low, high]`` instead of ``mean ± half-width``).
Differences between two methods on the same problems use :func:`paired_ci` (a t interval on
per-problem differences), which is what the report uses to say whether an adapter beats a baseline.

Output (``Evaluation.write``):

- ``results.json``: ``{method: {metric: {"mean", "ci_low", "ci_high"}}}``, metrics ``pass@k`` for
  each k and ``mean_length``; pass@k as fractions in [0, 1], lengths in tokens.
- ``eval_details.json``: config, problems, method descriptions (kind, role, level, action names),
  per-problem values (``[problem][seed]``), seed means, generation lengths, action usage,
  sequence-adapter choices and a sample of trajectories (text, token ids, token strings, per-token
  action indices into the method's action list, base entropies, max-probs) for the figures.
"""

from __future__ import annotations

import argparse
import logging
import math
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Literal, Sequence

import torch
from tqdm.auto import tqdm

from .actions import GREEDY, ActionSet, DecodingAction, load_action_set
from .decoding import DecodeResult, row_seed
from .policies import AdapterConfig, TokenPolicyChooser, load_adapter
from .rollouts import HFRollouts, RolloutRequest, Rollouts, encode_problems

__all__ = [
    "pass_at_k",
    "mean_ci",
    "paired_ci",
    "t_quantile",
    "EvalConfig",
    "Method",
    "greedy_method",
    "static_method",
    "mixed_method",
    "adapter_method",
    "Evaluation",
    "evaluate",
    "select_best_action",
    "resolve_best_action",
    "format_table",
    "format_interval",
    "configure_parser",
    "run_cli",
]

log = logging.getLogger(__name__)

MethodKind = Literal["greedy", "static", "mixed", "sequence", "token"]
RolloutsFactory = Callable[[ActionSet, bool], Rollouts]
"""``(action_set, per_token) -> Rollouts``; ``per_token`` is True when a chooser will drive it."""


# ---- statistics ----------------------------------------------------------------------------------


def _check_int(name: str, value) -> int:
    if isinstance(value, bool) or int(value) != value:
        raise ValueError(f"{name} must be an integer, got {value!r}")
    return int(value)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples of which ``c`` are correct: ``1 - C(n-c, k) / C(n, k)``.

    Computed as ``1 - prod_{i=n-c+1}^{n} (1 - k/i)`` (no huge binomials). Needs ``1 <= k <= n``
    and ``0 <= c <= n``; raises ValueError otherwise.
    """
    n, c, k = _check_int("n", n), _check_int("c", c), _check_int("k", k)
    if n < 1 or k < 1:
        raise ValueError(f"n and k must be >= 1, got n={n}, k={k}")
    if not 0 <= c <= n:
        raise ValueError(f"c must be in [0, n={n}], got {c}")
    if k > n:
        raise ValueError(f"pass@{k} needs at least k samples, got n={n}")
    if n - c < k:  # every k-subset contains a correct sample
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta ``I_x(a, b)``."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def _t_cdf(t: float, df: float) -> float:
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_quantile(p: float, df: float) -> float:
    """Quantile of Student's t with ``df`` degrees of freedom (bisection on the exact CDF)."""
    if not 0.0 < p < 1.0 or df <= 0:
        raise ValueError(f"need 0 < p < 1 and df > 0, got p={p}, df={df}")
    if df > 1e6:
        return statistics.NormalDist().inv_cdf(p)
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while _t_cdf(hi, df) < p:
        lo, hi = hi, hi * 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if _t_cdf(mid, df) < p else (lo, mid)
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


def mean_ci(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high): mean and two-sided Student-t interval of the mean of ``values``.

    With a single value the interval is undefined and returned as NaN; identical values give a
    zero-width interval."""
    xs = [float(v) for v in values]
    if not xs:
        raise ValueError("mean_ci needs at least one value")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    mean = math.fsum(xs) / len(xs)
    if len(xs) < 2:
        return mean, math.nan, math.nan
    half = t_quantile(0.5 + confidence / 2.0, len(xs) - 1) * statistics.stdev(xs) / math.sqrt(len(xs))
    return mean, mean - half, mean + half


def paired_ci(a: Sequence[float], b: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high) of the per-item difference ``a - b`` (items paired: the same problems)."""
    if len(a) != len(b):
        raise ValueError(f"paired values need equal lengths, got {len(a)} and {len(b)}")
    return mean_ci([x - y for x, y in zip(a, b)], confidence)


# ---- configuration and methods -------------------------------------------------------------------


@dataclass(frozen=True)
class EvalConfig:
    """How an evaluation samples and summarises."""

    k_values: tuple[int, ...] = (1, 2, 4, 8)
    """Parallel budgets k reported as pass@k; n = max(k) samples per problem and seed."""
    seeds: int = 3
    """Independent repetitions (different row seeds) of the whole evaluation."""
    token_budget: int = 128
    """Max new tokens per sample."""
    cot_ratio: float = 0.0
    """Fraction of prompts given a chain-of-thought instruction (fixed per problem, as in training)."""
    seed: int = 0
    """Base seed of the row seeds and of the CoT assignment."""
    confidence: float = 0.95
    """Level of the confidence intervals."""
    keep_trajectories: int = 64
    """Trajectories kept per method (seed 0, spread over problems first) for plots and traces."""

    def __post_init__(self) -> None:
        ks = tuple(sorted({_check_int("k", k) for k in self.k_values}))
        if not ks or ks[0] < 1:
            raise ValueError(f"k_values must be positive integers, got {self.k_values}")
        object.__setattr__(self, "k_values", ks)
        if self.seeds < 1 or self.token_budget < 1 or self.keep_trajectories < 0:
            raise ValueError("seeds and token_budget must be >= 1, keep_trajectories >= 0")
        if not 0.0 <= self.cot_ratio <= 1.0:
            raise ValueError(f"cot_ratio must be in [0, 1], got {self.cot_ratio}")
        if not 0.0 < self.confidence < 1.0:
            raise ValueError(f"confidence must be in (0, 1), got {self.confidence}")

    @property
    def n(self) -> int:
        """Samples per problem and seed."""
        return max(self.k_values)

    @property
    def metrics(self) -> list[str]:
        return [f"pass@{k}" for k in self.k_values] + ["mean_length"]


@dataclass
class Method:
    """One column of the comparison."""

    name: str
    """Unique display name (the key in results.json)."""
    kind: MethodKind
    actions: list[DecodingAction]
    """greedy/static: the one action; mixed: the set drawn from; adapters: the policy's outputs in order."""
    role: str = ""
    """Column in the paper's tables: greedy, best, mixed, w/o budget, w/ budget, entropy-only."""
    level: Literal["static", "sequence", "token"] = "static"
    """Which table the method belongs to (static baselines appear in both)."""
    policy: torch.nn.Module | None = None
    adapter: AdapterConfig | None = None
    source: str | None = None
    """Adapter directory, if any."""
    seed_policies: list[torch.nn.Module] | None = None
    """One adapter per evaluation seed (e.g. trained with seeds 0, 1, 2): seed s uses
    ``seed_policies[s % len]``; None means ``policy`` for every seed."""

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a method needs a name")
        if self.kind not in ("greedy", "static", "mixed", "sequence", "token"):
            raise ValueError(f"unknown method kind {self.kind!r}")
        if not self.actions:
            raise ValueError(f"method {self.name!r} has no actions")
        if self.kind in ("greedy", "static") and len(self.actions) != 1:
            raise ValueError(f"static method {self.name!r} needs exactly one action")
        if self.kind in ("sequence", "token") and self.policy is None:
            raise ValueError(f"adapter method {self.name!r} needs a policy")

    @property
    def action_names(self) -> list[str]:
        return [a.name for a in self.actions]

    def policy_for(self, seed: int) -> torch.nn.Module | None:
        return self.seed_policies[seed % len(self.seed_policies)] if self.seed_policies else self.policy

    @property
    def all_policies(self) -> list[torch.nn.Module]:
        return list(self.seed_policies or ([self.policy] if self.policy is not None else []))

    def describe(self) -> dict:
        """JSON-friendly description (eval_details.json ``methods``)."""
        out = {"kind": self.kind, "role": self.role, "level": self.level, "actions": self.action_names,
               "action_dicts": [a.to_dict() for a in self.actions], "source": self.source}
        if self.adapter is not None:
            out["adapter_policy"] = dict(self.adapter.policy)
        return out


def greedy_method(name: str = "Greedy") -> Method:
    return Method(name, "greedy", [GREEDY], role="greedy")


def static_method(action: DecodingAction, name: str = "Best", role: str = "best") -> Method:
    return Method(name, "greedy" if action.is_greedy else "static", [action], role=role)


def mixed_method(actions: Sequence[DecodingAction], name: str = "Mixed", level: str = "static") -> Method:
    return Method(name, "mixed", list(actions), role="mixed", level=level)


def adapter_role(config: AdapterConfig) -> str:
    """'entropy-only', 'w/ budget' or 'w/o budget' from an adapter's policy config."""
    if config.kind == "token" and config.policy.get("features", "hidden") == "entropy":
        return "entropy-only"
    return "w/ budget" if config.policy.get("use_budget", True) else "w/o budget"


def adapter_method(directory: str | Path | Sequence[str | Path], lm=None, name: str | None = None) -> Method:
    """Load the adapter in ``directory`` (checked against ``lm``) as a method. A list of directories
    (the same adapter trained with different seeds) gives one adapter per evaluation seed."""
    directories = [directory] if isinstance(directory, (str, Path)) else list(directory)
    loaded = [load_adapter(d, lm) for d in directories]
    policy, config = loaded[0]
    for _, other in loaded[1:]:
        if (other.kind, other.actions, adapter_role(other)) != (config.kind, config.actions, adapter_role(config)):
            raise ValueError(f"adapters {directories} differ in kind, actions or variant: they cannot share a method")
    role = adapter_role(config)
    name = name or f"{'Seq' if config.kind == 'sequence' else 'Token'} {role}"
    return Method(name, config.kind, config.action_list, role=role, level=config.kind, policy=policy, adapter=config,
                  source=", ".join(map(str, directories)),
                  seed_policies=[p for p, _ in loaded] if len(loaded) > 1 else None)


# ---- keys: which generation a method uses for (seed, problem, sample) ----------------------------

StaticKey = tuple  # (DecodingAction, seed, problem, sample); greedy: (GREEDY, 0, problem, 0)


def _static_key(action: DecodingAction, s: int, i: int, j: int) -> StaticKey:
    return (GREEDY, 0, i, 0) if action.is_greedy else (action, s, i, j)


def _mixed_action(method: Method, cfg: EvalConfig, s: int, pid: str, j: int) -> DecodingAction:
    return method.actions[row_seed(cfg.seed, s, pid, j, "mixed-action") % len(method.actions)]


def _sample_keys(method: Method, cfg: EvalConfig, s: int, i: int, pid: str, choices) -> list[list[tuple]]:
    """For each k (in ``cfg.k_values`` order) the n keys of the samples pass@k is computed from."""
    n, ks = cfg.n, cfg.k_values
    if method.kind == "token":
        keys = [("token", method.name, s, i, j) for j in range(n)]
        return [keys] * len(ks)
    if method.kind == "sequence":
        return [[_static_key(choices[method.name][s][i][ki], s, i, j) for j in range(n)] for ki in range(len(ks))]
    if method.kind == "mixed":
        keys = [_static_key(_mixed_action(method, cfg, s, pid, j), s, i, j) for j in range(n)]
    else:
        keys = [_static_key(method.actions[0], s, i, j) for j in range(n)]
    return [keys] * len(ks)


def _display_keys(method: Method, cfg: EvalConfig, problems, choices) -> list[tuple]:
    """Keys of the trajectories kept for ``method``: seed 0, one per problem first, then more samples."""
    out: list[tuple] = []
    for idx in range(cfg.keep_trajectories):
        i, j = idx % len(problems), idx // len(problems)
        if j >= cfg.n or (method.kind == "greedy" and j > 0):
            break
        key = _sample_keys(method, cfg, 0, i, problems[i].id, choices)[-1][j]
        if key not in out:
            out.append(key)
    return out


# ---- decoding and bookkeeping --------------------------------------------------------------------


@dataclass
class _Store:
    """Outcomes of decoded rows by key, plus full records for the kept ones."""

    tokenizer: object
    wanted: set = field(default_factory=set)
    correct: dict = field(default_factory=dict)
    length: dict = field(default_factory=dict)
    records: dict = field(default_factory=dict)
    token_counts: dict = field(default_factory=dict)  # token method name -> Counter(action)

    def add(self, keys: list[tuple], result: DecodeResult, rewards: torch.Tensor, actions: list[DecodingAction]) -> None:
        for r, key in enumerate(keys):
            self.correct[key] = float(rewards[r])
            self.length[key] = int(result.lengths[r])
            if key in self.wanted:
                self.records[key] = _record(result, r, self.tokenizer, actions, float(rewards[r]))


def _record(result: DecodeResult, r: int, tokenizer, actions: list[DecodingAction], reward: float) -> dict:
    n = int(result.lengths[r])
    ids = result.tokens[r, :n].tolist()
    return {
        "text": result.texts[r],
        "token_ids": ids,
        "tokens": tokenizer.batch_decode([[t] for t in ids]) if ids else [],
        "_actions": [actions[a] for a in result.actions[r, :n].tolist()],
        "entropy": [round(float(x), 4) for x in result.entropy[r, :n]],
        "max_prob": [round(float(x), 4) for x in result.max_prob[r, :n]],
        "correct": reward,
        "length": n,
        "stop_reason": "eos" if bool(result.stopped_at_eos[r]) else "budget",
    }


def _score(task, problems, keys_problem: list[int], result: DecodeResult) -> torch.Tensor:
    return torch.tensor([float(task.reward(problems[p], text)) for p, text in zip(keys_problem, result.texts)])


def _row_seed_of(cfg: EvalConfig, key: tuple, problems) -> int:
    _, s, i, j = key[-4:]
    return row_seed(cfg.seed, s, problems[i].id, j, "eval")


ROWS_PER_REQUEST = 4096
"""Rows sent to the rollout engine at once: bounds the memory of the ``[rows, steps]`` records."""


def _run_rows(keys, prompts, problems, task, cfg, rollouts: Rollouts, store: _Store, progress, *,
              row_actions=None, chooser=None, actions) -> list[DecodeResult]:
    """Decode the rows ``keys`` (problem index ``key[-2]``) in slices and record their outcomes."""
    results = []
    for start in range(0, len(keys), ROWS_PER_REQUEST):
        part = keys[start:start + ROWS_PER_REQUEST]
        request = RolloutRequest(prompts, [k[-2] for k in part], [_row_seed_of(cfg, k, problems) for k in part],
                                 cfg.token_budget, None if row_actions is None else row_actions[start:start + len(part)])
        result = rollouts.run(request, chooser, progress=progress)
        store.add(part, result, _score(task, problems, request.prompt_of_row, result), actions)
        results.append(result)
    return results


def _decode_static(keys, prompts, problems, task, cfg, rollouts: Rollouts, store: _Store, progress) -> None:
    if not keys:
        return
    index = {a: i for i, a in enumerate(rollouts.action_set.actions)}
    _run_rows(keys, prompts, problems, task, cfg, rollouts, store, progress, row_actions=[index[k[0]] for k in keys],
              actions=rollouts.action_set.actions)


def _decode_token(method: Method, s, prompts, problems, task, cfg, rollouts: Rollouts, store: _Store, progress) -> None:
    keys = [("token", method.name, s, i, j) for i in range(len(problems)) for j in range(cfg.n)]
    results = _run_rows(keys, prompts, problems, task, cfg, rollouts, store, progress,
                        chooser=TokenPolicyChooser(method.policy_for(s)), actions=method.actions)
    counts = store.token_counts.setdefault(method.name, Counter())
    for result in results:
        counts.update(result.actions[result.valid_mask()].tolist())


def _sequence_choices(method: Method, lm, prompts, cfg: EvalConfig) -> list[list[list[DecodingAction]]]:
    """``[seed][problem][k index]``: the action the sequence adapter (of that seed) picks for budget
    k, deterministically."""
    pooling = (method.adapter.embedding or {}).get("pooling", "mean") if method.adapter else "mean"
    emb = lm.prompt_embeddings(prompts, pooling=pooling)
    by_policy: dict[int, list[list[DecodingAction]]] = {}
    for policy in method.all_policies:
        device = next(policy.parameters()).device
        per_k = []
        with torch.no_grad():
            for k in cfg.k_values:
                action, _ = policy.select(emb.to(device), torch.full((len(prompts),), k, device=device), deterministic=True)
                per_k.append(action.tolist())
        by_policy[id(policy)] = [[method.actions[per_k[ki][i]] for ki in range(len(cfg.k_values))] for i in range(len(prompts))]
    return [by_policy[id(method.policy_for(s))] for s in range(cfg.seeds)]


def _static_actions(methods: Sequence[Method], choices: dict) -> list[DecodingAction]:
    """Every action static rows will use (greedy canonicalised), in first-use order."""
    seen: dict[DecodingAction, None] = {}
    for m in methods:
        if m.kind == "token":
            continue
        pool = ([a for per_seed in choices[m.name] for per_problem in per_seed for a in per_problem]
                if m.kind == "sequence" else m.actions)
        for a in pool:
            seen.setdefault(GREEDY if a.is_greedy else a, None)
    return list(seen)


# ---- the evaluation ------------------------------------------------------------------------------


@dataclass
class Evaluation:
    """Results of :func:`evaluate` (see the module docstring for the formats)."""

    results: dict
    details: dict

    def write(self, out_dir: str | Path) -> dict[str, Path]:
        from .cli_common import write_json

        out_dir = Path(out_dir)
        return {"results": write_json(out_dir / "results.json", self.results),
                "details": write_json(out_dir / "eval_details.json", self.details)}


def _check_methods(methods: Sequence[Method]) -> None:
    names = [m.name for m in methods]
    if not methods:
        raise ValueError("nothing to evaluate: no methods")
    if len(set(names)) != len(names):
        raise ValueError(f"method names must be unique, got {names}")


def _default_factory(lm, batch_rows: int) -> RolloutsFactory:
    return lambda action_set, per_token: HFRollouts(lm, action_set, batch_rows)


def evaluate(lm, task, problems, methods: Sequence[Method], config: EvalConfig | None = None, *,
             rollouts_factory: RolloutsFactory | None = None, batch_rows: int = 64,
             progress: bool = False, meta: dict | None = None) -> Evaluation:
    """Evaluate ``methods`` on ``problems`` (a list of ``tasks.Problem``); see the module docstring."""
    cfg = config or EvalConfig()
    _check_methods(methods)
    if not problems:
        raise ValueError("nothing to evaluate: no problems")
    factory = rollouts_factory or _default_factory(lm, batch_rows)
    prompts, cot = encode_problems(lm, task, problems, cfg.cot_ratio, cfg.seed)
    choices = {m.name: _sequence_choices(m, lm, prompts, cfg) for m in methods if m.kind == "sequence"}
    _warn_token_budgets(methods, cfg)
    modes = {id(p): p.training for m in methods for p in m.all_policies}
    for m in methods:
        for p in m.all_policies:
            p.eval()
    store = _Store(lm.tokenizer)
    display = {m.name: _display_keys(m, cfg, problems, choices) for m in methods}
    store.wanted = {k for keys in display.values() for k in keys}
    static_set = _static_actions(methods, choices)
    static_rollouts = factory(ActionSet(static_set), False) if static_set else None
    token_rollouts = {m.name: factory(ActionSet(m.actions), True) for m in methods if m.kind == "token"}
    try:
        for s in tqdm(range(cfg.seeds), desc="evaluate (seeds)", unit="seed", disable=not progress):
            needed = _keys_for_seed(methods, cfg, s, problems, choices)
            todo = sorted((k for k in needed if k[0] != "token" and k not in store.correct), key=lambda k: (k[2], k[1], k[3]))
            _decode_static(todo, prompts, problems, task, cfg, static_rollouts, store, progress and f"static s={s}")
            for m in methods:
                if m.kind == "token":
                    _decode_token(m, s, prompts, problems, task, cfg, token_rollouts[m.name], store,
                                  progress and f"{m.name} s={s}")
    finally:
        for r in [static_rollouts, *token_rollouts.values()]:
            if r is not None:
                r.close()
        for m in methods:  # give a policy that was training back in training mode
            for p in m.all_policies:
                p.train(modes[id(p)])
    return _assemble(methods, cfg, problems, cot, choices, store, display, meta or {})


def _warn_token_budgets(methods, cfg: EvalConfig) -> None:
    for m in methods:
        trained = (m.adapter.policy.get("token_budget") if m.adapter and m.kind == "token" else None)
        if trained and trained != cfg.token_budget:
            log.warning("%s was trained with token budget %d; evaluating with %d", m.name, trained, cfg.token_budget)


def _keys_for_seed(methods, cfg, s, problems, choices) -> set:
    keys = set()
    for m in methods:
        for i, p in enumerate(problems):
            for per_k in _sample_keys(m, cfg, s, i, p.id, choices):
                keys.update(per_k)
    return keys


def _problem_values(method: Method, cfg: EvalConfig, s: int, i: int, pid: str, choices, store: _Store) -> dict[str, float]:
    """pass@k and mean length of one problem in one seed."""
    out, lengths = {}, []
    for k, keys in zip(cfg.k_values, _sample_keys(method, cfg, s, i, pid, choices)):
        c = int(round(sum(store.correct[key] >= 0.5 for key in keys)))
        out[f"pass@{k}"] = pass_at_k(cfg.n, c, k)
        lengths.append(statistics.fmean(store.length[key] for key in keys))
    out["mean_length"] = statistics.fmean(lengths)
    return out


def _summarise(per_problem: dict[str, list[list[float]]], cfg: EvalConfig) -> tuple[dict, dict]:
    """results entry ``{metric: {mean, ci_low, ci_high}}`` and extra summary statistics."""
    entry, extra = {}, {}
    for metric, rows in per_problem.items():
        mean, low, high = mean_ci([statistics.fmean(r) for r in rows], cfg.confidence)
        if metric.startswith("pass@"):  # a probability: clip the interval to [0, 1]
            low, high = max(low, 0.0), min(high, 1.0)
        entry[metric] = {"mean": mean, "ci_low": _finite(low), "ci_high": _finite(high)}
        seed_means = [statistics.fmean(r[s] for r in rows) for s in range(cfg.seeds)]
        runs = len(rows) * cfg.seeds
        extra[metric] = {
            "seed_means": seed_means,
            "seed_std": statistics.stdev(seed_means) if len(seed_means) > 1 else 0.0,
            "binomial_se": math.sqrt(max(mean * (1 - mean), 0.0) / runs) if metric.startswith("pass@") else None,
        }
    return entry, extra


def _finite(x: float) -> float | None:
    return None if x is None or math.isnan(x) else x


def format_interval(mean: float, low: float | None, high: float | None, digits: int = 2) -> str:
    """``m ± h`` for a symmetric interval, ``m [lo, hi]`` for a clipped one, ``m`` without one."""
    if low is None or high is None:
        return f"{mean:.{digits}f}"
    if abs((high - mean) - (mean - low)) < 0.5 * 10 ** -digits:
        return f"{mean:.{digits}f} ± {(high - low) / 2:.{digits}f}"
    return f"{mean:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def _assemble(methods, cfg: EvalConfig, problems, cot, choices, store: _Store, display, meta) -> Evaluation:
    results, details = {}, _details_header(methods, cfg, problems, cot, meta)
    for m in methods:
        per_problem = {metric: [] for metric in cfg.metrics}
        for i, p in enumerate(problems):
            values = [_problem_values(m, cfg, s, i, p.id, choices, store) for s in range(cfg.seeds)]
            for metric in cfg.metrics:
                per_problem[metric].append([v[metric] for v in values])
        results[m.name], details["summary"][m.name] = _summarise(per_problem, cfg)
        details["per_problem"][m.name] = per_problem
        details["lengths"][m.name] = _method_lengths(m, cfg, problems, choices, store)
        details["action_usage"][m.name] = _action_usage(m, cfg, problems, choices, store)
        details["trajectories"][m.name] = [_public_record(store.records[k], k, m, problems) for k in display[m.name]
                                           if k in store.records]
        if m.kind == "sequence":
            details["sequence_choices"][m.name] = {
                "k_values": list(cfg.k_values),
                "actions": [[m.actions.index(a) for a in per_problem_choice] for per_problem_choice in choices[m.name][0]],
            }
    return Evaluation(results, details)


def _details_header(methods, cfg: EvalConfig, problems, cot, meta) -> dict:
    return {
        "config": {"k_values": list(cfg.k_values), "n": cfg.n, "seeds": cfg.seeds, "token_budget": cfg.token_budget,
                   "cot_ratio": cfg.cot_ratio, "seed": cfg.seed, "confidence": cfg.confidence,
                   "ci_method": "student-t over per-problem means (each averaged over seeds)", **meta},
        "problems": [{"id": p.id, "cot": bool(c), "question": p.question[:2000]} for p, c in zip(problems, cot)],
        "methods": {m.name: m.describe() for m in methods},
        "summary": {}, "per_problem": {}, "lengths": {}, "action_usage": {}, "sequence_choices": {}, "trajectories": {},
    }


def _method_keys(m: Method, cfg, problems, choices) -> list[tuple]:
    keys: dict[tuple, None] = {}
    for s in range(cfg.seeds):
        for i, p in enumerate(problems):
            for per_k in _sample_keys(m, cfg, s, i, p.id, choices):
                keys.update(dict.fromkeys(per_k))
    return list(keys)


def _method_lengths(m: Method, cfg, problems, choices, store: _Store) -> list[int]:
    """Length of every distinct generation the method used (greedy: one per problem)."""
    return [store.length[k] for k in _method_keys(m, cfg, problems, choices)]


def _action_usage(m: Method, cfg, problems, choices, store: _Store) -> list[float]:
    """Share of each of the method's actions: over tokens (token adapters) or over samples."""
    if m.kind == "token":
        counts = store.token_counts.get(m.name, Counter())
        total = sum(counts.values()) or 1
        return [counts.get(a, 0) / total for a in range(len(m.actions))]
    keys = _method_keys(m, cfg, problems, choices)
    counts = Counter(GREEDY if k[0].is_greedy else k[0] for k in keys)
    canon = [GREEDY if a.is_greedy else a for a in m.actions]
    return [counts.get(a, 0) / max(len(keys), 1) for a in canon]


def _public_record(record: dict, key: tuple, m: Method, problems) -> dict:
    canon = [GREEDY if a.is_greedy else a for a in m.actions]
    out = {k: v for k, v in record.items() if k != "_actions"}
    out["actions"] = [canon.index(GREEDY if a.is_greedy else a) for a in record["_actions"]]
    out.update(problem_id=problems[key[-2]].id, seed=key[-3], sample=key[-1])
    return out


# ---- the best single action -----------------------------------------------------------------------


def select_best_action(lm, task, problems, actions: Sequence[DecodingAction], *, samples: int = 4,
                       config: EvalConfig | None = None, **kwargs) -> tuple[DecodingAction, dict[str, float]]:
    """The action with the highest mean reward (pass@1 over ``samples`` samples, one seed) on
    ``problems`` (use validation problems, never the test set). Ties go to the earlier action."""
    base = config or EvalConfig()
    cfg = EvalConfig(k_values=(1, samples), seeds=1, token_budget=base.token_budget, cot_ratio=base.cot_ratio,
                     seed=base.seed, keep_trajectories=0)
    methods = [static_method(a, name=f"{i}:{a.name}") for i, a in enumerate(actions)]
    ev = evaluate(lm, task, problems, methods, cfg, **kwargs)
    scores = {m.actions[0].name: ev.results[m.name]["pass@1"]["mean"] for m in methods}
    best = max(range(len(methods)), key=lambda i: (ev.results[methods[i].name]["pass@1"]["mean"], -i))
    return actions[best], scores


def resolve_best_action(spec, actions: Sequence[DecodingAction]) -> DecodingAction | None:
    """The Best action from ``spec``: an index into ``actions``, an action name, a DecodingAction
    dict, ``{"index": i}`` / ``{"action": {...}}``, or a JSON file whose ``best_single`` is any of
    these. Returns None when a file has no ``best_single``."""
    import json

    if isinstance(spec, DecodingAction):
        return spec
    if isinstance(spec, (str, Path)) and Path(spec).is_file():
        data = json.loads(Path(spec).read_text())
        if not isinstance(data, dict) or data.get("best_single") is None:
            return None
        file_actions = [DecodingAction.from_dict(d) for d in data.get("actions", [])] or list(actions)
        return resolve_best_action(data["best_single"], file_actions)
    if isinstance(spec, str):
        text = spec.strip()
        if text.lstrip("-").isdigit():
            return resolve_best_action(int(text), actions)
        if text.startswith("{"):
            return resolve_best_action(json.loads(text), actions)
        for a in actions:
            if a.name == text:
                return a
        raise ValueError(f"best action {spec!r} is not an index, a name in {[a.name for a in actions]}, JSON or a file")
    if isinstance(spec, int):
        if not 0 <= spec < len(actions):
            raise ValueError(f"best action index {spec} is out of range for {len(actions)} actions")
        return actions[spec]
    if isinstance(spec, dict):
        if "index" in spec:
            return resolve_best_action(int(spec["index"]), actions)
        if "action" in spec:
            return resolve_best_action(spec["action"], actions)
        if "name" in spec and not set(spec) & {"do_sample", "temperature"}:
            return resolve_best_action(str(spec["name"]), actions)
        return DecodingAction.from_dict({k: v for k, v in spec.items() if k in
                                         ("do_sample", "temperature", "top_k", "top_p", "min_p")})
    raise ValueError(f"cannot read a best action from {spec!r}")


# ---- printing ------------------------------------------------------------------------------------


def _cell(entry: dict | None, metric: str) -> str:
    if entry is None:
        return "-"
    scale = 100.0 if metric.startswith("pass@") else 1.0
    low, high = entry.get("ci_low"), entry.get("ci_high")
    return format_interval(entry["mean"] * scale, None if low is None else low * scale, None if high is None else high * scale)


def format_table(results: dict, metrics: Sequence[str] | None = None) -> str:
    """Plain-text table: one row per method, pass@k in percent (mean ± CI half-width, or mean [low, high]
    where the interval was clipped to [0, 100])."""
    metrics = list(metrics or next(iter(results.values())).keys())
    header = ["method"] + [m + (" (%)" if m.startswith("pass@") else "") for m in metrics]
    rows = [[name] + [_cell(res.get(m), m) for m in metrics] for name, res in results.items()]
    widths = [max(len(r[c]) for r in [header] + rows) for c in range(len(header))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in rows]
    return "\n".join(lines)


# ---- CLI -----------------------------------------------------------------------------------------


def configure_parser(p: argparse.ArgumentParser) -> None:
    from .cli_common import add_model_arguments, add_rollout_arguments, add_task_arguments, parse_int_list

    add_model_arguments(p)
    add_task_arguments(p)
    add_rollout_arguments(p)
    g = p.add_argument_group("evaluation")
    g.add_argument("--adapter", action="append", default=[], metavar="[NAME=]DIR[,DIR...]",
                   help="a trained adapter directory (repeatable); NAME overrides the default column name; "
                        "several comma-separated directories (the same adapter trained with different seeds) "
                        "are used one per evaluation seed")
    g.add_argument("--k", type=parse_int_list, default=[1, 2, 4, 8], help="parallel budgets k for pass@k")
    g.add_argument("--seeds", type=int, default=3, help="independent repetitions")
    g.add_argument("--split", default="test", help="task split to evaluate on")
    g.add_argument("--actions", default=None,
                   help="action set (preset or JSON) for Best/Mixed; default: the first sequence adapter's, else 'math'")
    g.add_argument("--best-action", default=None,
                   help="Best: index/name in --actions, DecodingAction JSON, or a JSON file with best_single; "
                        "'auto' picks it on the validation split; 'none' drops Best. Default: best_single of --actions, else auto")
    g.add_argument("--best-problems", type=int, default=32, help="validation problems used by --best-action auto")
    g.add_argument("--baselines", default="greedy,best,mixed", help="static baselines to include (comma-separated)")
    g.add_argument("--confidence", type=float, default=0.95, help="confidence level of the intervals")
    g.add_argument("--keep-trajectories", type=int, default=64, help="trajectories kept per method for plots")
    g.add_argument("--no-progress", action="store_true", help="no progress bars")
    g.add_argument("--report", action="store_true", help="also write report.md and figures into --out")
    g.add_argument("--out", required=True, help="output directory (results.json, eval_details.json)")


def _parse_adapter_args(values: Sequence[str]) -> list[tuple[str | None, str]]:
    out = []
    for v in values:
        name, sep, path = v.partition("=")
        out.append((name, path) if sep and not Path(v).exists() else (None, v))
    return out


def _unique_name(name: str, taken: set[str], source: str) -> str:
    if name not in taken:
        return name
    candidate = f"{name} ({Path(source).name})"
    i = 2
    while candidate in taken:
        candidate, i = f"{name} ({Path(source).name} {i})", i + 1
    return candidate


def load_adapter_methods(specs: Sequence[str], lm) -> list[Method]:
    methods, taken = [], set()
    for name, path in _parse_adapter_args(specs):
        dirs = path.split(",")  # DIR1,DIR2,...: one adapter per evaluation seed
        m = adapter_method(dirs if len(dirs) > 1 else path, lm, name=name or None)
        m.name = _unique_name(m.name, taken, path)
        taken.add(m.name)
        methods.append(m)
    return methods


def _baseline_methods(args, lm, task, adapters: list[Method], cfg: EvalConfig, factory) -> list[Method]:
    wanted = {b.strip().lower() for b in args.baselines.split(",") if b.strip()}
    unknown = wanted - {"greedy", "best", "mixed"}
    if unknown:
        raise ValueError(f"unknown baseline(s) {sorted(unknown)}: choose from greedy, best, mixed")
    actions = _base_actions(args, adapters)
    out = [greedy_method()] if "greedy" in wanted else []
    if "best" in wanted:
        best = _best_action(args, lm, task, actions, cfg, factory)
        if best is not None:
            out.append(static_method(best))
    if "mixed" in wanted:
        out.append(mixed_method(actions))
        token_sets = {tuple(m.actions) for m in adapters if m.kind == "token"} - {tuple(actions)}
        for i, token_actions in enumerate(sorted(token_sets, key=str)):
            out.append(mixed_method(token_actions, name="Mixed (token actions)" + (f" {i + 1}" if i else ""), level="token"))
    return out


def _base_actions(args, adapters: list[Method]) -> list[DecodingAction]:
    if args.actions:
        return load_action_set(args.actions)
    for kind in ("sequence", "token"):
        for m in adapters:
            if m.kind == kind:
                return list(m.actions)
    return load_action_set("math")


def _best_action(args, lm, task, actions, cfg: EvalConfig, factory) -> DecodingAction | None:
    spec = args.best_action
    if spec is not None and spec.lower() == "none":
        return None
    if spec is None and args.actions and Path(args.actions).is_file():
        found = resolve_best_action(args.actions, actions)
        if found is not None:
            return found
    if spec is not None and spec.lower() != "auto":
        best = resolve_best_action(spec, actions)
        if best is None:
            raise ValueError(f"{spec} has no best_single entry")
        return best
    split = "validation" if "validation" in getattr(task, "splits", ()) else "train"
    problems = task.load(split)[: args.best_problems]
    log.info("choosing Best among %d actions on %d %s problems", len(actions), len(problems), split)
    best, scores = select_best_action(lm, task, problems, actions, samples=min(4, cfg.n), config=cfg,
                                      rollouts_factory=factory)
    log.info("Best = %s (validation pass@1 by action: %s)", best.name, {k: round(v, 3) for k, v in scores.items()})
    return best


def run_cli(args) -> int:
    from .cli_common import build_lm, build_rollouts, build_task

    cfg = EvalConfig(k_values=tuple(args.k), seeds=args.seeds, token_budget=args.token_budget, cot_ratio=args.cot_ratio,
                     seed=args.seed, confidence=args.confidence, keep_trajectories=args.keep_trajectories)
    lm, task = build_lm(args), build_task(args)
    problems = task.load(args.split)[: args.max_problems] if args.max_problems else task.load(args.split)

    def factory(action_set: ActionSet, per_token: bool) -> Rollouts:
        if per_token and args.backend == "vllm":  # vLLM cannot run a per-token chooser
            return HFRollouts(lm, action_set, args.batch_rows)
        return build_rollouts(args, lm, action_set)

    adapters = load_adapter_methods(args.adapter, lm)
    methods = _baseline_methods(args, lm, task, adapters, cfg, factory) + adapters
    meta = {"task": args.task, "split": args.split, "model": args.model, "num_problems": len(problems)}
    ev = evaluate(lm, task, problems, methods, cfg, rollouts_factory=factory, progress=not args.no_progress, meta=meta)
    paths = ev.write(args.out)
    print(format_table(ev.results, cfg.metrics))
    print(f"\nwrote {paths['results']} and {paths['details']}")
    if args.report:
        from .report import write_report

        print(f"report: {write_report(args.out, ev.results, ev.details)}")
    return 0
