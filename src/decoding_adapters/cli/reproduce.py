"""``reproduce``: the study of issue 16 — does adaptive decoding beat static decoding on the
default model, with intervals narrow enough to tell? It is the demo's stage runner
(``demo.run_demo``) at ``REPRODUCE_SIZES["full"]`` (= ``demo --size full``): a separate command so
that the README's headline table names one command with its own output directory, and so that its
sizes (``full``, ``smoke``) do not mix with the demo's (``default``, ``tiny``).

    decoding-adapters reproduce --out runs/reproduce          # ~90 min on the 2-core CPU; resumable
    decoding-adapters reproduce --plan                        # the stage-by-stage estimate, no work
    decoding-adapters reproduce --size smoke --model DIR      # every stage on a tiny model (tests)

What runs (``full``):

0. token budget: greedy on 100 validation problems at 16/24/32/48/64 tokens; the smallest budget
   that stops at most 2% of greedy rows before EOS is used everywhere (report: mean greedy length
   and the truncated fraction per budget).
1. action selection on the **whole** 180-config pool plus greedy (181 candidates) on 16
   validation problems x 2 samples; K = 6 by greedy coverage, with the coverage-vs-top-K figure;
   the same table picks Best and the best single token action.
2. sequence adapters w/ and w/o budget, **live rollouts**, B in {1, 2, 4, 8}, 3 seeds, 30 steps x 8
   prompts (~30 completions a step).
3. token adapters w/ budget, w/o budget, entropy-only, 3 seeds, up to 30 steps x 8 prompts x G = 4,
   validation (48 problems) every 5 steps, early stop after 3 validations without improvement
   (best validated weights kept); the report has every seed's validation curve.
4. evaluation on 200 test problems x 3 seeds x 8 samples, pass@1/2/4/8: Greedy, Best, Mixed,
   Mixed (token actions), Best token action, and the five adapters.
5. report: paired intervals, targets, seed spread, truncation, training curves, cost, figures.

Time estimate (2-core CPU; ``--plan`` prints it from ``demo.estimate_minutes``). The model is rows
x mean length / throughput, with the throughput and lengths measured on this machine for issue 16
(``benchmarks/reproduce_sizing.py``, CPU-time based because the machine was shared during the
measurement). See README.md ("Evidence at scale") for the figures and for what was cut to fit.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Literal

from ..demo import REPRODUCE_SIZES, DemoConfig, estimate_minutes, run_demo
from .config_args import add_config_arguments, build_config


@dataclass(frozen=True)
class ReproduceOptions:
    """reproduce"""

    out: str = "runs/reproduce"
    """output directory (re-run the same command to resume)"""
    size: Literal["full", "smoke"] = "full"
    """stage sizes: full (issue 16's study, ~90 min on 2 cores) or smoke (every stage on a tiny model, tests)"""
    model: str = "smollm2"
    """frozen LM (see `train-token --help`)"""
    plan: bool = False
    """print the stage-by-stage time estimate and exit"""
    progress: bool = True
    """progress bars"""


def format_plan(cfg: DemoConfig) -> str:
    plan = estimate_minutes(cfg)
    lines = [f"{stage:>9}: {minutes:6.1f} min" for stage, minutes in plan.items()]
    note = " (before the budget stage picks one)" if cfg.token_budget_candidates else ""
    return "\n".join(lines + [f"{'total':>9}: {sum(plan.values()):6.1f} min at token budget {cfg.token_budget}{note}"])


def configure_parser(p: argparse.ArgumentParser) -> None:
    add_config_arguments(p, ReproduceOptions)
    add_config_arguments(p, DemoConfig, title="stage sizes (override the --size preset)", overrides_only=True)


def run_cli(args) -> int:
    cfg = build_config(DemoConfig, args, base=REPRODUCE_SIZES[args.size])
    if args.plan:
        print(format_plan(cfg))
        return 0
    run_demo(args.out, cfg, model=args.model, progress=args.progress, label="reproduce")
    return 0
