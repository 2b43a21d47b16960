"""Rollout throughput of the in-process HF backend against Ray with 1 and 2 workers, side by side.

The workload: 32 arithmetic validation prompts x 2 samples, token budget 32, one fixed action
(T=1.0), on the default model. All three backends stay up for the whole run and are timed in
interleaved rounds (hf, hf-1t, ray-1, ray-2, hf, ...), so a change in machine load hits them alike.
Per backend the best round (least disturbed by other processes) gives tokens/s and the ratio to
hf; the median round is printed too, as the figure under the machine's actual load; and each
backend's rows are checked to be identical to the HF rows (same seeds, same tokens). Start-up
(Ray, actors loading the LM) and a warm-up decode are timed separately and excluded from throughput.

CPU split on a machine with C cores: hf uses C torch threads, hf-1t the same process with 1 thread;
ray-1 is one actor with C threads; ray-2 is two actors with C/2 threads each. (hf-1t separates the
effect of Ray from the effect of thread count: on an oversubscribed machine a multi-threaded
decode loses much more to contention than several single-threaded ones.) The local Ray cluster
advertises 2C logical CPUs so that both Ray configurations can be alive at once (only one of them
computes at a time).

    .venv/bin/python benchmarks/rollout_scaling.py                  # ~5 minutes on 2 cores
    .venv/bin/python benchmarks/rollout_scaling.py --rounds 3 --prompts 16

Prints a table and a final JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch

from decoding_adapters.decoding.actions import ActionSet, DecodingAction
from decoding_adapters.decoding.loop import row_seed
from decoding_adapters.decoding.ray_rollouts import RayRollouts, connect
from decoding_adapters.decoding.rollouts import HFRollouts, RolloutRequest, encode_problems
from decoding_adapters.lm.models import ModelSpec, load_frozen_lm
from decoding_adapters.tasks import get_task


def build_request(lm, prompts: int, samples: int, budget: int, seed: int) -> RolloutRequest:
    task = get_task("arithmetic")
    problems = task.load("validation")[:prompts]
    encoded, _ = encode_problems(lm, task, problems)
    rows = [(p, s) for p in range(len(problems)) for s in range(samples)]
    return RolloutRequest(
        encoded,
        [p for p, _ in rows],
        [row_seed(seed, "bench", problems[p].id, s) for p, s in rows],
        budget,
        [0] * len(rows),
    )


class Threads:
    """Run ``inner`` with ``n`` torch threads in this process (restored afterwards)."""

    def __init__(self, inner, n: int):
        self.inner, self.n = inner, n

    def run(self, request):
        before = torch.get_num_threads()
        torch.set_num_threads(self.n)
        try:
            return self.inner.run(request)
        finally:
            torch.set_num_threads(before)

    def close(self):
        self.inner.close()


def timed(fn):
    started = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--token-budget", type=int, default=32)
    parser.add_argument("--batch-rows", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds (best and median reported)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    cores = os.cpu_count() or 1
    load_before = os.getloadavg()
    spec = ModelSpec(name_or_path=args.model)
    lm = load_frozen_lm(spec)
    request = build_request(lm, args.prompts, args.samples, args.token_budget, args.seed)
    warmup = RolloutRequest(request.prompts[:2], [0, 1], [1, 2], 4, [0, 0])
    actions = ActionSet([DecodingAction(temperature=1.0)])

    started_ray = connect(num_cpus=2 * cores)
    hf = HFRollouts(lm, actions, args.batch_rows)
    backends, startup = {"hf": hf, "hf-1t": Threads(hf, 1)}, {"hf": 0.0, "hf-1t": 0.0}
    for workers in (1, 2):
        name = f"ray-{workers}"
        backends[name], startup[name] = timed(
            lambda workers=workers: RayRollouts(
                spec, actions, workers=workers, batch_rows=args.batch_rows, cpus_per_worker=cores / workers
            )
        )
    for backend in backends.values():
        backend.run(warmup)

    seconds = {name: [] for name in backends}
    tokens, identical = {}, {}
    reference = None
    for _ in range(args.rounds):
        for name, backend in backends.items():
            result, took = timed(lambda backend=backend: backend.run(request))
            seconds[name].append(took)
            tokens[name] = int(result.lengths.sum())
            reference = result if reference is None else reference
            identical[name] = bool(torch.equal(result.tokens, reference.tokens)) and result.texts == reference.texts
    for backend in backends.values():
        backend.close()
    if started_ray:
        import ray

        ray.shutdown()
    load_after = os.getloadavg()

    figures = {}
    hf_rate = tokens["hf"] / min(seconds["hf"])
    print(
        f"{request.num_rows} rows ({args.prompts} prompts x {args.samples}), budget {args.token_budget}, "
        f"{cores} cores, load average {load_before[0]:.2f} before / {load_after[0]:.2f} after"
    )
    print(f"{'backend':8} {'startup s':>9} {'best s':>7} {'median s':>9} {'tok/s':>7} {'vs hf':>6}  identical rows")
    for name in backends:
        best, median = min(seconds[name]), statistics.median(seconds[name])
        rate = tokens[name] / best
        figures[name] = {
            "startup_s": round(startup[name], 2),
            "seconds": [round(s, 3) for s in seconds[name]],
            "tokens": tokens[name],
            "tokens_per_s_best": round(rate, 1),
            "tokens_per_s_median": round(tokens[name] / median, 1),
            "speedup_vs_hf_best": round(rate / hf_rate, 3),
            "identical_to_hf": identical[name],
        }
        print(
            f"{name:8} {startup[name]:9.1f} {best:7.2f} {median:9.2f} {rate:7.1f} {rate / hf_rate:6.2f}  "
            f"{identical[name]}"
        )
    print(
        json.dumps(
            {
                "benchmark": "rollout_scaling",
                "model": args.model,
                "rows": request.num_rows,
                "token_budget": args.token_budget,
                "cores": cores,
                "rounds": args.rounds,
                "load_avg_before": round(load_before[0], 2),
                "load_avg_after": round(load_after[0], 2),
                "results": figures,
            }
        )
    )


if __name__ == "__main__":
    main()
