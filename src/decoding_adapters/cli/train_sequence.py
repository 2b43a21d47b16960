"""``train-sequence``: train a sequence-level (contextual bandit) adapter (``training.sequence``).

Every ``SequenceTrainConfig`` field is an option; ``--replay outcomes.jsonl`` trains by offline
replay of a ``select-actions`` table instead of live rollouts.
"""

from __future__ import annotations

import argparse

from ..training.sequence import SequenceTrainConfig, SequenceTrainer, reward_source
from .training import configure_training_parser, resolve_config, start_trainer, training_run


def configure_parser(p: argparse.ArgumentParser) -> None:
    configure_training_parser(p, SequenceTrainConfig, "sequence-level training")


def run_cli(args) -> int:
    config = resolve_config(args, SequenceTrainConfig)
    with training_run(args, config, needs_rollouts=not config.replay) as (lm, task, action_set, rollouts):
        rewards = reward_source(config, task, action_set, rollouts, lm=lm)  # live rollouts or offline replay
        out = start_trainer(SequenceTrainer(config, lm, task, rewards, args.out, task_name=args.task), args)
    print(f"sequence adapter written to {out}")
    return 0
