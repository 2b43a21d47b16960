"""``domains``: the mixed-domain / out-of-distribution study (``studies.domains.run_domains``):
sequence and token adapters trained on arithmetic, on pyfunc and on their balanced mix, evaluated
on each domain's test split and on the held-out (``ood``) families against Greedy / Best / Mixed.

``--size`` picks a preset ``DomainsConfig``; any of its fields given on the command line overrides
the preset (e.g. ``--size tiny --seeds 2``). Re-run the same command to resume.
"""

from __future__ import annotations

import argparse
import shlex
from dataclasses import dataclass, fields
from typing import Literal

from ..experiments.domains import SIZES, DomainsConfig, run_domains
from .config_args import add_config_arguments, build_config


@dataclass(frozen=True)
class DomainsOptions:
    """domains study"""

    out: str = "runs/domains"
    """output directory (re-run the same command to resume)"""
    size: Literal["default", "tiny"] = "default"
    """stage sizes: tiny (tests), default (~25 min on a loaded 2-core machine)"""
    model: str = "smollm2"
    """frozen LM (see `train-token --help`)"""
    progress: bool = True
    """progress bars"""


def configure_parser(p: argparse.ArgumentParser) -> None:
    add_config_arguments(p, DomainsOptions)
    add_config_arguments(p, DomainsConfig, title="stage sizes (override the --size preset)", overrides_only=True)


def reproduce_command(args, cfg: DomainsConfig) -> str:
    """The command that reproduces this run: the options, plus every size that differs from the preset."""
    parts = ["decoding-adapters", "domains", "--out", args.out, "--size", args.size]
    if args.model != "smollm2":
        parts += ["--model", args.model]
    preset = SIZES[args.size]
    for f in fields(DomainsConfig):
        value = getattr(cfg, f.name)
        if value != getattr(preset, f.name):
            text = ",".join(map(str, value)) if isinstance(value, tuple) else str(value)
            parts += [f"--{f.name.replace('_', '-')}", text]
    return " ".join(shlex.quote(p) for p in parts)


def run_cli(args) -> int:
    cfg = build_config(DomainsConfig, args, base=SIZES[args.size])
    run_domains(args.out, cfg, model=args.model, progress=args.progress, command=reproduce_command(args, cfg))
    return 0
