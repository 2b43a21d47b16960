"""Pieces both REINFORCE trainers share: atomic checkpoints, a resumable JSONL log, seeding,
prompt batches, and the final adapter save."""

from __future__ import annotations

import json
import os
import random
import time
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any, Sequence

import torch
from tqdm.auto import tqdm

from ..decoding import row_seed

__all__ = ["Checkpoint", "JsonlLog", "step_generator", "sample_prompt_batch", "config_from_dict"]


class Checkpoint:
    """``DIR/checkpoint.pt`` written atomically (temp file + ``os.replace``): a kill mid-write leaves
    the previous checkpoint intact, so ``--resume`` loses at most one checkpoint interval."""

    def __init__(self, directory: str | Path):
        self.path = Path(directory) / "checkpoint.pt"

    def exists(self) -> bool:
        return self.path.is_file()

    def save(self, state: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".pt.tmp")
        torch.save(state, tmp)
        os.replace(tmp, self.path)

    def load(self) -> dict[str, Any]:
        return torch.load(self.path, map_location="cpu", weights_only=False)


class JsonlLog:
    """Append-only training log; ``truncate_after(step)`` drops lines a resumed run will redo."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def truncate_after(self, step: int) -> None:
        if not self.path.exists():
            return
        keep = [line for line in self.read() if line.get("step", -1) <= step]
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps(x) + "\n" for x in keep))
        os.replace(tmp, self.path)

    def append(self, record: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()

    def read(self) -> list[dict]:
        if not self.path.exists():
            return []
        out = []
        for line in self.path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:  # a torn last line after a kill
                break
        return out


def step_generator(seed: int, *keys) -> torch.Generator:
    """A generator for one training step, so a resumed run redraws exactly what it would have."""
    return torch.Generator().manual_seed(row_seed(seed, *keys))


def seed_everything(seed: int, *keys) -> None:
    """Seed the global RNGs (dropout) from ``(seed, *keys)``."""
    s = row_seed(seed, *keys)
    torch.manual_seed(s)
    random.seed(s)


def sample_prompt_batch(num_prompts: int, batch: int, generator: torch.Generator) -> list[int]:
    """``batch`` distinct prompt indices (all of them when there are fewer)."""
    return torch.randperm(num_prompts, generator=generator)[: min(batch, num_prompts)].tolist()


def config_from_dict(cls, data: dict):
    """Rebuild a config dataclass from JSON, ignoring fields a newer version dropped."""
    names = {f.name for f in fields(cls)}
    return cls(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in data.items() if k in names})


def action_histogram(actions: torch.Tensor, num_actions: int) -> list[float]:
    """Fraction of each action among ``actions`` (any shape, -1 entries ignored)."""
    valid = actions[actions >= 0]
    if valid.numel() == 0:
        return [0.0] * num_actions
    return (torch.bincount(valid, minlength=num_actions).float() / valid.numel()).tolist()


def load_split(task, split: str) -> list:
    """``task.load(split)``; a task without a validation split lends the last 10% of its train
    split (the trainers then leave those problems out of training)."""
    try:
        return task.load(split)
    except ValueError:
        if split != "validation":
            raise
        train = task.load("train")
        return train[len(train) - max(1, len(train) // 10):]


class TrainingLoop:
    """The loop both trainers share: resume or start, one ``train_step`` per step, validation every
    ``val_every`` steps, a JSONL record per step, an atomic checkpoint every ``checkpoint_every``
    steps and at the end, then ``save`` (the adapter). Subclasses set ``config`` (with ``steps``,
    ``val_every``, ``checkpoint_every``, ``seed``), ``out_dir``, ``progress`` and ``step``, and
    implement ``start`` / ``train_step`` / ``validate`` / ``state`` / ``restore`` / ``save``."""

    name = "train"

    def _init_loop(self, out_dir, progress: bool) -> None:
        self.out_dir, self.progress, self.step = Path(out_dir), progress, 0
        self.checkpoint = Checkpoint(self.out_dir)
        self.log = JsonlLog(self.out_dir / "train_log.jsonl")

    def start(self) -> dict | None:
        """Work before step 1 of a fresh run; a returned dict is logged as step 0."""
        return None

    def train(self, resume: bool = False) -> Path:
        cfg = self.config
        if resume and self.checkpoint.exists():
            state = self.checkpoint.load()
            if state["config"] != asdict(cfg):
                raise ValueError("the checkpoint was written with a different configuration; resume with the same options")
            self.restore(state)
            self.step = state["step"]
        elif self.checkpoint.exists():
            raise ValueError(f"{self.out_dir} already holds a run: pass --resume to continue it or choose another --out")
        else:
            summary = self.start()
            self.log.truncate_after(-1)
            if summary is not None:
                self.log.append({"step": 0, **summary})
        self.log.truncate_after(self.step)
        bar = tqdm(total=cfg.steps, initial=self.step, desc=self.name, unit="step", disable=not self.progress)
        while self.step < cfg.steps:
            started = time.perf_counter()
            seed_everything(cfg.seed, "dropout", self.step)
            record = self.train_step()
            self.step += 1
            record = {"step": self.step, **record, "seconds": time.perf_counter() - started}
            if self.step % cfg.val_every == 0 or self.step == cfg.steps:
                record["val_reward"] = self.validate()
            self.log.append(record)
            bar.set_postfix(reward=f"{record['reward']:.2f}", val=f"{record.get('val_reward', float('nan')):.2f}")
            bar.update(1)
            if self.step % cfg.checkpoint_every == 0 or self.step == cfg.steps:
                self.checkpoint.save({"step": self.step, "config": asdict(cfg), **self.state()})
        bar.close()
        return self.save()


def add_loop_arguments(group, config_cls, int_fields: Sequence[str], float_fields: Sequence[str]) -> None:
    """``--some-field`` options for the named config fields, defaults from the dataclass."""
    for name in int_fields:
        group.add_argument("--" + name.replace("_", "-"), type=int, default=getattr(config_cls, name))
    for name in float_fields:
        group.add_argument("--" + name.replace("_", "-"), type=float, default=getattr(config_cls, name))


def resolve_config(args, config_cls, config_from_args):
    """The run's config: from the command line, or from the checkpoint when resuming."""
    if args.resume and Checkpoint(args.out).exists():
        return config_from_dict(config_cls, Checkpoint(args.out).load()["config"])
    return config_from_args(args)


def run_training_cli(args, config_cls, config_from_args, make_trainer, what: str) -> int:
    """Shared body of ``train-*``: config (from the checkpoint on --resume), LM, task, rollouts,
    train, and release the rollout workers whatever happens."""
    from ..actions import ActionSet, load_action_set
    from ..cli_common import build_lm, build_rollouts, build_task

    config = resolve_config(args, config_cls, config_from_args)
    lm = build_lm(args)
    task = build_task(args)
    action_set = ActionSet(load_action_set(config.actions), device=lm.device)
    rollouts = None if getattr(config, "replay", None) else build_rollouts(args, lm, action_set)
    try:
        out = make_trainer(config, lm, task, rollouts, action_set).train(resume=args.resume)
    finally:
        if rollouts is not None:
            rollouts.close()
    print(f"{what} written to {out}")
    return 0
