"""Pool evaluation with a shared prompt prefill vs without, on the real default model.

``evaluate_pool`` sends one rollout request per chunk of problems, in which every action x sample
row of a problem continues that problem's prompt: the prompt is prefilled once and its KV cache
fanned out to the rows. "Without" gives every (problem, action, sample) row its own copy of the
prompt (``share_prefill=False``), so each row pays its own prefill. Same rows, same seeds, same
chunks; the two runs are timed side by side in one process (alternating, best of ``--repeats``;
default 1: the default slice takes about 2.5 minutes with ``--threads 1`` on a busy 2-core machine).
Prints both times, the ratio, whether the outcomes agree, and a final JSON line.

On a CPU shared with other jobs pass ``--threads 1``: with 2 intra-op threads every op waits for
both threads to be scheduled, and on a loaded 2-core machine (load ~10) that made the same slice
~14x slower (75 s vs 5 s) and hid the prefill saving entirely.

    .venv/bin/python benchmarks/selection_prefill.py --threads 1     # 8 problems x 6 actions x 2 samples, b = 16
    .venv/bin/python benchmarks/selection_prefill.py --threads 1 --problems 2 --num-actions 4 --token-budget 8
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from decoding_adapters.decoding.actions import PRESETS
from decoding_adapters.lm.models import DEFAULT_MODEL, ModelSpec, load_frozen_lm
from decoding_adapters.selection.outcomes import evaluate_pool
from decoding_adapters.tasks import get_task


def timed_run(lm, task, problems, actions, args, share: bool, folder: Path):
    path = folder / f"{'shared' if share else 'unshared'}-{time.monotonic_ns()}.jsonl"  # fresh table: no resume
    start = time.perf_counter()
    table = evaluate_pool(
        lm,
        task,
        problems,
        actions,
        samples=args.samples,
        token_budget=args.token_budget,
        seed=args.seed,
        table_path=path,
        batch_rows=args.batch_rows,
        progress=False,
        share_prefill=share,
        stop_at_answer=False,
    )
    return time.perf_counter() - start, table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--problems", type=int, default=8)
    parser.add_argument("--actions", default="math", help="action preset (6 sampling actions by default)")
    parser.add_argument("--num-actions", type=int, default=None, help="use only the first N actions of the preset")
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--token-budget", type=int, default=16)
    parser.add_argument("--batch-rows", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch intra-op threads (default: torch's choice); "
        "1 avoids thread-barrier stalls on a CPU shared with other jobs",
    )
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    torch.manual_seed(0)
    lm = load_frozen_lm(ModelSpec(name_or_path=args.model, device=args.device))
    task = get_task("arithmetic")
    problems = task.load("validation")[: args.problems]
    actions = list(PRESETS[args.actions])[: args.num_actions]
    rows = len(problems) * len(actions) * args.samples
    print(
        f"{lm.spec.name_or_path} on {args.device}, {torch.get_num_threads()} threads: {len(problems)} problems x "
        f"{len(actions)} actions x {args.samples} samples = {rows} rows, token budget {args.token_budget}, "
        f"batch rows {args.batch_rows}"
    )
    times = {True: [], False: []}
    tables = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        evaluate_pool(
            lm,
            task,
            problems[:1],
            actions[:1],
            samples=1,
            token_budget=2,
            seed=0,
            table_path=folder / "warmup.jsonl",
            progress=False,
            stop_at_answer=False,
        )  # warm-up
        for _ in range(args.repeats):
            for share in (True, False):
                seconds, tables[share] = timed_run(lm, task, problems, actions, args, share, folder)
                times[share].append(seconds)
                print(f"  {'shared prefill' if share else 'one prompt copy per row'}: {seconds:.2f} s")
    shared, unshared = min(times[True]), min(times[False])
    _, _, r_shared = tables[True].to_matrix()
    _, _, r_unshared = tables[False].to_matrix()
    same = sum(
        tables[True].outcomes(p, a) == tables[False].outcomes(p, a)
        for p in tables[True].problem_ids
        for a in tables[True].action_names
    )
    cells = len(problems) * len(actions)
    print(f"shared prefill:    {shared:.2f} s ({rows / shared:.1f} rows/s)")
    print(f"without sharing:   {unshared:.2f} s ({rows / unshared:.1f} rows/s)")
    print(f"speed-up:          {unshared / shared:.2f}x")
    print(
        f"identical outcomes in {same}/{cells} (problem, action) cells; mean reward {r_shared.mean():.3f} vs "
        f"{r_unshared.mean():.3f}"
    )
    print(
        json.dumps(
            {
                "benchmark": "selection_prefill",
                "model": lm.spec.name_or_path,
                "device": args.device,
                "threads": torch.get_num_threads(),
                "problems": len(problems),
                "actions": len(actions),
                "samples": args.samples,
                "rows": rows,
                "token_budget": args.token_budget,
                "batch_rows": args.batch_rows,
                "repeats": args.repeats,
                "shared_s": round(shared, 3),
                "unshared_s": round(unshared, 3),
                "speedup": round(unshared / shared, 3),
                "identical_cells": same,
                "cells": cells,
            }
        )
    )


if __name__ == "__main__":
    main()
