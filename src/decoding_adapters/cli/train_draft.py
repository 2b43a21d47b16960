"""``train-draft``: train a draft-gated adapter (``training.draft``): the sequence policy over a greedy
draft's summary, choosing to keep the draft or re-decode with one action.

Its own command rather than a context option of ``train-sequence``: it trains from both-arms tables
(every problem's draft and re-decodes under every action, built here where missing, resumable), not
from live rollouts or a ``select-actions`` table, so most of ``train-sequence``'s reward options
would mean nothing; the policy class and the trainer's loop are the sequence adapter's.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from ..training.draft import DraftTrainConfig, DraftTrainer, ensure_tables
from .common import build_task
from .training import configure_training_parser, resolve_config, start_trainer, training_run

log = logging.getLogger(__name__)


def configure_parser(p: argparse.ArgumentParser) -> None:
    # the draft trainer replays its own tables and scores pass@B: train-sequence's --replay and --metric
    # would only be refused, so they are not its options
    configure_training_parser(p, DraftTrainConfig, "draft-gated training", exclude=("replay", "metric"))


def run_cli(args) -> int:
    task = build_task(args)  # no model yet: a task whose verifier has no answer check turns the stop off
    if getattr(task, "answer_check", "") is None and args.stop_at_answer:
        log.warning("task %s has no check for a complete answer (its verifier brings none): the drafts and "
                    "re-decodes are not stopped at the first answer, and the adapter records the stop as off",
                    task.name)
        args.stop_at_answer = False
    # the tables live beside the adapter unless named: built on the first run, reused on a resume
    args.table = args.table or str(Path(args.out) / "tables" / "train.jsonl")
    args.val_table = args.val_table or str(Path(args.out) / "tables" / "validation.jsonl")
    config = resolve_config(args, DraftTrainConfig)
    with training_run(args, config, needs_rollouts=False) as (lm, task, _, _):
        ensure_tables(config, lm, task, progress=getattr(args, "progress", True))
        out = start_trainer(DraftTrainer(config, lm, task, args.out, task_name=args.task), args)
    print(f"draft-gated adapter written to {out}")
    return 0
