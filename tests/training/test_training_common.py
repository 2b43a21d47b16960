"""training.common: the resumable loop both trainers share (on a toy trainer), resume checks,
config round trips, seeding and the small helpers."""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import torch

from decoding_adapters.training.common import (
    TrainingLoop,
    action_histogram,
    check_resume,
    check_shared_fields,
    config_from_dict,
    load_split,
    seed_everything,
    step_generator,
)


@dataclass(frozen=True)
class ToyConfig:
    steps: int = 6
    val_every: int = 2
    checkpoint_every: int = 2
    seed: int = 0
    lr: float = 0.5
    sizes: tuple[int, ...] = (1, 2)


class Interrupted(Exception):
    """Stands in for a kill between two steps."""


class ToyTrainer(TrainingLoop):
    """Each step draws a reward from the step's own generator and moves a one-weight policy by it."""

    name = "toy"

    def __init__(self, out, config: ToyConfig, kill_before_step: int | None = None):
        self.config, self.kill_before_step = config, kill_before_step
        self._init_loop(out, progress=False)
        self.policy = torch.nn.Linear(1, 1, bias=False)
        torch.nn.init.zeros_(self.policy.weight)

    def start(self):
        return {"prompts": 3}

    def train_step(self) -> dict:
        if self.kill_before_step is not None and self.step + 1 == self.kill_before_step:
            raise Interrupted
        reward = torch.rand((), generator=step_generator(self.config.seed, "toy", self.step)).item()
        with torch.no_grad():
            self.policy.weight += self.config.lr * reward
        return {"reward": reward, "dropout_draw": torch.rand(()).item()}  # global RNG: seeded per step

    def validate(self) -> float:
        return float(self.policy.weight.detach())

    def state(self) -> dict:
        return {"policy": self.policy.state_dict()}

    def restore(self, state: dict) -> None:
        self.policy.load_state_dict(state["policy"])

    def save(self):
        return self.out_dir


def _records(trainer: ToyTrainer) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "seconds"} for r in trainer.log.read()]


@pytest.mark.parametrize("kill_before_step", [3, 5])  # after a checkpoint interval ends, and inside one
def test_a_killed_run_resumed_equals_an_uninterrupted_one(tmp_path, kill_before_step):
    whole = ToyTrainer(tmp_path / "whole", ToyConfig())
    whole.train()
    killed = ToyTrainer(tmp_path / "killed", ToyConfig(), kill_before_step=kill_before_step)
    with pytest.raises(Interrupted):
        killed.train()
    resumed = ToyTrainer(tmp_path / "killed", ToyConfig())
    resumed.train(resume=True)
    assert _records(resumed) == _records(whole)
    assert torch.equal(resumed.policy.weight, whole.policy.weight)
    records = _records(whole)
    assert records[0] == {"step": 0, "prompts": 3} and [r["step"] for r in records] == list(range(7))
    assert [r["step"] for r in records if "val_reward" in r] == [2, 4, 6]


def test_an_existing_run_needs_resume_and_the_same_settings(tmp_path):
    ToyTrainer(tmp_path, ToyConfig(steps=2)).train()
    with pytest.raises(ValueError, match="already holds a run: pass --resume"):
        ToyTrainer(tmp_path, ToyConfig(steps=2)).train()
    with pytest.raises(ValueError, match=r"lr 0\.5 -> 0\.1 would change the run"):
        ToyTrainer(tmp_path, ToyConfig(steps=2, lr=0.1)).train(resume=True)
    longer = ToyTrainer(tmp_path, ToyConfig(steps=4))
    longer.train(resume=True)  # steps may grow: the run goes on
    assert [r["step"] for r in longer.log.read()] == [0, 1, 2, 3, 4]


def test_check_resume_refuses_a_config_with_fields_the_trainer_lacks():
    saved = dataclasses.asdict(ToyConfig())
    assert check_resume(saved, ToyConfig(), step=6) == []
    assert check_resume(saved, ToyConfig(steps=8, val_every=3), step=6) == ["steps 6 -> 8", "val_every 2 -> 3"]
    with pytest.raises(ValueError, match=r"does not fit this trainer.*\['bf16'\]"):
        check_resume({**saved, "bf16": False}, ToyConfig(), step=6)


def test_config_from_dict_round_trips_json_and_names_unknown_fields():
    config = ToyConfig(sizes=(1, 4, 8))
    as_json = {**dataclasses.asdict(config), "sizes": [1, 4, 8]}  # JSON has lists
    assert config_from_dict(ToyConfig, as_json) == config
    with pytest.raises(ValueError, match=r"ToyConfig has no field\(s\) \['budgets'\]"):
        config_from_dict(ToyConfig, {**as_json, "budgets": [1]})


def test_step_generators_and_global_seeding_depend_on_their_keys_only():
    draw = lambda *keys: torch.rand(3, generator=step_generator(7, *keys))  # noqa: E731
    assert torch.equal(draw("batch", 3), draw("batch", 3))
    assert not torch.equal(draw("batch", 3), draw("batch", 4)) and not torch.equal(draw("batch", 3), draw("val", 3))
    seed_everything(7, "dropout", 2)
    first = (torch.rand(2), random.random())
    seed_everything(7, "dropout", 2)
    assert torch.equal(first[0], torch.rand(2)) and first[1] == random.random()


def test_action_histogram_ignores_padding():
    actions = torch.tensor([[0, 2, 2, -1], [2, 0, -1, -1]])
    assert action_histogram(actions, 4) == pytest.approx([2 / 5, 0.0, 3 / 5, 0.0])
    assert action_histogram(torch.full((2, 3), -1), 3) == [0.0, 0.0, 0.0]


def test_load_split_lends_validation_from_train_when_a_task_has_none():
    class TrainOnly:
        def load(self, split):
            if split != "train":
                raise ValueError(f"no split {split!r}")
            return list(range(25))

    assert load_split(TrainOnly(), "validation") == [23, 24]  # the last 10% of train
    with pytest.raises(ValueError, match="no split 'test'"):
        load_split(TrainOnly(), "test")


VALID = dict(token_budget=8, lr=1e-3, entropy_coef=0.0, ema_decay=0.9, policy_temperature=1.0,
             max_train_prompts=None, val_problems=4, cot_ratio=0.0)


@pytest.mark.parametrize("field,bad", [("token_budget", 0), ("lr", 0.0), ("lr", float("nan")),
                                       ("entropy_coef", -0.1), ("ema_decay", 1.0), ("policy_temperature", 0.0),
                                       ("max_train_prompts", 0), ("val_problems", 0), ("cot_ratio", 1.5)])
def test_shared_fields_refuse_values_that_would_fail_later(field, bad):
    check_shared_fields(SimpleNamespace(**VALID))
    with pytest.raises(ValueError, match=field):
        check_shared_fields(SimpleNamespace(**{**VALID, field: bad}))
