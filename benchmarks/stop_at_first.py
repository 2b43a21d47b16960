"""Greedy vs "stop at the first answer" on validation problems of the default task: pass@1 with a
paired interval, decodes and tokens per problem, and which of greedy's failures stopping recovers.

Both methods run through ``evaluation.evaluate`` (one decode per problem each; the stop is the
decode loop's per-row check, ``Task.answer_complete``, so the tokens after the first answer are
never generated). Each greedy failure is classified as in ``docs/headroom.md`` section 3
(``evaluation.headroom.classify_failure``: right then overwritten, loop, cut by the budget, wrong
computation). A stopped row should be a prefix of its greedy row; where batch-dependent rounding
(bf16 kernels) makes them differ, the count is printed as ``not_prefix``.

    PYTHONPATH=src .venv/bin/python benchmarks/stop_at_first.py --out runs/stop-first
    PYTHONPATH=src .venv/bin/python benchmarks/stop_at_first.py --out runs/stop-first-400 --validation-size 400

Writes ``summary.json`` and ``eval_details.json`` into ``--out`` and prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from decoding_adapters.core.stats import mean_ci, paired_ci
from decoding_adapters.evaluation import (
    STOP_AT_FIRST_ANSWER,
    EvalConfig,
    evaluate,
    greedy_method,
    stop_at_first_answer_method,
)
from decoding_adapters.evaluation.headroom import FAILURE_CLASSES, classify_failure
from decoding_adapters.lm.models import ModelSpec, load_frozen_lm
from decoding_adapters.tasks import get_task


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--validation-size", type=int, default=None,
                   help="arithmetic validation_size (default: the task's, the pipeline's validation split)")
    p.add_argument("--problems", type=int, default=None, help="first N validation problems (default: all)")
    p.add_argument("--token-budget", type=int, default=48)
    p.add_argument("--model", default="smollm2")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--batch-rows", type=int, default=64)
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    options = {} if args.validation_size is None else {"validation_size": args.validation_size}
    task = get_task("arithmetic", **options)
    problems = task.load("validation")[: args.problems]
    lm = load_frozen_lm(ModelSpec(name_or_path=args.model, dtype=args.dtype))
    cfg = EvalConfig(k_values=(1,), seeds=1, token_budget=args.token_budget, keep_trajectories=len(problems))
    started = time.perf_counter()
    ev = evaluate(lm, task, problems, [greedy_method(), stop_at_first_answer_method()], cfg,
                  batch_rows=args.batch_rows, progress=True)
    seconds = time.perf_counter() - started
    ev.write(out)

    greedy = [r[0] for r in ev.details["per_problem"]["Greedy"]["pass@1"]]
    stopped = [r[0] for r in ev.details["per_problem"][STOP_AT_FIRST_ANSWER]["pass@1"]]
    diff, low, high = paired_ci(stopped, greedy)
    rows = {name: {t["problem_id"]: t for t in ev.details["trajectories"][name]}
            for name in ("Greedy", STOP_AT_FIRST_ANSWER)}
    classes = dict.fromkeys(FAILURE_CLASSES, 0)
    recovered = dict.fromkeys(FAILURE_CLASSES, 0)
    lost, not_prefix = 0, 0
    for i, problem in enumerate(problems):
        g, s = rows["Greedy"][problem.id], rows[STOP_AT_FIRST_ANSWER][problem.id]
        not_prefix += g["token_ids"][: s["length"]] != s["token_ids"]
        if greedy[i] >= 0.5:
            lost += stopped[i] < 0.5
            continue
        kind = classify_failure(g["token_ids"], g["stop_reason"] == "eos", g["text"],
                                lambda text, p=problem: task.reward(p, text) >= 0.5)
        classes[kind] += 1
        recovered[kind] += stopped[i] >= 0.5
    info = ev.details["methods"]
    summary = {
        "problems": len(problems),
        "validation_size": args.validation_size,
        "token_budget": args.token_budget,
        "model": args.model,
        "dtype": str(lm.model.dtype),
        "greedy_pass1": mean_ci(greedy),
        "stop_pass1": mean_ci(stopped),
        "stop_minus_greedy": {"diff": diff, "low": low, "high": high},
        "greedy_failures": classes,
        "recovered_by_stopping": recovered,
        "greedy_right_lost_by_stopping": lost,
        "not_prefix": not_prefix,
        "stopped_at_answer": sum(t["stop_reason"] == "answer" for t in rows[STOP_AT_FIRST_ANSWER].values()),
        "decodes_per_problem": {n: info[n]["decodes_per_problem"]["1"] for n in rows},
        "tokens_per_problem": {n: info[n]["tokens_per_problem"]["1"] for n in rows},
        "seconds": seconds,
        "threads": torch.get_num_threads(),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
