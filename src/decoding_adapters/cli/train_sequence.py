"""``train-sequence``: train a sequence-level (contextual bandit) adapter (``training.sequence``).

Every ``SequenceTrainConfig`` field is an option; ``--replay outcomes.jsonl`` trains by offline
replay of a ``select-actions`` table instead of live rollouts.
"""

from __future__ import annotations

import argparse

from ..training.sequence import SequenceTrainConfig, SequenceTrainer, reward_source
from .training import configure_training_parser, resolve_config, run_training


def configure_parser(p: argparse.ArgumentParser) -> None:
    configure_training_parser(p, SequenceTrainConfig, "sequence-level training")


def run_cli(args) -> int:
    config = resolve_config(args, SequenceTrainConfig)

    def make_trainer(config, lm, task, rollouts, action_set):
        rewards = reward_source(config, task, action_set, rollouts, lm=lm)
        return SequenceTrainer(config, lm, task, rewards, args.out, task_name=args.task)

    return run_training(args, config, make_trainer, "sequence adapter", needs_rollouts=not config.replay)
