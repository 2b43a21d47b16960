"""``reproduce``: the headline study — does adaptive decoding beat static decoding on the
default model, with intervals narrow enough to tell, and at what compute? It runs the demo's stages
(``experiments.demo.run_demo``) at ``REPRODUCE_SIZES`` (``full``, ``complete``, ``smoke``); the
README's headline table names this one command with its own output directory.

    decoding-adapters reproduce --out runs/reproduce --publish docs/reproduce   # ~108 min planned on 2 cores; resumable
    decoding-adapters reproduce --plan                        # the stage-by-stage estimate for this machine
    decoding-adapters reproduce --size smoke --model DIR      # every stage on a tiny model (tests)

What runs (``full``):

0. token budget: greedy on 400 validation problems, decoded once at 96 tokens; the smallest of
   32/48/64/96 that stops at most 35% of greedy rows before EOS is used everywhere after
   (chosen on validation; the report lists mean greedy length and truncated fraction per budget).
1. action selection on 16 actions spread over the 180-config pool plus greedy (17 candidates) on 64
   validation problems x 4 samples; K = 6 by greedy coverage, with the coverage curve and where it
   saturates; the same table picks Best at each pass@k (greedy and greedy stopped at its first
   answer included) and the best single token action.
2. sequence adapters w/ and w/o budget, **live rollouts**, B in {1, 2, 4}, 3 seeds, 24 steps x
   8 prompts, validated live (the argmax policy, as evaluated) on 400 problems at every B every 8
   steps and at step 0; a later step is kept only when its paired gain over step 0 is above 1.96
   standard errors (at every B where its choices change, for the w/ budget adapter), else step 0;
   the w/ budget adapter starts at Best at pass@B for each B, the w/o budget one at Best at pass@1.
3. draft-gated adapters, 3 seeds: both-arms tables (a greedy draft stopped at its first answer and 4
   re-decodes with the selected set's Best sampled action, on 256 training and 400 validation
   problems), 400 full-information steps from a prior on keeping the draft; beside them a random
   gate at the adapter's validation re-decode share and a confidence threshold tuned on validation.
4. token adapters w/ budget, w/o budget, entropy-only, 3 seeds, 48 steps x 8 prompts x G=8 each,
   prior at the best static token action; training prompts filtered by that prior (2 samples each,
   probed until 300 survive, from a train split of 1,500 generated problems), walked epoch by epoch
   so each run sees 300 distinct prompts; validation of the argmax policy on 400 problems x 1
   sample at step 0 and every 16 steps (the validation split generated at 400: its first 100 and
   the test split are the same problems as at the default size), a later step kept only when its
   paired gain's 95% interval is above 0; every seed's curve in the report.
5. evaluation on 200 test problems x 3 seeds x 4 samples, pass@1/2/4: Greedy, Stop at first answer,
   Best, Mixed, Mixed (per token), Mixed per sequence (token actions), Best token action, the five
   adapters, the draft-gated adapter and its two controls; decodes and generated tokens per problem
   for every method.
5b. fixed rules: sample tables of the 400 validation and the 200 evaluated problems (the stopped
   greedy and 8 samples at T=0.5 each; resumable, under ``rules/``), every rule of docs/rules.md
   tuned on validation per compute level and scored on the evaluated problems; each tuned point joins
   the evaluation as a method of family ``fixed rule`` (5.5 more planned minutes, at the draft
   stage's scale until a run measures the stage's own).
6. report: paired intervals with the direction on every seed, the targets, seed spread, accuracy
   per compute (which method wins at each number of decodes per problem), truncation, training
   curves, cost (minutes per stage against the plan, tokens per training step, steps per minute),
   figures.

Measurements behind the plan (``demo.estimate_minutes`` holds the constants): a model of decoded
rows x mean length / throughput, with one scale per stage fitted on a published run, and a few
seconds' decode probe (``demo.probe_tokens_per_second``) that scales it to the machine it runs on.
Greedy on the 100 validation problems at budgets 16/24/32/48/64/96 has mean length 14.6 / 20.5 /
25.3 / 32.5 / 35.7 / 39.3 tokens, stopped by the budget 77 / 70 / 52 / 30 / 15 / 7% of rows: the
model keeps talking after the answer, so "greedy not truncated" needs about 128 tokens.

Plan on the reference machine (probe 440 tok/s): 117.3 minutes: budget 0.4, selection 6.7, sequence
43.8, draft 3.7, token 37.6, evaluation 15.9, fixed rules 5.4, attempt policy 3.6 (every choice on 400
validation problems; the rules' tables of 400 validation and the evaluated problems, the attempt
policy's of 400 training problems). What was cut to fit 120 minutes, evaluation first (each is a field of
``StudyConfig``; ``--size complete`` restores them all):

- pass@8: the evaluation scores 4 samples per problem and seed (pass@8 doubled its rows), and the
  sequence adapters train at B up to 4, the largest B evaluated;
- token validation: the argmax policy only (sampling the policy too doubled it; argmax was the
  served mode of every run before) on 400 problems x 1 sample, not 400 x 2;
- the token budget: greedy truncation allowed up to 35% (expected choice 48: 30% of greedy rows
  cut, mean greedy length 32.5) instead of ~2% (128 tokens);
- selection over 16 of the 180 pool actions (plus greedy), not the whole pool;
- short training: sequence adapters 24 live steps of 8 prompts, token adapters 48 steps of 64
  rollouts. The report's cost section gives tokens per step and steps per minute.

``--size complete`` (the uncut study: budget chosen at <= 2% truncation from 48..192, pass@8,
selection on the whole pool, 60 steps of each adapter, token validation in both modes on 400 x 2)
plans at about 10 hours on the reference CPU.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Literal

from ..experiments.demo import REPRODUCE_SIZES, run_demo
from ..lm.models import DEFAULT_DEVICE
from .study import add_study_arguments, format_plan, publish_if_asked, study_command, study_config


@dataclass(frozen=True)
class ReproduceOptions:
    """reproduce"""

    out: str = "runs/reproduce"
    """output directory (re-run the same command to resume)"""
    size: Literal["full", "complete", "smoke"] = "full"
    """stage sizes: full (the study cut to ~108 min on the 2-core reference CPU), complete (uncut, ~10 h),
    smoke (tests)"""
    model: str = "smollm2"
    """frozen LM (see `train-token --help`)"""
    device: str = DEFAULT_DEVICE
    """torch device: auto (cuda where present, else cpu), cpu, cuda, cuda:N"""
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
        print(format_plan(cfg, args.model, device=args.device))
        return 0
    command = study_command("reproduce", args, cfg, REPRODUCE_SIZES)
    run_demo(args.out, cfg, model=args.model, progress=args.progress, label="reproduce", command=command,
             device=args.device)
    publish_if_asked(args)
    return 0
