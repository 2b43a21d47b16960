"""Balanced sampling per training step (training.common): group quotas, the grouped prompt
sampler, and both trainers drawing every step's prompts equally from the domains of a task mix."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from test_training_token import PomdpRollouts, T

from conftest import FakeLM
from decoding_adapters.decoding.actions import ActionSet, DecodingAction
from decoding_adapters.tasks import MixTask
from decoding_adapters.tasks.mix import domain_of
from decoding_adapters.training.common import group_quotas, prompt_groups, sample_prompt_batch
from decoding_adapters.training.sequence import SequenceTrainConfig, SequenceTrainer
from decoding_adapters.training.token import TokenTrainConfig, TokenTrainer

SMALL = {"arithmetic": {"train_size": 40, "validation_size": 8, "test_size": 4},
         "pyfunc": {"train_size": 10, "validation_size": 8, "test_size": 4}}


@pytest.mark.parametrize("sizes, batch, weights, expected", [
    ({"a": 10, "b": 10}, 4, None, {"a": 2, "b": 2}),
    ({"a": 10, "b": 10}, 5, None, {"a": 3, "b": 2}),  # the remainder goes to the earlier group
    ({"a": 10, "b": 10}, 6, {"a": 2, "b": 1}, {"a": 4, "b": 2}),
    ({"a": 1, "b": 10}, 6, None, {"a": 1, "b": 5}),  # a full group's share goes to the others
    ({"a": 2, "b": 3}, 99, None, {"a": 2, "b": 3}),  # never more than there is
    ({"a": 5, "b": 5, "c": 5}, 7, None, {"a": 3, "b": 2, "c": 2}),
])
def test_group_quotas(sizes, batch, weights, expected):
    assert group_quotas(sizes, batch, weights) == expected


def test_grouped_sampler_balances_every_batch():
    groups = ["a"] * 30 + ["b"] * 6  # unbalanced pool
    for step in range(20):
        gen = torch.Generator().manual_seed(step)
        picked = sample_prompt_batch(len(groups), 8, gen, groups=groups)
        assert len(set(picked)) == 8
        assert Counter(groups[i] for i in picked) == {"a": 4, "b": 4}
    again = sample_prompt_batch(len(groups), 8, torch.Generator().manual_seed(3), groups=groups)
    assert again == sample_prompt_batch(len(groups), 8, torch.Generator().manual_seed(3), groups=groups)


def test_ungrouped_sampler_is_unchanged():
    expected = torch.randperm(20, generator=torch.Generator().manual_seed(5))[:6].tolist()
    assert sample_prompt_batch(20, 6, torch.Generator().manual_seed(5)) == expected


def test_group_labels_must_match():
    with pytest.raises(ValueError, match="group labels"):
        sample_prompt_batch(5, 2, torch.Generator(), groups=["a"])


def test_prompt_groups_only_for_a_mix():
    mix = MixTask("arithmetic+pyfunc", options=SMALL)
    train = mix.load("train")
    assert prompt_groups(mix.domains["arithmetic"], train) == {}
    assert prompt_groups(mix, train)["groups"] == [domain_of(p) for p in train]


class RecordingRewards:
    """A reward source that records the problems of every training step (reward 1 for action 0)."""

    action_set = ActionSet([DecodingAction(do_sample=False), DecodingAction(temperature=1.0)])
    offline = False

    def __init__(self):
        self.steps = []

    def scorable(self, problem_ids):
        return None

    def rewards(self, problems, prompts, actions, budgets, metrics, key, progress=False):
        if key[0] == "train":
            self.steps.append([domain_of(p) for p in problems])
        return torch.tensor([float(a == 0) for a in actions])


def test_sequence_trainer_balances_a_mix_per_step(tmp_path):
    mix = MixTask("arithmetic+pyfunc", options=SMALL)  # 40 arithmetic vs 10 pyfunc training problems
    rewards = RecordingRewards()
    config = SequenceTrainConfig(parallel_budgets=(1, 2), steps=6, prompts_per_step=6, val_every=1000,
                                 checkpoint_every=1000, policy_hidden=8, val_problems=4)
    trainer = SequenceTrainer(config, FakeLM(8), mix, rewards, tmp_path, progress=False)
    trainer.train()
    assert len(rewards.steps) == 6
    for step in rewards.steps:
        assert Counter(step) == {"arithmetic": 3, "pyfunc": 3}
    assert trainer.task_name == "arithmetic+pyfunc"



def test_token_trainer_balances_a_mix_per_step(tmp_path, monkeypatch):
    mix = MixTask("arithmetic+pyfunc", options=SMALL)  # 40 arithmetic vs 10 pyfunc training problems
    config = TokenTrainConfig(token_budget=T, steps=3, prompts_per_step=4, group_size=2, filter_samples=0,
                              val_every=1000, val_problems=2, checkpoint_every=1000, policy_width=8,
                              max_train_prompts=50)
    trainer = TokenTrainer(config, FakeLM(6), mix, PomdpRollouts(), tmp_path, progress=False)
    steps = []
    original = TokenTrainer._request

    def recording(self, problems, samples, key):
        if key[0] == "train":
            steps.append([domain_of(p) for p in problems])
        return original(self, problems, samples, key)

    monkeypatch.setattr(TokenTrainer, "_request", recording)
    trainer.train()
    assert len(steps) == 3
    assert all(Counter(step) == {"arithmetic": 2, "pyfunc": 2} for step in steps)
