"""Sandbox cost: latency of one run and throughput of batched runs.

    PYTHONPATH=src python benchmarks/sandbox_throughput.py [--runs 30] [--workers 2]
        [--no-private-filesystem] [--no-cgroup]

Prints the active isolation layers, the median and 90th percentile wall time of one empty run
(``pass``) run back to back, programs per second for ``execute_batch`` (a program that reads
stdin and prints) and for ``call_function_batch`` (a function called 5 times), and a final JSON
line with every figure. Runs against an older ``decoding_adapters.sandbox.runner`` without the batch API
too (then only the latency is measured), to give before/after figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

from decoding_adapters.sandbox import runner as sandbox


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30, help="runs per measurement")
    parser.add_argument("--workers", type=int, default=2, help="runs at a time in the batched measurements")
    parser.add_argument("--no-private-filesystem", action="store_true")
    parser.add_argument("--no-cgroup", action="store_true")
    args = parser.parse_args()
    options = {}
    if args.no_private_filesystem:
        options["private_filesystem"] = False
    if args.no_cgroup:
        options["use_cgroup"] = False
    config = sandbox.SandboxConfig(timeout_s=20.0, **options)
    figures: dict = {"runs": args.runs, "workers": args.workers}

    first = sandbox.execute("pass", "", config)  # probes the interpreter once
    layers = getattr(first, "layers", None)
    figures["layers"] = None if layers is None else {k: v for k, v in vars(layers).items()}
    print(f"layers: {figures['layers']}")

    latencies = []
    for _ in range(args.runs):
        started = time.perf_counter()
        result = sandbox.execute("pass", "", config)
        latencies.append(time.perf_counter() - started)
        assert result.ok, result.stderr
    latencies.sort()
    figures["run_ms_median"] = round(1000 * statistics.median(latencies), 1)
    figures["run_ms_p90"] = round(1000 * latencies[int(0.9 * (len(latencies) - 1))], 1)
    print(f"one empty run: median {figures['run_ms_median']} ms, p90 {figures['run_ms_p90']} ms")

    programs = [("import sys\nprint(int(sys.stdin.read()) ** 2)", str(i)) for i in range(args.runs)]
    started = time.perf_counter()
    if hasattr(sandbox, "execute_batch"):
        results = sandbox.execute_batch(programs, config, workers=args.workers)
    else:
        with ThreadPoolExecutor(args.workers) as pool:
            results = list(pool.map(lambda p: sandbox.execute(p[0], p[1], config), programs))
    elapsed = time.perf_counter() - started
    assert [r.stdout for r in results] == [f"{i * i}\n" for i in range(args.runs)]
    figures["programs_per_s"] = round(args.runs / elapsed, 1)
    print(f"execute_batch: {figures['programs_per_s']} programs/s ({args.workers} at a time)")

    if hasattr(sandbox, "call_function_batch"):
        jobs = [(f"def f(x):\n    return x * {i}", "f", [(k,) for k in range(5)]) for i in range(args.runs)]
        started = time.perf_counter()
        called = sandbox.call_function_batch(jobs, config, workers=args.workers)
        elapsed = time.perf_counter() - started
        assert [r.values for r in called] == [[k * i for k in range(5)] for i in range(args.runs)]
        figures["function_programs_per_s"] = round(args.runs / elapsed, 1)
        print(f"call_function_batch: {figures['function_programs_per_s']} programs/s (5 calls each)")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
