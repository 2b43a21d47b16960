"""``reproduce``: the headline study — does adaptive decoding beat static decoding and the fixed
answer rules on the default model, with intervals narrow enough to tell, and at what compute? It
runs the demo's stages (``experiments.demo.run_demo``) at ``REPRODUCE_SIZES`` (``full``, ``complete``,
``smoke``); ``full`` is the published evidence run, the only command that reads the arithmetic task's
sealed2 split (disjoint by content from every other split); the README's headline names this one
command with its own output directory.

    decoding-adapters reproduce --out runs/reproduce-sealed2 --publish docs/reproduce-sealed2  # resumable
    decoding-adapters reproduce --plan                        # the stage-by-stage estimate for this machine
    decoding-adapters reproduce --size smoke --model DIR      # every stage on a tiny model (tests)

What runs (``full``):

0. token budget: greedy on 400 validation problems, decoded once at 96 tokens; the smallest of
   32/48/64/96 that stops at most 35% of greedy rows before EOS or their first answer is used
   everywhere after (chosen on validation: 32, which stops 14.5% there; the report lists mean greedy
   length and truncated fraction per budget).
1. action selection on 16 actions spread over the 180-config pool plus greedy (17 candidates) on 64
   validation problems x 4 samples; K = 6 by greedy coverage, with the coverage curve and where it
   saturates; Best at each pass@k (greedy and greedy stopped at its first answer included) is
   chosen among finalists decoded on the same 400 validation problems as every other choice; the
   selection table picks the best single token action.
2. sequence adapters w/ and w/o budget, **live rollouts**, B in {1, 2, 4}, 3 seeds, 16 steps x
   8 prompts, validated live (the argmax policy, as evaluated) on 400 problems at every B every 8
   steps and at step 0; a later step is kept only when its paired gain over step 0 is above 1.96
   standard errors (at every B where its choices change, for the w/ budget adapter), else step 0;
   the w/ budget adapter starts at Best at pass@B for each B, the w/o budget one at Best at pass@1.
3. draft-gated adapters, 3 seeds: both-arms tables (a greedy draft stopped at its first answer and 4
   re-decodes with the selected set's Best sampled action, on 256 training and 400 validation
   problems), 400 full-information steps from a prior on keeping the draft; beside them a random
   gate at the adapter's validation re-decode share and a confidence threshold tuned on validation.
4. token adapters w/ budget, w/o budget, entropy-only, 3 seeds, 16 steps x 8 prompts x G=8 each,
   prior at the best static token action; training prompts filtered by that prior (2 samples each,
   probed until 256 survive, from a train split of 1,500 generated problems), walked epoch by epoch
   so each run sees 256 distinct prompts; validation of the argmax policy on 400 problems x 1
   sample at step 0 and every 16 steps (the validation split generated at 400: its first 100 are
   the same problems as at the default size), a later step kept only when its paired gain's 95%
   interval is above 0; every seed's curve in the report.
5. evaluation on the first 1,000 problems of the sealed2 split x 3 seeds x 2 samples, pass@1/2 and
   answer accuracy: Greedy (stopped at its first answer), Greedy to the budget, Best, Mixed, Mixed
   (per token), Mixed per sequence (token actions), Best token action, the five adapters, the
   draft-gated adapter and its two controls; decodes and generated tokens per problem for every method.
5b. fixed rules: sample tables of the 400 validation and the 1,000 evaluated problems (the stopped
   greedy and 6 samples of each of the selection's first three sampled actions, mean hidden states
   kept; resumable, under ``rules/``), every rule of docs/rules.md tuned on validation per compute
   level and sampled arm and scored on the evaluated problems; each tuned point joins the evaluation
   as a method of family ``fixed rule``. Then the verifier, trained on the attempt stage's training
   table, and every rule that reads it (``verifier/``), tuned and scored the same way.
5c. the learned attempt policy (confidence + hidden-state summary): a table of 400 training problems
   under the same arms, one policy per price (0.3 ... 0.003) and training seed, kept-best on the
   validation table and scored on the evaluated one; per seed, the same policy restricted to each
   single sampled arm (the value of choosing the decoder); the report reads each seed's curve at
   1.5, 2.5 and 4 decodes per problem against the strongest rule there (verifier-reading rules
   included), and at the draft-gated adapter's compute against it.
6. report: paired intervals with the direction on every seed, the targets, seed spread, accuracy
   per compute (which method wins at each number of decodes per problem), truncation, training
   curves, cost (minutes per stage against the plan, tokens per training step, steps per minute),
   figures.

Measurements behind the plan (``experiments.planning`` holds the constants): a model of decoded
rows x mean length / throughput, with one scale per stage fitted on a published run, and a few
seconds' decode probe (``experiments.probe``) that scales it to the machine it runs on.
Decoded to the budget, greedy on the 100 validation problems at budgets 16/24/32/48/64/96 has mean
length 14.6 / 20.5 / 25.3 / 32.5 / 35.7 / 39.3 tokens, stopped by the budget 77 / 70 / 52 / 30 / 15 /
7% of rows: the model keeps talking after the answer. Stopped at its first answer (the protocol), on
the 400 validation problems at 32/48/64/96: 19.0 / 20.9 / 22.1 / 23.4 tokens, 14.5 / 10 / 5 / 2.5% cut.

``reproduce --plan`` prints the plan per stage for the machine it runs on; the plan on the reference
machine (probe 440 tok/s) and the minutes the published run spent are in docs/results.md. What was
cut to fit 120 minutes on the reference machine, evaluation first (each is a field of
``StudyConfig``; ``--size complete`` restores them all):

- pass@8: the evaluation scores 4 samples per problem and seed (pass@8 doubled its rows), and the
  sequence adapters train at B up to 4, the largest B evaluated;
- token validation: the argmax policy only (sampling the policy too doubled it; argmax was the
  served mode of every run before) on 400 problems x 1 sample, not 400 x 2;
- the token budget: greedy truncation allowed up to 35% (expected choice 32: 14.5% of greedy rows
  cut before their first answer, mean greedy length 19.0) instead of ~2% (96 tokens);
- selection over 16 of the 180 pool actions (plus greedy), not the whole pool;
- short training: sequence adapters 24 live steps of 8 prompts, token adapters 32 steps of 64
  rollouts (48 before the evaluation grew to 1,000 problems). The report's cost section gives tokens
  per step and steps per minute.

``--size complete`` (the uncut study: budget chosen at <= 2% truncation from 48..192, pass@8,
selection on the whole pool, 60 steps of each adapter, token validation in both modes on 400 x 2)
is for a bigger machine (``reproduce --size complete --plan``).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Literal

from ..experiments.demo import run_demo
from ..experiments.presets import REPRODUCE_SIZES, SIZE_NOTES
from ..lm.models import DEFAULT_DEVICE
from .study import (
    add_study_arguments,
    add_table_backend_arguments,
    format_plan,
    publish_if_asked,
    study_command,
    study_config,
    table_backend,
)


@dataclass(frozen=True)
class ReproduceOptions:
    """reproduce"""

    out: str = "runs/reproduce"
    """output directory (re-run the same command to resume)"""
    size: Literal["full", "complete", "smoke"] = "full"
    """stage sizes: full (the evidence run on the sealed2 split, cut to fit the 2-core reference CPU;
    --plan prints its plan here), complete (uncut, for a bigger machine), smoke (tests)"""
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
    add_table_backend_arguments(p)


def run_cli(args) -> int:
    cfg = study_config(args, REPRODUCE_SIZES)
    tables = table_backend(args)
    if args.plan:
        print(format_plan(cfg, args.model, device=args.device))
        return 0
    command = study_command("reproduce", args, cfg, REPRODUCE_SIZES)
    preset = REPRODUCE_SIZES[args.size]
    run_demo(args.out, cfg, model=args.model, progress=args.progress, label="reproduce", command=command,
             device=args.device, tables=tables,
             size_note=SIZE_NOTES.get(args.size, "") if cfg == preset else "")
    publish_if_asked(args)
    return 0
