"""What the study commands (``demo``, ``reproduce``, ``domains``) share: a ``--size`` preset
``StudyConfig`` whose every field, nested ones included (``--token.lr``, ``--sequence.steps``,
``--selection.k``, ``--eval.k-values``), can be overridden on the command line, and the command
line that reproduces a run; ``demo`` and ``reproduce`` also take where their sample tables are
decoded (``--table-backend``, ``--table-workers``)."""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..decoding.table_engines import TableBackend
from ..experiments.planning import estimate_minutes, fit_note, fit_to_minutes, plan_advice, plan_range
from ..experiments.probe import decode_probe
from ..experiments.study_config import StudyConfig
from ..lm.models import DEFAULT_DEVICE, ModelSpec, load_frozen_lm
from .config_args import add_config_arguments, build_config

__all__ = ["StudyTableOptions", "add_study_arguments", "add_table_backend_arguments", "table_backend", "study_config",
           "study_command", "format_plan", "publish", "publish_if_asked"]


def add_study_arguments(p: argparse.ArgumentParser, options: type) -> None:
    """The command's own ``options`` dataclass, then every ``StudyConfig`` field as an override."""
    add_config_arguments(p, options)
    add_config_arguments(p, StudyConfig, title="stage sizes (override the --size preset)", overrides_only=True)


@dataclass(frozen=True)
class StudyTableOptions:
    """sample tables"""

    table_backend: Literal["hf", "ray"] = TableBackend.kind
    """where the sample tables of the rules, verifier and attempt stages are decoded: hf (this process) or
    ray (--table-workers actors, each with its own copy of the LM). The tables are the same bytes either
    way (the same chunks, a seed per row), so a resumed run may switch"""
    table_workers: int = TableBackend.workers
    """Ray actors that decode the sample tables (--table-backend ray)"""

    def __post_init__(self) -> None:
        TableBackend(self.table_backend, self.table_workers)  # checks them


def add_table_backend_arguments(p: argparse.ArgumentParser) -> None:
    """``--table-backend`` / ``--table-workers`` (``demo`` and ``reproduce``)."""
    add_config_arguments(p, StudyTableOptions)


def table_backend(args) -> TableBackend:
    """Where the study's sample tables are decoded, from ``--table-backend`` / ``--table-workers``."""
    options = build_config(StudyTableOptions, args)
    if options.table_backend == "ray" and importlib.util.find_spec("ray") is None:  # before the LM loads
        raise ValueError("--table-backend ray needs Ray (pip install -e '.[ray]'); or build the tables with "
                         "--table-backend hf")
    return TableBackend(options.table_backend, options.table_workers)


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
    if getattr(args, "device", DEFAULT_DEVICE) != DEFAULT_DEVICE:
        parts += ["--device", args.device]
    parts += _changes(cfg, sizes[args.size])
    return " ".join(shlex.quote(p) for p in parts)


def format_plan(cfg: StudyConfig, model: str | None = None, minutes: float | None = None,
                device: str = DEFAULT_DEVICE) -> str:
    """The stage-by-stage estimate; with ``model``, scaled to this machine by a few seconds' decode
    probe of it (``experiments.probe.decode_probe``, as the run measures it), and with ``minutes`` as well, of the
    sizes ``fit_to_minutes`` keeps on this machine."""
    probe = speed = None
    if model is not None:
        lm = load_frozen_lm(ModelSpec(name_or_path=model, device=device))
        probe = decode_probe(lm, cfg)
        speed = probe.capacity  # the sizes fit the machine, not the minute it was probed in (as the run does)
    fitting = bool(minutes and speed)
    fitted = fit_to_minutes(cfg, speed, minutes)[0] if fitting else cfg
    plan = estimate_minutes(fitted, speed)
    lines = [f"{stage:>9}: {planned:6.1f} min" for stage, planned in plan.items()]
    note = " (before the budget stage picks one)" if cfg.budget.candidates else ""
    lines.append(f"{'total':>9}: {sum(plan.values()):6.1f} min at token budget {cfg.token_budget}{note}")
    if probe is not None:
        low, high = plan_range(fitted, probe)
        lines.append(f"{'range':>9}: {low:.1f}-{max(high, low):.1f} min (unloaded - at the speed seen now); "
                     + probe.describe())
    cut = fit_note(cfg, fitted, minutes, speed) if fitting else ""
    advice = plan_advice(cfg, fitted, minutes, probe) if probe is not None else ""
    return "\n".join(lines + ([cut] if cut else []) + ([f"advice: {advice}"] if advice else []))


def publish(out: Path, target: Path) -> list[Path]:
    """Copy what the README's headline cites from a finished run ``out`` into ``target``: the
    report directory (report.md, results.json, figures, traces), the evaluation's
    eval_details.json (per-problem outcomes: every paired interval can be recomputed from it), the
    run's configuration and stage minutes, the truncation figures, the action selection, the fixed
    rules' tuned curves (validation and test, every setting), the attempt policies' curve, and the
    sample tables the rules and the attempt policies read (``tables/validation``, ``tables/evaluated``,
    ``tables/train``: every arm, sample, answer, confidence reading and mean hidden state), and the
    weights of every trained verifier and attempt policy (``verifier/``, ``policies/``: re-scored on
    those tables without retraining, ``evaluation.rescore``)."""
    sources = [p for p in sorted((out / "report").iterdir()) if p.is_file()]
    sources += [out / "eval" / "eval_details.json", out / "study_config.json", out / "stage_minutes.json",
                out / "budget" / "truncation.json", out / "rules" / "curves.json", out / "attempt" / "curve.json",
                out / "verifier" / "verifier_rules.json"]
    sources += [out / "actions" / name for name in ("selection.md", "selection.png", "actions.json")]
    target.mkdir(parents=True, exist_ok=True)
    copied = []
    for source in sources:
        if source.is_file():
            copied.append(Path(shutil.copy2(source, target / source.name)))
    tables = {"validation": out / "rules" / "validation", "evaluated": out / "rules" / "test",
              "train": out / "attempt" / "train"}
    for name, source in tables.items():
        if source.is_dir():
            shutil.copytree(source, target / "tables" / name, dirs_exist_ok=True)
            copied += sorted(p for p in (target / "tables" / name).iterdir() if p.is_file())
    return copied + _publish_weights(out, target)


TRAINED_FILES = ("adapter.json", "adapter.safetensors", "README.md", "train_log.jsonl", "verifier.json",
                 "verifier.safetensors")
"""What of a trained policy's or verifier's directory is published (not its optimiser checkpoint)."""


def _publish_weights(out: Path, target: Path) -> list[Path]:
    """The verifier (``verifier/``) and every attempt policy, the single-arm ones included
    (``policies/``, ``policies/single-arm/``), each directory's :data:`TRAINED_FILES`."""
    folders = {target / "verifier": out / "verifier" / "verifier"}
    for pattern, where in (("price-*-seed-*", "policies"), ("single-arm/arm-*", "policies/single-arm")):
        folders.update({target / where / d.name: d for d in sorted((out / "attempt").glob(pattern)) if d.is_dir()})
    copied = []
    for dest, source in folders.items():
        for name in TRAINED_FILES:
            if (source / name).is_file():
                dest.mkdir(parents=True, exist_ok=True)
                copied.append(Path(shutil.copy2(source / name, dest / name)))
    return copied


def publish_if_asked(args) -> None:
    if args.publish:
        print(f"published {len(publish(Path(args.out), Path(args.publish)))} files to {args.publish}")
