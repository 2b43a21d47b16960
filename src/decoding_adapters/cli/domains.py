"""``domains``: the mixed-domain / out-of-distribution study (``experiments.domains.run_domains``):
sequence and token adapters trained on arithmetic, on pyfunc and on their balanced mix, evaluated
on each domain's test split and on the held-out (``ood``) families against Greedy / Best / Mixed.

``--size`` picks a preset ``StudyConfig``; any of its fields given on the command line overrides
the preset (e.g. ``--size tiny --seeds 2``). Re-run the same command to resume.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Literal

from ..experiments.domains import SIZES, run_domains
from ..lm.models import DEFAULT_DEVICE
from .study import add_study_arguments, study_command, study_config


@dataclass(frozen=True)
class DomainsOptions:
    """domains study"""

    out: str = "runs/domains"
    """output directory (re-run the same command to resume)"""
    size: Literal["default", "tiny"] = "default"
    """stage sizes: tiny (tests), default (~25 min on a loaded 2-core machine)"""
    model: str = "smollm2"
    """frozen LM (see `train-token --help`)"""
    device: str = DEFAULT_DEVICE
    """torch device: auto (cuda where present, else cpu), cpu, cuda, cuda:N"""
    progress: bool = True
    """progress bars"""


def configure_parser(p: argparse.ArgumentParser) -> None:
    add_study_arguments(p, DomainsOptions)


def run_cli(args) -> int:
    cfg = study_config(args, SIZES)
    run_domains(args.out, cfg, model=args.model, progress=args.progress,
                command=study_command("domains", args, cfg, SIZES), device=args.device)
    return 0
