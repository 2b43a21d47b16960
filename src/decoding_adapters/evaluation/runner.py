"""The runner: decoding the generations every method needs once (each method's plan, ``plans``,
says which rows, ``keys``), scoring them and summarising pass@k with intervals into an
``Evaluation``; the cost of each method's answers. See the package docstring for the sampling
scheme (common random numbers) and the intervals.

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

import logging
import statistics
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

import torch
from tqdm.auto import tqdm

from ..core.files import write_json
from ..decoding.actions import GREEDY, ActionSet, DecodingAction
from ..decoding.loop import DecodeResult, row_seed
from ..decoding.rollouts import HFRollouts, RolloutRequest, Rollouts, answer_check, answer_stops, encode_problems
from ..selection.best import BestStatic, best_static_from_counts
from ..tasks import content_hash
from .aggregate import summarise
from .checkpoint import SeedCheckpoint
from .keys import Key, StaticKey, TokenKey
from .methods import ANSWER_ACCURACY, EvalConfig, Method, static_method
from .plans import OwnRowsPlan, Plan, Setup, plan_for
from .store import RowStore

__all__ = [
    "Evaluation",
    "details_config",
    "evaluate",
    "select_best_action",
    "train_overlap",
    "COMPUTE_FIELDS",
]

COMPUTE_FIELDS = ("decodes_per_problem", "tokens_per_problem")
"""The keys of ``eval_details.json`` ``methods[name]`` that the evaluation measures (the others
describe the method)."""

log = logging.getLogger(__name__)

RolloutsFactory = Callable[[ActionSet, bool], Rollouts]
"""``(action_set, per_token) -> Rollouts``; ``per_token`` is True when a chooser will drive it."""


# ---- which rows each method needs -----------------------------------------------------------------


def _display_keys(method: Method, plan: Plan, cfg: EvalConfig, problems, choices) -> list[Key]:
    """Keys of the trajectories kept for ``method``: seed 0, one per problem first, then more samples."""
    out: list[Key] = []
    shown = plan.shown_samples(cfg)
    for idx in range(cfg.keep_trajectories):
        i, j = idx % len(problems), idx // len(problems)
        if j >= shown:
            break
        keys = plan.sample_keys(method, cfg, 0, i, problems[i].id, choices)[-1]
        if j >= len(keys):  # a draft-gated method that kept the draft has one generation
            continue
        key = keys[j]
        if key not in out:
            out.append(key)
    return out


def _keys_for_seed(methods, cfg, s, problems, choices) -> dict[Key, None]:
    """Every generation seed ``s`` needs, in first-use order (an ordered set)."""
    keys: dict[Key, None] = {}
    for m in methods:
        plan = plan_for(m)
        for i, p in enumerate(problems):
            for per_k in plan.sample_keys(m, cfg, s, i, p.id, choices):
                keys.update(dict.fromkeys(per_k))
    return keys


def _method_keys(m: Method, cfg, problems, choices) -> list[Key]:
    """Every generation ``m`` uses over all seeds, in first-use order."""
    plan, keys = plan_for(m), {}
    for s in range(cfg.seeds):
        for i, p in enumerate(problems):
            for per_k in plan.sample_keys(m, cfg, s, i, p.id, choices):
                keys.update(dict.fromkeys(per_k))
    return list(keys)


def _static_actions(methods: Sequence[Method], choices: dict) -> list[DecodingAction]:
    """Every action shared rows will use (greedy canonicalised), in first-use order."""
    seen: dict[DecodingAction, None] = {}
    for m in methods:
        for a in plan_for(m).static_actions(m, choices):
            seen.setdefault(GREEDY if a.is_greedy else a, None)
    return list(seen)


# ---- decoding ---------------------------------------------------------------------------------------


def _score(task, problems, keys_problem: list[int], result: DecodeResult) -> torch.Tensor:
    return torch.tensor(task.reward_batch([problems[p] for p in keys_problem], result.texts), dtype=torch.float32)


def _row_seed_of(cfg: EvalConfig, key: Key, problems) -> int:
    return row_seed(cfg.seed, key.seed, problems[key.problem].id, key.sample, "eval")


ROWS_PER_REQUEST = 4096
"""Rows sent to the rollout engine at once: bounds the memory of the ``[rows, steps]`` records."""


@dataclass
class _Run:
    """What every decode call of one evaluation shares."""

    prompts: list
    problems: list
    task: object
    cfg: EvalConfig
    store: RowStore


def _run_rows(
    keys,
    run_ctx: _Run,
    rollouts: Rollouts,
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
    problems, task, cfg = run_ctx.problems, run_ctx.task, run_ctx.cfg
    results = []
    for start in range(0, len(keys), ROWS_PER_REQUEST):
        part = keys[start : start + ROWS_PER_REQUEST]
        request = RolloutRequest(
            run_ctx.prompts,
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
        rewards = _score(task, problems, request.prompt_of_row, result)
        run_ctx.store.add(part, result, rewards, actions, seconds, answers)
        results.append(result)
    return results


def _decode_static(keys, run_ctx: _Run, rollouts: Rollouts, progress) -> None:
    if not keys:
        return
    index = {a: i for i, a in enumerate(rollouts.action_set.actions)}
    problems, task = run_ctx.problems, run_ctx.task
    stops = [answer_check(task, problems[k.problem]) if k.stop_at_answer else None for k in keys]
    # every static row of an evaluation under the protocol stops; a control decodes to the budget
    _run_rows(keys, run_ctx, rollouts, progress, row_actions=[index[k.action] for k in keys],
              actions=rollouts.action_set.actions, stop_checks=stops if any(stops) else None)


def _decode_own(method: Method, plan: OwnRowsPlan, s, run_ctx: _Run, rollouts: Rollouts, progress) -> None:
    """Decode the rows of its own of ``method`` in seed ``s`` (a chooser at every token, or its own
    rollout, as its plan says).

    An argmax adapter whose chosen actions were all greedy for a prompt produced a row that depends
    on no seed (every step's action and token are functions of the prefix alone): with
    ``decode_deterministic_once`` its sample 0 is decoded first, and where it is all greedy it
    stands for every sample of this seed and of the later seeds that use the same policy."""
    problems, cfg, store = run_ctx.problems, run_ctx.cfg, run_ctx.store
    chooser, own_run = plan.row_decoder(method, s, rollouts)
    counts = store.token_counts.setdefault(method.name, Counter())
    stop = method.stops(cfg)

    def run(keys: list[TokenKey]) -> None:
        if not keys:
            return
        checks = answer_stops(run_ctx.task, problems, [k.problem for k in keys], stop)
        for result in _run_rows(keys, run_ctx, rollouts, progress, chooser=chooser, actions=method.actions,
                                run=own_run, stop_checks=checks):
            counts.update(result.actions[result.valid_mask()].tolist())

    keys = [[TokenKey(method.name, s, i, j) for j in range(cfg.n)] for i in range(len(problems))]  # [problem][sample]
    if not plan.replicates_deterministic(method, cfg):
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


def _check_methods(methods: Sequence[Method], cfg: EvalConfig, problems) -> None:
    names = [m.name for m in methods]
    if not methods:
        raise ValueError("nothing to evaluate: no methods")
    if len(set(names)) != len(names):
        raise ValueError(f"method names must be unique, got {names}")
    for m in methods:  # a per-k static row needs an action for every reported k
        for k in cfg.k_values:
            m.action_for_k(k)
    if not problems:
        raise ValueError("nothing to evaluate: no problems")


def _default_factory(lm, batch_rows: int) -> RolloutsFactory:
    return lambda action_set, per_token: HFRollouts(lm, action_set, batch_rows)


def _refuse_overlap(methods: Sequence[Method], problems, allow: bool) -> dict[str, int]:
    overlap = train_overlap(methods, problems)
    if overlap and not allow:
        raise ValueError(
            "refusing to score adapters on problems they were trained or selected on: "
            + "; ".join(f"{name}: {n} of {len(problems)} problems" for name, n in overlap.items())
            + ". Evaluate on another split or file, or pass --allow-train-overlap (allow_train_overlap=True); "
            "the report then says so."
        )
    return overlap


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
    _check_methods(methods, cfg, problems)
    overlap = _refuse_overlap(methods, problems, allow_train_overlap)
    meta = {**(meta or {}), "allow_train_overlap": bool(allow_train_overlap), "train_overlap": overlap}
    prompts, cot = encode_problems(lm, task, problems, cfg.cot_ratio, cfg.seed)
    store = RowStore(lm.tokenizer)
    setup = Setup(lm, task, prompts, problems, cfg, batch_rows, store, summaries={})
    choices = {}  # what each method decides before decoding: [seed][problem][k index]
    for m in methods:
        chosen = plan_for(m).choose(m, setup)
        if chosen is not None:
            choices[m.name] = chosen
    modes = {id(p): p.training for m in methods for p in m.all_policies}
    for m in methods:
        for p in m.all_policies:
            p.eval()
    display = {m.name: _display_keys(m, plan_for(m), cfg, problems, choices) for m in methods}
    store.wanted = {k for keys in display.values() for k in keys}
    try:
        _decode_seeds(methods, _Run(prompts, problems, task, cfg, store), choices,
                      rollouts_factory or _default_factory(lm, batch_rows), progress, checkpoint)
    finally:
        for m in methods:  # give a policy that was training back in training mode
            for p in m.all_policies:
                p.train(modes[id(p)])
    evaluation = _assemble(methods, cfg, problems, cot, choices, store, display, meta)
    evaluation.details["cost"] = _costs(methods, cfg, problems, choices, store, time.perf_counter() - started)
    return evaluation


def _decode_seeds(methods, run_ctx: _Run, choices, factory: RolloutsFactory, progress,
                  checkpoint: SeedCheckpoint | None) -> None:
    """Decode every row the methods need, seed by seed: the shared fixed-action rows first (one
    engine over all their actions), then each method's own rows (an engine each); with a
    ``checkpoint``, saved after each seed and restored before."""
    cfg, store = run_ctx.cfg, run_ctx.store
    static_set = _static_actions(methods, choices)
    static_rollouts = factory(ActionSet(static_set), False) if static_set else None
    own = {}  # method name -> (method, plan, rollouts) of the methods that decode rows of their own
    for m in methods:
        plan = plan_for(m)
        rollouts = plan.rollouts(m, factory)
        if rollouts is not None:
            own[m.name] = (m, plan, rollouts)
    done_seeds = checkpoint.restore(store) if checkpoint is not None else set()
    try:
        for s in tqdm(range(cfg.seeds), desc="evaluate (seeds)", unit="seed", disable=not progress):
            if s in done_seeds:
                continue
            needed = _keys_for_seed(methods, cfg, s, run_ctx.problems, choices)
            todo = sorted(
                (k for k in needed if isinstance(k, StaticKey) and k not in store.correct),
                key=lambda k: (k.problem, k.seed, k.sample),
            )
            _decode_static(todo, run_ctx, static_rollouts, progress and f"static s={s}")
            for m, plan, rollouts in own.values():
                _decode_own(m, plan, s, run_ctx, rollouts, progress and f"{m.name} s={s}")
            if checkpoint is not None:
                done_seeds.add(s)
                checkpoint.save(store, done_seeds)
    finally:
        for r in [static_rollouts, *(r for _, _, r in own.values())]:
            if r is not None:
                r.close()


def train_overlap(methods: Sequence[Method], problems) -> dict[str, int]:
    """``{adapter method: number of problems it was trained or selected on}`` (only those with any)."""
    hashes = [content_hash(p) for p in problems] if any(m.seen_hashes for m in methods) else []
    out = {}
    for m in methods:
        n = sum(h in m.seen_hashes for h in hashes) if m.seen_hashes else 0
        if n:
            out[m.name] = n
    return out


# ---- from rows to eval_details ---------------------------------------------------------------------


def _assemble(methods, cfg: EvalConfig, problems, cot, choices, store: RowStore, display, meta) -> Evaluation:
    results, details = {}, _details_header(methods, cfg, problems, cot, meta)
    for m in methods:
        plan = plan_for(m)
        per_problem = {metric: [] for metric in cfg.metrics}
        for i, p in enumerate(problems):
            values = [plan.problem_values(m, cfg, s, i, p.id, choices, store) for s in range(cfg.seeds)]
            for metric in cfg.metrics:
                per_problem[metric].append([v[metric] for v in values])
        results[m.name], details["summary"][m.name] = summarise(per_problem, cfg)
        own = str(cfg.k_values[0])  # the method's own answer: B = the smallest k
        details["per_problem"][m.name] = {**per_problem, ANSWER_ACCURACY: per_problem[f"{ANSWER_ACCURACY}@{own}"]}
        per_problem_compute = _compute(m, plan, cfg, problems, choices, store)
        details["compute"][m.name] = per_problem_compute
        for unit in ("decodes", "tokens"):
            means = {k: statistics.fmean(values) for k, values in per_problem_compute[unit].items()}
            details["methods"][m.name][f"{unit}_per_problem"] = {**means, "answer": means[own]}
        keys = _method_keys(m, cfg, problems, choices)
        details["lengths"][m.name] = [store.length[k] for k in keys]
        details["action_usage"][m.name] = plan.action_usage(m, keys, store)
        details["trajectories"][m.name] = [
            _public_record(store.records[k], k, plan.output_actions(m), problems)
            for k in display[m.name]
            if k in store.records
        ]
        plan.add_details(m, details, cfg, problems, choices, store)
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


def _family(problem) -> dict:
    """``{"family": ...}`` where the task gives its problems a family (the report's per-family lines), else {}."""
    family = (getattr(problem, "meta", None) or {}).get("family")
    return {} if family is None else {"family": str(family)}


def _details_header(methods, cfg: EvalConfig, problems, cot, meta) -> dict:
    return {
        "config": details_config(cfg, meta),
        "problems": [{"id": p.id, "cot": bool(c), "question": p.question[:2000], **_family(p)}
                     for p, c in zip(problems, cot)],
        "methods": {m.name: m.describe() for m in methods},
        "summary": {},
        "per_problem": {},
        "lengths": {},
        "action_usage": {},
        "sequence_choices": {},
        "trajectories": {},
        "compute": {},
    }


def _compute(m: Method, plan: Plan, cfg: EvalConfig, problems, choices,
             store: RowStore) -> dict[str, dict[str, list[float]]]:
    """What answering each problem cost the method at each k: ``{"decodes": {k: [per problem]},
    "tokens": {k: [per problem]}}`` (k as a string), each value the mean over seeds of its plan's
    cost (:func:`aggregate.subset_cost`) on the n samples pass@k comes from. A decode is one
    generated sequence for one problem (a method that decodes twice for an answer counts both:
    ``DecodeResult.decodes``); tokens are the generated tokens summed over those decodes (EOS
    included; padding and forced tokens excluded: ``DecodeResult.generated_tokens``)."""
    out = {"decodes": {str(k): [] for k in cfg.k_values}, "tokens": {str(k): [] for k in cfg.k_values}}
    for i, p in enumerate(problems):
        sums = {k: [0.0, 0.0] for k in cfg.k_values}
        for s in range(cfg.seeds):
            for k, keys in zip(cfg.k_values, plan.sample_keys(m, cfg, s, i, p.id, choices)):
                sources = [store.source.get(key, key) for key in keys]
                costs = {src: (store.decodes[src], store.generated[src]) for src in set(sources)}
                d, t = plan.cost(sources, costs, k)
                sums[k][0] += d
                sums[k][1] += t
        for k in cfg.k_values:
            out["decodes"][str(k)].append(sums[k][0] / cfg.seeds)
            out["tokens"][str(k)].append(sums[k][1] / cfg.seeds)
    return out


def _costs(methods, cfg, problems, choices, store: RowStore, wall_seconds: float) -> dict:
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


def _public_record(record: dict, key: Key, output_actions: list[DecodingAction], problems) -> dict:
    """A kept row as eval_details shows it: each token's action as an index into the method's outputs."""
    canon = [GREEDY if a.is_greedy else a for a in output_actions]
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
