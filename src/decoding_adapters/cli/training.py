"""What ``train-sequence`` and ``train-token`` share: their options and the run around a trainer."""

from __future__ import annotations

import argparse
import json
import logging
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from ..core.files import Checkpoint, write_json
from ..decoding.actions import ActionSet, load_action_set
from ..training.common import check_resume
from .common import (
    COMMAND_TOKEN_BUDGET,
    add_model_arguments,
    add_rollout_arguments,
    add_run_arguments,
    add_task_arguments,
    build_lm,
    build_rollouts,
    build_task,
    check_output_dir,
    load_problems,
)
from .config_args import add_config_arguments, build_config

__all__ = ["configure_training_parser", "resolve_config", "start_trainer", "training_run"]

log = logging.getLogger(__name__)


def configure_training_parser(p: argparse.ArgumentParser, config_cls: type, title: str, exclude=()) -> None:
    """frozen LM, task, rollouts, the trainer config (every field but ``exclude``), --out / --resume, --force."""
    add_model_arguments(p)
    add_task_arguments(p, exclude=("cot_ratio", "max_problems"))  # trainers: max_train_prompts / val_problems
    add_rollout_arguments(p, exclude=("token_budget", "seed"))
    add_config_arguments(p, config_cls, title=title, exclude=exclude, defaults={"token_budget": COMMAND_TOKEN_BUDGET})
    add_run_arguments(p)
    add_config_arguments(p, PreflightOptions)


@dataclass(frozen=True)
class PreflightOptions:
    """pre-flight"""

    force: bool = False
    """train even when the pre-flight check (greedy on the first training problems, or the draft table)
    finds nothing solved; without it the run stops there with the share solved and cut by the budget"""


def start_trainer(trainer, args) -> str:
    """``trainer`` set to refuse an unsolvable start unless ``--force``, trained (or resumed); the
    adapter's directory, with the step it kept where that is not the last (``... (kept step 0, the
    untrained start)``)."""
    trainer.refuse_unsolved = not getattr(args, "force", False)
    out = trainer.train(resume=args.resume)
    kept = getattr(trainer, "kept_step", None)
    if kept is None or kept == trainer.step:
        return str(out)
    start = ", the untrained start: no later validation beat it" if kept == 0 else ""
    return f"{out} (kept step {kept} of {trainer.step}{start})"


OPTIONS_FILE = "cli_options.json"
"""The options a training run was started with, beside its checkpoint: ``--resume`` reads them back."""
NOT_STORED = ("out", "resume", "command", "verbose", "progress", "force")


def resolve_config(args, config_cls):
    """The run's config, from the command line, after the pre-flight checks that need no model:
    ``--out`` is a directory; an existing run there is refused without ``--resume``; with it, every
    option not given again is read back from the run (``cli_options.json``, else the checkpoint's
    config), and the options given must match the checkpoint's (``training.common.check_resume``:
    only options that extend the run may change, and the change is reported); the action set and
    the task's training data load. A fresh run records its options."""
    check_output_dir(args.out)
    checkpoint = Checkpoint(args.out)
    state = checkpoint.load() if checkpoint.exists() else None
    if state is not None and not args.resume:
        raise ValueError(f"{args.out} already holds a run: pass --resume to continue it or choose another --out")
    if state is not None:
        _check_same_model(args)
        _restore_options(args, state["config"])
    elif args.resume:
        log.warning("--resume: %s holds no checkpoint yet; starting the run from the beginning", args.out)
    config = build_config(config_cls, args)
    if state is not None:
        check_resume(state["config"], config, state["step"], checkpoint.path)  # the trainer logs allowed changes
    load_action_set(config.actions)
    load_problems(build_task(args), "train")
    if state is None:
        stored = {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(args).items()
                  if not k.startswith("_") and k not in NOT_STORED}
        write_json(Path(args.out) / OPTIONS_FILE, stored)
    return config


def _check_same_model(args) -> None:
    """A run resumes on the LM it was started with: its checkpoint's policy is shaped for that LM's
    hidden states (another LM's would not fit them, or would silently mean something else)."""
    path = Path(args.out) / OPTIONS_FILE
    if "name_or_path" not in getattr(args, "_given", set()) or not path.is_file():
        return
    started = json.loads(path.read_text()).get("name_or_path")
    if started is not None and started != args.name_or_path:
        raise ValueError(f"{args.out} was trained on --model {started}: a policy cannot continue on another LM "
                         f"(--model {args.name_or_path}); resume without --model, or start a new --out")


def _restore_options(args, saved_config: dict) -> None:
    """Every option not given on this command line takes the value the run was started with."""
    given = getattr(args, "_given", set())
    stored = dict(saved_config)
    path = Path(args.out) / OPTIONS_FILE
    if path.is_file():
        stored.update(json.loads(path.read_text()))
    restored = []
    for name, value in stored.items():
        if name in given or not hasattr(args, name) or name in NOT_STORED:
            continue
        value = tuple(value) if isinstance(value, list) and isinstance(getattr(args, name), tuple) else value
        if getattr(args, name) != value:
            shown = ",".join(map(str, value)) if isinstance(value, (tuple, list)) else value
            restored.append(f"--{name.replace('_', '-')} {shown}")
        setattr(args, name, value)
    if restored:
        log.info("resuming %s with its original options: %s", args.out, " ".join(map(str, restored)))


@contextmanager
def training_run(args, config, needs_rollouts: bool = True) -> Iterator[tuple]:
    """``(lm, task, action_set, rollouts)`` for a trainer; the rollouts are released whatever happens."""
    lm = build_lm(args)
    task = build_task(args)
    action_set = ActionSet(load_action_set(config.actions), device=lm.device)
    rollouts = build_rollouts(args, lm, action_set) if needs_rollouts else None
    try:
        yield lm, task, action_set, rollouts
    finally:
        if rollouts is not None:
            rollouts.close()
