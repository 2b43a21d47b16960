"""How long scoring every fixed rule at every setting takes from a stored table of samples.

Builds a synthetic table in the real shapes (``evaluation.sample_table.synthetic_sample_table``:
random answers and confidences, the greedy arm and one sampled arm of N samples), splits it into a
validation and a test half, and runs ``evaluation.rules.tune_rules`` (every rule at every setting of
its grid on validation, the chosen setting per compute level on test). The target: under a minute
for 1,000 problems.

    PYTHONPATH=src .venv/bin/python benchmarks/rules_scoring.py --problems 1000

Prints the time per rule and one final JSON line.
"""

from __future__ import annotations

import argparse
import json
import time

from decoding_adapters.evaluation.rules import greedy_then, rule_grid, tune_rules
from decoding_adapters.evaluation.sample_table import synthetic_sample_table
from decoding_adapters.policies.fixed_rules import RULES


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--problems", type=int, default=1000, help="problems in each of the validation and test tables")
    p.add_argument("--samples", type=int, default=8, help="samples of the sampled arm")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    validation = greedy_then(synthetic_sample_table(args.problems, args.samples, seed=args.seed), 1)
    test = greedy_then(synthetic_sample_table(args.problems, args.samples, seed=args.seed + 1), 1)
    times, settings = {}, {}
    start = time.perf_counter()
    for rule in RULES:
        t0 = time.perf_counter()
        tune_rules(validation, test, rules=[rule])
        times[rule] = round(time.perf_counter() - t0, 3)
        settings[rule] = len(rule_grid(validation, [rule]))
        print(f"{rule:22s} {settings[rule]:5d} settings  {times[rule]:7.2f} s", flush=True)
    total = time.perf_counter() - start
    print(json.dumps({"benchmark": "rules_scoring", "problems": args.problems, "draws": validation.length,
                      "settings": sum(settings.values()), "seconds": round(total, 2), "per_rule_s": times,
                      "target_s": 60, "met": total < 60}))


if __name__ == "__main__":
    main()
