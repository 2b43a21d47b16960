"""Sandbox cost: latency of one run and throughput of batched runs.

    PYTHONPATH=src python benchmarks/sandbox_throughput.py [--runs 30] [--workers 2]
        [--no-private-filesystem] [--no-cgroup] [--baseline-src /work/main/src]

Prints the active isolation layers, the median and 90th percentile wall time of one empty run
(``pass``) run back to back, programs per second for ``execute_batch`` (a program that reads
stdin and prints) and for ``call_function_batch`` (a function called 5 times), and a final JSON
line with every figure. Runs against an older ``decoding_adapters.sandbox.runner`` without the batch API
too (then only the latency is measured), to give before/after figures.

``--baseline-src DIR`` loads another copy of the sandbox package (``DIR/decoding_adapters/sandbox``,
e.g. the main checkout) beside this one and times one empty run of each in turn, ``--runs``
pairs: the per-run wall time and CPU time (the run's processes, from ``RUSAGE_CHILDREN``) of
both, and the ratio new/old of their medians with a 95% interval bootstrapped over the pairs.
Paired and interleaved, so the load of other work on the machine falls on both alike.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import resource
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from decoding_adapters.sandbox import functions
from decoding_adapters.sandbox import runner as sandbox


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30, help="runs per measurement")
    parser.add_argument("--workers", type=int, default=2, help="runs at a time in the batched measurements")
    parser.add_argument("--no-private-filesystem", action="store_true")
    parser.add_argument("--no-cgroup", action="store_true")
    parser.add_argument("--baseline-src", help="another source tree whose sandbox is timed beside this one")
    args = parser.parse_args()
    options = {}
    if args.no_private_filesystem:
        options["private_filesystem"] = False
    if args.no_cgroup:
        options["use_cgroup"] = False
    config = sandbox.SandboxConfig(timeout_s=20.0, **options)
    figures: dict = {"runs": args.runs, "workers": args.workers}
    if args.baseline_src:
        figures["paired"] = paired(args.baseline_src, args.runs, options)
        print(json.dumps(figures))
        return

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

    if hasattr(functions, "call_function_batch"):
        jobs = [(f"def f(x):\n    return x * {i}", "f", [(k,) for k in range(5)]) for i in range(args.runs)]
        started = time.perf_counter()
        called = functions.call_function_batch(jobs, config, workers=args.workers)
        elapsed = time.perf_counter() - started
        assert [r.values for r in called] == [[k * i for k in range(5)] for i in range(args.runs)]
        figures["function_programs_per_s"] = round(args.runs / elapsed, 1)
        print(f"call_function_batch: {figures['function_programs_per_s']} programs/s (5 calls each)")
    print(json.dumps(figures))


def load_baseline(source: str):
    """The sandbox package under ``source``, imported as ``baseline_sandbox`` (its relative imports
    resolve inside it), with its control-group names and uids kept apart from ours."""
    path = os.path.join(source, "decoding_adapters", "sandbox")
    spec = importlib.util.spec_from_file_location(
        "baseline_sandbox", os.path.join(path, "__init__.py"), submodule_search_locations=[path]
    )
    package = importlib.util.module_from_spec(spec)
    sys.modules["baseline_sandbox"] = package
    spec.loader.exec_module(package)
    runner = importlib.import_module("baseline_sandbox.runner")
    # run-<pid>-<n>: names apart from ours (the groups live in runner in older versions)
    groups = getattr(runner, "_CGROUPS", None) or importlib.import_module("baseline_sandbox.cgroups").CONTROL_GROUPS
    groups._counter = 10**6
    runner._UIDS._free.rotate(-runner.UID_SLOTS // 2)  # uids apart from ours
    return runner


def one_run(module, config) -> tuple[float, float]:
    """(wall s, CPU s of the run's processes) of one empty run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    result = module.execute("pass", "", config)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert result.ok, (result.status, result.stderr)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def ratio_interval(new: list[float], old: list[float], draws: int = 2000) -> tuple[float, float, float]:
    """Median(new)/median(old) and a 95% bootstrap interval over the pairs."""
    rng = random.Random(0)
    pairs = list(zip(new, old))
    ratios = []
    for _ in range(draws):
        sample = [rng.choice(pairs) for _ in pairs]
        ratios.append(statistics.median(a for a, _ in sample) / statistics.median(b for _, b in sample))
    ratios.sort()
    return statistics.median(new) / statistics.median(old), ratios[int(0.025 * draws)], ratios[int(0.975 * draws)]


def paired(source: str, runs: int, options: dict) -> dict:
    baseline = load_baseline(source)
    modules = {"new": sandbox, "old": baseline}
    configs = {name: module.SandboxConfig(timeout_s=20.0, **options) for name, module in modules.items()}
    for name, module in modules.items():
        layers = module.execute("pass", "", configs[name]).layers  # probes the interpreter once
        print(f"{name} layers: {layers}")
    walls: dict = {"new": [], "old": []}
    cpus: dict = {"new": [], "old": []}
    for index in range(runs):
        order = ("new", "old") if index % 2 == 0 else ("old", "new")
        for name in order:
            wall, cpu = one_run(modules[name], configs[name])
            walls[name].append(wall)
            cpus[name].append(cpu)
    figures = {}
    for label, values in (("wall", walls), ("cpu", cpus)):
        ratio, low, high = ratio_interval(values["new"], values["old"])
        figures[label] = {
            "new_ms_median": round(1000 * statistics.median(values["new"]), 1),
            "old_ms_median": round(1000 * statistics.median(values["old"]), 1),
            "ratio": round(ratio, 3),
            "ratio_95": [round(low, 3), round(high, 3)],
        }
        print(
            f"{label} per run: new {figures[label]['new_ms_median']} ms, old {figures[label]['old_ms_median']} ms, "
            f"new/old {ratio:.3f} [95% {low:.3f}, {high:.3f}] over {runs} pairs"
        )
    return figures


if __name__ == "__main__":
    main()
