"""``demo``: the main job (``demo.run_demo``): select actions, train both adapters, evaluate, report.

``--size`` picks a preset ``DemoConfig``; any of its fields given on the command line overrides
the preset (e.g. ``--size tiny --seeds 1``).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Literal

from ..experiments.demo import SIZES, DemoConfig, run_demo
from .common import check_output_dir
from .config_args import add_config_arguments, build_config


@dataclass(frozen=True)
class DemoOptions:
    """demo"""

    out: str = "runs/demo"
    """output directory (re-run the same command to resume)"""
    size: Literal["default", "full", "tiny"] = "default"
    """stage sizes: tiny (tests), default (~15 min on 2 cores), full (= `reproduce`, the full study)"""
    model: str = "smollm2"
    """frozen LM (see `train-token --help`)"""
    progress: bool = True
    """progress bars"""


def configure_parser(p: argparse.ArgumentParser) -> None:
    add_config_arguments(p, DemoOptions)
    add_config_arguments(p, DemoConfig, title="stage sizes (override the --size preset)", overrides_only=True)


def run_cli(args) -> int:
    cfg = build_config(DemoConfig, args, base=SIZES[args.size])
    check_output_dir(args.out)  # pre-flight: a file or unwritable --out fails now, not after a stage
    run_demo(args.out, cfg, model=args.model, progress=args.progress)
    return 0
