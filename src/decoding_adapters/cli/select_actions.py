"""``select-actions``: evaluate a candidate pool and pick K complementary actions (``selection``)."""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

from ..decoding.actions import ActionSet
from ..decoding.protocol import STOP_AT_ANSWER
from ..reporting.selection import write_outputs
from ..selection.coverage import build_pool, select_from_table
from ..selection.outcomes import check_table, evaluate_pool, table_header
from ..tasks import check_disjoint, problems_record
from ..tasks.base import problems_digest
from .common import (
    add_model_arguments,
    add_rollout_arguments,
    add_task_arguments,
    build_lm,
    build_rollouts,
    build_task,
    check_output_dir,
    load_problems,
)
from .config_args import add_config_arguments


@dataclass(frozen=True)
class SelectionOptions:
    """selection"""

    out: str
    """output folder (re-running with the same folder resumes)"""
    pool: str = "pool"
    """candidate actions: 'pool' (the paper's 180), a preset name or a JSON file"""
    pool_subsample: int | None = None
    """keep N evenly spaced candidates (to size the pool down for a CPU)"""
    k: int = 6
    """actions to select"""
    samples: int = 4
    """samples per (problem, action); R = their mean reward"""
    best_k: tuple[int, ...] = (1, 2, 4, 8)
    """pass@k values the Best static strategy (greedy included) is chosen for; k above --samples is extrapolated"""
    split: str = "validation"
    """task split to select on"""
    stop_at_answer: bool = STOP_AT_ANSWER
    """end every sample at its task's first complete answer (the protocol; a table replayed by train-sequence
    must match its --stop-at-answer)"""
    progress: bool = True
    """progress bar"""


def configure_parser(p: argparse.ArgumentParser) -> None:
    add_config_arguments(p, SelectionOptions)
    add_task_arguments(p)
    add_model_arguments(p)
    add_rollout_arguments(p)


def run_cli(args) -> int:
    pool = build_pool(args.pool, args.pool_subsample)
    if not 1 <= args.k <= len(pool):
        raise ValueError(f"--k must be in [1, {len(pool)}] (the pool size), got {args.k}")
    out = check_output_dir(args.out)  # pre-flight: before the model loads (re-running resumes, so no --force)
    task = build_task(args)
    check_disjoint(task)  # selection problems are never train/test problems of another split
    split = load_problems(task, args.split)
    problems = task.subset(split, args.max_problems, args.seed)
    # the whole split's digest: a run over more of it (a larger --max-problems) still resumes
    data = {"split": args.split, "count": len(split), "digest": problems_digest(split)}
    # pre-flight: a stored table written with other settings is refused before the model loads
    settings = dict(token_budget=args.token_budget, seed=args.seed, cot_ratio=args.cot_ratio, samples=args.samples,
                    stop_at_answer=args.stop_at_answer)
    check_table(out / "outcomes.jsonl", table_header(task, None, problems, data=data, **settings), ignore=("model",))
    lm = build_lm(args)
    rollouts = build_rollouts(args, lm, ActionSet(pool))
    start = time.perf_counter()
    try:
        table = evaluate_pool(lm, task, problems, pool, samples=args.samples, token_budget=args.token_budget,
                              seed=args.seed, table_path=out / "outcomes.jsonl", rollouts=rollouts,
                              batch_rows=args.batch_rows, progress=args.progress, cot_ratio=args.cot_ratio,
                              data=data, stop_at_answer=args.stop_at_answer)
    finally:
        rollouts.close()
    selection = select_from_table(table, args.k, args.best_k)
    meta = {"task": task.name, "split": args.split, "problems": len(problems), "samples": args.samples,
            "token_budget": args.token_budget, "seed": args.seed, "model": lm.fingerprint(),
            "seconds": round(time.perf_counter() - start, 1), "selected_on": problems_record(problems)}
    markdown = write_outputs(out, pool, selection, meta)
    print(markdown)
    print(f"wrote {out / 'actions.json'}, {out / 'selection.md'}, {out / 'selection.png'}")
    return 0
