"""CPU left to a host job beside a hostile sandboxed run (many spinners, each in a session of its own).

    PYTHONPATH=src python benchmarks/sandbox_cpu_share.py [--seconds 3] [--repeats 3] [--spinners 60]
        [--baseline-src /work/main/src]

A CPU-bound host job (one process counting loop iterations for ``--seconds``) is timed alone, then
beside a run whose program forks ``--spinners`` processes that each call ``setsid()`` and spin.
Where runs get only memory and pids controllers, each session is an autogroup of its own with a
fair share of its own, and the host job's share shrinks with their number; with the run's CPU
quota the whole run is one group capped at ``cpu_cores``. Each measurement beside a run follows
a solo measurement taken just before it (other work on the machine changes the solo rate), and
``--baseline-src`` times another copy of the sandbox (e.g. the main checkout) in the same loop.
Prints the kept fraction of the solo rate per repeat and their median, and a final JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

from sandbox_throughput import load_baseline  # noqa: E402  (same directory)

from decoding_adapters.sandbox import runner as sandbox

HOST_JOB = r"""
import sys, time
end = time.perf_counter() + float(sys.argv[1])
count = 0
while time.perf_counter() < end:
    count += 1
print(count / float(sys.argv[1]))
"""

HOSTILE = r"""
import os, time
end = time.monotonic() + {seconds}
for _ in range({spinners}):
    if os.fork() == 0:
        os.setsid()
        while time.monotonic() < end:
            pass
        os._exit(0)
while time.monotonic() < end:
    time.sleep(0.05)
"""


def host_rate(seconds: float) -> float:
    """Loop iterations per second of one CPU-bound host process."""
    out = subprocess.run([sys.executable, "-S", "-c", HOST_JOB, str(seconds)], capture_output=True, text=True)
    return float(out.stdout)


def rate_beside(module, seconds: float, spinners: int) -> tuple[float, str]:
    """The host job's rate while a hostile run spins beside it; and the run's status."""
    config = module.SandboxConfig(timeout_s=seconds + 10.0, max_processes=spinners + 4)
    code = HOSTILE.format(seconds=seconds + 1.5, spinners=spinners)
    results = []
    thread = threading.Thread(target=lambda: results.append(module.execute(code, "", config)))
    thread.start()
    time.sleep(0.75)  # the run is up and its spinners started
    rate = host_rate(seconds)
    thread.join()
    return rate, results[0].status


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--spinners", type=int, default=60)
    parser.add_argument("--baseline-src", help="another source tree whose sandbox is measured in the same loop")
    args = parser.parse_args()
    modules = {"new": sandbox}
    if args.baseline_src:
        modules["old"] = load_baseline(args.baseline_src)
    for name, module in modules.items():
        print(f"{name} layers: {module.execute('pass', '', module.SandboxConfig(timeout_s=20.0)).layers}")
    kept: dict[str, list[float]] = {name: [] for name in modules}
    for repeat in range(args.repeats):
        for name, module in modules.items():
            solo = host_rate(args.seconds)
            beside, status = rate_beside(module, args.seconds, args.spinners)
            kept[name].append(beside / solo)
            print(f"repeat {repeat} {name}: solo {solo:,.0f}/s, beside the run {beside:,.0f}/s "
                  f"({100 * beside / solo:.0f}% kept; run status {status})", flush=True)
    figures = {"seconds": args.seconds, "spinners": args.spinners, "cpus": os.cpu_count(),
               "load_1min": os.getloadavg()[0]}
    for name, values in kept.items():
        figures[f"{name}_kept_median"] = round(statistics.median(values), 3)
        figures[f"{name}_kept"] = [round(v, 3) for v in values]
        print(f"{name}: host job keeps {100 * statistics.median(values):.0f}% of its solo rate (median)")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
