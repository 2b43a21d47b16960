"""The experiment pipeline: one study config, one stage clock, and the stages as functions.

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
- **rules** (:func:`rule_tables`, :func:`fixed_rules`): sample tables of validation problems and of
  the evaluated problems (built once under the study's folder, shared by every stage that scores
  stored samples), every fixed rule tuned on validation per compute level and its points added to
  the evaluation as methods of family ``fixed rule``;
- **verifier** (:func:`verifier_stage`): a verifier trained on a table of training problems, its
  quality per family, and every rule's variant that reads it added beside the plain rules
  (``"reads_verifier": true``);
- **report**: each study writes its own (``reporting``).

``StudyConfig`` nests the trainers' and the evaluation's own configs, so each setting is declared
once: ``--token.lr`` on the command line is ``TokenTrainConfig.lr``. The fields a study sets per
run (the token budget, seeds, which variant) are not options of the nested configs
(``metadata["exclude"]``); the study's ``token_budget`` and ``seeds`` are copied into them.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Literal, Sequence

import numpy as np
import torch

from ..core.files import write_json
from ..decoding.actions import DEFAULT_TOKEN_BUDGET, GREEDY, ActionSet, DecodingAction, load_action_set
from ..decoding.protocol import STOP_AT_ANSWER, DecodingProtocol, stored_stop
from ..decoding.rollouts import HFRollouts
from ..evaluation import (
    COMPUTE_FIELDS,
    EvalConfig,
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
from ..evaluation.attempt import rule_baselines, seed_agreement, train_and_score
from ..evaluation.decoder_choice import decoder_ablation, decoder_arms, single_arm_runs
from ..evaluation.rules import fit_calibrations, greedy_then, tune_rules
from ..evaluation.sample_table import SampleTable, build_sample_table
from ..evaluation.verifier import crossfit_table_scores, fit_on_table, ranking_quality, table_scores
from ..policies.draft import DraftContextConfig
from ..policies.fixed_rules import RULE_LABELS, RULES, VERIFIER_RULES, reads_verifier, score_setting, setting_from_dict
from ..policies.networks import load_adapter
from ..policies.verifier import load_verifier
from ..reporting.selection import write_outputs
from ..selection.best import best_static_from_table
from ..selection.coverage import build_pool, select_from_table
from ..selection.outcomes import OutcomeTable, evaluate_pool
from ..training.attempt import AttemptTrainConfig
from ..training.draft import DraftTable, DraftTrainConfig, DraftTrainer, ensure_tables
from ..training.sequence import SequenceTrainConfig, SequenceTrainer, reward_source
from ..training.token import TokenTrainConfig, TokenTrainer
from ..training.verifier import VerifierTrainConfig

__all__ = [
    "BudgetConfig",
    "SelectionConfig",
    "RulesConfig",
    "StudyConfig",
    "StageClock",
    "study_task_options",
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
    "rule_tables",
    "study_table",
    "rule_entries",
    "add_rule_entries",
    "fixed_rules",
    "AttemptStageConfig",
    "VerifierStageConfig",
    "verifier_stage",
    "problem_families",
    "attempt_entries",
    "attempt_stage",
    "RULE_TABLE_KEY",
]


@dataclass(frozen=True)
class BudgetConfig:
    """The token-budget stage: greedy on validation at each candidate budget."""

    candidates: tuple[int, ...] = ()
    """Budgets measured with greedy on validation first; the smallest whose truncated fraction is
    <= max_truncated replaces the study's token_budget (empty: no budget stage)."""
    problems: int = 100
    """Validation problems of the truncation measurement."""
    max_truncated: float = 0.20
    """Largest fraction of greedy rows a chosen budget may stop before EOS."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.max_truncated <= 1.0:
            raise ValueError(f"max_truncated must be in [0, 1], got {self.max_truncated}")
        if self.problems < 1:
            raise ValueError(f"budget problems must be >= 1, got {self.problems}")


@dataclass(frozen=True)
class SelectionConfig:
    """The action-selection stage: a candidate pool decoded on validation, K picked by coverage."""

    pool_subsample: int | None = 8
    """Candidates taken evenly from the 180-config pool (greedy is added; none: the whole pool)."""
    problems: int = 32
    """Validation problems the candidates are run on (per domain in a task mix)."""
    samples: int = 4
    """Samples per (problem, action); also the largest parallel budget replay can serve."""
    k: int = 4
    """Size of the selected sequence-level action set."""
    best_problems: int | None = None
    """Validation problems (the first ones, ``samples`` each) on which Best (the best static strategy
    at each pass@k) and the sequence adapters' start actions are chosen, among the finalists the first
    ``problems`` screen (``best_finalists``); the K actions are chosen by coverage on those first
    ``problems``. None: everything on ``problems``."""
    best_finalists: int = 2
    """With ``best_problems``: the candidates with the highest pass@k on the first ``problems``, this
    many per pass@k of the evaluation (greedy always among them), go on to be decoded on the rest."""

    def __post_init__(self) -> None:
        for name in ("problems", "samples", "k"):
            if getattr(self, name) < 1:
                raise ValueError(f"selection {name} must be >= 1, got {getattr(self, name)}")
        if self.best_problems is not None and self.best_problems < self.problems:
            raise ValueError(f"best_problems must be >= problems ({self.problems}) or None, got {self.best_problems}")
        if self.best_finalists < 1:
            raise ValueError(f"best_finalists must be >= 1, got {self.best_finalists}")

    def finalist_rows(self, pool: int, k_values: int) -> int:
        """Rows Best's finalists decode past the first ``problems`` (at most ``best_finalists`` per each
        of ``k_values`` pass@k, and greedy, of a pool of ``pool``): what the plan counts."""
        finalists = min(pool, self.best_finalists * k_values + 1)
        return finalists * (self.choice_problems - self.problems) * self.samples

    @property
    def choice_problems(self) -> int:
        """Validation problems the selection stage decodes: Best's (``best_problems``) or ``problems``."""
        return self.problems if self.best_problems is None else self.best_problems
        if self.pool_subsample is not None and self.pool_subsample < 1:
            raise ValueError(f"pool_subsample must be >= 1 or None, got {self.pool_subsample}")


@dataclass(frozen=True)
class RulesConfig:
    """The fixed-rules stage: sample tables of validation problems (tuning) and of the evaluated
    problems (scoring), every rule tuned on validation at each compute level (docs/rules.md)."""

    enabled: bool = False
    """Run the stage (the study's evaluation then holds every rule's tuned points)."""
    temperatures: tuple[float, ...] = (0.5,)
    """Sampled arms beside greedy, one per temperature (unless ``decoders``); the rules read the
    stopped greedy, then the first sampled arm's samples."""
    decoders: str | None = None
    """Sampled arms beside greedy from an action set instead of the temperatures: a select-actions
    actions.json (its coverage-selected actions, in the order chosen) or a preset; greedy dropped.
    The attempt policy then chooses each attempt's arm among them."""
    decoder_count: int | None = None
    """How many of ``decoders``' sampled actions, in its order (None: all)."""
    samples: int = 8
    """Samples N per sampled arm and problem (the greedy arm is decoded once)."""
    problems: int = 400
    """Validation problems of the tuning table (the first of the validation split)."""
    rules: tuple[str, ...] = RULES
    """Rules tuned and scored (``policies.fixed_rules.RULES``)."""
    hidden: bool = False
    """The tables also keep each sample's mean hidden state (the rules read none; a learned policy
    over the same tables may)."""

    def __post_init__(self) -> None:
        if self.samples < 1 or self.problems < 1:
            raise ValueError(f"rules samples and problems must be >= 1, got {self.samples}, {self.problems}")
        if not self.temperatures or any(t <= 0 for t in self.temperatures):
            raise ValueError(f"rules temperatures must be positive and at least one, got {self.temperatures}")
        if self.decoder_count is not None and self.decoders is None:
            raise ValueError("rules decoder_count needs rules decoders")
        if self.decoders is not None:
            self.arms  # noqa: B018  (an unreadable action set or too few sampled actions: refused here)
        unknown = [r for r in self.rules if r not in RULES]
        if unknown or not self.rules:
            raise ValueError(f"unknown or no rules {unknown}; choose from {list(RULES)}")

    @property
    def arms(self) -> list[DecodingAction]:
        """Greedy, then the sampled arms (``decoders``', else one per temperature)."""
        if self.decoders is not None:
            return [GREEDY] + decoder_arms(self.decoders, self.decoder_count)
        return [GREEDY] + [DecodingAction(temperature=t) for t in self.temperatures]

    @property
    def rows_per_problem(self) -> int:
        """Decoded rows per problem of a table: greedy once, each sampled arm ``samples`` times."""
        return 1 + (len(self.arms) - 1) * self.samples


@dataclass(frozen=True)
class AttemptStageConfig:
    """The attempt-policy stage, after the fixed rules: the learned attempt policy (docs/attempt.md)
    trained on a table of training problems under the rules' arms, kept-best on the rules'
    validation table and scored on their evaluation table, one policy per price per decode."""

    enabled: bool = False
    """Run the stage (needs the fixed-rules stage: it reads its tables)."""
    train_problems: int = 400
    """Training problems of its table (the first of the train split)."""
    prices: tuple[float, ...] = (0.02, 0.05, 0.1)
    """Prices per decode, one policy each (its point on the accuracy-per-compute curve)."""
    features: tuple[str, ...] = ("confidence", "agreement")
    """What the policy reads (``policies.attempt.ATTEMPT_FEATURE_SETS``; ``hidden`` needs ``--rules.hidden``)."""
    steps: int = 300
    """Training steps per policy."""
    seed: int = 0
    """First training seed: the stage trains one policy per price for each of the study's ``seeds``
    training seeds from this one."""

    def __post_init__(self) -> None:
        if self.train_problems < 1 or self.steps < 0 or not self.prices or any(p < 0 for p in self.prices):
            raise ValueError("attempt train_problems must be >= 1, steps >= 0 and prices non-negative (at least one)")


@dataclass(frozen=True)
class VerifierStageConfig:
    """The verifier stage, after the fixed rules: a verifier (``policies.verifier``) trained on a table
    of training problems under the rules' arms, its ranking quality per family, and every rule's
    variant that reads it tuned on the rules' validation table and scored on their evaluation table,
    beside the plain rules (the strongest rule at a compute is chosen among all of them)."""

    enabled: bool = False
    """Run the stage (needs the fixed-rules stage: it reads its tables)."""
    train_problems: int = 400
    """Training problems of its table (the first of the train split; the attempt stage's table when both run)."""
    rules: tuple[str, ...] = VERIFIER_RULES
    """Verifier-reading rules tuned and scored (``policies.fixed_rules.VERIFIER_RULES``); the verifier is
    trained at ``training.verifier.VerifierTrainConfig``'s defaults (``train-verifier`` trains others)."""

    def __post_init__(self) -> None:
        unknown = [r for r in self.rules if r not in VERIFIER_RULES]
        if self.train_problems < 1 or unknown or not self.rules:
            raise ValueError(f"verifier train_problems must be >= 1 and rules among {list(VERIFIER_RULES)} (got "
                             f"{unknown or 'none'})")


# Nested-config fields a study sets for each run (which variant, seed, action set, replay table) or
# takes from its own (its protocol: token budget and stop; the evaluation's seeds): not command-line options.
SEQUENCE_SET_BY_STUDY = ("actions", "use_budget", "token_budget", "replay", "seed", "stop_at_answer")
TOKEN_SET_BY_STUDY = ("actions", "use_budget", "features", "token_budget", "seed", "stop_at_answer")
EVAL_SET_BY_STUDY = ("token_budget", "seeds", "stop_at_answer")


@dataclass(frozen=True)
class StudyConfig:
    """Sizes of every stage of a study."""

    token_budget: int = DEFAULT_TOKEN_BUDGET
    """Max new tokens per completion everywhere (replaced by the budget stage's choice when
    budget.candidates is set); part of the study's ``protocol``."""
    stop_at_answer: bool = STOP_AT_ANSWER
    """Every sample of every stage (selection, training rollouts, validation, the draft stage's
    tables, evaluation) ends at the task's first complete answer; part of the study's ``protocol``
    and recorded in every adapter. False (``--no-stop-at-answer``) decodes to the token budget."""
    budget: BudgetConfig = field(default_factory=BudgetConfig)
    """token budget stage"""
    selection: SelectionConfig = field(default_factory=SelectionConfig)
    """action selection"""
    sequence_rewards: Literal["replay", "live"] = "replay"
    """Rewards of the sequence adapters: offline replay of the selection table, or live rollouts."""
    sequence: SequenceTrainConfig = field(default_factory=lambda: SequenceTrainConfig(parallel_budgets=(1, 2, 4)),
                                          metadata={"exclude": SEQUENCE_SET_BY_STUDY})
    """sequence adapters"""
    token: TokenTrainConfig = field(default_factory=TokenTrainConfig, metadata={"exclude": TOKEN_SET_BY_STUDY})
    """token adapters"""
    eval: EvalConfig = field(default_factory=EvalConfig, metadata={"exclude": EVAL_SET_BY_STUDY})
    """evaluation"""
    eval_problems: int = 32
    """Test problems of every evaluated split."""
    eval_split: str = "test"
    """The split every method is evaluated on (its first ``eval_problems``): ``test``, or a held-out
    split of the task that only the published evidence run reads (``reproduce --size full``)."""
    train_size: int | None = None
    """Problems the generated task makes for its train split (``arithmetic``'s ``train_size``; None:
    the task's default): enough that ``token.min_train_prompts`` survive the token trainer's filter."""
    validation_size: int | None = None
    """Problems the generated task makes for its validation split (None: the task's default); the
    first ones stay the same problems whatever the size, and test does not change."""
    seeds: int = 3
    """Training seeds of every adapter, and evaluation seeds."""
    batch_rows: int = 128
    """Rows decoded together: on a CPU, bigger batches give more tokens per second."""
    threads: int = 0
    """torch CPU threads (1 is fastest on a shared, loaded machine; 0 keeps torch's default)."""
    draft_stage: bool = False
    """Also train the draft-gated adapter (one per seed) and evaluate it beside a random gate at its
    re-decode share and a confidence threshold tuned on validation."""
    draft_features: Literal["confidence", "mean", "hidden"] = "mean"
    """What the draft-gated adapter reads of the greedy draft (docs/draft-gated.md)."""
    draft_samples: int = 4
    """Re-decodes per problem in the draft stage's both-arms tables (one re-decode action: the
    selected set's Best at the largest k, else its first sampled action)."""
    rules: RulesConfig = field(default_factory=RulesConfig)
    """fixed rules over stored sample tables"""
    attempt: AttemptStageConfig = field(default_factory=AttemptStageConfig)
    """the learned attempt policy over the fixed rules' tables"""
    verifier: VerifierStageConfig = field(default_factory=VerifierStageConfig)
    """the learned verifier and the rules that read it, over the fixed rules' tables"""

    def __post_init__(self) -> None:
        if self.sequence_rewards not in ("replay", "live"):
            raise ValueError(f"sequence_rewards must be 'replay' or 'live', got {self.sequence_rewards!r}")
        if self.attempt.enabled and not self.rules.enabled:
            raise ValueError("the attempt-policy stage reads the fixed-rules stage's tables: enable --rules.enabled")
        if self.verifier.enabled and not self.rules.enabled:
            raise ValueError("the verifier stage reads the fixed-rules stage's tables: enable --rules.enabled")
        both = self.verifier.enabled and self.attempt.enabled
        if both and self.verifier.train_problems != self.attempt.train_problems:
            raise ValueError("the verifier and attempt stages share one training table: give them the same "
                             "train_problems")
        if "hidden" in self.attempt.features and not self.rules.hidden:
            raise ValueError("an attempt policy that reads hidden states needs tables that keep them (--rules.hidden)")
        if self.sequence_rewards == "replay" and max(self.sequence.parallel_budgets) > self.selection.samples:
            raise ValueError("offline replay serves budgets B up to selection.samples: raise it or use "
                             "sequence_rewards=live")
        for name in ("eval_problems", "seeds", "batch_rows", "draft_samples"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.eval_split in ("train", "validation"):
            raise ValueError(f"eval_split must be a held-out split, not {self.eval_split!r}: the study trains and "
                             "chooses on train and validation")
        for name in ("train_size", "validation_size"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1 or None, got {getattr(self, name)}")
        # one protocol (validated once) for every stage: the nested configs keep its fields flat, as
        # their own commands and study_config.json have them, and take it whole
        protocol = self.protocol
        object.__setattr__(self, "sequence", protocol.onto(self.sequence))
        object.__setattr__(self, "token", protocol.onto(self.token))
        object.__setattr__(self, "eval", replace(protocol.onto(self.eval), seeds=self.seeds))

    @property
    def protocol(self) -> DecodingProtocol:
        """The token budget and the stop at the first answer every stage decodes under."""
        return DecodingProtocol(self.token_budget, self.stop_at_answer)


def study_task_options(cfg: StudyConfig) -> dict:
    """``get_task`` options of a study's generated task: the split sizes it sets."""
    return {name: getattr(cfg, name) for name in ("train_size", "validation_size") if getattr(cfg, name) is not None}


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


# ---- fixed rules ---------------------------------------------------------------------------------

RULE_TABLE_KEY = "sample_tables"
"""The key of an ``eval_details.json`` method entry added from stored sample tables (a fixed rule's
tuned point): the tables it was tuned and scored on. The evaluation's own methods have none."""


def rule_tables(lm, task, cfg: StudyConfig, out: Path, problems, *, progress: bool = False,
                on_chunk=None) -> tuple[SampleTable, SampleTable]:
    """The validation table (the first ``cfg.rules.problems`` validation problems) and the evaluation
    table (``problems``, the evaluated ones, in their order) under ``cfg.rules.arms``, each
    ``cfg.rules.samples`` per sampled arm, in ``out/validation`` and ``out/test``: built chunk by
    chunk where missing (a rerun after a kill keeps the chunks written), read back where there.
    Any stage that scores stored samples reads these two tables; none decodes them again."""
    validation = study_table(lm, task, cfg, Path(out) / "validation", "validation",
                             task.load("validation")[: cfg.rules.problems], progress=progress, on_chunk=on_chunk)
    test = study_table(lm, task, cfg, Path(out) / "test", cfg.eval_split, problems, progress=progress,
                       on_chunk=on_chunk)
    return validation, test


def study_table(lm, task, cfg: StudyConfig, path: Path, split: str, problems, *, progress: bool = False,
                on_chunk=None) -> SampleTable:
    """One sample table of ``problems`` (of ``split``) under the study's arms and settings
    (``cfg.rules``: arms, samples, hidden; the study's token budget and stop; seed 0) in ``path``:
    built chunk by chunk where missing, read back where there (a table made under other settings is
    refused). A stage that needs another split's table (a learned policy's training problems) builds
    it with this, beside the rules' two."""
    rc = cfg.rules
    return build_sample_table(lm, task, list(problems), rc.arms, samples=rc.samples, token_budget=cfg.token_budget,
                              path=path, split=split, seed=0, stop_at_answer=cfg.stop_at_answer, hidden=rc.hidden,
                              chunk_problems=max(1, cfg.batch_rows // rc.rows_per_problem), progress=progress,
                              on_chunk=on_chunk)


def rule_entries(validation: SampleTable, test: SampleTable, rules: Sequence[str] = RULES,
                 tables: dict | None = None,
                 verifier: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[dict, dict]:
    """Every rule tuned on ``validation`` per compute level (``evaluation.rules.tune_rules``; the
    stopped greedy, then the first sampled arm's samples) and scored on ``test``: ``(entries,
    curves)``. ``entries[name]`` is one method per tuned point in the shape of the evaluation's
    (``methods``, ``per_problem``, ``compute``: see ``evaluation.runner``), named ``"<rule> (<= L
    decodes)"`` with ``curve`` the rule's label; ``curves`` is ``tune_rules``'s output. The rules
    that read the verifier (``VERIFIER_RULES``) need ``verifier``, its scores ``[P, A, N]`` of the
    validation and the test table; their entries carry ``"reads_verifier": true``."""
    arm = next(name for name, a in zip(validation.arm_names, validation.actions) if not a.is_greedy)
    plain, reading = [r for r in rules if not reads_verifier(r)], [r for r in rules if reads_verifier(r)]
    groups = [(plain, greedy_then(validation, arm), greedy_then(test, arm))] if plain else []
    if reading:
        if verifier is None:
            raise ValueError(f"the rules {reading} read the verifier: give its scores of both tables")
        groups.append((reading, greedy_then(validation, arm, verifier=verifier[0]),
                       greedy_then(test, arm, verifier=verifier[1])))
    entries, curves = {}, {}
    for group, val_draws, test_draws in groups:
        tuned = tune_rules(val_draws, test_draws, rules=group)
        curves.update(tuned)
        entries.update(_rule_points(tuned, val_draws, test_draws, test, tables))
    return entries, curves


def _rule_points(curves: dict, val_draws, test_draws, test: SampleTable, tables: dict | None) -> dict:
    """:func:`rule_entries`' entries of one group of rules tuned on the same draws."""
    calibrations = fit_calibrations(val_draws)  # what tune_rules scored test with
    entries = {}
    for rule, curve in curves.items():
        for point in curve["points"]:
            result = score_setting(setting_from_dict(point["setting"]), test_draws, calibrations)
            correct = test_draws.correct(result.answers).astype(float)
            decodes, tokens = result.decodes.astype(float), result.tokens.astype(float)
            name = f"{RULE_LABELS[rule]} (<= {point['level']:g} decodes)"
            entries[name] = {
                "method": {"kind": "rule", "role": "fixed rule", "level": "sequence", "family": "fixed rule",
                           "curve": RULE_LABELS[rule], "rule": rule, "setting": _json_setting(point["setting"]),
                           "compute_level": point["level"], "validation": point["validation"],
                           "answer_rule": f"{RULE_LABELS[rule]} over {test_draws.label}",
                           "actions": [a.name for a in test.actions],
                           "stop_at_answer": test.header.get("stop_at_answer"),
                           "seeds": "one sample table (seed 0): one value per problem, the same for every seed",
                           RULE_TABLE_KEY: tables or {},
                           "decodes_per_problem": {"answer": float(decodes.mean())},
                           "tokens_per_problem": {"answer": float(tokens.mean())},
                           **({"reads_verifier": True} if reads_verifier(rule) else {})},
                # [problem][seed]: the table is one draw of the samples (seed 0), so one column
                "per_problem": {"answer_accuracy": [[float(c)] for c in correct]},
                "compute": {"decodes": {"answer": decodes.tolist()}, "tokens": {"answer": tokens.tolist()}},
            }
    return entries


def _json_setting(setting: dict) -> dict:
    """A tuned setting with its non-finite thresholds ('never keep the draft') as strings: strict JSON."""
    return {k: str(v) if isinstance(v, float) and not math.isfinite(v) else v for k, v in setting.items()}


def add_rule_entries(evaluation: Evaluation, entries: dict, family: str = "fixed rule",
                     verifier: bool = False) -> Evaluation:
    """``evaluation`` with the points ``entries`` (:func:`rule_entries`, :func:`attempt_entries`) in
    its eval_details, replacing those of the same ``family`` added from sample tables before that
    read the verifier as ``verifier`` says (the plain rules' and the verifier rules' stages replace
    their own) (results.json keeps the evaluation's own methods: a curve of many points is drawn and
    compared from eval_details, not listed as rows)."""
    details = json.loads(json.dumps(evaluation.details))  # a copy
    added_before = {n for n, m in details.get("methods", {}).items()
                    if RULE_TABLE_KEY in m and m.get("family", "fixed rule") == family
                    and bool(m.get("reads_verifier", False)) == verifier}
    for section, key in (("methods", "method"), ("per_problem", "per_problem"), ("compute", "compute")):
        details[section] = _replace_in_place(details.get(section, {}), added_before,
                                             {n: e[key] for n, e in entries.items()})
    return Evaluation(evaluation.results, details)


def _replace_in_place(old: dict, dropped: set, new: dict) -> dict:
    """``old`` without the names in ``dropped``, each name in ``new`` given its new value where it
    stood, the rest of ``new`` after: a resumed run that adds the same points again writes
    eval_details in the order the first run wrote it (so it is not rewritten)."""
    merged = {}
    for name, value in old.items():
        if name in new:
            merged[name] = new[name]
        elif name not in dropped:
            merged[name] = value
    for name, value in new.items():
        merged.setdefault(name, value)
    return merged


def fixed_rules(lm, task, cfg: StudyConfig, out: Path, evaluation: Evaluation, problems, *,
                progress: bool = False, on_chunk=None) -> Evaluation:
    """The rules stage: the two sample tables in ``out`` (:func:`rule_tables`; ``problems`` must be
    the evaluation's), every rule tuned on validation and scored on the evaluated problems, written
    to ``out/curves.json``; returns ``evaluation`` with every rule's points added."""
    ids = [p.get("id") if isinstance(p, dict) else p for p in evaluation.details.get("problems", [])]
    if ids and ids != [p.id for p in problems]:
        raise ValueError("the rules' evaluation table must hold the evaluated problems, in their order")
    validation, test = rule_tables(lm, task, cfg, out, problems, progress=progress, on_chunk=on_chunk)
    tables = {"validation": str(Path(out) / "validation"), "test": str(Path(out) / "test")}
    entries, curves = rule_entries(validation, test, cfg.rules.rules, tables)
    write_json(Path(out) / "curves.json", {"validation_problems": validation.shape[0], "test_problems": test.shape[0],
                                           "samples": cfg.rules.samples, "arms": validation.arm_names,
                                           "tables": tables, "rules": curves})
    return add_rule_entries(evaluation, entries)


# ---- the learned attempt policy ---------------------------------------------------------------------


def attempt_entries(scored: Sequence, test: SampleTable, tables: dict, sources: Sequence[str],
                    label: str = "Attempt policy") -> dict:
    """One eval_details method per price (``evaluation.attempt.Scored`` of every training seed at that
    price, in seed order), named ``"<label> (price p)"``, of family ``learned``, in the rules'
    entries' shape: ``per_problem[...]["answer_accuracy"]`` is ``[problem][training seed]`` and
    ``compute[...]["decodes"]["answer"]`` the mean over seeds per problem, with each seed's own
    decodes and tokens per problem under ``"by_seed"`` (``[problem][seed]``): a seed's policy spends
    its own compute, so a verdict at a compute level reads each seed's curve (``reporting.rules``)."""
    by_price: dict[float, list] = {}
    for s, source in zip(scored, sources):
        by_price.setdefault(s.price, []).append((s, source))
    entries = {}
    for price, runs in by_price.items():
        correct = np.stack([s.outcome.correct.astype(float) for s, _ in runs], axis=1)  # [problem, seed]
        decodes = np.stack([s.outcome.attempts.astype(float) for s, _ in runs], axis=1)
        tokens = np.stack([s.outcome.tokens.astype(float) for s, _ in runs], axis=1)
        first = runs[0][0]
        name = f"{label} (price {price:g})"
        entries[name] = {
            "method": {"kind": "attempt", "role": "attempt policy", "level": "sequence", "family": "learned",
                       "curve": label, "price": price, "features": list(first.features),
                       "parts": list(first.parts),
                       "per_seed": [{**s.record(), "source": source} for s, source in runs],
                       "seed_agreement": seed_agreement([s.outcome for s, _ in runs]),
                       "validation": {"accuracy": float(np.mean([s.val_accuracy for s, _ in runs])),
                                      "decodes": float(np.mean([s.val_decodes for s, _ in runs]))},
                       "answer_rule": "its learned weighting of its attempts' answers",
                       "actions": [a.name for a in test.actions], "stop_at_answer": test.header.get("stop_at_answer"),
                       "seeds": "one sample table (seed 0); one policy per training seed, one column each",
                       "source": ", ".join(source for _, source in runs), RULE_TABLE_KEY: tables,
                       "decodes_per_problem": {"answer": float(decodes.mean())},
                       "tokens_per_problem": {"answer": float(tokens.mean())}},
            "per_problem": {"answer_accuracy": correct.tolist()},
            "compute": {"decodes": {"answer": decodes.mean(axis=1).tolist(), "by_seed": decodes.tolist()},
                        "tokens": {"answer": tokens.mean(axis=1).tolist(), "by_seed": tokens.tolist()}},
        }
    return entries


def attempt_stage(lm, task, cfg: StudyConfig, out: Path, rules_out: Path, evaluation: Evaluation, problems, *,
                  progress: bool = False, on_chunk=None, verifier_dir: Path | None = None) -> Evaluation:
    """The attempt-policy stage: the fixed rules' two tables (read back from ``rules_out``), a table
    of ``cfg.attempt.train_problems`` training problems in ``out/train`` (:func:`study_table`), one
    policy per price and training seed (the study's ``seeds`` from ``attempt.seed``) trained there
    (resumable, in ``out/price-<p>-seed-<s>``), kept-best on validation and
    scored on the evaluated problems; written to ``out/curve.json``; returns ``evaluation`` with one
    ``learned`` entry per price added. With ``verifier_dir`` (the verifier stage's verifier) the
    strongest rule each policy is set against there is chosen among the verifier rules too.
    With two or more sampled arms, also the same policy restricted to its best single sampled arm
    (``evaluation.decoder_choice``): the ablation in ``curve.json``'s ``ablations`` and one ``"Attempt
    policy, best single arm (price p)"`` entry per price (its ``parts``: verifier, stop; the full
    policy's: verifier, stop, decoder)."""
    ac = cfg.attempt
    validation, test = rule_tables(lm, task, cfg, rules_out, problems, progress=progress, on_chunk=on_chunk)
    train = study_table(lm, task, cfg, Path(out) / "train", "train", task.load("train")[: ac.train_problems],
                        progress=progress, on_chunk=on_chunk)
    if verifier_dir is not None:
        verifier = load_verifier(verifier_dir)[0]
        scores = (table_scores(verifier, validation), table_scores(verifier, test))
        baselines = rule_baselines(validation, test, cfg.rules.rules + cfg.verifier.rules, scores)
    else:
        baselines = rule_baselines(validation, test, cfg.rules.rules)
    config = AttemptTrainConfig(features=tuple(ac.features), steps=ac.steps, val_every=max(1, min(25, ac.steps)))
    scored, sources = [], []
    for price in ac.prices:
        for seed in range(ac.seed, ac.seed + cfg.seeds):  # one policy per training seed, as every adapter
            where = Path(out) / f"price-{price:g}-seed-{seed}"
            resume = (where / "train_log.jsonl").is_file()  # a killed (or finished) run continues from its checkpoint
            scored.append(train_and_score(train, validation, test, replace(config, price=price, seed=seed),
                                          baselines, where, resume=resume, task=task.name))
            sources.append(str(where))
    tables = {"train": str(Path(out) / "train"), "validation": str(Path(rules_out) / "validation"),
              "test": str(Path(rules_out) / "test")}
    entries = attempt_entries(scored, test, tables, sources)
    ablations = []
    if sum(not a.is_greedy for a in train.actions) >= 2:  # the value of choosing the decoder: the best single arm
        runs = single_arm_runs(train, validation, test, config, scored, baselines)
        ablations.append(decoder_ablation(train, validation, test, config, scored, baselines, runs))
        best = [s for run in runs.values() for s in run.by_arm[run.best]]  # seed by seed, as ``scored``
        entries.update(attempt_entries(best, test, tables, ["" for _ in best], "Attempt policy, best single arm"))
    write_json(Path(out) / "curve.json", {"train_problems": train.shape[0], "tables": tables,
                                          "policies": [s.record() for s in scored], "ablations": ablations})
    return add_rule_entries(evaluation, entries, family="learned")


# ---- the learned verifier and the rules that read it ----------------------------------------------------


def problem_families(problems) -> list[str]:
    """Each problem's family (``meta["family"]``; "" where the task has none)."""
    return [str((getattr(p, "meta", None) or {}).get("family", "")) for p in problems]


def verifier_stage(lm, task, cfg: StudyConfig, out: Path, rules_out: Path, evaluation: Evaluation, problems, *,
                   train_table: Path | None = None, progress: bool = False, on_chunk=None) -> Evaluation:
    """The verifier stage: the fixed rules' two tables (read back from ``rules_out``), a table of
    ``cfg.verifier.train_problems`` training problems in ``train_table`` (default ``out/train``;
    :func:`study_table`), a verifier trained there into ``out/verifier`` (read back when there), its
    ranking quality per family (cross-fitted on the training table; on validation and on the
    evaluated problems) and every verifier rule tuned on validation and scored on the evaluated
    problems, written to ``out/verifier_rules.json``; returns ``evaluation`` with their points added
    (family ``fixed rule``, ``"reads_verifier": true``)."""
    vc = cfg.verifier
    validation, test = rule_tables(lm, task, cfg, rules_out, problems, progress=progress, on_chunk=on_chunk)
    train_path = Path(train_table or Path(out) / "train")
    train_problems = task.load("train")[: vc.train_problems]
    train = study_table(lm, task, cfg, train_path, "train", train_problems, progress=progress, on_chunk=on_chunk)
    where = Path(out) / "verifier"
    config = VerifierTrainConfig()
    verifier = load_verifier(where)[0] if (where / "verifier.json").is_file() else fit_on_table(train, config, where)
    scores = (table_scores(verifier, validation), table_scores(verifier, test))
    validation_problems = task.load("validation")[: cfg.rules.problems]
    quality = {"train (cross-fitted)": ranking_quality(crossfit_table_scores(train, config), train,
                                                       problem_families(train_problems)),
               "validation": ranking_quality(scores[0], validation, problem_families(validation_problems)),
               "evaluated": ranking_quality(scores[1], test, problem_families(problems))}
    tables = {"train": str(train_path), "validation": str(Path(rules_out) / "validation"),
              "test": str(Path(rules_out) / "test"), "verifier": str(where)}
    entries, curves = rule_entries(validation, test, vc.rules, tables, verifier=scores)
    write_json(Path(out) / "verifier_rules.json", {"tables": tables, "quality": quality, "rules": curves})
    return add_rule_entries(evaluation, entries, verifier=True)
