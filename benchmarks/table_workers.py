"""Wall time of building one sample table in this process, on 1 Ray worker and on 2, side by side.

The workload: ``--problems`` arithmetic validation problems, the greedy arm and one sampled arm
(T=0.5) with ``--samples`` samples, token budget ``--token-budget``, each sample ended at its first
complete answer, mean hidden states kept (the tables ``rules`` and ``train-attempt`` build), in
chunks of ``--chunk-problems`` problems. Each engine builds the table into a fresh directory in
interleaved rounds (here, here-1t, ray-1, ray-2, here, ...), so a change in the machine's load hits them
alike; per engine the best round (least disturbed) and the median are printed. Start-up (Ray, the
actors loading the LM) is timed on its own and excluded. Every engine's table directory is checked
to be byte for byte the in-process one (file for file).

CPU split on a machine with C cores: ``here`` uses C torch threads, ``here-1t`` the same process
with 1 (it separates the effect of the workers from that of the thread count: on an oversubscribed
machine a multi-threaded decode loses much more to contention than single-threaded ones);
``ray-1`` is one actor with C threads, ``ray-2`` two actors with C/2 each. The local Ray cluster
advertises 2C logical CPUs so that both Ray engines can be alive at once (only one computes at a time).

    .venv/bin/python benchmarks/table_workers.py                    # a few minutes on 2 cores
    .venv/bin/python benchmarks/table_workers.py --problems 8 --rounds 1

Prints a table and a final JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch

from decoding_adapters.decoding.actions import GREEDY, DecodingAction
from decoding_adapters.decoding.ray_rollouts import TaskSpec, connect
from decoding_adapters.decoding.table_engines import LocalChunks, RayChunks
from decoding_adapters.evaluation.sample_table import build_sample_table
from decoding_adapters.lm.models import ModelSpec, load_frozen_lm
from decoding_adapters.tasks import get_task


class Threads(LocalChunks):
    """This process's LM with ``n`` torch threads while it decodes (restored afterwards)."""

    def __init__(self, lm, task, n: int):
        super().__init__(lm, task)
        self.n = n

    def map(self, decode, chunks):
        before = torch.get_num_threads()
        torch.set_num_threads(self.n)
        try:
            yield from super().map(decode, chunks)
        finally:
            torch.set_num_threads(before)


def files(path: Path) -> dict[str, bytes]:
    return {f.name: f.read_bytes() for f in sorted(path.iterdir())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--problems", type=int, default=16)
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--token-budget", type=int, default=32)
    parser.add_argument("--chunk-problems", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()

    cores = os.cpu_count() or 1
    load_before = os.getloadavg()
    spec = ModelSpec(name_or_path=args.model)
    task = get_task("arithmetic")
    problems = task.load("validation")[: args.problems]
    arms = [GREEDY, DecodingAction(temperature=0.5)]
    started_ray = connect(num_cpus=2 * cores)
    startup, engines = {}, {}
    begin = time.perf_counter()
    lm = load_frozen_lm(spec)
    engines["here"], startup["here"] = LocalChunks(lm, task), time.perf_counter() - begin
    engines["here-1t"], startup["here-1t"] = Threads(lm, task, 1), 0.0
    for workers in (1, 2):
        begin = time.perf_counter()
        engines[f"ray-{workers}"] = RayChunks(spec, TaskSpec("arithmetic"), workers=workers,
                                              cpus_per_worker=cores / workers)
        startup[f"ray-{workers}"] = time.perf_counter() - begin

    root = Path(tempfile.mkdtemp(prefix="table-workers-"))
    seconds = {name: [] for name in engines}
    identical = {}
    try:
        for r in range(args.rounds):
            for name, engine in engines.items():
                path = root / f"{name}-{r}"
                begin = time.perf_counter()
                build_sample_table(lm, task, problems, arms, samples=args.samples, token_budget=args.token_budget,
                                   path=path, split="validation", hidden=True, progress=False,
                                   chunk_problems=args.chunk_problems, engine=engine)
                seconds[name].append(time.perf_counter() - begin)
                identical[name] = identical.get(name, True) and files(path) == files(root / f"here-{r}")
    finally:
        for engine in engines.values():
            engine.close()
        if started_ray:
            import ray

            ray.shutdown()
        shutil.rmtree(root, ignore_errors=True)
    load_after = os.getloadavg()

    here = min(seconds["here"])
    machine = f"{platform.machine()}, {cores} cores, torch {torch.__version__}"
    print(f"{args.problems} problems x (greedy + {args.samples} samples), budget {args.token_budget}, "
          f"{args.chunk_problems} problems per chunk; {machine}; load average {load_before[0]:.2f} before / "
          f"{load_after[0]:.2f} after")
    print(f"{'engine':7} {'startup s':>9} {'best s':>7} {'median s':>9} {'vs here':>8} {'vs ray-1':>8}  identical")
    figures = {}
    for name in engines:
        best, median = min(seconds[name]), statistics.median(seconds[name])
        figures[name] = {"startup_s": round(startup[name], 2), "seconds": [round(s, 2) for s in seconds[name]],
                         "ratio_to_here_best": round(best / here, 3),
                         "ratio_to_ray1_best": round(best / min(seconds["ray-1"]), 3),
                         "identical_to_here": identical[name]}
        print(f"{name:7} {startup[name]:9.1f} {best:7.2f} {median:9.2f} {best / here:8.2f} "
              f"{best / min(seconds['ray-1']):8.2f}  {identical[name]}")
    print(json.dumps({"benchmark": "table_workers", "model": args.model, "problems": args.problems,
                      "samples": args.samples, "token_budget": args.token_budget,
                      "chunk_problems": args.chunk_problems, "rounds": args.rounds, "machine": machine,
                      "load_avg_before": round(load_before[0], 2), "load_avg_after": round(load_after[0], 2),
                      "results": figures}))


if __name__ == "__main__":
    main()
