"""What the study commands (``demo``, ``reproduce``, ``domains``) share: a ``--size`` preset
``StudyConfig`` whose every field, nested ones included (``--token.lr``, ``--sequence.steps``,
``--selection.k``, ``--eval.k-values``), can be overridden on the command line, and the command
line that reproduces a run."""

from __future__ import annotations

import argparse
import dataclasses
import shlex

from ..experiments.pipeline import StudyConfig
from .config_args import add_config_arguments, build_config

__all__ = ["add_study_arguments", "study_config", "study_command"]


def add_study_arguments(p: argparse.ArgumentParser, options: type) -> None:
    """The command's own ``options`` dataclass, then every ``StudyConfig`` field as an override."""
    add_config_arguments(p, options)
    add_config_arguments(p, StudyConfig, title="stage sizes (override the --size preset)", overrides_only=True)


def study_config(args, sizes: dict[str, StudyConfig]) -> StudyConfig:
    """The ``--size`` preset with the fields given on the command line replaced."""
    return build_config(StudyConfig, args, base=sizes[args.size])


def _changes(cfg, preset, prefix: str = "", exclude=()) -> list[str]:
    """``--name value`` for every option-backed field where ``cfg`` differs from ``preset``."""
    parts = []
    for f in dataclasses.fields(cfg):
        value, base = getattr(cfg, f.name), getattr(preset, f.name)
        if f.name in exclude:
            continue
        if dataclasses.is_dataclass(value):
            parts += _changes(value, base, f"{prefix}{f.name}.", f.metadata.get("exclude", ()))
        elif value != base:
            text = ",".join(map(str, value)) if isinstance(value, tuple) else "none" if value is None else str(value)
            parts += [f"--{prefix}{f.name.replace('_', '-')}", text]
    return parts


def study_command(command: str, args, cfg: StudyConfig, sizes: dict[str, StudyConfig]) -> str:
    """The command line that reproduces this run: the options, plus every size that differs from the preset."""
    parts = ["decoding-adapters", command, "--out", args.out, "--size", args.size]
    if args.model != "smollm2":
        parts += ["--model", args.model]
    parts += _changes(cfg, sizes[args.size])
    return " ".join(shlex.quote(p) for p in parts)
