"""The runner: which generation each method uses (typed keys), decoding the generations once,
scoring them and summarising pass@k with intervals into an ``Evaluation``. See the package
docstring for the sampling scheme (common random numbers) and the intervals.

``eval_details.json`` (what the report reads; a module that adds methods to it, e.g. fixed rules
scored from stored samples, writes the same shape):

- ``methods[name]``: one entry per method: ``kind``, ``role``, ``level``, ``family`` (``static``,
  ``fixed rule`` or ``learned``), ``answer_rule`` (how its B samples become one answer), and its
  compute, ``decodes_per_problem`` and ``tokens_per_problem``: ``{"1": .., "2": .., ...,
  "answer": ..}``, the mean over problems of the cost of its answer at B = k (the same k samples
  pass@k draws from), and ``"answer"``: the cost of ``per_problem[name]["answer_accuracy"]``. A
  method with a single setting (a fixed rule at one knob value) may give only ``"answer"``; a rule
  traced at several settings is one entry per setting with ``"curve"``: the label they share.
- ``per_problem[name]``: ``{metric: [problem][seed]}``: ``pass@k``, ``answer_accuracy@k``,
  ``mean_length`` and ``answer_accuracy`` (its own answer: B = the smallest k evaluated).
- ``compute[name]``: ``{"decodes": {k: [per problem]}, "tokens": {k: [per problem]}}``.
- ``summary``, ``lengths``, ``action_usage``, ``sequence_choices``, ``trajectories``, ``draft``,
  ``cost``, ``config`` (with ``stop_at_answer``) and ``problems``: see the package docstring."""

from __future__ import annotations

import json
import logging
import math
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, NamedTuple, Sequence, Union

import torch
from tqdm.auto import tqdm

from ..core.files import CHECKSUM_SUFFIX, read_checked, write_checked, write_json
from ..core.stats import finite_or_none, format_interval, pass_at_k, problem_binomial_halfwidth, problem_interval
from ..decoding.actions import GREEDY, ActionSet, DecodingAction
from ..decoding.loop import DecodeResult, row_seed
from ..decoding.rollouts import HFRollouts, RolloutRequest, Rollouts, answer_check, answer_stops, encode_problems
from ..policies.draft import CONFIDENCE_FEATURES
from ..policies.networks import TokenPolicyChooser, UniformChooser
from ..selection.best import BestStatic, best_static_from_counts
from ..tasks import content_hash
from .draft import draft_choices, draft_compute, draft_summaries
from .methods import ANSWER_ACCURACY, EvalConfig, Method, policy_choices, static_method

__all__ = [
    "Evaluation",
    "details_config",
    "StaticKey",
    "TokenKey",
    "evaluate",
    "select_best_action",
    "format_table",
    "train_overlap",
    "subset_cost",
    "vote",
    "COMPUTE_FIELDS",
]

COMPUTE_FIELDS = ("decodes_per_problem", "tokens_per_problem")
"""The keys of ``eval_details.json`` ``methods[name]`` that the evaluation measures (the others
describe the method)."""

log = logging.getLogger(__name__)

RolloutsFactory = Callable[[ActionSet, bool], Rollouts]
"""``(action_set, per_token) -> Rollouts``; ``per_token`` is True when a chooser will drive it."""


# ---- keys: which generation a method uses for (seed, problem, sample) ----------------------------

class StaticKey(NamedTuple):
    """A generation under one fixed action, shared by every method that uses that action for this
    (seed, problem, sample). Greedy is deterministic: ``(GREEDY, 0, problem, 0)`` for all of them
    (unless ``EvalConfig.decode_deterministic_once`` is off)."""

    action: DecodingAction
    seed: int
    problem: int
    """Index into the evaluated problems."""
    sample: int
    stop_at_answer: bool = False
    """The row ends at its first complete answer (the protocol's default; a row to the budget is a
    generation of its own)."""


class TokenKey(NamedTuple):
    """A generation of a method that decodes its own rows (a token adapter, per-token Mixed, a
    custom rollout), never shared with another method."""

    method: str
    seed: int
    problem: int
    sample: int


Key = Union[StaticKey, TokenKey]


def _static_key(action: DecodingAction, s: int, i: int, j: int, once: bool = True, stop: bool = False) -> StaticKey:
    if action.is_greedy:
        return StaticKey(GREEDY, 0, i, 0, stop) if once else StaticKey(GREEDY, s, i, j, stop)
    return StaticKey(action, s, i, j, stop)


def _mixed_action(method: Method, cfg: EvalConfig, s: int, pid: str, j: int) -> DecodingAction:
    return method.actions[row_seed(cfg.seed, s, pid, j, "mixed-action") % len(method.actions)]


def _sample_keys(method: Method, cfg: EvalConfig, s: int, i: int, pid: str, choices) -> list[list[Key]]:
    """For each k (in ``cfg.k_values`` order) the n keys of the samples pass@k is computed from."""
    n, ks, once, stop = cfg.n, cfg.k_values, cfg.decode_deterministic_once, method.stops(cfg)
    if method.keeps_draft:  # the draft alone (kept), or the draft then n samples of the chosen action
        draft = _static_key(GREEDY, s, i, 0, once, stop)
        return [[draft] if c == 0 else [draft] + [_static_key(method.actions[c - 1], s, i, j, once, stop)
                                                  for j in range(n)]
                for c in choices[method.name][s][i]]
    if method.decodes_own_rows:
        keys = [TokenKey(method.name, s, i, j) for j in range(n)]
        return [keys] * len(ks)
    if method.chooses_per_prompt:
        return [[_static_key(choices[method.name][s][i][ki], s, i, j, once, stop) for j in range(n)]
                for ki in range(len(ks))]
    if method.method_kind.mixed:
        keys = [_static_key(_mixed_action(method, cfg, s, pid, j), s, i, j, once, stop) for j in range(n)]
    elif method.k_actions is not None:  # the Best row: pass@k from the samples of that k's action
        return [[_static_key(method.action_for_k(k), s, i, j, once, stop) for j in range(n)] for k in ks]
    else:
        keys = [_static_key(method.actions[0], s, i, j, once, stop) for j in range(n)]
    return [keys] * len(ks)


def _display_keys(method: Method, cfg: EvalConfig, problems, choices) -> list[Key]:
    """Keys of the trajectories kept for ``method``: seed 0, one per problem first, then more samples."""
    out: list[Key] = []
    for idx in range(cfg.keep_trajectories):
        i, j = idx % len(problems), idx // len(problems)
        if j >= cfg.n or (method.method_kind.greedy and j > 0 and cfg.decode_deterministic_once):
            break
        keys = _sample_keys(method, cfg, 0, i, problems[i].id, choices)[-1]
        if j >= len(keys):  # a draft-gated method that kept the draft has one generation
            continue
        key = keys[j]
        if key not in out:
            out.append(key)
    return out


# ---- decoding and bookkeeping --------------------------------------------------------------------


@dataclass
class _Store:
    """Outcomes of decoded rows by key, plus full records for the kept ones and what each cost."""

    tokenizer: object
    wanted: set = field(default_factory=set)
    correct: dict = field(default_factory=dict)
    answer: dict = field(default_factory=dict)
    """The answer each row states (``Task.extract_answer``): what a vote counts."""
    length: dict = field(default_factory=dict)
    records: dict = field(default_factory=dict)
    token_counts: dict = field(default_factory=dict)  # token method name -> Counter(action)
    seconds: dict = field(default_factory=dict)
    """Decode seconds of each *decoded* key: its decode call's time split over the call's rows in
    proportion to their lengths (a replicated key has none)."""
    decodes: dict = field(default_factory=dict)
    """Sequences generated for each key (``DecodeResult.row_costs``: more than one for a two-pass method)."""
    generated: dict = field(default_factory=dict)
    """Tokens generated for each key over all its decodes."""
    source: dict = field(default_factory=dict)
    """A replicated key -> the decoded key it stands for (a deterministic row decoded once)."""
    all_greedy: dict = field(default_factory=dict)
    """Token keys: whether every action the chooser took in the row was greedy."""
    row_actions: dict = field(default_factory=dict)
    """Token keys whose row was all greedy: the action index of every generated token."""
    deterministic: dict = field(default_factory=dict)
    """``(method name, id(policy)) -> {problem: key}``: argmax token rows that depend on no seed."""
    draft_confidence: dict = field(default_factory=dict)
    """Draft-gated method name -> ``[problem, 6]`` its drafts' confidence summary
    (``policies.draft.CONFIDENCE_FEATURES``), what its gate read."""

    def add(
        self, keys: list[Key], result: DecodeResult, rewards: torch.Tensor, actions: list[DecodingAction],
        seconds: float = 0.0, answers: Sequence[str] | None = None,
    ) -> None:
        lengths = result.lengths.double()
        share = lengths / lengths.sum() if float(lengths.sum()) > 0 else torch.full_like(lengths, 1 / len(keys))
        greedy = torch.tensor([a.is_greedy for a in actions] + [True])  # index -1 (past the end) counts as greedy
        row_greedy = greedy[result.actions].all(dim=1)  # [rows]
        decodes, generated = result.row_costs()
        for r, key in enumerate(keys):
            self.correct[key] = float(rewards[r])
            self.answer[key] = answers[r] if answers is not None else result.texts[r].strip()
            self.length[key] = int(result.lengths[r])
            self.decodes[key] = int(decodes[r])
            self.generated[key] = int(generated[r])
            self.seconds[key] = seconds * float(share[r])
            if key in self.wanted:
                self.records[key] = _record(result, r, self.tokenizer, actions, float(rewards[r]))
            if isinstance(key, TokenKey):
                self.all_greedy[key] = bool(row_greedy[r])
                if row_greedy[r]:
                    self.row_actions[key] = result.actions[r, : int(result.lengths[r])].tolist()

    def replicate(self, source: Key, target: Key) -> None:
        """``target`` has ``source``'s outcome without being decoded (a deterministic row)."""
        self.correct[target] = self.correct[source]
        self.answer[target] = self.answer[source]
        self.length[target] = self.length[source]
        self.decodes[target] = self.decodes[source]
        self.generated[target] = self.generated[source]
        self.source[target] = self.source.get(source, source)
        if target in self.wanted and source in self.records:
            self.records[target] = self.records[source]


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
        "stop_reason": _stop_reason(result, r),
    }


def _stop_reason(result: DecodeResult, r: int) -> str:
    if bool(result.stopped_at_eos[r]):
        return "eos"
    if result.stopped_by_check is not None and bool(result.stopped_by_check[r]):
        return "answer"
    return "budget"


def _score(task, problems, keys_problem: list[int], result: DecodeResult) -> torch.Tensor:
    return torch.tensor(task.reward_batch([problems[p] for p in keys_problem], result.texts), dtype=torch.float32)


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
    stop_checks=None,
    run: Callable[[RolloutRequest], DecodeResult] | None = None,
) -> list[DecodeResult]:
    """Decode the rows ``keys`` in slices and record their outcomes (``run``: how a request is
    decoded; default ``rollouts.run`` with ``chooser``)."""
    results = []
    for start in range(0, len(keys), ROWS_PER_REQUEST):
        part = keys[start : start + ROWS_PER_REQUEST]
        request = RolloutRequest(
            prompts,
            [k.problem for k in part],
            [_row_seed_of(cfg, k, problems) for k in part],
            cfg.token_budget,
            None if row_actions is None else row_actions[start : start + len(part)],
            None if stop_checks is None else stop_checks[start : start + len(part)],
        )
        start_time = time.perf_counter()
        result = run(request) if run is not None else rollouts.run(request, chooser, progress=progress)
        if len(result.texts) != len(part):
            raise ValueError(f"a rollout returned {len(result.texts)} rows for {len(part)} requested")
        seconds = time.perf_counter() - start_time
        answers = [task.extract_answer(problems[p], t) for p, t in zip(request.prompt_of_row, result.texts)]
        store.add(part, result, _score(task, problems, request.prompt_of_row, result), actions, seconds, answers)
        results.append(result)
    return results


def _decode_static(keys, prompts, problems, task, cfg, rollouts: Rollouts, store: _Store, progress) -> None:
    if not keys:
        return
    index = {a: i for i, a in enumerate(rollouts.action_set.actions)}
    stops = [answer_check(task, problems[k.problem]) if k.stop_at_answer else None for k in keys]
    # every static row of an evaluation under the protocol stops; a control decodes to the budget
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
        stop_checks=stops if any(stops) else None,
    )


def _decode_token(method: Method, s, prompts, problems, task, cfg, rollouts: Rollouts, store: _Store, progress) -> None:
    """Decode the token-chooser rows of ``method`` in seed ``s``.

    An argmax adapter whose chosen actions were all greedy for a prompt produced a row that depends
    on no seed (every step's action and token are functions of the prefix alone): with
    ``decode_deterministic_once`` its sample 0 is decoded first, and where it is all greedy it
    stands for every sample of this seed and of the later seeds that use the same policy.

    A custom method (``Method.rollout``) decodes its rows its own way, every sample."""
    own_run = None
    if method.method_kind.custom:
        chooser = None

        def own_run(request: RolloutRequest) -> DecodeResult:
            return method.rollout(rollouts, request, s)
    elif method.per_token:
        chooser = UniformChooser(len(method.actions))
    else:
        chooser = TokenPolicyChooser(method.policy_for(s), deterministic=method.policy_mode == "argmax")
    counts = store.token_counts.setdefault(method.name, Counter())
    stop = method.stops(cfg)

    def run(keys: list[TokenKey]) -> None:
        if not keys:
            return
        checks = answer_stops(task, problems, [k.problem for k in keys], stop)
        for result in _run_rows(keys, prompts, problems, task, cfg, rollouts, store, progress, chooser=chooser,
                                actions=method.actions, run=own_run, stop_checks=checks):
            counts.update(result.actions[result.valid_mask()].tolist())

    keys = [[TokenKey(method.name, s, i, j) for j in range(cfg.n)] for i in range(len(problems))]  # [problem][sample]
    if not (cfg.decode_deterministic_once and method.decodes_per_token and method.policy_mode == "argmax"):
        run([k for per_problem in keys for k in per_problem])
        return
    known = store.deterministic.setdefault((method.name, id(method.policy_for(s))), {})
    run([keys[i][0] for i in range(len(problems)) if i not in known])
    for i in range(len(problems)):
        if i not in known and store.all_greedy[keys[i][0]]:
            known[i] = keys[i][0]
    run([k for i in range(len(problems)) if i not in known for k in keys[i][1:]])
    for i, source in known.items():
        for key in keys[i]:
            if key != source:
                store.replicate(source, key)
                counts.update(store.row_actions[source])


def _sequence_choices(method: Method, lm, prompts, cfg: EvalConfig, problems) -> list[list[list[DecodingAction]]]:
    """``[seed][problem][k index]``: the action the sequence adapter (of that seed) picks for budget
    k: its argmax (policy_mode 'argmax', the same in every seed) or a draw from pi with the uniform
    of ``row_seed(cfg.seed, seed, problem id, k, "policy")`` (policy_mode 'sample')."""
    pooling = (method.adapter.embedding or {}).get("pooling", "mean") if method.adapter else "mean"
    emb = lm.prompt_embeddings(prompts, pooling=pooling)

    def uniform_for(seed: int, problem, k: int) -> torch.Tensor:
        generator = torch.Generator().manual_seed(row_seed(cfg.seed, seed, problem.id, k, "policy"))
        return torch.rand((), generator=generator)

    indices = policy_choices(method, emb, problems, cfg, uniform_for)
    return [[[method.actions[i] for i in per_k] for per_k in per_seed] for per_seed in indices]


def _static_actions(methods: Sequence[Method], choices: dict) -> list[DecodingAction]:
    """Every action static rows will use (greedy canonicalised), in first-use order."""
    seen: dict[DecodingAction, None] = {}
    for m in methods:
        if m.decodes_own_rows:
            continue
        pool = (
            [a for per_seed in choices[m.name] for per_problem in per_seed for a in per_problem]
            if m.chooses_per_prompt
            else m.drafted_actions
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
    allow_train_overlap: bool = False,
    checkpoint: SeedCheckpoint | None = None,
) -> Evaluation:
    """Evaluate ``methods`` on ``problems`` (a list of ``tasks.Problem``); see the module docstring.

    An adapter is never scored on problems it was trained or selected on (by content hash, as
    recorded in its adapter.json): that raises a ValueError, unless ``allow_train_overlap``, in which
    case ``eval_details.json`` records the overlap and the report states it.

    ``checkpoint``: every finished seed's decoded rows are saved there, and a later call with the
    same checkpoint (the same options) decodes only the seeds still missing (``evaluate`` after a
    Ctrl-C continues)."""
    cfg = config or EvalConfig()
    started = time.perf_counter()
    _check_methods(methods)
    for m in methods:  # a per-k static row needs an action for every reported k
        for k in cfg.k_values:
            m.action_for_k(k)
    if not problems:
        raise ValueError("nothing to evaluate: no problems")
    overlap = train_overlap(methods, problems)
    if overlap and not allow_train_overlap:
        raise ValueError(
            "refusing to score adapters on problems they were trained or selected on: "
            + "; ".join(f"{name}: {n} of {len(problems)} problems" for name, n in overlap.items())
            + ". Evaluate on another split or file, or pass --allow-train-overlap (allow_train_overlap=True); "
            "the report then says so."
        )
    meta = {**(meta or {}), "allow_train_overlap": bool(allow_train_overlap), "train_overlap": overlap}
    factory = rollouts_factory or _default_factory(lm, batch_rows)
    prompts, cot = encode_problems(lm, task, problems, cfg.cot_ratio, cfg.seed)
    choices = {m.name: _sequence_choices(m, lm, prompts, cfg, problems) for m in methods if m.chooses_per_prompt}
    summaries = {}  # the draft pass: one greedy decode that records hidden states (per kind of draft)
    for m in methods:
        if m.keeps_draft:
            stop = m.stops(cfg)
            if stop not in summaries:
                checks = answer_stops(task, problems, range(len(problems)), stop)
                summaries[stop] = draft_summaries(lm, prompts, cfg.token_budget, batch_rows, checks)
            choices[m.name] = draft_choices(m, lm, prompts, cfg, problems, summaries[stop])
    modes = {id(p): p.training for m in methods for p in m.all_policies}
    for m in methods:
        for p in m.all_policies:
            p.eval()
    store = _Store(lm.tokenizer)
    store.draft_confidence = {m.name: summaries[m.stops(cfg)].confidence for m in methods if m.keeps_draft}
    display = {m.name: _display_keys(m, cfg, problems, choices) for m in methods}
    store.wanted = {k for keys in display.values() for k in keys}
    static_set = _static_actions(methods, choices)
    static_rollouts = factory(ActionSet(static_set), False) if static_set else None
    token_rollouts = {m.name: factory(ActionSet(m.actions), m.decodes_per_token) for m in methods if m.decodes_own_rows}
    done_seeds = checkpoint.restore(store) if checkpoint is not None else set()
    try:
        for s in tqdm(range(cfg.seeds), desc="evaluate (seeds)", unit="seed", disable=not progress):
            if s in done_seeds:
                continue
            needed = _keys_for_seed(methods, cfg, s, problems, choices)
            todo = sorted(
                (k for k in needed if isinstance(k, StaticKey) and k not in store.correct),
                key=lambda k: (k.problem, k.seed, k.sample),
            )
            _decode_static(todo, prompts, problems, task, cfg, static_rollouts, store, progress and f"static s={s}")
            for m in methods:
                if m.decodes_own_rows:
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
            if checkpoint is not None:
                done_seeds.add(s)
                checkpoint.save(store, done_seeds)
    finally:
        for r in [static_rollouts, *token_rollouts.values()]:
            if r is not None:
                r.close()
        for m in methods:  # give a policy that was training back in training mode
            for p in m.all_policies:
                p.train(modes[id(p)])
    evaluation = _assemble(methods, cfg, problems, cot, choices, store, display, meta)
    evaluation.details["cost"] = _costs(methods, cfg, problems, choices, store, time.perf_counter() - started)
    return evaluation


def train_overlap(methods: Sequence[Method], problems) -> dict[str, int]:
    """``{adapter method: number of problems it was trained or selected on}`` (only those with any)."""
    hashes = [content_hash(p) for p in problems] if any(m.seen_hashes for m in methods) else []
    out = {}
    for m in methods:
        n = sum(h in m.seen_hashes for h in hashes) if m.seen_hashes else 0
        if n:
            out[m.name] = n
    return out


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
    """pass@k, answer accuracy at B = k and mean length of one problem in one seed."""
    out, lengths = {}, []
    for k, keys in zip(cfg.k_values, _sample_keys(method, cfg, s, i, pid, choices)):
        out[f"{ANSWER_ACCURACY}@{k}"] = _answer_accuracy(keys, k, store, method.keeps_draft)
        if method.keeps_draft:
            out[f"pass@{k}"], answer_keys = _draft_pass(keys, k, cfg.n, store)
            lengths.append(statistics.fmean(store.length[key] for key in answer_keys))
            continue
        c = int(round(sum(store.correct[key] >= 0.5 for key in keys)))
        out[f"pass@{k}"] = pass_at_k(cfg.n, c, k)
        lengths.append(statistics.fmean(store.length[key] for key in keys))
    out["mean_length"] = statistics.fmean(lengths)
    return out


def vote(answers: Sequence[str], correct: Sequence[float]) -> float:
    """Whether the majority answer among ``answers`` is right (``correct[j]``: sample j's reward):
    the most frequent non-empty answer, ties to the one stated first; where no sample states an
    answer, the first sample. Samples with the same answer share its correctness."""
    counts = Counter(a for a in answers if a)
    if not counts:
        return float(correct[0] >= 0.5)
    top = max(counts.values())
    winner = next(j for j, a in enumerate(answers) if a and counts[a] == top)
    return float(correct[winner] >= 0.5)


def _answer_accuracy(keys: list[Key], k: int, store: _Store, draft: bool) -> float:
    """Accuracy of the one answer a method returns from B = k samples, without a verifier
    (``Method.answer_rule``), averaged over the disjoint blocks of k of its n samples (every sample
    used once: at k = 1 it is pass@1). A draft-gated method: the draft where kept; where re-decoded
    the re-decode at k = 1, else a vote over the draft (first) and k - 1 re-decodes."""
    def block_vote(block):
        return vote([store.answer[key] for key in block], [store.correct[key] for key in block])

    if draft:
        if len(keys) == 1:
            return float(store.correct[keys[0]] >= 0.5)
        samples, size = keys[1:], max(k - 1, 1)
        blocks = [samples[b * size:(b + 1) * size] for b in range(len(samples) // size)]
        if k > 1:
            blocks = [[keys[0], *block] for block in blocks]
    else:
        blocks = [keys[b * k:(b + 1) * k] for b in range(len(keys) // k)]
    return statistics.fmean(block_vote(block) for block in blocks)


def _draft_pass(keys: list[Key], k: int, n: int, store: _Store) -> tuple[float, list[Key]]:
    """pass@k of a draft-gated method on one problem and the keys of its answers: the draft alone
    (kept); at k = 1 the re-decode (its n samples' mean); above, the draft and k - 1 samples (right
    unless all are wrong, unbiased over the n samples)."""
    draft = float(store.correct[keys[0]] >= 0.5)
    if len(keys) == 1:
        return draft, keys
    c = int(round(sum(store.correct[key] >= 0.5 for key in keys[1:])))
    if k == 1:
        return c / n, keys[1:]
    return 1 - (1 - draft) * (1 - pass_at_k(n, c, min(k - 1, n))), keys


def _summarise(per_problem: dict[str, list[list[float]]], cfg: EvalConfig) -> tuple[dict, dict]:
    """results entry ``{metric: {mean, ci_low, ci_high}}`` and extra summary statistics."""
    entry, extra = {}, {}
    for metric, rows in per_problem.items():
        # a probability's interval is clipped to [0, 1]; every interval counts a problem once
        clip = (0.0, 1.0) if metric.startswith(("pass@", ANSWER_ACCURACY)) else None
        mean, low, high = problem_interval(rows, cfg.confidence, clip)
        entry[metric] = {"mean": mean, "ci_low": finite_or_none(low), "ci_high": finite_or_none(high)}
        seed_means = [statistics.fmean(r[s] for r in rows) for s in range(cfg.seeds)]
        runs = len(rows)  # distinct problems: a problem's seeds are not independent outcomes
        if metric.startswith("pass@"):  # the paper's ± (comparable with its tables; not used for verdicts)
            entry[metric]["binomial_halfwidth"], entry[metric]["outcomes"] = problem_binomial_halfwidth(
                rows, cfg.confidence)
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
        own = str(cfg.k_values[0])  # the method's own answer: B = the smallest k
        details["per_problem"][m.name] = {**per_problem, ANSWER_ACCURACY: per_problem[f"{ANSWER_ACCURACY}@{own}"]}
        per_problem_compute = _compute(m, cfg, problems, choices, store)
        details["compute"][m.name] = per_problem_compute
        for unit in ("decodes", "tokens"):
            means = {k: statistics.fmean(values) for k, values in per_problem_compute[unit].items()}
            details["methods"][m.name][f"{unit}_per_problem"] = {**means, "answer": means[own]}
        details["lengths"][m.name] = _method_lengths(m, cfg, problems, choices, store)
        details["action_usage"][m.name] = _action_usage(m, cfg, problems, choices, store)
        details["trajectories"][m.name] = [
            _public_record(store.records[k], k, m, problems) for k in display[m.name] if k in store.records
        ]
        if m.keeps_draft:
            details.setdefault("draft", {})[m.name] = _draft_details(m, cfg, problems, choices, store)
        if m.chooses_per_prompt:
            by_seed = [[[m.actions.index(a) for a in per_problem_choice] for per_problem_choice in per_seed]
                       for per_seed in choices[m.name]]
            details["sequence_choices"][m.name] = {
                "k_values": list(cfg.k_values),
                "actions": by_seed[0],  # [problem][k index]: seed 0's adapter (the choices figure)
                "actions_by_seed": by_seed,  # [seed][problem][k index]
            }
    return Evaluation(results, details)


def details_config(cfg: EvalConfig, meta: Mapping | None = None) -> dict:
    """The settings an evaluation records as ``config`` in eval_details.json (``meta`` appended):
    what must match for a stored evaluation to stand for a new one."""
    return {
        "k_values": list(cfg.k_values),
        "n": cfg.n,
        "seeds": cfg.seeds,
        "token_budget": cfg.token_budget,
        "cot_ratio": cfg.cot_ratio,
        "seed": cfg.seed,
        "confidence": cfg.confidence,
        "decode_deterministic_once": cfg.decode_deterministic_once,
        "stop_at_answer": cfg.stop_at_answer,
        "ci_method": "student-t over per-problem means (each averaged over seeds)",
        **(meta or {}),
    }


def _details_header(methods, cfg: EvalConfig, problems, cot, meta) -> dict:
    return {
        "config": details_config(cfg, meta),
        "problems": [{"id": p.id, "cot": bool(c), "question": p.question[:2000]} for p, c in zip(problems, cot)],
        "methods": {m.name: m.describe() for m in methods},
        "summary": {},
        "per_problem": {},
        "lengths": {},
        "action_usage": {},
        "sequence_choices": {},
        "trajectories": {},
        "compute": {},
    }


def _method_keys(m: Method, cfg, problems, choices) -> list[Key]:
    keys: dict[Key, None] = {}
    for s in range(cfg.seeds):
        for i, p in enumerate(problems):
            for per_k in _sample_keys(m, cfg, s, i, p.id, choices):
                keys.update(dict.fromkeys(per_k))
    return list(keys)


def _draft_details(m: Method, cfg, problems, choices, store: _Store) -> dict:
    """A draft-gated method's choices ``[seed][problem][k index]`` (0 keeps the draft), its compute
    per k (decodes and tokens per problem, the draft counted; re-decoded share), what its gate read
    (``confidence``: per problem id, the draft's confidence summary) and every re-decode outcome the
    evaluation decoded (``redecode_outcomes[seed][problem][action]``: the mean correctness of that
    action's samples, whichever method decoded them; None where none did), so that a gate at another
    re-decode share can be re-scored from the file."""
    once, stop = cfg.decode_deterministic_once, m.stops(cfg)
    lengths = [store.length[_static_key(GREEDY, 0, i, 0, once, stop)] for i in range(len(problems))]
    redecode = []
    for i in range(len(problems)):
        per_action = []
        for a in m.actions:
            keys = [_static_key(a, s, i, j, once, stop) for s in range(cfg.seeds) for j in range(cfg.n)]
            known = [store.length[key] for key in keys if key in store.length]
            per_action.append(statistics.fmean(known) if known else 0.0)
        redecode.append(per_action)

    def outcome(a, s, i):  # the mean correctness of the action's decoded samples; None where none was
        known = [store.correct[k] for j in range(cfg.n) if (k := _static_key(a, s, i, j, once, stop)) in store.correct]
        return statistics.fmean(known) if known else None

    confidence = store.draft_confidence.get(m.name)
    return {"k_values": list(cfg.k_values), "choices_by_seed": choices[m.name],
            **draft_compute(choices[m.name], cfg, lengths, redecode),
            "confidence": {} if confidence is None else {
                p.id: dict(zip(CONFIDENCE_FEATURES, map(float, row))) for p, row in zip(problems, confidence.tolist())},
            "redecode_outcomes": [[[outcome(a, s, i) for a in m.actions] for i in range(len(problems))]
                                  for s in range(cfg.seeds)]}


def subset_cost(sources: Sequence, costs: Mapping, k: int) -> tuple[float, float]:
    """Expected ``(decodes, tokens)`` of answering with ``k`` of the ``n`` samples ``sources`` (one
    entry per sample: the decoded generation it is; ``costs[source] = (decodes, tokens)``), the
    ``k`` drawn without replacement as pass@k's estimator draws them. Samples that are one
    generation (a deterministic row standing for several samples) cost it once: a generation that
    is ``m`` of the ``n`` samples is among the ``k`` with probability ``1 - C(n-m, k) / C(n, k)``.
    So ``k`` distinct samples cost ``k`` times their mean, and greedy costs one decode at every k."""
    n = len(sources)
    if not 1 <= k <= n:
        raise ValueError(f"k must be in [1, {n}], got {k}")
    decodes = tokens = 0.0
    for source, m in Counter(sources).items():
        share = 1.0 - math.comb(n - m, k) / math.comb(n, k)
        decodes += share * costs[source][0]
        tokens += share * costs[source][1]
    return decodes, tokens


def _draft_cost(sources: Sequence, costs: Mapping, k: int) -> tuple[float, float]:
    """A draft-gated answer's ``(decodes, tokens)``: the draft (``sources[0]``), plus, where it
    re-decoded, the expected cost of the 1 (k = 1) or k - 1 of the n samples ``sources[1:]`` that
    the answer uses (:func:`subset_cost`)."""
    decodes, tokens = costs[sources[0]]
    if len(sources) > 1:
        extra = subset_cost(sources[1:], costs, min(max(1, k - 1), len(sources) - 1))
        decodes, tokens = decodes + extra[0], tokens + extra[1]
    return decodes, tokens


def _compute(m: Method, cfg: EvalConfig, problems, choices, store: _Store) -> dict[str, dict[str, list[float]]]:
    """What answering each problem cost the method at each k: ``{"decodes": {k: [per problem]},
    "tokens": {k: [per problem]}}`` (k as a string), each value the mean over seeds of
    :func:`subset_cost` on the n samples pass@k comes from. A decode is one generated sequence for
    one problem (a method that decodes twice for an answer counts both: ``DecodeResult.decodes``);
    tokens are the generated tokens summed over those decodes (EOS included; padding and forced
    tokens excluded: ``DecodeResult.generated_tokens``)."""
    out = {"decodes": {str(k): [] for k in cfg.k_values}, "tokens": {str(k): [] for k in cfg.k_values}}
    for i, p in enumerate(problems):
        sums = {k: [0.0, 0.0] for k in cfg.k_values}
        for s in range(cfg.seeds):
            for k, keys in zip(cfg.k_values, _sample_keys(m, cfg, s, i, p.id, choices)):
                sources = [store.source.get(key, key) for key in keys]
                costs = {src: (store.decodes[src], store.generated[src]) for src in set(sources)}
                d, t = _draft_cost(sources, costs, k) if m.keeps_draft else subset_cost(sources, costs, k)
                sums[k][0] += d
                sums[k][1] += t
        for k in cfg.k_values:
            out["decodes"][str(k)].append(sums[k][0] / cfg.seeds)
            out["tokens"][str(k)].append(sums[k][1] / cfg.seeds)
    return out


def _method_lengths(m: Method, cfg, problems, choices, store: _Store) -> list[int]:
    """Length of every distinct generation the method used (greedy: one per problem)."""
    return [store.length[k] for k in _method_keys(m, cfg, problems, choices)]


def _costs(methods, cfg, problems, choices, store: _Store, wall_seconds: float) -> dict:
    """What the evaluation cost: per method, the rows it decoded for itself, its generated tokens and
    decode seconds counted in full (``seconds_alone``: what the method would cost evaluated alone
    with the same sharing inside it) and split evenly among the methods that share a row
    (``seconds_share``: the shares add up to the evaluation's decode seconds); totals."""
    keys = {m.name: [k for k in _method_keys(m, cfg, problems, choices) if k in store.seconds] for m in methods}
    users = Counter(k for ks in keys.values() for k in ks)
    out = {"methods": {}}
    for m in methods:
        ks = keys[m.name]
        out["methods"][m.name] = {
            "rows": len(ks),
            "tokens": sum(store.length[k] for k in ks),
            "seconds_alone": sum(store.seconds[k] for k in ks),
            "seconds_share": sum(store.seconds[k] / users[k] for k in ks),
        }
    out["decoded_rows"] = len(store.seconds)
    out["decoded_tokens"] = sum(store.length[k] for k in store.seconds)
    out["decode_seconds"] = sum(store.seconds.values())
    out["wall_seconds"] = wall_seconds
    return out


def _action_usage(m: Method, cfg, problems, choices, store: _Store) -> list[float]:
    """Share of each of the method's actions: over tokens (methods with rows of their own: token
    adapters, per-token Mixed, custom rollouts) or over samples."""
    if m.decodes_own_rows:
        counts = store.token_counts.get(m.name, Counter())
        total = sum(counts.values()) or 1
        return [counts.get(a, 0) / total for a in range(len(m.actions))]
    keys = _method_keys(m, cfg, problems, choices)
    counts = Counter(GREEDY if k.action.is_greedy else k.action for k in keys)
    canon = [GREEDY if a.is_greedy else a for a in m.drafted_actions]
    return [counts.get(a, 0) / max(len(keys), 1) for a in canon]


def _public_record(record: dict, key: Key, m: Method, problems) -> dict:
    canon = [GREEDY if a.is_greedy else a for a in m.drafted_actions]
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
    k_values: Sequence[int] = (1,),
    config: EvalConfig | None = None,
    **kwargs,
) -> BestStatic:
    """The best static strategy among ``actions`` at each pass@k in ``k_values``
    (``selection.best``), from ``samples`` samples of every action on ``problems`` in one seed (use
    validation problems, never the test set), each sample ending where ``config`` says
    (``stop_at_answer``, the protocol's stop by default). Ties go to the earlier action."""
    base = config or EvalConfig()
    cfg = EvalConfig(
        k_values=(1, samples),
        seeds=1,
        token_budget=base.token_budget,
        cot_ratio=base.cot_ratio,
        seed=base.seed,
        keep_trajectories=0,
        stop_at_answer=base.stop_at_answer,
    )
    methods = [static_method(a, name=f"{i}:{a.name}") for i, a in enumerate(actions)]
    names = [a.name for a in actions]
    ev = evaluate(lm, task, problems, methods, cfg, **kwargs)
    # pass@1 of a problem in the one seed is c / samples: the counts behind every pass@k
    correct = [[round(ev.details["per_problem"][m.name]["pass@1"][i][0] * samples) for m in methods]
               for i in range(len(problems))]
    return best_static_from_counts(correct, samples, k_values, names)


# ---- printing ------------------------------------------------------------------------------------


def _cell(entry: dict | None, metric: str) -> str:
    if entry is None:
        return "-"
    scale = 100.0 if metric.startswith(("pass@", ANSWER_ACCURACY)) else 1.0
    low, high = entry.get("ci_low"), entry.get("ci_high")
    return format_interval(
        entry["mean"] * scale, None if low is None else low * scale, None if high is None else high * scale
    )


def format_table(results: dict, metrics: Sequence[str] | None = None) -> str:
    """Plain-text table: one row per method, pass@k in percent (mean ± CI half-width, or mean [low, high]
    where the interval was clipped to [0, 100])."""
    metrics = list(metrics or next(iter(results.values())).keys())
    header = ["method"] + [m + (" (%)" if m.startswith(("pass@", ANSWER_ACCURACY)) else "") for m in metrics]
    rows = [[name] + [_cell(res.get(m), m) for m in metrics] for name, res in results.items()]
    widths = [max(len(r[c]) for r in [header] + rows) for c in range(len(header))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in rows]
    return "\n".join(lines)


_KEYED_FIELDS = ("correct", "answer", "length", "records", "seconds", "decodes", "generated", "source",
                 "all_greedy", "row_actions")
"""What a seed checkpoint keeps of ``_Store`` by key (not the tokenizer, the wanted keys or the argmax
rows' policy-identity map, which a resumed process rebuilds); ``token_counts`` is kept beside them."""
CHECKPOINT_FORMAT = 1
"""The version of a seed checkpoint's JSON layout: another version is ignored (decoded again)."""


def _key_json(key: Key) -> list:
    """A store key as JSON: ``["static", action fields, seed, problem, sample, stop]`` or
    ``["token", method, seed, problem, sample]``."""
    if isinstance(key, StaticKey):
        return ["static", key.action.to_dict(), key.seed, key.problem, key.sample, key.stop_at_answer]
    return ["token", key.method, key.seed, key.problem, key.sample]


def _key_from_json(item) -> Key:
    """The inverse of :func:`_key_json`; anything else is a ValueError."""
    if isinstance(item, list) and len(item) == 6 and item[0] == "static":
        _, action, seed, problem, sample, stop = item
        return StaticKey(DecodingAction.from_dict(action), int(seed), int(problem), int(sample), bool(stop))
    if isinstance(item, list) and len(item) == 5 and item[0] == "token" and isinstance(item[1], str):
        return TokenKey(item[1], int(item[2]), int(item[3]), int(item[4]))
    raise ValueError(f"not a store key: {item!r}")


def _value_json(name: str, value):
    if name == "source":
        return _key_json(value)
    if name == "records":  # the actions of every token are dataclasses: their fields
        return {**value, "_actions": [a.to_dict() for a in value["_actions"]]}
    return value


def _value_from_json(name: str, value):
    if name == "source":
        return _key_from_json(value)
    if name == "records":
        return {**value, "_actions": [DecodingAction.from_dict(a) for a in value["_actions"]]}
    return value


@dataclass
class SeedCheckpoint:
    """The decoded rows of an evaluation's finished seeds, in ``path`` (JSON, with its SHA-256 in
    ``path.sha256`` as every file a later run reads back: a changed file is refused, and reading it
    runs no code), for ``options`` (anything that JSON-encodes: a checkpoint made under other
    options is ignored, with a log line)."""

    path: Path
    options: dict

    def restore(self, store: "_Store") -> set[int]:
        """Fill ``store`` from the checkpoint; the seeds it holds (none when absent or stale). A file
        that does not match its checksum is a one-line ValueError."""
        if not Path(self.path).is_file():
            return set()
        data = read_checked(self.path)  # before parsing: a changed file is refused unread
        try:
            saved = json.loads(data)
            if saved.get("format") != CHECKPOINT_FORMAT:
                raise ValueError(f"format {saved.get('format')!r}, not {CHECKPOINT_FORMAT}")
            if saved.get("options") != _json_form(self.options):
                log.info("the evaluation checkpoint %s was made with other options: starting over", self.path)
                return set()
            fields = {name: {_key_from_json(k): _value_from_json(name, v) for k, v in saved["store"][name]}
                      for name in _KEYED_FIELDS}
            counts = {m: Counter({int(a): int(c) for a, c in per.items()})
                      for m, per in saved["token_counts"].items()}
            seeds = {int(s) for s in saved["seeds"]}
        except (ValueError, KeyError, TypeError, AttributeError) as err:  # an older or foreign layout
            log.warning("ignoring the evaluation checkpoint %s (%s): decoding again", self.path, err)
            return set()
        for name, values in fields.items():
            getattr(store, name).update(values)
        store.token_counts.update(counts)
        log.info("resuming the evaluation from %s: seed(s) %s already decoded", self.path,
                 ",".join(map(str, sorted(seeds))))
        return seeds

    def save(self, store: "_Store", seeds: set[int]) -> None:
        """Write every decoded row of ``store`` and the finished ``seeds`` (atomically, checksummed)."""
        saved = {
            "format": CHECKPOINT_FORMAT,
            "options": _json_form(self.options),
            "seeds": sorted(seeds),
            "store": {name: [[_key_json(k), _value_json(name, v)] for k, v in getattr(store, name).items()]
                      for name in _KEYED_FIELDS},
            "token_counts": {m: {str(a): c for a, c in counts.items()} for m, counts in store.token_counts.items()},
        }
        write_checked(self.path, json.dumps(saved).encode("utf-8"))

    def remove(self) -> None:
        Path(self.path).unlink(missing_ok=True)
        Path(str(self.path) + CHECKSUM_SUFFIX).unlink(missing_ok=True)


def _json_form(options: dict) -> str:
    return json.dumps(options, sort_keys=True, default=str)
