"""The demo and the reproduce study: a script over the pipeline's stages (``experiments.pipeline``).

Stages (each resumable: run the same command again after a kill and finished work is reused):

0. ``budget/`` (when ``budget.candidates`` is set): greedy on validation problems at each
   candidate token budget; the smallest budget whose truncated fraction is <= ``max_truncated``
   becomes the token budget of every later stage (chosen on validation, never test).
1. ``actions/``: evaluate a pool of candidate actions on validation problems and pick K by greedy
   coverage; the same table gives the best single *token* action.
2. ``seq-*/``: sequence adapters w/ and w/o budget, trained by **offline replay** of the stage-1
   outcome table (``sequence_rewards="replay"``: B <= samples stored) or with **live rollouts**
   (``sequence_rewards="live"``: B completions decoded per bandit round).
3. ``tok-*/``: token adapters w/ budget, w/o budget and entropy-only, trained with live rollouts
   on filtered training prompts, with early stopping on validation reward when
   ``token.patience`` > 0.
4. ``eval/``: Greedy, Best, Mixed, the token-level baselines and every adapter on the test split,
   same problems and seeds.
4b. ``rules/`` (when ``rules.enabled``): sample tables of validation problems and of the evaluated
   problems (the stopped greedy and N samples per sampled arm), every fixed rule tuned on validation
   per compute level and scored on the evaluated problems; its points join ``eval/eval_details.json``.
5. ``report/``: report.md (with the truncation, training-curve, target and cost sections),
   results.json, figures.

``SIZES`` are the ``demo`` command's (``tiny`` for tests; ``default`` takes about 13 minutes on the
2-core reference machine: a budget stage over 32-96 tokens, then everything at the chosen budget,
64; on a slower CPU ``fit_to_minutes`` cuts its sizes to keep within ``minutes``);
``REPRODUCE_SIZES`` are the ``reproduce`` command's (``full``: the study behind the README's
headline table, ``complete``: uncut, ``smoke``: every stage on a tiny model).
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch

from ..core.files import write_json
from ..decoding.actions import PRESETS, ActionSet, DecodingAction, load_action_set
from ..decoding.rollouts import HFRollouts, RolloutRequest, encode_problems
from ..evaluation import (
    EvalConfig,
    Method,
    best_token_action_method,
    format_table,
    greedy_method,
    greedy_to_budget_method,
    mixed_method,
    sequence_mixture_of_token_actions,
    token_mixed_method,
)
from ..lm.models import DEFAULT_DEVICE, ModelSpec, load_frozen_lm
from ..reporting.report import (
    compare,
    evidence_lines,
    headroom_section,
    nothing_solved,
    per_seed_differences,
    seed_clause,
    selection_section,
    strongest_static,
    training_curve_section,
    truncation_section,
    write_report,
)
from ..reporting.rules import rules_section
from ..selection.best import best_static_from_table
from ..tasks import get_task
from ..training.sequence import SequenceTrainConfig
from ..training.token import PROBE_ROUND_FACTOR, TokenTrainConfig
from . import pipeline
from .pipeline import AttemptStageConfig, BudgetConfig, RulesConfig, SelectionConfig, StudyConfig, VerifierStageConfig

__all__ = ["SIZES", "REPRODUCE_SIZES", "run_demo", "estimate_minutes", "probe_tokens_per_second", "decode_probe",
           "fit_to_minutes", "scaled_sizes", "fit_note", "target_lines"]


DEFAULT = StudyConfig(
    token_budget=64,  # replaced by the budget stage's choice; 64 is what it chooses for the default model and task
    # 20% truncation keeps the demo within 15 minutes on 2 cores: on the default task 64 tokens stop
    # 16% of greedy rows on validation (49% at 32, 6% at 96); the budget stage's greedy accuracy
    # column shows whether those rows had already given their answer.
    budget=BudgetConfig(candidates=(32, 48, 64, 96), problems=100, max_truncated=0.20),
    selection=SelectionConfig(pool_subsample=8, problems=32, samples=4, k=4),
    sequence_rewards="replay",
    sequence=SequenceTrainConfig(parallel_budgets=(1, 2, 4), steps=200, prompts_per_step=16, max_train_prompts=256,
                                 val_every=20, val_problems=64, checkpoint_every=50),
    # 12 token steps keep the demo within 15 minutes on 2 cores at the 64-token budget: 16 took 15.2.
    # The learning rate is the trainer's default (docs/token-defaults.md); the best static token
    # action is the policy's prior (run_demo passes it).
    # The demo is a demonstration, not evidence: its filter probes 48 prompts, its validation 16.
    token=TokenTrainConfig(steps=12, prompts_per_step=8, group_size=4, max_train_prompts=48, min_train_prompts=24,
                           filter_samples=4, val_every=4, val_problems=16, checkpoint_every=1, patience=2),
    eval=EvalConfig(k_values=(1, 2, 4)),
    eval_problems=32,
    seeds=3,
    batch_rows=128,
    # the draft-gated adapter with 1 re-decode per table problem: with 2 the demo no longer fits 15
    # minutes on the reference machine (15.3 planned), with 4 the draft stage took a quarter of them
    draft_stage=True,
    draft_samples=1,
    # The fixed rules at demo sizes (64 validation problems x 4 samples) plan 0.65 more minutes, and
    # the demo already plans 14.9 of its 15 on the reference machine: off unless asked for
    # (--rules.enabled); reproduce runs them at full size.
    rules=RulesConfig(enabled=False, samples=4, problems=64),
)

TINY = StudyConfig(
    token_budget=4,
    budget=BudgetConfig(candidates=()),
    selection=SelectionConfig(pool_subsample=3, problems=4, samples=2, k=2),
    sequence_rewards="replay",
    sequence=SequenceTrainConfig(parallel_budgets=(1, 2), steps=3, prompts_per_step=2, max_train_prompts=256,
                                 val_every=1, val_problems=64, checkpoint_every=1),
    token=TokenTrainConfig(steps=2, prompts_per_step=2, group_size=2, max_train_prompts=4, filter_samples=0,
                           val_every=2, val_problems=4, checkpoint_every=1, patience=0),
    eval=EvalConfig(k_values=(1, 2)),
    eval_problems=3,
    seeds=2,
    batch_rows=16,
    rules=RulesConfig(enabled=True, samples=2, problems=4),
    verifier=VerifierStageConfig(enabled=True, train_problems=4),
    draft_stage=True,  # every stage runs, the draft-gated one too: tiny checks the pipeline
    draft_samples=1,
)
TINY_NOTE = ("--size tiny checks that every stage runs end to end, at toy sizes and a {budget}-token budget that is "
             "too short for the model to state an answer, so nothing is solved: that is expected here and is not a "
             "result. The default size (`demo`) picks a budget at which the model answers.")
"""What a tiny run prints where nothing was solved, instead of leaving the user to debug the task."""

FULL = StudyConfig(
    # The study cut to fit 120 minutes on the 2-core CPU (cli/reproduce.py: the plan, what was cut; COMPLETE: uncut).
    token_budget=32,  # replaced by the budget stage's choice; 32 is the expected one (plan, --plan)
    # chosen on 400 validation problems like every other choice (with the stop at the first answer, 32
    # stops 14.5% of greedy rows there, 48 10%, 96 2.5%)
    budget=BudgetConfig(candidates=(32, 48, 64, 96), problems=400, max_truncated=0.35),
    # 64 problems x 4 samples lets coverage tell candidates apart past K = 3 (8 x 1 saturated
    # there); 16 pool actions plus greedy keep it at about 8 minutes.
    selection=SelectionConfig(pool_subsample=16, problems=64, samples=4, k=6),
    sequence_rewards="live",
    # Sequence validation scores each of 400 problems at every B; a later step is kept only when its
    # paired gain over step 0 is above 1.96 standard errors at every B where its choices change. 48
    # problems are too few: a policy collapsed onto T=0.5 top-k 10 at every B drew 12.5 points above
    # greedy at B = 1 on them (+/- 7.1), 0.5 below it on 400 (+/- 2.7), 7.5 below it on test.
    # The rows are decoded once per (problem, action) and reused by later validations (and the
    # draft stage's validation table takes the same 400). Cost on the reference machine's plan:
    # sequence 9.1 -> 43.8 minutes, draft 1.9 -> 3.7 (with the budget's, +36.7 minutes).
    # B up to 4, the largest the evaluation scores (its pass@8 was cut to fit the time).
    sequence=SequenceTrainConfig(parallel_budgets=(1, 2, 4), steps=24, prompts_per_step=8, max_train_prompts=256,
                                 val_every=8, val_problems=400, checkpoint_every=1),
    # Token training at the trainer's validated defaults (lr, PPO epochs, prior at the best static token
    # action: docs/token-defaults.md), every run to its 32-step cap with groups of 8. The prompt filter
    # judges with that prior (2 samples) until 256 prompts survive: 32 x 8 epoch-wise slots show each run all 256.
    # Validation: the argmax policy on 400 problems x 1 sample, the same rows and seeds at every
    # validation (step 0 included), a later step kept only when its paired gain's 95% interval is
    # above 0; at step 0 and every 16 steps. Argmax only, to fit the time: it won validation on every
    # seed of the planted task; at step 0 it is greedy, which sampling the prior scores below.
    token=TokenTrainConfig(steps=32, prompts_per_step=8, group_size=8, max_train_prompts=None, min_train_prompts=256,
                           filter_samples=2, val_every=16, val_problems=400, val_samples=1, val_modes=("argmax",),
                           checkpoint_every=1, patience=0),
    # The sealed split's first 1,000 problems (the published evidence run reads it, nothing else); pass@8
    # was cut (it doubled the evaluation's rows), and token training to 32 steps, to fit the time.
    eval=EvalConfig(k_values=(1, 2, 4)),
    eval_problems=1000,
    eval_split="sealed",
    seeds=3,
    batch_rows=128,
    draft_stage=True,
    train_size=1500,  # the splits sized for the token trainer (test and sealed unchanged by it)
    validation_size=400,
    # rules tuned on 400 validation problems (stopped greedy, then 8 x T=0.5); the tables keep the hidden
    # states the attempt policy reads (docs/attempt.md); its prices trace ~1.1 to ~4.5 decodes per problem
    rules=RulesConfig(enabled=True, samples=8, problems=400, hidden=True),
    verifier=VerifierStageConfig(enabled=True),  # on the attempt stage's training table: seconds
    attempt=AttemptStageConfig(enabled=True, features=("confidence", "hidden"),
                               prices=(0.3, 0.2, 0.15, 0.1, 0.05, 0.03, 0.01, 0.003)),
)

COMPLETE = replace(
    FULL,
    # The study uncut: greedy (almost) never truncated, pass@8 (B up to 8), selection on 32 x 4,
    # longer training validated in both policy modes on 400 x 2. About 10 hours on the 2-core CPU by
    # the plan: for a bigger machine.
    token_budget=128,
    budget=BudgetConfig(candidates=(48, 64, 96, 128, 192), problems=400, max_truncated=0.02),
    # Best and the adapters' start actions on 400 validation problems as every other choice (finalists of 32 x 4)
    selection=SelectionConfig(pool_subsample=None, problems=32, samples=4, k=6, best_problems=400),
    sequence=replace(FULL.sequence, parallel_budgets=(1, 2, 4, 8), steps=60, prompts_per_step=16, val_every=20,
                     val_problems=400),
    token=replace(FULL.token, steps=60, prompts_per_step=8, group_size=8, filter_samples=4, val_every=10,
                  val_samples=2, val_modes=("sample", "argmax"), patience=3),
    eval=EvalConfig(k_values=(1, 2, 4, 8)),
)

SMOKE = replace(
    # Every stage of the full study (budget choice, whole pool, live sequence rollouts, early
    # stopping, every baseline) on a tiny model in well under a minute: the CLI test's size.
    TINY,
    budget=BudgetConfig(candidates=(2, 4), problems=4, max_truncated=1.0),
    selection=SelectionConfig(pool_subsample=None, problems=2, samples=1, k=2),
    sequence_rewards="live",
    sequence=replace(TINY.sequence, parallel_budgets=(1, 2), steps=2, max_train_prompts=4, val_every=1,
                     val_problems=2),
    token=replace(TINY.token, steps=4, val_every=1, patience=1),
    draft_stage=True,
)

SIZES: dict[str, StudyConfig] = {"tiny": TINY, "default": DEFAULT}
"""The ``demo`` command's sizes."""

REPRODUCE_SIZES: dict[str, StudyConfig] = {"full": FULL, "complete": COMPLETE, "smoke": SMOKE}
"""The ``reproduce`` command's sizes."""

TOKEN_VARIANTS = {  # directory suffix -> (use_budget, features)
    "budget": (True, "hidden"),
    "nobudget": (False, "hidden"),
    "entropy": (True, "entropy"),
}

ADAPTER_NAMES = {  # directory prefix -> method name in the evaluation
    "seq-budget": "Seq w/ budget",
    "seq-nobudget": "Seq w/o budget",
    "tok-budget": "Token w/ budget",
    "tok-nobudget": "Token w/o budget",
    "tok-entropy": "Token entropy-only",
}

DRAFT_TRAINING = dict(steps=400, lr=1e-3, prompts_per_step=32, val_every=10, checkpoint_every=10, policy_hidden=256)
"""The draft stage's trainer settings, where they differ from the sequence adapters': the setting
chosen on validation in docs/draft-gated.md (its tables cost no decoding per step, so many steps
are cheap; 1e-3 kept more configurations above step 0 than 3e-3 there)."""

# ---- the time estimate ---------------------------------------------------------------------------

DECODE_TOKENS_PER_SECOND = 220.0
"""Decoded tokens per second of the default model on the 2-core CPU with batches of ~128 short
arithmetic rows. Measured on a shared machine, so from CPU time with one thread
(130-152 tokens per CPU-second for 128 sampled rows at budget 48; 84 for 100 greedy rows whose
batch shrinks as they finish) and scaled by 1.5 for the second core; see cli/reproduce.py.
Token-adapter rollouts, which record hidden states and run the policy at every step, are charged
TOKEN_ROLLOUT_OVERHEAD more (the decode benchmark's adapter/fixed ratio with recording on top)."""
TOKEN_ROLLOUT_OVERHEAD = 1.15
POOL_ROW_OVERHEAD = 1.5
"""Pool rows mix top-k / top-p / min-p actions (a sort of the vocabulary per row and step): 96
tokens per CPU-second for 128 rows of the 180 pool against ~150 for temperature-only rows."""
MEAN_SAMPLED_LENGTH = 0.75
"""Mean generated length of a sampled row as a fraction of the token budget (measured at budget 48
on validation: T=0.5 0.57, T=1.0 0.74, T=1.25 0.89; greedy 0.56 at budget 64)."""
STAGE_SCALE = {"budget": 0.28, "select": 0.37, "sequence": 0.43, "token": 0.26, "evaluate": 0.28, "draft": 0.37,
               "rules": 0.37, "attempt": 0.37, "verifier": 0.37}
"""Measured over planned minutes of each decoding stage (the model above at the constants above),
fitted on the reference machine (probe 440 tok/s), ``reproduce`` at budget 48 idle: budget 0.12 of
0.40, selection 5.2 of 17.8, sequence 15.1 of 35.2, token 34.1 of 133.4, evaluation 30.7 of 111.2
minutes; for the selection, with the demo at budget 64 (1.9 of 6.3: the geometric mean of the two
ratios). Rows end earlier than MEAN_SAMPLED_LENGTH and methods share decoded rows (greedy and
greedy-only adapters once), so every stage runs faster than the row model; near-greedy token
rollouts end earliest (0.56 of the budget). On a slower machine the probe scales every stage alike
(docs/reproduce/stage_minutes.json: a run at probe 0.59 of the reference). The rules, verifier and
attempt stages decode tables as the draft stage does, so they take its scale until a run measures theirs."""
SECONDS_PER_CALL = 1.0  # fixed cost of one small decode call (prefill, Python, scoring): tiny steps pay it


def _decode_minutes(rows: float, cfg: StudyConfig, overhead: float = 1.0, calls: float = 0.0) -> float:
    tokens = rows * cfg.token_budget * MEAN_SAMPLED_LENGTH
    return (tokens * overhead / DECODE_TOKENS_PER_SECOND + calls * SECONDS_PER_CALL) / 60


def _small_batch_cost(rows_per_call: int, reference_rows: int) -> float:
    """Cost per row of decoding in calls of ``rows_per_call`` rows, relative to the ``reference_rows``
    the token stage's scale was fitted at (``reproduce``: 64-row steps, 96-row validations): a smaller
    batch runs the same matmuls at a lower rate. The square root is fitted on the demo's token stage
    (32-row calls), which ran 1.35-1.48 x what the reference rate planned (10.0 and 11.1 minutes at a
    probe 0.67 x the reference)."""
    return math.sqrt(max(reference_rows / rows_per_call, 1.0))


PROBE_ROWS, PROBE_TOKENS = 32, 16
"""The throughput probe: this many sampled (T = 1) rows of validation prompts, this many tokens."""
REFERENCE_PROBE_TOKENS_PER_SECOND = 440.0
"""What :func:`probe_tokens_per_second` measured on the machine the constants above were fitted on
(the project's 2-core AMD EPYC with AVX512-BF16, bf16, idle: 402 / 447 / 440 / 441 / 542 in five
probes, median 440)."""


def probe_tokens_per_second(lm, task) -> float:
    """Decoded tokens per second of ``lm`` on this machine: ``PROBE_ROWS`` rows at T = 1 for
    ``PROBE_TOKENS`` tokens, after a small warm-up (first calls allocate caches and pick kernels).
    A few seconds; divided by ``REFERENCE_PROBE_TOKENS_PER_SECOND`` it scales the plan to the CPU
    it runs on (an AVX2-only CPU runs fp32, several times slower than the reference)."""
    problems = task.load("validation")[: PROBE_ROWS // 2]
    prompts, _ = encode_problems(lm, task, problems)
    rollouts = HFRollouts(lm, ActionSet([DecodingAction(temperature=1.0)]), batch_rows=PROBE_ROWS)

    def request(rows: int, tokens: int) -> RolloutRequest:
        return RolloutRequest(prompts=prompts, prompt_of_row=[r % len(prompts) for r in range(rows)],
                              row_seeds=list(range(rows)), token_budget=tokens, row_actions=[0] * rows)

    rollouts.run(request(4, 4))  # the first call allocates caches and picks kernels
    start = time.perf_counter()
    warm = rollouts.run(request(4, 4))
    warm_rate = float(warm.lengths.sum()) / max(time.perf_counter() - start, 1e-6)
    rows, tokens = PROBE_ROWS, PROBE_TOKENS
    if rows * tokens / max(warm_rate, 1e-6) > PROBE_MAX_S / 2:  # a machine so busy that the probe would take
        rows, tokens = 8, 8  # minutes: a smaller one (a lower bound; the one-thread probe gives the capacity)
    start = time.perf_counter()
    result = rollouts.run(request(rows, tokens))
    return float(result.lengths.sum()) / max(time.perf_counter() - start, 1e-6)


PROBE_REPEATS = 3
"""Probes per measurement (each of the many-thread and the one-thread kind), spread over a few
seconds; the plan reads their median, so one probe caught in another process's burst moves nothing."""
PROBE_SPREAD_S = 2.0  # seconds of pause spread between the probes (a short burst of other work passes)
PROBE_MAX_S = 20.0  # probing stops repeating past this (after one probe of each kind): a busy machine waits less
REFERENCE_SINGLE_THREAD_TOKENS_PER_SECOND = 260.0
"""What one probe thread (``torch.set_num_threads(1)``) measured on the reference machine; with
:data:`REFERENCE_PROBE_TOKENS_PER_SECOND` it says how much a second thread adds there (1.7 x)."""


@dataclass(frozen=True)
class DecodeProbe:
    """What the decode probe saw: the speed now, the machine's own speed with the load taken out
    (what the sizes are fitted to: a busy minute does not halve the demo), and the load."""

    tokens_per_second: float
    """Median of the many-thread probes: what this machine decodes now, under its present load."""
    capacity: float = 0.0
    """What it would decode unloaded: the larger of the median and the one-thread median scaled by
    the reference machine's gain from more threads (one thread is slowed little by one other busy
    process on two cores; many threads stall on the slowest); 0 = ``tokens_per_second``."""
    samples: tuple[float, ...] = ()
    """Every many-thread probe, tok/s."""
    single_thread: tuple[float, ...] = ()
    """Every one-thread probe, tok/s (none on a GPU or with one thread)."""
    load: float | None = None
    """The 1-minute load average while probing (the larger of before and after); None: unknown."""
    cpus: int = field(default_factory=lambda: os.cpu_count() or 1)
    """CPUs of this machine."""

    def __post_init__(self) -> None:
        if not self.capacity:
            object.__setattr__(self, "capacity", self.tokens_per_second)

    @property
    def busy(self) -> bool:
        """Whether the probe ran beside other work: a load of a CPU or more (the probe itself adds
        a little), or a speed now under 0.8 of the capacity."""
        return (self.load is not None and self.load >= 1.0) or self.tokens_per_second < 0.8 * self.capacity

    def describe(self) -> str:
        spread = f" (median of {', '.join(f'{s:.0f}' for s in self.samples)})" if len(self.samples) > 1 else ""
        load = "" if self.load is None else f"; load {self.load:.1f} on {self.cpus} CPUs"
        unloaded = (f"; {self.capacity:.0f} tok/s unloaded (one-thread probe x the reference's thread gain)"
                    if self.capacity > self.tokens_per_second * 1.05 else "")
        return (f"decode probe {self.tokens_per_second:.0f} tok/s{spread}{unloaded}{load}; "
                f"{self.capacity / REFERENCE_PROBE_TOKENS_PER_SECOND:.2f} x the reference machine")

    def record(self) -> dict:
        return {"tokens_per_second": self.tokens_per_second, "capacity": self.capacity, "samples": list(self.samples),
                "single_thread": list(self.single_thread), "load": self.load, "cpus": self.cpus,
                "reference": REFERENCE_PROBE_TOKENS_PER_SECOND}

    @classmethod
    def from_record(cls, record: dict) -> "DecodeProbe":
        """Read back (a record that holds only ``tokens_per_second`` is a probe without load)."""
        return cls(float(record["tokens_per_second"]), float(record.get("capacity") or 0.0),
                   tuple(record.get("samples", ())), tuple(record.get("single_thread", ())), record.get("load"),
                   int(record.get("cpus") or os.cpu_count() or 1))


def _load() -> float | None:
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):  # not on every platform
        return None


def measure_probe(lm, task, repeats: int = PROBE_REPEATS, spread_s: float = PROBE_SPREAD_S) -> DecodeProbe:
    """``repeats`` many-thread probes (:func:`probe_tokens_per_second`) and as many one-thread ones,
    alternating, with ``spread_s`` seconds of pause spread between them (fewer past
    :data:`PROBE_MAX_S`), and the load average."""
    before = _load()
    threads = torch.get_num_threads()
    one_thread = threads > 1 and str(getattr(lm, "device", "cpu")).startswith("cpu")
    multi, single = [], []
    started = time.perf_counter()
    for i in range(repeats):
        if i and time.perf_counter() - started > PROBE_MAX_S:
            break
        multi.append(probe_tokens_per_second(lm, task))
        if one_thread:
            torch.set_num_threads(1)
            try:
                single.append(probe_tokens_per_second(lm, task))
            finally:
                torch.set_num_threads(threads)
        if i < repeats - 1:
            time.sleep(spread_s / max(repeats - 1, 1))
    after = _load()
    now = statistics.median(multi)
    gain = REFERENCE_PROBE_TOKENS_PER_SECOND / REFERENCE_SINGLE_THREAD_TOKENS_PER_SECOND
    capacity = max(now, statistics.median(single) * gain) if single else now
    loads = [x for x in (before, after) if x is not None]
    return DecodeProbe(now, capacity, tuple(multi), tuple(single), max(loads) if loads else None)


def decode_probe(lm, cfg: StudyConfig) -> DecodeProbe:
    """The decode probe of a study: :func:`measure_probe` on the study's own task. ``--plan`` and the
    run itself both measure through this one call, so they time the same request."""
    return measure_probe(lm, get_task("arithmetic", **pipeline.study_task_options(cfg)))


def _probe_once(lm, cfg: StudyConfig, path: Path) -> DecodeProbe:
    """The decode probe, measured on a run's first start and read back on every resume, so that a
    resumed run plans, and fits its sizes, as it started."""
    if path.is_file():
        return DecodeProbe.from_record(json.loads(path.read_text()))
    probe = decode_probe(lm, cfg)
    write_json(path, probe.record())
    return probe


def plan_range(cfg: StudyConfig, probe: DecodeProbe) -> tuple[float, float]:
    """Total planned minutes at the machine's capacity and at the speed the probe saw now."""
    return (sum(estimate_minutes(cfg, probe.capacity).values()),
            sum(estimate_minutes(cfg, probe.tokens_per_second).values()))


def plan_advice(cfg: StudyConfig, fitted: StudyConfig, minutes: float | None, probe: DecodeProbe) -> str:
    """What to do when the plan cannot meet ``minutes`` ('' when it can): the load to wait out, or the
    minutes the smallest sizes need here, or a smaller preset."""
    low, high = plan_range(fitted, probe)
    notes = []
    if minutes and low > minutes:
        notes.append(f"even the smallest sizes the fit allows take about {low:.0f} min on this machine, over "
                     f"--minutes {minutes:g}: give --minutes {math.ceil(low)} (or more), try --size tiny to check "
                     "the pipeline only, or use a faster machine (a GPU, or a CPU with AVX512-BF16 runs bf16)")
    if probe.busy and high > max(low * 1.1, low + 0.5):
        notes.append(f"the machine is busy now (load {probe.load if probe.load is not None else 0:.1f} on "
                     f"{probe.cpus} CPUs): at the speed the probe saw, the run would take up to {high:.0f} min; it "
                     "re-plans from the stages it has finished and cuts the later stages' sizes to keep within "
                     "--minutes, or run it when the other work has ended")
    return "; ".join(notes)


def estimate_minutes(cfg: StudyConfig, tokens_per_second: float | None = None) -> dict[str, float]:
    """Planned minutes of every stage (used for the progress line's time left; ``demo --plan`` and
    ``reproduce --plan`` print it). A model of decoded rows x mean length / throughput, fitted on
    the reference machine; ``tokens_per_second`` (:func:`probe_tokens_per_second` on this machine)
    scales the decoding stages by how much slower or faster this machine is."""
    pool = _pool_size(cfg)
    seq, tok = cfg.sequence, cfg.token
    mean_b = sum(seq.parallel_budgets) / len(seq.parallel_budgets)
    seq_runs = 2 * cfg.seeds
    if cfg.sequence_rewards == "live":
        # validation: every problem at every B, the first one in full (B rows per problem and B
        # at most), later ones only the (problem, action) pairs the policy moved to
        val_calls = seq.steps // seq.val_every + 1
        val_rows = seq.val_problems * (sum(seq.parallel_budgets) + (val_calls - 1) * mean_b)
        seq_rows = seq_runs * (seq.steps * seq.prompts_per_step * mean_b + val_rows)
        sequence = _decode_minutes(seq_rows, cfg, calls=seq_runs * (seq.steps + val_calls))
    else:
        sequence = seq_runs * seq.steps * 0.02 / 60  # offline replay: no decoding, ~10 ms a step
    tok_runs = len(TOKEN_VARIANTS) * cfg.seeds
    steps = tok.steps
    if tok.patience:  # early stopping: no token run on the default task has beaten its step-0 validation,
        steps = min(steps, tok.patience * tok.val_every)  # so every one stopped at the first chance
    vals = steps // tok.val_every + 1  # step 0 is validated too
    step_rows, val_call_rows = tok.prompts_per_step * tok.group_size, tok.val_problems * tok.val_samples
    val_rows = vals * val_call_rows * len(tok.val_modes)
    tok_rows = tok_runs * (steps * step_rows * _small_batch_cost(step_rows, 64)
                           + val_rows * _small_batch_cost(val_call_rows, 96))
    token = _decode_minutes(tok_rows, cfg, TOKEN_ROLLOUT_OVERHEAD, calls=tok_runs * (steps + vals))
    if tok.filter_samples:  # the start policy's probe: about PROBE_ROUND_FACTOR prompts per prompt wanted
        # (it keeps about a third of the prompts on the default task)
        wanted = min(tok.min_train_prompts, tok.steps * tok.prompts_per_step)
        probed = min(PROBE_ROUND_FACTOR * wanted, tok.max_train_prompts or PROBE_ROUND_FACTOR * wanted)
        token += _decode_minutes(probed * tok.filter_samples, cfg)
    n = max(cfg.eval.k_values) * cfg.eval_problems * cfg.seeds
    # static rows: Best, Mixed (K actions), token Mixed, best token action, the sequence adapters'
    # picks (shared with those where the action is the same: ~2 more actions' worth)
    # (+ one greedy row per problem, and one stopped at its first answer)
    static_rows = n * 5 + 2 * cfg.eval_problems
    evaluation = _decode_minutes(static_rows, cfg) + _decode_minutes(n * 3, cfg, TOKEN_ROLLOUT_OVERHEAD)
    budget = 0.0
    if cfg.budget.candidates:  # greedy rows once at the largest candidate (about half of it is used)
        budget = cfg.budget.problems * max(cfg.budget.candidates) * 0.5 / DECODE_TOKENS_PER_SECOND / 60
    slower = 1.0 if tokens_per_second is None else REFERENCE_PROBE_TOKENS_PER_SECOND / tokens_per_second
    decoding = {
        "budget": budget,
        # the pool's samples, then greedy stopped at its first answer once per problem (a Best candidate)
        "select": _decode_minutes(pool * cfg.selection.problems * cfg.selection.samples, cfg, POOL_ROW_OVERHEAD)
        + _decode_minutes(cfg.selection.problems, cfg)  # and Best's finalists on more problems:
        + _decode_minutes(cfg.selection.finalist_rows(pool, len(cfg.eval.k_values)), cfg, POOL_ROW_OVERHEAD),
        "sequence": sequence,
        "token": token,
        "evaluate": evaluation,
    }
    if cfg.draft_stage:  # both-arms tables: a draft and draft_samples re-decodes per training and validation problem
        table_rows = ((seq.max_train_prompts or 256) + seq.val_problems) * (1 + cfg.draft_samples)
        decoding["draft"] = _decode_minutes(table_rows, cfg) + cfg.seeds * DRAFT_TRAINING["steps"] * 0.05 / 60
        decoding["evaluate"] += _decode_minutes(cfg.eval_problems, cfg)  # the draft pass
    if cfg.rules.enabled:  # the two sample tables: the stopped greedy and N samples per sampled arm and problem
        per_problem = 1 + len(cfg.rules.temperatures) * cfg.rules.samples  # the tuning itself takes seconds
        decoding["rules"] = _decode_minutes((cfg.rules.problems + cfg.eval_problems) * per_problem, cfg)
        if cfg.attempt.enabled or cfg.verifier.enabled:  # their training table, decoded by the first (as the rules')
            first = "verifier" if cfg.verifier.enabled else "attempt"  # fitting is seconds
            decoding[first] = _decode_minutes(getattr(cfg, first).train_problems * per_problem, cfg)
    scaled = {stage: minutes * STAGE_SCALE[stage] * slower for stage, minutes in decoding.items()}
    return {"load": 0.1, **scaled, "report": 0.1}


FIT_LADDER = (
    (1.0, 1.0, 1.0, 1.0), (0.75, 1.0, 1.0, 1.0), (0.5, 1.0, 1.0, 1.0), (0.33, 1.0, 1.0, 1.0),
    (0.33, 1.0, 0.67, 1.0), (0.33, 1.0, 0.34, 1.0), (0.33, 1.0, 0.34, 0.5), (0.25, 1.0, 0.34, 0.5),
    (0.25, 0.75, 0.34, 0.5), (0.25, 0.5, 0.34, 0.5), (0.25, 0.33, 0.34, 0.5), (0.25, 0.25, 0.34, 0.5),
)
"""The (token-training steps, problems, seeds, selection samples) factors ``fit_to_minutes`` tries,
in order: training steps, then seeds, then selection samples are cut before any problem, since the
evaluation's and the selection's problems decide how wide every interval in the table is (at 8
problems the intervals are about ±45 points and nothing can be told apart)."""


def scaled_sizes(cfg: StudyConfig, steps_scale: float, problems_scale: float, seeds_scale: float = 1.0,
                 samples_scale: float = 1.0) -> StudyConfig:
    """``cfg`` with the sizes that trade evidence for time multiplied (never raised): token-training
    steps by ``steps_scale`` (rounded down to whole validation intervals, at least one), evaluation
    and selection problems by ``problems_scale`` (rounded down to multiples of 8, at least 8), seeds
    by ``seeds_scale`` (rounded, at least 1) and the selection's samples per problem by
    ``samples_scale`` (at least 2, and at least the largest B offline replay serves). Everything
    else, the token budget and every rate included, stays."""
    tok, sel = cfg.token, cfg.selection
    steps = min(tok.steps, max(tok.val_every, int(tok.steps * steps_scale) // tok.val_every * tok.val_every))

    def problems(n: int) -> int:
        return min(n, max(8, int(n * problems_scale) // 8 * 8))

    seeds = min(cfg.seeds, max(1, round(cfg.seeds * seeds_scale)))
    # offline replay serves budgets B up to the selection's samples
    replayed = max(cfg.sequence.parallel_budgets) if cfg.sequence_rewards == "replay" else 2
    samples = min(sel.samples, max(2, replayed, int(sel.samples * samples_scale)))
    fitted = replace(cfg, token=replace(tok, steps=steps), eval_problems=problems(cfg.eval_problems), seeds=seeds,
                     selection=replace(sel, problems=problems(sel.problems), samples=samples))
    return cfg if fitted == cfg else fitted


def fit_to_minutes(cfg: StudyConfig, tokens_per_second: float | None,
                   minutes: float) -> tuple[StudyConfig, tuple[float, ...]]:
    """The first of ``FIT_LADDER`` whose ``scaled_sizes`` plan (``estimate_minutes`` at this machine's
    probe) takes at most ``minutes``, and that config; the last rung when none does. Trades how much
    the demo shows for time on slower CPUs (e.g. an AVX2-only one decoding fp32): the evidence lives
    in ``reproduce``, which is never fitted."""
    for rung in FIT_LADDER:
        fitted = scaled_sizes(cfg, *rung)
        if sum(estimate_minutes(fitted, tokens_per_second).values()) <= minutes:
            break
    return fitted, rung


def fit_note(cfg: StudyConfig, fitted: StudyConfig, minutes: float, tokens_per_second: float) -> str:
    """One sentence saying which sizes ``fit_to_minutes`` cut, and why ('' when none)."""
    cuts = [(label, a, b) for label, a, b in (
        ("token-training steps", cfg.token.steps, fitted.token.steps),
        ("seeds", cfg.seeds, fitted.seeds),
        ("selection samples", cfg.selection.samples, fitted.selection.samples),
        ("evaluation problems", cfg.eval_problems, fitted.eval_problems),
        ("selection problems", cfg.selection.problems, fitted.selection.problems),
    ) if a != b]
    if not cuts:
        return ""
    planned = sum(estimate_minutes(fitted, tokens_per_second).values())
    short = "" if planned <= minutes else " (the smallest sizes the fit allows: still longer)"
    return (f"Sizes cut to fit {minutes:g} minutes on this machine (decode probe {tokens_per_second:.0f} tok/s, "
            f"{tokens_per_second / REFERENCE_PROBE_TOKENS_PER_SECOND:.2f} x the reference): "
            + ", ".join(f"{label} {a} -> {b}" for label, a, b in cuts) + f"; planned {planned:.1f} minutes{short}.")


def replan(cfg: StudyConfig, clock: pipeline.StageClock, minutes: float, tokens_per_second: float, path: Path,
           stages: tuple[str, ...]) -> tuple[StudyConfig, str]:
    """``cfg`` with the sizes of ``stages`` (still to run: token-training steps, evaluation problems)
    cut, when the finished stages ran slower than planned so far that the rest would pass
    ``minutes``: the plan of the stages left, scaled by the pace the finished ones kept (their real
    over their planned minutes), must fit in the minutes left. The choice is written to ``path`` at
    the first decision and read back on a resume, so a resumed run keeps the sizes it trained with.
    Returns the config and a sentence for the report ('' when nothing was cut)."""
    record = json.loads(path.read_text()) if path.is_file() else {}
    key = ",".join(stages)
    if key not in record:
        done = {k: v for k, v in clock.total_minutes().items() if k in clock.plan and k != "load"}
        planned = sum(clock.plan[k] for k in done)
        pace = sum(done.values()) / planned if planned >= 0.5 else 1.0
        left = minutes - sum(clock.total_minutes().values())
        chosen, sentence = cfg, ""
        if pace > 1.0:
            for steps_scale, problems_scale in ((1.0, 1.0), (0.75, 1.0), (0.5, 1.0), (0.33, 1.0), (0.25, 1.0),
                                                (0.25, 0.75), (0.25, 0.5)):
                fitted = scaled_sizes(cfg, steps_scale if "token" in stages else 1.0, problems_scale)
                chosen = replace(cfg, token=fitted.token, eval_problems=fitted.eval_problems)
                plan = estimate_minutes(chosen, tokens_per_second)
                if sum(plan[k] for k in stages if k in plan) * pace <= left:
                    break
            cuts = [f"{label} {a} -> {b}" for label, a, b in (
                ("token-training steps", cfg.token.steps, chosen.token.steps),
                ("evaluation problems", cfg.eval_problems, chosen.eval_problems)) if a != b]
            if cuts:
                sentence = (f"Re-planned before the {stages[0]} stage from the finished stages (they ran at "
                            f"{pace:.1f} x their plan, {left:.1f} of {minutes:g} minutes left): "
                            + ", ".join(cuts) + ".")
        record[key] = {"token_steps": chosen.token.steps, "eval_problems": chosen.eval_problems, "note": sentence}
        write_json(path, record)
        if sentence:
            print(sentence, flush=True)
    chosen = record[key]
    cfg = replace(cfg, token=replace(cfg.token, steps=min(cfg.token.steps, chosen["token_steps"])),
                  eval_problems=min(cfg.eval_problems, chosen["eval_problems"]))
    clock.plan = {**clock.plan, **{k: v for k, v in estimate_minutes(cfg, tokens_per_second).items() if k in stages}}
    return cfg, chosen["note"]


OPTIONS_FILE = "demo_options.json"
"""What a study run in a folder was asked for (model, minutes, every size): a later run into the same
folder must ask for the same, or its report would mix runs."""


def check_same_run(out: Path, requested: dict) -> None:
    """Record ``requested`` in ``out``, or refuse when ``out`` holds a run started with other options."""
    path = out / OPTIONS_FILE
    if path.is_file():
        before = json.loads(path.read_text())
        # a setting the record predates (a stage added since the run started, e.g. the fixed rules)
        # is not a change: the resumed run adds that stage's work to the finished ones
        known = _flat(before)
        changed = sorted({(k, v) for k, v in _flat(requested).items() if k in known} ^ known.items())
        if changed:
            names = sorted({name for name, _ in changed})
            old, new = _flat(before), _flat(requested)
            raise ValueError(
                f"{out} holds a run started with other options ("
                + "; ".join(f"{n}: {old.get(n)} -> {new.get(n)}" for n in names[:6])
                + "): re-run it with the options it was started with, or choose another --out"
            )
    else:
        out.mkdir(parents=True, exist_ok=True)
        write_json(path, requested)


def _flat(data: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in data.items():
        if isinstance(value, dict):
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = json.dumps(value)
    return flat


TOKEN_MIXED = "Mixed (per token)"
"""The token-level Mixed row: a uniform mixture over the token action set drawn at every token."""


def _metric_at(results: dict, metric: str) -> str:
    ks = sorted(int(m.split("@")[1]) for m in next(iter(results.values())) if m.startswith("pass@"))
    return {"first": f"pass@{ks[0]}", "last": f"pass@{ks[-1]}"}[metric]


TOKEN_TARGET_GAIN = 0.03
"""Token w/ budget's target: this much pass@1 over Greedy and over the per-token Mixed."""
DRAFT_TARGET_GAIN, DRAFT_TARGET_DECODES = 0.05, 1.5
"""The draft-gated adapter's target: this much pass@1 over the strongest static method, at no more
than this many decodes per problem."""


def target_lines(results: dict, details: dict | None, confidence: float = 0.95) -> list[str]:
    """The study's targets, each checked on paired per-problem differences: a markdown bullet per
    target saying whether it is met, with the difference and its interval in points, and on how many
    evaluation seeds the per-seed difference meets the target's bar."""
    if not results:
        return []
    if nothing_solved(results):
        return ["- **not judged**: nothing was solved, so no target can be met or missed at this size"]
    p1, pmax = _metric_at(results, "first"), _metric_at(results, "last")

    def diff(a: str | None, b: str | None, metric: str) -> dict | None:
        if a not in results or b not in results or metric not in results[a] or metric not in results[b]:
            return None
        c = compare(results, details, a, b, metric, confidence)
        return {**c, "seeds": per_seed_differences(details, a, b, metric)}

    def text(c: dict, holds) -> str:
        interval = "" if math.isnan(c["low"]) else f" [{c['low'] * 100:+.1f}, {c['high'] * 100:+.1f}]"
        seeds = seed_clause(c["seeds"], holds)
        return f"{c['diff'] * 100:+.1f}{interval}" + (f" ({seeds})" if seeds else "")

    def not_below(c: dict) -> bool:
        return (c["high"] if not math.isnan(c["high"]) else c["diff"]) >= 0

    def above(gain: float):
        return lambda d: d >= gain and d > 0

    checks = []  # (target, [(label, comparison, per-seed bar)], met)
    tok = "Token w/ budget"
    gaps = [(f"vs {b}", diff(tok, b, p1)) for b in ("Greedy", TOKEN_MIXED)]
    if all(c for _, c in gaps):
        met = all(c["diff"] >= TOKEN_TARGET_GAIN and c["low"] > 0 for _, c in gaps)
        checks.append((f"{tok}: {p1} at least +{TOKEN_TARGET_GAIN * 100:g} points over Greedy and over per-token "
                       "Mixed, interval above 0", [(label, c, above(TOKEN_TARGET_GAIN)) for label, c in gaps], met))
    c = diff("Token entropy-only", tok, p1)
    if c:
        checks.append((f"Token entropy-only below {tok} at {p1}", [("entropy-only minus full", c, lambda d: d < 0)],
                       c["diff"] < 0))
    strongest = strongest_static(results, details, p1)
    draft = "Draft-gated"
    c = diff(draft, strongest, p1)
    if c:
        decodes = (details or {}).get("methods", {}).get(draft, {}).get("decodes_per_problem", {}).get(p1.split("@")[1])
        cheap = decodes is not None and decodes <= DRAFT_TARGET_DECODES
        spent = "" if decodes is None else f", {decodes:.2f} decodes per problem"
        checks.append((f"{draft}: {p1} at least +{DRAFT_TARGET_GAIN * 100:g} points over the strongest static "
                       f"method ({strongest} on this split), interval above 0, at <= {DRAFT_TARGET_DECODES:g} decodes "
                       f"per problem{spent}; a target across compute, not a verdict",
                       [(f"vs {strongest}", c, above(DRAFT_TARGET_GAIN))],
                       c["diff"] >= DRAFT_TARGET_GAIN and c["low"] > 0 and cheap))
    seq = "Seq w/ budget"
    strongest_max = strongest_static(results, details, pmax)
    c = diff(seq, strongest, p1)
    if c:
        checks.append((f"{seq} not below the strongest static method at {p1} ({strongest}; interval not entirely "
                       "below 0)", [(f"vs {strongest}", c, lambda d: d >= 0)], not_below(c)))
    c = diff(seq, strongest_max, pmax)
    if c and pmax != p1:
        checks.append((f"{seq} above the strongest static method at {pmax} ({strongest_max}), interval above 0",
                       [(f"vs {strongest_max}", c, above(0.0))], c["low"] > 0))
    cs = [(m, diff(seq, "Seq w/o budget", m)) for m in dict.fromkeys((p1, pmax))]
    if all(c for _, c in cs):
        checks.append((f"{seq} not below Seq w/o budget (no interval entirely below 0)",
                       [(m, c, lambda d: d >= 0) for m, c in cs], all(not_below(c) for _, c in cs)))
    return [
        f"- {'**met**' if met else '**not met**'}: {target} — "
        + "; ".join(f"{label} {text(c, holds)}" for label, c, holds in comps)
        for target, comps, met in checks
    ]


def _token_data_section(prompts_file: Path, cfg: StudyConfig) -> str:
    """What the token runs trained and validated on: the prompt filter's counts (``token-prompts.json``)."""
    if not prompts_file.is_file():
        return ""
    r = json.loads(prompts_file.read_text())
    tok = cfg.token
    kept = r.get("kept_count", len(r.get("kept", [])))
    if "dropped_all_fail" not in r:
        return f"Training prompts: {kept} (no filter)."
    return (f"The prompt filter judged training prompts with the policy every token run starts from "
            f"({r.get('judged_by', 'start policy')}, {tok.filter_samples} samples each): it kept **{kept}** of "
            f"{r['train_prompts']} probed ({r['dropped_all_fail']} always failed, {r['dropped_all_pass']} always "
            f"passed; {r.get('wanted', '?')} wanted). Each run saw {r.get('distinct_prompts_per_run', '?')} distinct "
            f"training prompts ({tok.steps} steps x {tok.prompts_per_step}, epoch by epoch). Validation: "
            f"{r.get('val_problems', tok.val_problems)} problems x {tok.val_samples} samples per policy mode, the same "
            f"rows and seeds at every validation; a later step is kept only when its paired gain over step 0 "
            f"exceeds {tok.min_improvement_se:g} standard errors.")


def _cost_section(clock: pipeline.StageClock, out: Path, cfg: StudyConfig, note: str = "") -> str:
    """Minutes per stage (measured against planned), what the time fit cut (``note``) and the
    training throughput figures."""
    lines = [note, ""] if note else []
    lines += ["| stage | planned (min) | spent (min, all runs) |", "| --- | ---: | ---: |"]
    spent = clock.total_minutes()
    for key, planned in clock.plan.items():
        measured = spent.get(key)
        lines.append(f"| {key} | {planned:.1f} | {'–' if measured is None else f'{measured:.1f}'} |")
    planned = sum(v for k, v in clock.plan.items() if k != "report")
    measured = sum(v for k, v in spent.items() if k != "report")
    lines.append(f"| **total** (without the report) | {planned:.1f} | {measured:.1f} |")
    text = "\n".join(lines) + "\n\nThe report stage's own time is not included (it is being written)."
    if planned > 0 and measured > 0:
        ratio = measured / planned
        text += (f" The run took **{ratio:.2f} x its plan** ({'within' if abs(ratio - 1) <= 0.10 else 'outside'} "
                 "10% of it); the plan is scaled to this machine by the decode probe at the run's first start.")
    rows = []
    for prefix in ("seq-budget", "tok-budget"):
        log_path = out / f"{prefix}-s0" / "train_log.jsonl"
        if not log_path.is_file():
            continue
        records = [json.loads(line) for line in log_path.read_text().splitlines() if line.strip()]
        steps = [r for r in records if r.get("step", 0) > 0 and "seconds" in r]
        if not steps:
            continue
        seconds = sum(r["seconds"] for r in steps) / len(steps)
        if prefix.startswith("tok"):
            rows_per_step = cfg.token.prompts_per_step * cfg.token.group_size
            length = sum(r.get("mean_length", 0.0) for r in steps) / len(steps)
            tokens = f"{rows_per_step * length:.0f}"
        else:
            budgets = cfg.sequence.parallel_budgets
            rows_per_step = cfg.sequence.prompts_per_step * sum(budgets) / len(budgets)
            tokens = "–"
        rows.append(f"| {ADAPTER_NAMES[prefix]} (seed 0) | {len(steps)} | {rows_per_step:.0f} | {tokens} | "
                    f"{seconds:.1f} | {60 / seconds:.1f} |")
    if rows:
        text += ("\n\n| training run | steps | rollouts / step | tokens / step | s / step | steps / min |\n"
                 "| --- | ---: | ---: | ---: | ---: | ---: |\n" + "\n".join(rows))
    return text




def _pool_size(cfg: StudyConfig) -> int:
    return 181 if cfg.selection.pool_subsample is None else cfg.selection.pool_subsample + 1


def _best_token_action(lm, task, cfg: StudyConfig, out: Path, progress: bool) -> DecodingAction:
    """The token-level action set's best single action on the validation problems Best is chosen on
    (cells already in the pool table are reused; missing ones are decoded into it)."""
    actions = list(PRESETS["math-token"])
    problems = task.load("validation")[: cfg.selection.choice_problems]
    label = "token actions (best single one)" if progress else False
    table = pipeline.decode_candidates(lm, task, problems, actions, cfg, out / "outcomes.jsonl", label)
    best = best_static_from_table(table, (1,), [a.name for a in actions])  # ties: the first (greedy, in math-token)
    return actions[best.choice[0]]


def _token_baselines(actions: list[DecodingAction], best: DecodingAction) -> list[Method]:
    """The token-level static baselines: the token action set mixed uniformly per token (the
    paper's token-level Mixed), mixed once per sample (its own row), and its best single action
    (chosen on validation)."""
    return [
        token_mixed_method(actions, TOKEN_MIXED),
        sequence_mixture_of_token_actions(actions),
        best_token_action_method(best),
    ]


def run_demo(out: str | Path, cfg: StudyConfig, *, model: str = "smollm2", progress: bool = True,
             label: str = "demo", command: str = "", minutes: float | None = None,
             device: str = DEFAULT_DEVICE) -> dict:
    """Run every stage into ``out`` and return the evaluation results. With ``minutes``, the sizes
    are cut by ``fit_to_minutes`` when this machine's plan is longer (the report says so)."""
    out = Path(out)
    check_same_run(out, {"model": model, "minutes": minutes, "study": asdict(cfg)})
    clock = pipeline.StageClock(label, out / "stage_minutes.json")  # the plan needs the probe: after loading
    clock.begin("load", "loading the frozen LM", model)
    lm = load_frozen_lm(ModelSpec(name_or_path=model, device=device))
    task = get_task("arithmetic", **pipeline.study_task_options(cfg))
    probe = _probe_once(lm, cfg, out / "decode_probe.json")  # the plan, scaled to this machine
    speed = probe.capacity  # the sizes are fitted to the machine; a busy spell is met by re-planning below

    def fit(cfg: StudyConfig) -> StudyConfig:
        return fit_to_minutes(cfg, speed, minutes)[0] if minutes else cfg

    clock.plan = estimate_minutes(fit(cfg), speed)
    low, high = plan_range(fit(cfg), probe)
    span = f"{low:.0f}" if high < low * 1.1 else f"{low:.0f}-{high:.0f}"
    print(f"{probe.describe()}; plan {span} min", flush=True)
    advice = plan_advice(cfg, fit(cfg), minutes, probe)
    if advice:
        print(f"note: {advice}", flush=True)
    clock.end()

    budget_record = None
    if cfg.budget.candidates:
        clock.begin("budget", "token budget from greedy truncation on validation",
                    f"budgets {','.join(map(str, cfg.budget.candidates))} x {cfg.budget.problems} problems")
        cfg, budget_record = pipeline.choose_budget(lm, task, cfg, out / "budget")
        print(f"token budget: {cfg.token_budget}", flush=True)
        clock.end()
    fitted = fit(cfg)  # at the chosen budget
    note = fit_note(cfg, fitted, minutes, speed) if minutes else ""
    cfg = fitted
    if note:
        print(note, flush=True)
    # the stages still to run
    clock.plan = {**estimate_minutes(cfg, speed), **{k: clock.plan[k] for k in clock.minutes}}
    write_json(out / "study_config.json", {"model": model, "command": command, "fit": note, **asdict(cfg)})

    sel = cfg.selection
    clock.begin("select", "action selection", f"{_pool_size(cfg)} candidates x {sel.choice_problems} problems x "
                                              f"{sel.samples} samples")
    pool, problems = pipeline.candidate_pool(cfg), task.load("validation")[: sel.problems]
    outcomes = out / "actions" / "outcomes.jsonl"
    table = pipeline.decode_candidates(lm, task, problems, pool, cfg, outcomes, progress)
    best_table = pipeline.decode_best_finalists(lm, task, cfg, table, pool, outcomes, progress)
    meta = pipeline.selection_meta(cfg, task.name, len(problems), pool)
    print(pipeline.write_selection(out / "actions", pool, table, sel.k, meta, cfg.eval.k_values, best_table))
    actions_path, table_path = out / "actions" / "actions.json", out / "actions" / "outcomes.jsonl"
    token_actions = list(PRESETS["math-token"])
    best_token = _best_token_action(lm, task, cfg, out / "actions", progress)
    token_baselines = _token_baselines(token_actions, best_token)
    # every token run starts at the prior on the best static token action: the recorded config says so
    cfg = replace(cfg, token=replace(cfg.token, prior_action=token_actions.index(best_token)))
    write_json(out / "study_config.json", {"model": model, "command": command, "fit": note, **asdict(cfg)})
    clock.end()

    seeds = range(cfg.seeds)
    clock.begin(
        "sequence",
        f"sequence adapters ({'live rollouts' if cfg.sequence_rewards == 'live' else 'offline replay'})",
        f"w/ and w/o budget x {cfg.seeds} seeds x {cfg.sequence.steps} steps, "
        f"B in {set(cfg.sequence.parallel_budgets)}",
    )
    for seed in seeds:
        for use_budget, tag in ((True, "budget"), (False, "nobudget")):
            pipeline.train_sequence(lm, task, cfg, actions_path, table_path, out / f"seq-{tag}-s{seed}", seed,
                                    use_budget)
    clock.end()

    if cfg.draft_stage:
        clock.begin("draft", "draft-gated adapters", f"both-arms tables ({cfg.draft_samples} re-decodes per problem), "
                                                     f"{cfg.seeds} seeds, features {cfg.draft_features}")
        for seed in seeds:
            pipeline.train_draft(lm, task, cfg, actions_path, out / f"draft-s{seed}", seed,
                                 features=cfg.draft_features, **DRAFT_TRAINING)
        clock.end()

    if minutes:  # the later stages' sizes, re-planned from the real minutes of the finished ones
        cfg, replanned = replan(cfg, clock, minutes, speed, out / "replan.json", ("token", "evaluate"))
        note = " ".join(x for x in (note, replanned) if x)
        write_json(out / "study_config.json", {"model": model, "command": command, "fit": note, **asdict(cfg)})
    stop = f", early stop after {cfg.token.patience} flat validations" if cfg.token.patience else ""
    clock.begin("token", "token adapters",
                f"{len(TOKEN_VARIANTS)} variants x {cfg.seeds} seeds x <= {cfg.token.steps} steps{stop}")
    problems = pipeline.filtered_prompts(lm, task, cfg, out, progress,
                                         prior_action=token_actions.index(best_token))
    for seed in seeds:
        for tag, (use_budget, features) in TOKEN_VARIANTS.items():
            pipeline.train_token(lm, task, cfg, out / f"tok-{tag}-s{seed}", seed, use_budget=use_budget,
                                 features=features, problems=problems, progress=progress,
                                 prior_action=token_actions.index(best_token))
    clock.end()

    if minutes:
        cfg, replanned = replan(cfg, clock, minutes, speed, out / "replan.json", ("evaluate",))
        note = " ".join(x for x in (note, replanned) if x)
        write_json(out / "study_config.json", {"model": model, "command": command, "fit": note, **asdict(cfg)})
    clock.begin("evaluate", "evaluation", f"{cfg.eval_problems} test problems x {cfg.seeds} seeds, "
                                          f"pass@{','.join(map(str, cfg.eval.k_values))}")
    methods = [greedy_method(), *([greedy_to_budget_method()] if cfg.stop_at_answer else []),
               pipeline.best_method(actions_path, cfg.eval.k_values),
               mixed_method(load_action_set(actions_path), "Mixed"),
               *token_baselines]
    methods += [pipeline.adapter_runs(out, prefix, cfg, lm, name) for prefix, name in ADAPTER_NAMES.items()]
    if cfg.draft_stage:  # the draft-gated adapter and its controls at the same compute
        methods += [pipeline.adapter_runs(out, "draft", cfg, lm, "Draft-gated"),
                    *pipeline.draft_controls(lm, task, cfg, actions_path, out / "draft-s0", out)]
    test_problems = task.load(cfg.eval_split)[: cfg.eval_problems]
    evaluation = pipeline.evaluate_methods(lm, task, test_problems, methods, cfg,
                                           out / "eval", meta={"model": model, "task": task.name}, progress=progress)
    clock.end()

    rc, vc, ac, tests = cfg.rules, cfg.verifier, cfg.attempt, test_problems
    stages = [  # (run it, key, label, detail, run): each stage over the rules' tables adds its points
        (rc.enabled, "rules", "fixed rules", f"sample tables of {rc.problems} validation and {len(tests)} test "
         f"problems, greedy + {rc.samples} samples at T={rc.temperatures}", lambda ev: pipeline.fixed_rules(
             lm, task, cfg, out / "rules", ev, tests, progress=progress)),
        (rc.enabled and vc.enabled, "verifier", "verifier and the rules that read it", f"{vc.train_problems} training "
         f"problems", lambda ev: pipeline.verifier_stage(lm, task, cfg, out / "verifier", out / "rules", ev, tests,
                                                         train_table=out / "attempt" / "train", progress=progress)),
        (rc.enabled and ac.enabled, "attempt", "attempt policy", f"a sample table of {ac.train_problems} training "
         f"problems, one policy per price {list(ac.prices)}", lambda ev: pipeline.attempt_stage(
             lm, task, cfg, out / "attempt", out / "rules", ev, tests, progress=progress,
             verifier_dir=out / "verifier" / "verifier" if vc.enabled else None))]
    for stage in (s for s in stages if s[0]):
        evaluation = pipeline.table_stage(clock, evaluation, out / "eval", *stage[1:])

    clock.begin("report", "report")
    logs = {name: out / f"{prefix}-s0" / "train_log.jsonl" for prefix, name in ADAPTER_NAMES.items()}
    curves = {name: [out / f"{prefix}-s{s}" / "train_log.jsonl" for s in seeds]
              for prefix, name in ADAPTER_NAMES.items()}
    sections = [
        ("Action selection", selection_section(actions_path, out / "report")),
        ("Token budget and truncation", truncation_section(
            budget_record["stats"], budget_record["chosen"], budget_record["max_truncated"]) if budget_record else ""),
        ("Token training data", _token_data_section(out / "token-prompts.json", cfg)),
        ("Training curves (every seed)", training_curve_section(out / "report", curves)),
        ("Fixed rules", rules_section(evaluation.results, evaluation.details, out / "report")),
        ("Head-room captured", headroom_section(actions_path, evaluation.results,
                                                evaluation.details, list(ADAPTER_NAMES.values()))),
        ("Targets", "\n".join(target_lines(evaluation.results, evaluation.details))),
        ("Cost", _cost_section(clock, out, cfg, note)),
    ]
    report_path = write_report(out / "report", evaluation.results, evaluation.details, logs, sections=sections)
    clock.end()
    lines = evidence_lines(evaluation.results, evaluation.details)
    if nothing_solved(evaluation.results) and cfg.token_budget <= TINY.token_budget:
        lines = [TINY_NOTE.format(budget=cfg.token_budget)]  # the verifier is not at fault: the budget is tiny
    for line in lines:
        print(line.replace("**", ""))
    print(format_table(evaluation.results))
    runs, total = clock.runs(), sum(clock.total_minutes().values())
    spent = f"{clock.elapsed():.1f} min"
    if runs > 1:
        spent += f" (this run; {total:.1f} min over {runs} runs into {out})"
    print(f"\n{label} finished in {spent}; report: {report_path}")
    return evaluation.results
