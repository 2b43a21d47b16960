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
:func:`stats.pass_at_k` on those ``n``. ``mean_length`` is the mean number of generated tokens (EOS
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
problems computed separately for each seed). With one problem the interval is undefined (null).
Intervals of pass@k are clipped to [0, 1] (then no longer symmetric: tables print
``mean [low, high]`` instead of ``mean ± half-width``). Differences between two methods on the
same problems use :func:`stats.paired_ci` (a t interval on per-problem differences), which is
what the report uses to say whether an adapter beats a baseline.

Output (``Evaluation.write``):

- ``results.json``: ``{method: {metric: {"mean", "ci_low", "ci_high"}}}``, metrics ``pass@k`` for
  each k and ``mean_length``; pass@k as fractions in [0, 1], lengths in tokens.
- ``eval_details.json``: config, problems, method descriptions (kind, role, level, action names),
  per-problem values (``[problem][seed]``), seed means, generation lengths, action usage,
  sequence-adapter choices and a sample of trajectories (text, token ids, token strings, per-token
  action indices into the method's action list, base entropies, max-probs) for the figures.
"""

from __future__ import annotations

import json
import logging
import math
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Literal, NamedTuple, Sequence, Union

import torch
from tqdm.auto import tqdm

from .actions import GREEDY, ActionSet, DecodingAction
from .decoding import DecodeResult, row_seed
from .io import write_json
from .policies import AdapterConfig, TokenPolicyChooser, load_adapter
from .rollouts import HFRollouts, RolloutRequest, Rollouts, encode_problems
from .stats import check_int, finite_or_none, format_interval, mean_ci, pass_at_k

__all__ = [
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
]

log = logging.getLogger(__name__)

MethodKind = Literal["greedy", "static", "mixed", "sequence", "token"]
RolloutsFactory = Callable[[ActionSet, bool], Rollouts]
"""``(action_set, per_token) -> Rollouts``; ``per_token`` is True when a chooser will drive it."""


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
        ks = tuple(sorted({check_int("k", k) for k in self.k_values}))
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
        out = {
            "kind": self.kind,
            "role": self.role,
            "level": self.level,
            "actions": self.action_names,
            "action_dicts": [a.to_dict() for a in self.actions],
            "source": self.source,
        }
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
    return Method(
        name,
        config.kind,
        config.action_list,
        role=role,
        level=config.kind,
        policy=policy,
        adapter=config,
        source=", ".join(map(str, directories)),
        seed_policies=[p for p, _ in loaded] if len(loaded) > 1 else None,
    )


# ---- keys: which generation a method uses for (seed, problem, sample) ----------------------------

class StaticKey(NamedTuple):
    """A generation under one fixed action, shared by every method that uses that action for this
    (seed, problem, sample). Greedy is deterministic: ``(GREEDY, 0, problem, 0)`` for all of them."""

    action: DecodingAction
    seed: int
    problem: int
    """Index into the evaluated problems."""
    sample: int


class TokenKey(NamedTuple):
    """A generation of a token adapter (its own, never shared)."""

    method: str
    seed: int
    problem: int
    sample: int


Key = Union[StaticKey, TokenKey]


def _static_key(action: DecodingAction, s: int, i: int, j: int) -> StaticKey:
    return StaticKey(GREEDY, 0, i, 0) if action.is_greedy else StaticKey(action, s, i, j)


def _mixed_action(method: Method, cfg: EvalConfig, s: int, pid: str, j: int) -> DecodingAction:
    return method.actions[row_seed(cfg.seed, s, pid, j, "mixed-action") % len(method.actions)]


def _sample_keys(method: Method, cfg: EvalConfig, s: int, i: int, pid: str, choices) -> list[list[Key]]:
    """For each k (in ``cfg.k_values`` order) the n keys of the samples pass@k is computed from."""
    n, ks = cfg.n, cfg.k_values
    if method.kind == "token":
        keys = [TokenKey(method.name, s, i, j) for j in range(n)]
        return [keys] * len(ks)
    if method.kind == "sequence":
        return [[_static_key(choices[method.name][s][i][ki], s, i, j) for j in range(n)] for ki in range(len(ks))]
    if method.kind == "mixed":
        keys = [_static_key(_mixed_action(method, cfg, s, pid, j), s, i, j) for j in range(n)]
    else:
        keys = [_static_key(method.actions[0], s, i, j) for j in range(n)]
    return [keys] * len(ks)


def _display_keys(method: Method, cfg: EvalConfig, problems, choices) -> list[Key]:
    """Keys of the trajectories kept for ``method``: seed 0, one per problem first, then more samples."""
    out: list[Key] = []
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

    def add(
        self, keys: list[Key], result: DecodeResult, rewards: torch.Tensor, actions: list[DecodingAction]
    ) -> None:
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


def _row_seed_of(cfg: EvalConfig, key: Key, problems) -> int:
    return row_seed(cfg.seed, key.seed, problems[key.problem].id, key.sample, "eval")


ROWS_PER_REQUEST = 4096
"""Rows sent to the rollout engine at once: bounds the memory of the ``[rows, steps]`` records."""


def _run_rows(
    keys,
    prompts,
    problems,
    task,
    cfg,
    rollouts: Rollouts,
    store: _Store,
    progress,
    *,
    row_actions=None,
    chooser=None,
    actions,
) -> list[DecodeResult]:
    """Decode the rows ``keys`` in slices and record their outcomes."""
    results = []
    for start in range(0, len(keys), ROWS_PER_REQUEST):
        part = keys[start : start + ROWS_PER_REQUEST]
        request = RolloutRequest(
            prompts,
            [k.problem for k in part],
            [_row_seed_of(cfg, k, problems) for k in part],
            cfg.token_budget,
            None if row_actions is None else row_actions[start : start + len(part)],
        )
        result = rollouts.run(request, chooser, progress=progress)
        store.add(part, result, _score(task, problems, request.prompt_of_row, result), actions)
        results.append(result)
    return results


def _decode_static(keys, prompts, problems, task, cfg, rollouts: Rollouts, store: _Store, progress) -> None:
    if not keys:
        return
    index = {a: i for i, a in enumerate(rollouts.action_set.actions)}
    _run_rows(
        keys,
        prompts,
        problems,
        task,
        cfg,
        rollouts,
        store,
        progress,
        row_actions=[index[k.action] for k in keys],
        actions=rollouts.action_set.actions,
    )


def _decode_token(method: Method, s, prompts, problems, task, cfg, rollouts: Rollouts, store: _Store, progress) -> None:
    keys = [TokenKey(method.name, s, i, j) for i in range(len(problems)) for j in range(cfg.n)]
    results = _run_rows(
        keys,
        prompts,
        problems,
        task,
        cfg,
        rollouts,
        store,
        progress,
        chooser=TokenPolicyChooser(method.policy_for(s)),
        actions=method.actions,
    )
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
        per_k = [policy.choose(emb, torch.full((len(prompts),), k))[0].tolist() for k in cfg.k_values]
        by_policy[id(policy)] = [
            [method.actions[per_k[ki][i]] for ki in range(len(cfg.k_values))] for i in range(len(prompts))
        ]
    return [by_policy[id(method.policy_for(s))] for s in range(cfg.seeds)]


def _static_actions(methods: Sequence[Method], choices: dict) -> list[DecodingAction]:
    """Every action static rows will use (greedy canonicalised), in first-use order."""
    seen: dict[DecodingAction, None] = {}
    for m in methods:
        if m.kind == "token":
            continue
        pool = (
            [a for per_seed in choices[m.name] for per_problem in per_seed for a in per_problem]
            if m.kind == "sequence"
            else m.actions
        )
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
        out_dir = Path(out_dir)
        return {
            "results": write_json(out_dir / "results.json", self.results),
            "details": write_json(out_dir / "eval_details.json", self.details),
        }


def _check_methods(methods: Sequence[Method]) -> None:
    names = [m.name for m in methods]
    if not methods:
        raise ValueError("nothing to evaluate: no methods")
    if len(set(names)) != len(names):
        raise ValueError(f"method names must be unique, got {names}")


def _default_factory(lm, batch_rows: int) -> RolloutsFactory:
    return lambda action_set, per_token: HFRollouts(lm, action_set, batch_rows)


def evaluate(
    lm,
    task,
    problems,
    methods: Sequence[Method],
    config: EvalConfig | None = None,
    *,
    rollouts_factory: RolloutsFactory | None = None,
    batch_rows: int = 64,
    progress: bool = False,
    meta: dict | None = None,
) -> Evaluation:
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
            todo = sorted(
                (k for k in needed if isinstance(k, StaticKey) and k not in store.correct),
                key=lambda k: (k.problem, k.seed, k.sample),
            )
            _decode_static(todo, prompts, problems, task, cfg, static_rollouts, store, progress and f"static s={s}")
            for m in methods:
                if m.kind == "token":
                    _decode_token(
                        m,
                        s,
                        prompts,
                        problems,
                        task,
                        cfg,
                        token_rollouts[m.name],
                        store,
                        progress and f"{m.name} s={s}",
                    )
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
        trained = m.adapter.policy.get("token_budget") if m.adapter and m.kind == "token" else None
        if trained and trained != cfg.token_budget:
            log.warning("%s was trained with token budget %d; evaluating with %d", m.name, trained, cfg.token_budget)


def _keys_for_seed(methods, cfg, s, problems, choices) -> dict[Key, None]:
    """Every generation seed ``s`` needs, in first-use order (an ordered set)."""
    keys: dict[Key, None] = {}
    for m in methods:
        for i, p in enumerate(problems):
            for per_k in _sample_keys(m, cfg, s, i, p.id, choices):
                keys.update(dict.fromkeys(per_k))
    return keys


def _problem_values(
    method: Method, cfg: EvalConfig, s: int, i: int, pid: str, choices, store: _Store
) -> dict[str, float]:
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
        entry[metric] = {"mean": mean, "ci_low": finite_or_none(low), "ci_high": finite_or_none(high)}
        seed_means = [statistics.fmean(r[s] for r in rows) for s in range(cfg.seeds)]
        runs = len(rows) * cfg.seeds
        extra[metric] = {
            "seed_means": seed_means,
            "seed_std": statistics.stdev(seed_means) if len(seed_means) > 1 else 0.0,
            "binomial_se": math.sqrt(max(mean * (1 - mean), 0.0) / runs) if metric.startswith("pass@") else None,
        }
    return entry, extra


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
        details["trajectories"][m.name] = [
            _public_record(store.records[k], k, m, problems) for k in display[m.name] if k in store.records
        ]
        if m.kind == "sequence":
            details["sequence_choices"][m.name] = {
                "k_values": list(cfg.k_values),
                "actions": [
                    [m.actions.index(a) for a in per_problem_choice] for per_problem_choice in choices[m.name][0]
                ],
            }
    return Evaluation(results, details)


def _details_header(methods, cfg: EvalConfig, problems, cot, meta) -> dict:
    return {
        "config": {
            "k_values": list(cfg.k_values),
            "n": cfg.n,
            "seeds": cfg.seeds,
            "token_budget": cfg.token_budget,
            "cot_ratio": cfg.cot_ratio,
            "seed": cfg.seed,
            "confidence": cfg.confidence,
            "ci_method": "student-t over per-problem means (each averaged over seeds)",
            **meta,
        },
        "problems": [{"id": p.id, "cot": bool(c), "question": p.question[:2000]} for p, c in zip(problems, cot)],
        "methods": {m.name: m.describe() for m in methods},
        "summary": {},
        "per_problem": {},
        "lengths": {},
        "action_usage": {},
        "sequence_choices": {},
        "trajectories": {},
    }


def _method_keys(m: Method, cfg, problems, choices) -> list[Key]:
    keys: dict[Key, None] = {}
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
    counts = Counter(GREEDY if k.action.is_greedy else k.action for k in keys)
    canon = [GREEDY if a.is_greedy else a for a in m.actions]
    return [counts.get(a, 0) / max(len(keys), 1) for a in canon]


def _public_record(record: dict, key: Key, m: Method, problems) -> dict:
    canon = [GREEDY if a.is_greedy else a for a in m.actions]
    out = {k: v for k, v in record.items() if k != "_actions"}
    out["actions"] = [canon.index(GREEDY if a.is_greedy else a) for a in record["_actions"]]
    out.update(problem_id=problems[key.problem].id, seed=key.seed, sample=key.sample)
    return out


# ---- the best single action -----------------------------------------------------------------------


def select_best_action(
    lm,
    task,
    problems,
    actions: Sequence[DecodingAction],
    *,
    samples: int = 4,
    config: EvalConfig | None = None,
    **kwargs,
) -> tuple[DecodingAction, dict[str, float]]:
    """The action with the highest mean reward (pass@1 over ``samples`` samples, one seed) on
    ``problems`` (use validation problems, never the test set). Ties go to the earlier action."""
    base = config or EvalConfig()
    cfg = EvalConfig(
        k_values=(1, samples),
        seeds=1,
        token_budget=base.token_budget,
        cot_ratio=base.cot_ratio,
        seed=base.seed,
        keep_trajectories=0,
    )
    methods = [static_method(a, name=f"{i}:{a.name}") for i, a in enumerate(actions)]
    ev = evaluate(lm, task, problems, methods, cfg, **kwargs)
    scores = {m.actions[0].name: ev.results[m.name]["pass@1"]["mean"] for m in methods}
    best = max(range(len(methods)), key=lambda i: (ev.results[methods[i].name]["pass@1"]["mean"], -i))
    return actions[best], scores


def resolve_best_action(spec, actions: Sequence[DecodingAction]) -> DecodingAction | None:
    """The Best action from ``spec``: an index into ``actions``, an action name, a DecodingAction
    dict, ``{"index": i}`` / ``{"action": {...}}``, or a JSON file whose ``best_single`` is any of
    these. Returns None when a file has no ``best_single``."""
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
        return DecodingAction.from_dict(
            {k: v for k, v in spec.items() if k in ("do_sample", "temperature", "top_k", "top_p", "min_p")}
        )
    raise ValueError(f"cannot read a best action from {spec!r}")


# ---- printing ------------------------------------------------------------------------------------


def _cell(entry: dict | None, metric: str) -> str:
    if entry is None:
        return "-"
    scale = 100.0 if metric.startswith("pass@") else 1.0
    low, high = entry.get("ci_low"), entry.get("ci_high")
    return format_interval(
        entry["mean"] * scale, None if low is None else low * scale, None if high is None else high * scale
    )


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
