"""``reproduce``: the headline study — does adaptive decoding beat static decoding on the
default model, with intervals narrow enough to tell? It runs the demo's stages
(``experiments.demo.run_demo``) at ``REPRODUCE_SIZES`` (``full``, ``complete``, ``smoke``); the
README's headline table names this one command with its own output directory.

    decoding-adapters reproduce --out runs/reproduce --publish docs/reproduce   # ~80 min on 2 cores; resumable
    decoding-adapters reproduce --plan                        # the stage-by-stage estimate for this machine
    decoding-adapters reproduce --size smoke --model DIR      # every stage on a tiny model (tests)

What runs (``full``):

0. token budget: greedy on 100 validation problems, decoded once at 96 tokens; the smallest of
   32/48/64/96 that stops at most 35% of greedy rows before EOS is used everywhere after
   (chosen on validation; the report lists mean greedy length and truncated fraction per budget).
1. action selection on 16 actions spread over the 180-config pool plus greedy (17 candidates) on 64
   validation problems x 4 samples; K = 6 by greedy coverage, with the coverage curve and where it
   saturates; the same table picks Best at each pass@k (greedy included) and the best single
   token action.
2. sequence adapters w/ and w/o budget, **live rollouts**, B in {1, 2, 4, 8}, 3 seeds, 24 steps x
   8 prompts, validated live on 32 problems every 8 steps (step 0 included, best validated kept);
   the w/ budget adapter starts at Best at pass@B for each B, the w/o budget one at Best at pass@1.
3. token adapters w/ budget, w/o budget, entropy-only, 3 seeds, 40 steps x 8 prompts x G=8 each,
   prior at the best static token action, validation (sampled and argmax policy) on 96 problems
   at step 0 and every 8 steps, best validated weights and mode kept; every seed's curve in the report.
4. evaluation on 200 test problems x 3 seeds x 8 samples, pass@1/2/4/8: Greedy, Best, Mixed,
   Mixed (per token), Mixed per sequence (token actions), Best token action, and the five adapters.
5. report: paired intervals, the targets, seed spread, truncation, training curves,
   cost (minutes per stage, tokens per training step, steps per minute), figures.

Measurements behind the plan (on this 2-core machine while five other jobs ran, load
average 10, so from CPU time of one thread: ``benchmarks/reproduce_sizing.py``;
``demo.estimate_minutes`` holds the constants):

- greedy on the 100 validation problems at budgets 16/24/32/48/64/96: mean length 14.6 / 20.5 /
  25.3 / 32.5 / 35.7 / 39.3 tokens, stopped by the budget 77 / 70 / 52 / 30 / 15 / 7% of rows:
  the model keeps talking after the answer, so "greedy not truncated" needs about 128 tokens;
- decode throughput, 128 sampled rows of 32 validation prompts at budget 48: 130 (T=0.5), 151
  (T=1), 152 (T=1.25) tokens per CPU-second; greedy 100 rows at 96: 84 (the batch shrinks as rows
  finish); 128 rows of the 180 pool (top-k / top-p / min-p mixed) at budget 16: 96; mean sampled
  length 57 / 74 / 89% of the budget. The plan takes 220 tokens/s for the two cores (1.5 x one
  thread), 75% of the budget per sampled row, +50% for pool rows, +15% for token-adapter rollouts
  (features recorded, policy run per step) and 1 s per small decode call.

Plan at the expected budget of 48 (``--plan``): load 0.5, budget 0.4, selection 5.9, sequence
10.4, token 19.0, evaluation 44.5, report 1 — **about 82 minutes**. The evaluation dominates: 200
problems x 3 seeds x n samples for every sampled method (~7 of them once shared rows are counted).

A first full run (n = 4, token training capped at 20 steps with 24 validation
problems and patience 2) took 55.4 min: its token stage 5.3 of 16.7 planned minutes and its
evaluation 22.4 of 55.9, so ``EVALUATION_SCALE`` and ``TOKEN_STAGE_SCALE`` (``demo.py``) carry
those ratios and the time saved bought back two cuts: pass@8 (n = 8) and longer token training
(one seed was still improving at the 20-step cap; validation curves only, the test split was not
used to choose). The run published in docs/reproduce took 59.4 min: load 0.2,
budget 0.2, selection 2.7, sequence 6.3, token 9.3, evaluation 40.6.

What was cut to fit (each is a field of ``StudyConfig``; ``--size complete`` restores them all):

- the token budget: greedy truncation allowed up to 35% (expected choice 48: 30% of greedy rows
  cut, mean greedy length 32.5) instead of ~2% (128 tokens). At 64 (15%) the plan is 119 min, at
  96 (7%) 199 min;
- action selection on 8 validation problems x 1 sample (the coverage estimate is coarse);
- short training: sequence adapters 12 live steps, token adapters at most 48 steps of 16 rollouts.
  The report's cost section gives tokens per step and steps per minute, to say whether training
  was compute-starved.

``--size complete`` (the uncut study: budget chosen at <= 2% truncation from 48..192, pass@8,
selection on 32 x 4, 60 steps of each adapter) plans at about 18 hours on this CPU.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Literal

from ..experiments.demo import REPRODUCE_SIZES, run_demo
from .study import add_study_arguments, format_plan, publish_if_asked, study_command, study_config


@dataclass(frozen=True)
class ReproduceOptions:
    """reproduce"""

    out: str = "runs/reproduce"
    """output directory (re-run the same command to resume)"""
    size: Literal["full", "complete", "smoke"] = "full"
    """stage sizes: full (the study cut to ~90 min on 2 cores), complete (uncut, ~18 h there), smoke (tests)"""
    model: str = "smollm2"
    """frozen LM (see `train-token --help`)"""
    plan: bool = False
    """print the stage-by-stage time estimate, scaled to this machine by a few seconds' decode probe, and exit"""
    publish: str | None = None
    """after the run, copy the report, its figures, eval_details.json, the truncation figures and the
    action selection into this directory (e.g. docs/reproduce)"""
    progress: bool = True
    """progress bars"""


def configure_parser(p: argparse.ArgumentParser) -> None:
    add_study_arguments(p, ReproduceOptions)


def run_cli(args) -> int:
    cfg = study_config(args, REPRODUCE_SIZES)
    if args.plan:
        print(format_plan(cfg, args.model))
        return 0
    command = study_command("reproduce", args, cfg, REPRODUCE_SIZES)
    run_demo(args.out, cfg, model=args.model, progress=args.progress, label="reproduce", command=command)
    publish_if_asked(args)
    return 0
