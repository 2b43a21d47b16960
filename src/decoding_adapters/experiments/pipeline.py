"""The experiment pipeline: one stage clock, and the stages that decode, train and evaluate as
functions (the study's config is ``experiments.study_config``; the stages over stored sample
tables, rules, attempt policy and verifier, are ``experiments.stages_rules``).

A study (``demo``, ``reproduce``, ``domains``) is a short script over these stages, each resumable
(run the same command again after a kill and finished work is reused):

- **budget** (:func:`choose_budget`): greedy on validation problems at each candidate token
  budget; the smallest whose truncated fraction is <= ``budget.max_truncated`` becomes the token
  budget of every later stage (chosen on validation, never test);
- **select** (:func:`decode_candidates`, :func:`write_selection`): decode a candidate pool on
  validation problems into an outcome table and pick K actions by greedy coverage; with
  ``selection.best_problems``, Best's finalists on more validation problems
  (:func:`decode_best_finalists`), where Best and the adapters' start actions are chosen;
- **train sequence** (:func:`train_sequence`): a sequence adapter, by offline replay of the
  outcome table or with live rollouts (``sequence_rewards``);
- **train token** (:func:`train_token`): a token adapter with live rollouts (:func:`token_trainer`
  is the one place a study builds a ``TokenTrainer``);
- **evaluate** (:func:`evaluate_methods`): methods on a split, same problems and seeds;
- **rules**, **attempt**, **verifier**: ``experiments.stages_rules``;
- **report**: each study writes its own (``reporting``).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Sequence

import torch

from ..core.files import write_json
from ..decoding.actions import ActionSet, DecodingAction, load_action_set
from ..decoding.protocol import stored_stop
from ..decoding.rollouts import HFRollouts
from ..evaluation import (
    COMPUTE_FIELDS,
    Evaluation,
    Method,
    adapter_method,
    best_per_k_method,
    choose_token_budget,
    details_config,
    evaluate,
    greedy_truncation,
    load_best_per_k,
)
from ..evaluation import draft as draft_eval
from ..policies.draft import DraftContextConfig
from ..policies.networks import load_adapter
from ..reporting.selection import write_outputs
from ..selection.best import best_static_from_table
from ..selection.coverage import build_pool, select_from_table
from ..selection.outcomes import OutcomeTable, evaluate_pool
from ..training.draft import DraftTable, DraftTrainConfig, DraftTrainer, ensure_tables
from ..training.sequence import SequenceTrainer, reward_source
from ..training.token import TokenTrainConfig, TokenTrainer
from .stages_rules import RULE_TABLE_KEY
from .study_config import StudyConfig

__all__ = [
    "StageClock",
    "finished",
    "choose_budget",
    "candidate_pool",
    "decode_candidates",
    "write_selection",
    "best_method",
    "best_finalists",
    "decode_best_finalists",
    "selection_meta",
    "best_action_index",
    "best_action_per_budget",
    "train_sequence",
    "train_draft",
    "redecode_action",
    "draft_controls",
    "token_trainer",
    "filtered_prompts",
    "train_token",
    "adapter_runs",
    "evaluate_methods",
]


class StageClock:
    """Prints where the run is, how long it has taken and, given a plan (planned minutes per stage),
    the time left: the planned minutes of the stages still to run, scaled by how the finished
    stages compared with their plan. Each stage's minutes are added to ``minutes_file`` when it
    ends, so a resumed run's file holds the total spent on every stage over all runs (a stage
    killed midway loses the killed part), and the number of runs."""

    def __init__(self, label: str, minutes_file: Path, plan: dict[str, float] | None = None):
        self.label, self.minutes_file, self.plan = label, Path(minutes_file), plan
        self.started = time.perf_counter()
        self.minutes: dict[str, float] = {}
        record = self._read()
        write_json(self.minutes_file, {"runs": record["runs"] + 1, "minutes": record["minutes"]})

    def begin(self, key: str, label: str, detail: str = "") -> None:
        """Announce stage ``key`` (one of the plan's keys)."""
        eta = ""
        if self.plan is not None:
            left = sum(v for k, v in self.plan.items() if k not in self.minutes)
            # pace: measured over planned minutes of the finished decoding stages (loading is not a guide)
            done = [k for k in self.minutes if k != "load"]
            planned = sum(self.plan.get(k, 0.0) for k in done)
            pace = sum(self.minutes[k] for k in done) / planned if planned >= 1.0 else 1.0
            eta = f", ~{left * pace:.0f} min left (plan {sum(self.plan.values()):.0f} min)"
        print(f"[{self.label} {self.elapsed():5.1f} min{eta}] {label}{': ' + detail if detail else ''}", flush=True)
        self.current, self.stage_started = key, time.perf_counter()

    def end(self) -> None:
        self.minutes[self.current] = (time.perf_counter() - self.stage_started) / 60
        record = self._read()
        record["minutes"][self.current] = record["minutes"].get(self.current, 0.0) + self.minutes[self.current]
        write_json(self.minutes_file, record)

    def elapsed(self) -> float:
        """Minutes since this run started."""
        return (time.perf_counter() - self.started) / 60

    def total_minutes(self) -> dict[str, float]:
        """Minutes spent per stage over every run into this output directory."""
        return self._read()["minutes"]

    def runs(self) -> int:
        """Runs into this output directory, this one included."""
        return self._read()["runs"]

    def _read(self) -> dict:
        if not self.minutes_file.is_file():
            return {"runs": 0, "minutes": {}}
        return json.loads(self.minutes_file.read_text())


def finished(directory: Path) -> bool:
    """A training run whose adapter is written (a study skips it when resumed)."""
    return (directory / "adapter.json").is_file()


# ---- budget --------------------------------------------------------------------------------------


def choose_budget(lm, task, cfg: StudyConfig, out: Path) -> tuple[StudyConfig, dict | None]:
    """The token budget from greedy truncation on validation (cached in ``out/truncation.json``):
    ``cfg`` at the chosen budget, and the measurement (None without candidates)."""
    if not cfg.budget.candidates:
        return cfg, None
    path = out / "truncation.json"
    record = json.loads(path.read_text()) if path.is_file() else None
    if record is None or stored_stop(record) != cfg.stop_at_answer:
        problems = task.load("validation")[: cfg.budget.problems]
        stats = greedy_truncation(lm, task, problems, cfg.budget.candidates, batch_rows=cfg.batch_rows,
                                  stop_at_answer=cfg.stop_at_answer)
        record = {
            "stop_at_answer": cfg.stop_at_answer,
            "split": "validation",
            "stats": [st.to_dict() for st in stats],
            "max_truncated": cfg.budget.max_truncated,
            "chosen": choose_token_budget(stats, cfg.budget.max_truncated),
        }
        write_json(path, record)
    return replace(cfg, token_budget=int(record["chosen"])), record


# ---- select --------------------------------------------------------------------------------------


def candidate_pool(cfg: StudyConfig) -> list[DecodingAction]:
    """The 180-config pool (subsampled by ``selection.pool_subsample``) plus greedy."""
    return build_pool("pool", subsample=cfg.selection.pool_subsample, add_greedy=True)


def decode_candidates(lm, task, problems, actions, cfg: StudyConfig, table_path: Path,
                      progress: bool | str) -> OutcomeTable:
    """Every (problem, action) cell of ``actions`` on ``problems``, ``selection.samples`` times, in
    the outcome table at ``table_path`` (cells already there are reused; missing ones are decoded)."""
    return evaluate_pool(lm, task, problems, actions, samples=cfg.selection.samples, token_budget=cfg.token_budget,
                         seed=0, table_path=table_path, batch_rows=cfg.batch_rows, progress=progress,
                         stop_at_answer=cfg.stop_at_answer)


def best_finalists(table: OutcomeTable, pool, k_values, per_k: int) -> list[DecodingAction]:
    """The candidates of ``pool`` with the ``per_k`` highest pass@k on ``table`` for each k of
    ``k_values`` (ties: pool order), greedy among them, in pool order: the ones Best is then chosen
    among on more problems."""
    names = [a.name for a in pool]
    screen = best_static_from_table(table, k_values, names)
    keep = {a.name for a in pool if a.is_greedy}
    for row in screen.scores:  # one row of pass@k scores per k
        keep.update(names[j] for j in sorted(range(len(names)), key=lambda j: -row[j])[:per_k])
    return [a for a in pool if a.name in keep]


def decode_best_finalists(lm, task, cfg: StudyConfig, table: OutcomeTable, pool, table_path: Path,
                          progress: bool | str) -> OutcomeTable | None:
    """With ``selection.best_problems``: Best's finalists on ``table`` (:func:`best_finalists`)
    decoded on the first ``best_problems`` validation problems into ``table_path`` (cells already there
    are reused), the table Best is chosen on; None without."""
    sel = cfg.selection
    if sel.choice_problems <= sel.problems:
        return None
    finalists = best_finalists(table, pool, cfg.eval.k_values, sel.best_finalists)
    return decode_candidates(lm, task, task.load("validation")[: sel.choice_problems], finalists, cfg, table_path,
                             progress)


def write_selection(out: Path, pool, table: OutcomeTable, k: int, meta: dict, k_values=(1,),
                    best_table: OutcomeTable | None = None) -> str:
    """K actions of ``pool`` by greedy coverage of ``table``, written into ``out`` (actions.json with
    the Best static strategy at each pass@k in ``k_values`` and ``meta``; selection.md,
    selection.png); returns the markdown. Best is chosen among the whole pool on the same outcomes,
    or, given ``best_table`` (the finalists on more problems, :func:`best_finalists`), among the
    candidates it holds on its problems."""
    selection = select_from_table(table, k, k_values)
    if best_table is not None:  # Best (and the adapters' start actions) on more problems
        selection = replace(selection, best=best_static_from_table(best_table, k_values))
    return write_outputs(out, pool, selection, meta)


def best_method(actions: Path, k_values) -> Method:
    """The Best row: at each pass@k the static strategy (pool + greedy, every sample under the
    study's stop) with the highest validation pass@k, from the selection's ``actions.json``."""
    per_k = load_best_per_k(actions)
    return best_per_k_method({k: per_k[k] for k in k_values})


def selection_meta(cfg: StudyConfig, task_name: str, problems: int, pool) -> dict:
    """What a study's actions.json records about its selection (``problems``: those coverage read;
    ``best_problems``: those Best was chosen on, where more)."""
    more = cfg.selection.choice_problems > problems
    return {"task": task_name, "split": "validation", "problems": problems, "samples": cfg.selection.samples,
            "token_budget": cfg.token_budget, "seed": 0, "k": cfg.selection.k, "pool": [a.name for a in pool],
            **({"best_problems": cfg.selection.choice_problems} if more else {})}


# ---- train sequence ------------------------------------------------------------------------------


def best_action_index(actions: Path, action_set: ActionSet) -> int | None:
    """Index in ``action_set`` of the selection's best single static action (``best_single`` of
    ``actions.json``, chosen on validation), the sequence adapter's prior; None when the selected
    set does not contain it (the policy then starts uniform)."""
    best = DecodingAction.from_dict(json.loads(Path(actions).read_text())["best_single"])
    names = action_set.names
    return names.index(best.name) if best.name in names else None


def best_action_per_budget(actions: Path, action_set: ActionSet, budgets: Sequence[int]) -> tuple[int, ...] | None:
    """For each parallel budget B, the index in ``action_set`` of the selection's Best at pass@B
    (``best_per_k`` of ``actions.json``; at the largest k <= B it lists whose Best is in the set,
    else the best single action): the w/ budget sequence adapter's prior per budget. None when
    neither is in the set for some B."""
    data = json.loads(Path(actions).read_text())
    names = action_set.names
    best = data.get("best_per_k") or {}
    per_k = sorted((int(k), name) for k, name in best.get("best", {}).items() if name in names)
    fallback = best_action_index(actions, action_set)
    chosen = []
    for b in budgets:
        below = [names.index(name) for k, name in per_k if k <= b]
        chosen.append(below[-1] if below else fallback)
    return None if any(c is None for c in chosen) else tuple(chosen)


def train_sequence(lm, task, cfg: StudyConfig, actions: Path, table: Path, out: Path, seed: int, use_budget: bool,
                   *, table_task=None) -> None:
    """A sequence adapter on ``task`` into ``out`` (skipped when finished, resumed when started):
    by replay of the outcome ``table`` (decoded for ``table_task``, default ``task``; the trainer
    draws ``task``'s problems from it) or with live rollouts."""
    if finished(out):
        return
    live = cfg.sequence_rewards == "live"
    action_set = ActionSet(load_action_set(actions))
    config = replace(cfg.sequence, actions=str(actions), use_budget=use_budget, replay=None if live else str(table),
                     seed=seed, prior_action=best_action_index(actions, action_set),
                     budget_prior_actions=best_action_per_budget(actions, action_set, cfg.sequence.parallel_budgets)
                     if use_budget else None)
    rollouts = HFRollouts(lm, action_set, cfg.batch_rows) if live else None
    rewards = reward_source(config, table_task or task, action_set, rollouts, lm=lm)  # live or offline replay
    SequenceTrainer(config, lm, task, rewards, out, task_name=task.name, progress=False).train(resume=True)


# ---- train draft-gated ---------------------------------------------------------------------------


def train_draft(lm, task, cfg: StudyConfig, actions: Path, out: Path, seed: int, *, features: str = "confidence",
                tables: Path | None = None, **overrides) -> None:
    """A draft-gated adapter into ``out`` (skipped when finished, resumed when started): both-arms
    tables of the training and validation problems under the selected set's sampled actions
    (built once in ``tables``, default ``out``'s parent, resumable; ``cfg.sequence``'s problem
    counts), then ``training.draft.DraftTrainer`` from the sequence settings of the study, its prior
    on keeping the draft."""
    if finished(out):
        return
    tables = tables or out.parent
    overrides.setdefault("redecode_actions", (redecode_action(actions, cfg.eval.k_values).name,))
    overrides.setdefault("table_samples", cfg.draft_samples)
    config = DraftTrainConfig(**{
        **{k: v for k, v in asdict(cfg.sequence).items() if k not in ("replay", "metric", "group_size")},
        "actions": str(actions), "seed": seed, "features": features, "prior_action": 0,
        "budget_prior_actions": None, "table": str(tables / "draft-table-train.jsonl"),
        "val_table": str(tables / "draft-table-validation.jsonl"), **overrides})
    ensure_tables(replace(config, seed=0), lm, task)  # one pair of tables for every training seed
    DraftTrainer(config, lm, task, out, task_name=task.name, progress=False).train(resume=True)


def redecode_action(actions: Path, k_values) -> DecodingAction:
    """The draft stage's re-decode action: the selected set's Best at the largest k when it samples,
    else the set's first sampled action."""
    per_k = (load_best_per_k(actions) if Path(actions).is_file() else None) or {}  # a preset name has none
    best = per_k.get(max(k_values)) if k_values else None
    if best is not None and not best.is_greedy:
        return best
    sampled = [a for a in load_action_set(actions) if not a.is_greedy]
    if not sampled:
        raise ValueError(f"{actions} has no sampled action to re-decode with")
    return sampled[0]


def draft_controls(lm, task, cfg: StudyConfig, actions: Path, adapter: Path, tables: Path) -> list[Method]:
    """The draft-gated adapter's controls for the evaluation, from the validation table: a random
    gate at the adapter's validation re-decode share (B = 1) and the confidence threshold tuned on
    validation (pass@1 at <= 1.5 decodes per problem)."""
    table = DraftTable.load(tables / "draft-table-validation.jsonl")
    ids = table.problem_ids
    policy, config = load_adapter(adapter, lm)
    contexts = table.context(ids, DraftContextConfig(**config.draft))
    choice, _ = policy.choose(contexts, torch.ones(len(ids), dtype=torch.long))
    share = float((choice > 0).double().mean())
    action = config.action_list[0]
    tuned = draft_eval.tune_threshold(table, ids, action.name, max_decodes=1.5)
    stop = config.stop_at_answer  # the controls decode as the adapter they are compared to
    return [draft_eval.random_gate_method(action, share, f"Random gate ({share:.0%})", stop_at_answer=stop),
            draft_eval.threshold_gate_method(action, tuned["feature"], tuned["threshold"],
                                             f"Confidence threshold ({tuned['feature']})", stop_at_answer=stop)]


# ---- train token ---------------------------------------------------------------------------------


def token_trainer(config: TokenTrainConfig, lm, task, out: Path, cfg: StudyConfig, *, progress: bool,
                  train_problems: list | None = None) -> TokenTrainer:
    """The ``TokenTrainer`` of a study run: ``config`` with HF rollouts of its action set."""
    rollouts = HFRollouts(lm, ActionSet(load_action_set(config.actions)), cfg.batch_rows)
    return TokenTrainer(config, lm, task, rollouts, out, progress=progress, train_problems=train_problems)


def filtered_prompts(lm, task, cfg: StudyConfig, out: Path, progress: bool, prior_action: int | None = None) -> list:
    """Probe the training prompts once for all token runs with the policy they start from (the prior
    at ``prior_action``: every run starts exactly there, whatever its seed or variant) and keep those
    it neither always passes nor always fails; cached in ``out/token-prompts.json`` with the counts."""
    cache = out / "token-prompts.json"
    by_id = {p.id: p for p in task.load("train")}
    judged_by = f"start policy, prior at action {prior_action}"
    if cache.is_file():
        record = json.loads(cache.read_text())
        if record.get("judged_by") == judged_by:
            return [by_id[i] for i in record["kept"]]
    config = replace(cfg.token, use_budget=True, features="hidden", seed=0, prior_action=prior_action)
    trainer = token_trainer(config, lm, task, out / "probe", cfg, progress=progress)
    summary = trainer.prepare()
    write_json(cache, {**summary, "judged_by": judged_by, "kept_count": summary["kept"],
                       "kept": [p.id for p in trainer.train_problems]})
    return trainer.train_problems


def train_token(lm, task, cfg: StudyConfig, out: Path, seed: int, *, use_budget: bool = True,
                features: str = "hidden", problems: list | None = None, progress: bool = True,
                prior_action: int | None = None) -> None:
    """A token adapter on ``task`` into ``out`` (skipped when finished, resumed when started);
    ``problems``: training prompts already filtered (:func:`filtered_prompts`); ``prior_action``:
    the index, in the token action set, of the best static token action chosen on validation (the
    policy starts there and learns deviations)."""
    if finished(out):
        return
    config = replace(cfg.token, use_budget=use_budget, features=features, seed=seed, prior_action=prior_action)
    token_trainer(config, lm, task, out, cfg, progress=progress, train_problems=problems).train(resume=True)


# ---- evaluate ------------------------------------------------------------------------------------


def adapter_runs(out: Path, prefix: str, cfg: StudyConfig, lm, name: str) -> Method:
    """The adapters ``out/{prefix}-s{seed}`` of every training seed, evaluated as one method."""
    return adapter_method([out / f"{prefix}-s{s}" for s in range(cfg.seeds)], lm, name=name)


def evaluate_methods(lm, task, problems, methods: list[Method], cfg: StudyConfig, out: Path, *, meta: dict,
                     progress: bool) -> Evaluation:
    """``methods`` on ``problems`` (``cfg.eval``: same problems and row seeds for every method),
    written into ``out``; a finished evaluation there of the same methods, problems and settings
    is read back instead (a run killed in the report stage does not decode its evaluation again)."""
    done = _finished_evaluation(out, methods, problems, cfg, meta)
    if done is not None:
        return done
    evaluation = evaluate(lm, task, problems, methods, cfg.eval, batch_rows=cfg.batch_rows,
                          progress=progress, meta=meta)
    evaluation.write(out)
    return evaluation


def _finished_evaluation(out: Path, methods: list[Method], problems, cfg: StudyConfig, meta: dict) -> Evaluation | None:
    """The evaluation stored in ``out`` when it was made of these methods (as eval_details.json
    describes them), problems and settings (``details_config``, what the evaluation records), and
    no adapter was saved after it; None otherwise."""
    results_path, details_path = Path(out) / "results.json", Path(out) / "eval_details.json"
    if not (results_path.is_file() and details_path.is_file()):
        return None
    details = json.loads(details_path.read_text())
    stored = details.get("config", {})
    stored_ids = [p.get("id") if isinstance(p, dict) else p for p in details.get("problems", [])]
    described = json.loads(json.dumps({m.name: m.describe() for m in methods}))  # as JSON stores it
    stored_methods = {name: {k: v for k, v in d.items() if k not in COMPUTE_FIELDS}  # measured, not described
                      for name, d in details.get("methods", {}).items()
                      if RULE_TABLE_KEY not in d}  # a rule scored from stored samples was added after it
    same = (stored_methods == described and stored_ids == [p.id for p in problems]
            and all(stored.get(k) == v for k, v in details_config(cfg.eval, meta).items()))
    # an adapter saved after the evaluation (retrained) makes it stale
    weights = [Path(d) / "adapter.safetensors" for m in methods if m.source for d in m.source.split(", ")]
    newest = max((w.stat().st_mtime for w in weights if w.is_file()), default=0.0)
    same = same and results_path.stat().st_mtime >= newest
    return Evaluation(json.loads(results_path.read_text()), details) if same else None
