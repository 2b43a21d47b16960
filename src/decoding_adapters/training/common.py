"""Pieces both REINFORCE trainers share: the resumable training loop (checkpoints and the JSONL
log come from ``io``), seeding, prompt batches and the validation split."""

from __future__ import annotations

import random
import time
from dataclasses import asdict, fields
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ..decoding import row_seed
from ..io import Checkpoint, JsonlLog

__all__ = [
    "TrainingLoop",
    "EarlyStopping",
    "step_generator",
    "seed_everything",
    "sample_prompt_batch",
    "config_from_dict",
    "action_histogram",
    "load_split",
]


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


RENAMED_FIELDS = {"budgets": "parallel_budgets"}
"""Config fields renamed since a checkpoint may have been written: old name -> new name."""


def config_from_dict(cls, data: dict):
    """Rebuild a config dataclass from JSON (or a checkpoint), reading renamed fields under their
    new names and ignoring fields a newer version dropped."""
    names = {f.name for f in fields(cls)}
    data = {RENAMED_FIELDS.get(k, k) if RENAMED_FIELDS.get(k) in names else k: v for k, v in data.items()}
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
    implement ``start`` / ``train_step`` / ``validate`` / ``state`` / ``restore`` / ``save``.

    Early stopping (a config with ``patience > 0``, e.g. ``TokenTrainConfig``): after each
    validation the loop keeps the best validation reward and a copy of ``self.policy``'s weights at
    that point; when ``patience`` validations in a row have not beaten the best by more than
    ``min_improvement``, training stops, the best weights are put back and saved. The stop and the
    best step are logged (``early_stop`` record) and kept in the checkpoint, so a resumed run that
    had stopped stays stopped."""

    name = "train"

    def _init_loop(self, out_dir, progress: bool) -> None:
        self.out_dir, self.progress, self.step = Path(out_dir), progress, 0
        self.checkpoint = Checkpoint(self.out_dir)
        self.log = JsonlLog(self.out_dir / "train_log.jsonl")
        self.early = EarlyStopping()

    def start(self) -> dict | None:
        """Work before step 1 of a fresh run; a returned dict is logged as step 0."""
        return None

    def train(self, resume: bool = False) -> Path:
        cfg = self.config
        if resume and self.checkpoint.exists():
            state = self.checkpoint.load()
            if config_from_dict(type(cfg), state["config"]) != cfg:
                raise ValueError(
                    "the checkpoint was written with a different configuration; resume with the same options"
                )
            self.restore(state)
            self.step = state["step"]
            self.early = EarlyStopping.from_state(state.get("early_stopping"))
        elif self.checkpoint.exists():
            raise ValueError(
                f"{self.out_dir} already holds a run: pass --resume to continue it or choose another --out"
            )
        else:
            summary = self.start()
            self.log.truncate_after(-1)
            if summary is not None:
                self.log.append({"step": 0, **summary})
        self.log.truncate_after(self.step)
        bar = tqdm(total=cfg.steps, initial=self.step, desc=self.name, unit="step", disable=not self.progress)
        patience = getattr(cfg, "patience", 0)  # only configs that declare it stop early
        while self.step < cfg.steps and not self.early.stopped:
            started = time.perf_counter()
            seed_everything(cfg.seed, "dropout", self.step)
            record = self.train_step()
            self.step += 1
            record = {"step": self.step, **record, "seconds": time.perf_counter() - started}
            if self.step % cfg.val_every == 0 or self.step == cfg.steps:
                record["val_reward"] = self.validate()
                if patience > 0 and self.early.observe(
                    record["val_reward"], self.step, self.policy, patience, getattr(cfg, "min_improvement", 0.0)
                ):
                    record["early_stop"] = {"best_step": self.early.best_step, "best_val_reward": self.early.best}
            self.log.append(record)
            bar.set_postfix(reward=f"{record['reward']:.2f}", val=f"{record.get('val_reward', float('nan')):.2f}")
            bar.update(1)
            if self.step % cfg.checkpoint_every == 0 or self.step == cfg.steps or self.early.stopped:
                self.checkpoint.save(
                    {"step": self.step, "config": asdict(cfg), **self.state(), "early_stopping": self.early.state()}
                )
        bar.close()
        if patience > 0 and self.early.best_policy is not None:
            self.policy.load_state_dict(self.early.best_policy)  # the adapter is the best validated one
        return self.save()


class EarlyStopping:
    """Best validation reward so far, the weights at that point and validations since (see
    ``TrainingLoop``). A NaN validation reward (no validation problems) never counts as better."""

    def __init__(self):
        self.best = float("-inf")
        self.best_step = 0
        self.since_best = 0
        self.stopped = False
        self.best_policy: dict | None = None

    def observe(self, value: float, step: int, policy: torch.nn.Module, patience: int, min_improvement: float) -> bool:
        """Record a validation reward; True when this one ends training."""
        if value == value and value > self.best + min_improvement:  # value == value: not NaN
            self.best, self.best_step, self.since_best = value, step, 0
            self.best_policy = {k: v.detach().clone() for k, v in policy.state_dict().items()}
        else:
            self.since_best += 1
        self.stopped = self.since_best >= patience
        return self.stopped

    def state(self) -> dict:
        return {
            "best": self.best,
            "best_step": self.best_step,
            "since_best": self.since_best,
            "stopped": self.stopped,
            "best_policy": self.best_policy,
        }

    @classmethod
    def from_state(cls, state: dict | None) -> "EarlyStopping":
        early = cls()
        for key, value in (state or {}).items():
            setattr(early, key, value)
        return early
