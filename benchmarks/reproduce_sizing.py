"""The measurements behind ``reproduce``'s time plan: greedy truncation on validation
at several token budgets, and decode throughput of sampled rows, timed by CPU time of a fixed
number of threads (wall clock is meaningless on a shared machine; scale by the cores you have).

    PYTHONPATH=src .venv/bin/python benchmarks/reproduce_sizing.py [--threads 1] [--budget 48]

Last line: one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import resource
import time

import torch

from decoding_adapters.decoding.actions import PRESETS, ActionSet
from decoding_adapters.decoding.loop import row_seed
from decoding_adapters.decoding.rollouts import HFRollouts, RolloutRequest, encode_problems
from decoding_adapters.evaluation.truncation import greedy_truncation
from decoding_adapters.lm.models import load_frozen_lm
from decoding_adapters.tasks import get_task


def clock() -> tuple[float, float]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return time.perf_counter(), usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1, help="torch threads (CPU time is per thread sum)")
    parser.add_argument("--budgets", default="16,24,32,48,64,96", help="greedy truncation budgets")
    parser.add_argument("--budget", type=int, default=48, help="token budget of the sampled-throughput rows")
    parser.add_argument("--problems", type=int, default=100, help="validation problems for truncation")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    lm, task = load_frozen_lm("smollm2"), get_task("arithmetic")
    validation = task.load("validation")
    figures: dict = {"threads": args.threads}
    wall, cpu = clock()
    stats = greedy_truncation(lm, task, validation[: args.problems], [int(b) for b in args.budgets.split(",")],
                              stop_at_answer=False)
    wall2, cpu2 = clock()
    tokens = stats[-1].mean_length * stats[-1].rows
    figures["greedy"] = {"stats": [s.to_dict() for s in stats], "tokens_per_cpu_second": tokens / (cpu2 - cpu)}
    for s in stats:
        print(f"budget {s.token_budget:4d}: greedy mean length {s.mean_length:5.1f}, "
              f"truncated {s.truncated_fraction:.0%}")
    actions = ActionSet(list(PRESETS["math-token"]))
    rollouts = HFRollouts(lm, actions, 128)
    problems = validation[:32]
    prompts, _ = encode_problems(lm, task, problems)
    rows = [(i, g) for i in range(len(problems)) for g in range(4)]
    for index in range(1, len(actions)):
        request = RolloutRequest(
            prompts=prompts,
            prompt_of_row=[i for i, _ in rows],
            row_seeds=[row_seed("sizing", index, i, g) for i, g in rows],
            token_budget=args.budget,
            row_actions=[index] * len(rows),
        )
        wall, cpu = clock()
        result = rollouts.run(request)
        wall2, cpu2 = clock()
        tokens = int(result.lengths.sum())
        name = actions.actions[index].name
        figures[name] = {
            "rows": len(rows),
            "mean_length_fraction": tokens / len(rows) / args.budget,
            "truncated": float((~result.stopped_at_eos).float().mean()),
            "tokens_per_cpu_second": tokens / (cpu2 - cpu),
            "wall_seconds": wall2 - wall,
        }
        print(f"{name}: {figures[name]}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
