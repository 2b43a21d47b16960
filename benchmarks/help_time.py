"""How long ``decoding-adapters COMMAND --help`` takes, each in a fresh process: the first call (which
builds the help screen, importing the library) and the next (printed from the help cache), side by
side, with an empty cache of its own. Prints a line per command and a final JSON line.

    python benchmarks/help_time.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _once(argv: list[str], env: dict) -> tuple[float, int]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "decoding_adapters", *argv], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{argv}: exit {done.returncode}\n{done.stderr}")
    return time.perf_counter() - start, len(done.stdout.splitlines())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="cached calls timed per command (median)")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    from decoding_adapters.cli import COMMANDS

    rows = {}
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "XDG_CACHE_HOME": cache, "COLUMNS": "100",
               "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
        for command in ["", *COMMANDS]:
            argv = [command, "--help"] if command else ["--help"]
            first, lines = _once(argv, env)
            cached = sorted(_once(argv, env)[0] for _ in range(args.repeats))[args.repeats // 2]
            rows[command or "(top level)"] = {"first_s": round(first, 2), "cached_s": round(cached, 2), "lines": lines}
            print(f"{command or '(top level)':>15}: first {first:5.2f} s, cached {cached:5.2f} s "
                  f"({first / cached:4.1f}x), {lines} lines", flush=True)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(json.dumps({"help_seconds": rows, "load_average_1min": round(load, 1), "cpus": os.cpu_count()}))


if __name__ == "__main__":
    main()
