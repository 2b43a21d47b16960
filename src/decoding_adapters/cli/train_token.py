"""``train-token``: train a token-level (POMDP) adapter (``training.token``); with ``--backend ray
--workers N``, data-parallel on Ray Train (``training.ddp``).

Every ``TokenTrainConfig`` field is an option.
"""

from __future__ import annotations

import argparse

from ..decoding.ray_rollouts import TaskSpec
from ..training.ddp import train_token_ddp
from ..training.token import TokenTrainConfig, TokenTrainer
from .common import model_spec, task_options
from .training import configure_training_parser, resolve_config, start_trainer, training_run


def configure_parser(p: argparse.ArgumentParser) -> None:
    configure_training_parser(p, TokenTrainConfig, "token-level training")


def run_cli(args) -> int:
    config = resolve_config(args, TokenTrainConfig)
    if args.backend == "ray":  # DDP on Ray Train: every worker rolls out its shard of the prompts
        out = train_token_ddp(config, model_spec(args), TaskSpec(args.task, task_options(args)), args.out,
                              workers=args.workers, batch_rows=args.batch_rows, address=args.ray_address,
                              resume=args.resume, task_name=args.task)
        print(f"token adapter written to {out}")
        return 0
    with training_run(args, config) as (lm, task, _, rollouts):
        out = start_trainer(TokenTrainer(config, lm, task, rollouts, args.out, task_name=args.task), args)
    print(f"token adapter written to {out}")
    return 0
