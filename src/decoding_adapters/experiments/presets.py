"""The study's sizes and the runs it is made of: the ``demo`` command's ``SIZES`` (``tiny``: a first run of every
stage, the fixed rules and the attempt policy included, in a few minutes; ``default`` fits about 13
minutes on the 2-core reference machine), the ``reproduce``
command's ``REPRODUCE_SIZES`` (``full``: the study behind the README's headline table, ``complete``:
uncut, ``smoke``: every stage on a tiny model), and the adapter runs every size trains."""

from __future__ import annotations

from dataclasses import replace

from ..evaluation import EvalConfig
from ..training.sequence import SequenceTrainConfig
from ..training.token import TokenTrainConfig
from .study_config import (
    AttemptStageConfig,
    BudgetConfig,
    RulesConfig,
    SelectionConfig,
    StudyConfig,
    VerifierStageConfig,
)

__all__ = ["DEFAULT", "TINY", "TINY_NOTE", "FULL", "COMPLETE", "SMOKE", "SIZES", "REPRODUCE_SIZES", "SIZE_NOTES",
           "TOKEN_VARIANTS", "ADAPTER_NAMES", "TOKEN_MIXED", "DRAFT_TRAINING", "pool_size"]


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
    # A newcomer's first run: every stage, the fixed rules and the attempt policy included, at sizes
    # that plan about a minute of decoding on the 2-core reference machine, and at a token budget where
    # the default model answers (32, the full study's: greedy stopped at its first answer solves about
    # half of the problems there), so its table shows something solved. One seed and 16 test
    # problems: it shows the pipeline and the headline method, not evidence.
    token_budget=32,
    budget=BudgetConfig(candidates=()),
    selection=SelectionConfig(pool_subsample=3, problems=8, samples=2, k=2),
    sequence_rewards="replay",
    # 16 training and 16 validation problems: also the draft stage's both-arms tables
    sequence=SequenceTrainConfig(parallel_budgets=(1, 2), steps=3, prompts_per_step=2, max_train_prompts=16,
                                 val_every=1, val_problems=16, checkpoint_every=1),
    token=TokenTrainConfig(steps=2, prompts_per_step=2, group_size=2, max_train_prompts=4, filter_samples=0,
                           val_every=2, val_problems=4, checkpoint_every=1, patience=0),
    eval=EvalConfig(k_values=(1, 2)),
    eval_problems=16,
    seeds=1,
    batch_rows=64,
    draft_stage=True,
    draft_samples=1,
    rules=RulesConfig(enabled=True, samples=2, problems=16),
    verifier=VerifierStageConfig(enabled=True, train_problems=16),  # the attempt stage's training table
    attempt=AttemptStageConfig(enabled=True, train_problems=16, prices=(0.1,), steps=50),
)
TINY_NOTE = ("Nothing was solved at this size ({problems} test problems, a {budget}-token budget): no method answered "
             "a test problem right, so this table compares nothing. On the default model `--size tiny` solves some "
             "problems; with this model, try a longer --token-budget or the default size (`demo`).")
"""What a small run prints where nothing was solved, instead of leaving the user to debug the task."""

FULL = StudyConfig(
    # The study cut to fit 120 minutes on the 2-core CPU (cli/reproduce.py: the plan, what was cut; COMPLETE: uncut).
    token_budget=32,  # replaced by the budget stage's choice; 32 is the expected one (plan, --plan)
    # chosen on 400 validation problems like every other choice (with the stop at the first answer, 32
    # stops 14.5% of greedy rows there, 48 10%, 96 2.5%)
    budget=BudgetConfig(candidates=(32, 48, 64, 96), problems=400, max_truncated=0.35),
    # 64 problems x 4 samples lets coverage tell candidates apart past K = 3 (8 x 1 saturated
    # there); 16 pool actions plus greedy keep it at about 8 minutes.
    # Best, and the actions the sequence adapters start from, chosen on the same 400 validation
    # problems as every other choice (the coverage selection's finalists decoded there).
    selection=SelectionConfig(pool_subsample=16, problems=64, samples=4, k=6, best_problems=400),
    sequence_rewards="live",
    # Sequence validation scores each of 400 problems at every B; a later step is kept only when its
    # paired gain over step 0 is above 1.96 standard errors at every B where its choices change. 48
    # problems are too few: a policy collapsed onto T=0.5 top-k 10 at every B drew 12.5 points above
    # greedy at B = 1 on them (+/- 7.1), 0.5 below it on 400 (+/- 2.7), 7.5 below it on test.
    # The rows are decoded once per (problem, action) and reused by later validations (and the
    # draft stage's validation table takes the same 400). Cost on the reference machine's plan:
    # sequence 9.1 -> 43.8 minutes, draft 1.9 -> 3.7 (with the budget's, +36.7 minutes).
    # B up to 4, the largest the evaluation scores (its pass@8 was cut to fit the time).
    # Reduced size on the sealed2 run (labelled so in the report): 16 steps, cut from 24, to fit the
    # tables of three sampled arms; both adapters kept their start on every seed of the sealed run.
    sequence=SequenceTrainConfig(parallel_budgets=(1, 2, 4), steps=16, prompts_per_step=8, max_train_prompts=256,
                                 val_every=8, val_problems=400, checkpoint_every=1),
    # Token training at the trainer's validated defaults (lr, PPO epochs, prior at the best static token
    # action: docs/token-defaults.md), every run to its 32-step cap with groups of 8. The prompt filter
    # judges with that prior (2 samples) until 256 prompts survive: 32 x 8 epoch-wise slots show each run all 256.
    # Validation: the argmax policy on 400 problems x 1 sample, the same rows and seeds at every
    # validation (step 0 included), a later step kept only when its paired gain's 95% interval is
    # above 0; at step 0 and every 16 steps. Argmax only, to fit the time: it won validation on every
    # seed of the planted task; at step 0 it is greedy, which sampling the prior scores below.
    # Reduced size (labelled so): 16 steps, cut from 32 (every token run of the sealed run kept step 0).
    token=TokenTrainConfig(steps=16, prompts_per_step=8, group_size=8, max_train_prompts=None, min_train_prompts=256,
                           filter_samples=2, val_every=16, val_problems=400, val_samples=1, val_modes=("argmax",),
                           checkpoint_every=1, patience=0),
    # The sealed2 split's first 1,000 problems, disjoint by content from every other split (the
    # published evidence run reads it, nothing else); pass@4 and pass@8 were cut (each doubles the
    # evaluation's rows) to fit the rules' tables of three sampled arms in the time.
    eval=EvalConfig(k_values=(1, 2)),
    eval_problems=1000,
    eval_split="sealed2",
    seeds=3,
    batch_rows=128,
    draft_stage=True,
    train_size=1500,  # the splits sized for the token trainer (test and sealed unchanged by it)
    validation_size=400,
    # rules tuned on 400 validation problems (stopped greedy, then 6 samples of each of the study's
    # first three coverage-selected sampled actions: 19 rows per problem); the tables keep the hidden
    # states the attempt policy reads (docs/attempt.md); its prices trace ~1.1 to ~4.5 decodes per problem.
    # 6 draws per arm, cut from 8 (samples before arms) when the plan counted the attempt stage's
    # training (three arms make a 361-state lattice at 8 draws): 8 plans 136 minutes on the reference.
    rules=RulesConfig(enabled=True, samples=6, problems=400, hidden=True, decoders="selection", decoder_count=3),
    verifier=VerifierStageConfig(enabled=True),  # on the attempt stage's training table: seconds
    attempt=AttemptStageConfig(enabled=True, features=("confidence", "hidden"),
                               prices=(0.3, 0.2, 0.15, 0.1, 0.05, 0.03, 0.01, 0.003)),
)

COMPLETE = replace(
    FULL,
    # The study uncut: greedy (almost) never truncated, pass@8 (B up to 8), selection on 32 x 4,
    # longer training validated in both policy modes on 400 x 2: for a bigger machine
    # (`reproduce --size complete --plan`).
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

SMOKE = StudyConfig(
    # Every stage of the full study (budget choice, whole pool, live sequence rollouts, early
    # stopping, every baseline, the fixed rules) on a tiny model in well under a minute: the CLI
    # test's size.
    token_budget=4,
    budget=BudgetConfig(candidates=(2, 4), problems=4, max_truncated=1.0),
    selection=SelectionConfig(pool_subsample=None, problems=2, samples=1, k=2, best_problems=4),
    sequence_rewards="live",
    sequence=SequenceTrainConfig(parallel_budgets=(1, 2), steps=2, prompts_per_step=2, max_train_prompts=4,
                                 val_every=1, val_problems=2, checkpoint_every=1),
    token=TokenTrainConfig(steps=4, prompts_per_step=2, group_size=2, max_train_prompts=4, filter_samples=0,
                           val_every=1, val_problems=4, checkpoint_every=1, patience=1),
    eval=EvalConfig(k_values=(1, 2)),
    eval_problems=3,
    seeds=2,
    batch_rows=16,
    rules=RulesConfig(enabled=True, samples=2, problems=4),
    draft_stage=True,
    draft_samples=1,
)

SIZES: dict[str, StudyConfig] = {"tiny": TINY, "default": DEFAULT}
"""The ``demo`` command's sizes."""

REPRODUCE_SIZES: dict[str, StudyConfig] = {"full": FULL, "complete": COMPLETE, "smoke": SMOKE}
"""The ``reproduce`` command's sizes."""

SIZE_NOTES: dict[str, str] = {
    "full": "Cut to fit the reference machine's 120 minutes: the paper's sequence and token adapters ran at "
            "reduced size (16 training steps each, from 24 and 32 of the uncut study), and the evaluation scores "
            "pass@1 and pass@2 only (pass@4 and pass@8 cut).",
}
"""What a ``reproduce`` size cut from the uncut study (``complete``), for its report."""

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
TOKEN_MIXED = "Mixed (per token)"
"""The token-level Mixed row: a uniform mixture over the token action set drawn at every token."""


def pool_size(cfg: StudyConfig) -> int:
    """Candidate actions the selection stage decodes: the pool (181, or its subsample) plus greedy."""
    return 181 if cfg.selection.pool_subsample is None else cfg.selection.pool_subsample + 1
