"""Pieces both REINFORCE trainers share: atomic checkpoints, a resumable JSONL log, seeding,
prompt batches, and the final adapter save."""

from __future__ import annotations

import json
import os
import random
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any, Sequence

import torch

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


def config_to_dict(config) -> dict:
    return asdict(config)


def action_histogram(actions: torch.Tensor, num_actions: int) -> list[float]:
    """Fraction of each action among ``actions`` (any shape, -1 entries ignored)."""
    valid = actions[actions >= 0]
    if valid.numel() == 0:
        return [0.0] * num_actions
    return (torch.bincount(valid, minlength=num_actions).float() / valid.numel()).tolist()


def mean_or_none(values: Sequence[float]) -> float | None:
    return float(sum(values) / len(values)) if values else None


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
