"""``demo``: the main job (``experiments.demo.run_demo``): select actions, train both adapters,
evaluate, report.

``--size`` picks a preset ``StudyConfig``; any of its fields given on the command line overrides
the preset (e.g. ``--size tiny --seeds 1 --token.lr 0.001``). The full-size study is ``reproduce``.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Literal

from ..experiments.demo import run_demo
from ..experiments.presets import SIZES
from ..lm.models import DEFAULT_DEVICE
from .common import check_output_dir
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
class DemoOptions:
    """demo"""

    out: str = "runs/demo"
    """output directory (re-run the same command to resume)"""
    size: Literal["default", "tiny"] = "default"
    """stage sizes: tiny (a first run: every stage, the fixed rules and the attempt policy included, at
    small sizes: not evidence), default (~13 min on the 2-core reference machine); the full study is `reproduce`"""
    minutes: float = 15.0
    """fit the run into this many minutes on this machine: when the plan (scaled by the decode probe) is
    longer, token-training steps, then seeds and selection samples, and only then evaluation and
    selection problems are cut until it fits, and the output and the report say so; 0 keeps the sizes"""
    model: str = "smollm2"
    """frozen LM (see `train-token --help`)"""
    device: str = DEFAULT_DEVICE
    """torch device: auto (cuda where present, else cpu), cpu, cuda, cuda:N"""
    plan: bool = False
    """print the stage-by-stage time estimate, scaled to this machine by a few seconds' decode probe, and exit"""
    publish: str | None = None
    """after the run, copy the report, its figures, eval_details.json (per-problem outcomes), the
    configuration and the action selection into this directory (e.g. docs/demo)"""
    progress: bool = True
    """progress bars"""


def configure_parser(p: argparse.ArgumentParser) -> None:
    add_study_arguments(p, DemoOptions)
    add_table_backend_arguments(p)


def run_cli(args) -> int:
    if args.minutes < 0:
        raise ValueError(f"--minutes must be >= 0 (0 keeps the sizes as given), got {args.minutes:g}")
    cfg = study_config(args, SIZES)
    tables = table_backend(args)
    if args.plan:
        print(format_plan(cfg, args.model, minutes=args.minutes, device=args.device))
        return 0
    check_output_dir(args.out)  # pre-flight: a file or unwritable --out fails now, not after a stage
    command = study_command("demo", args, cfg, SIZES)
    if args.minutes != DemoOptions.minutes:
        command += f" --minutes {args.minutes:g}"
    run_demo(args.out, cfg, model=args.model, progress=args.progress, command=command, minutes=args.minutes or None,
             device=args.device, tables=tables)
    publish_if_asked(args)
    return 0
