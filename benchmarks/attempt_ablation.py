"""Which signal carries the attempt policy's gain: the feature-set ablation on stored sample tables.

Trains the attempt policy (``training.attempt``) for each nested feature set (confidence only;
+ the hidden summary; + answer agreement; + the answer tokens' probabilities), each price and each
seed on the training table less its last ``--holdout`` share, keep-best on the validation table;
tunes every fixed rule on the validation table; scores both on the held-out training problems.
Prints per (features, price) each seed's answer accuracy and mean decodes against the strongest
fixed rule at that compute (paired 95% interval over problems) and the share of problems on which
the seeds' policies make the same decisions. Writes ``--out`` (JSON).

    PYTHONPATH=src .venv/bin/python benchmarks/attempt_ablation.py --train runs/attempt/tables/train \
        --validation runs/attempt/tables/validation --out runs/attempt/ablation.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from decoding_adapters.core.files import write_json
from decoding_adapters.core.stats import paired_ci
from decoding_adapters.evaluation.attempt import (
    ablation,
    crossfit_score,
    format_curve,
    rule_baselines,
    seed_agreement,
    strongest_rule,
)
from decoding_adapters.evaluation.sample_table import SampleTable
from decoding_adapters.training.attempt import FEATURE_SETS, AttemptTrainConfig


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", required=True, help="training sample table directory")
    parser.add_argument("--validation", required=True, help="validation sample table directory")
    parser.add_argument("--out", required=True, help="JSON file of the results")
    parser.add_argument("--holdout", type=float, default=0.25, help="share of training problems scored on")
    parser.add_argument("--prices", type=float, nargs="+", default=[0.003, 0.01, 0.03, 0.1])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--features", nargs="+", default=list(FEATURE_SETS), choices=list(FEATURE_SETS))
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--crossfit", type=int, default=0,
                        help="instead of the ablation: the first feature set scored out of sample on every training "
                        "problem by this many folds (the rules scored on the whole training table)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    started = time.perf_counter()
    train, validation = SampleTable.load(args.train), SampleTable.load(args.validation)
    if args.crossfit:
        return crossfit(args, train, validation, started)
    held = int(round(args.holdout * train.shape[0]))
    cut = train.shape[0] - held
    fit, scoring = train.subset(range(cut)), train.subset(range(cut, train.shape[0]))
    baselines = rule_baselines(validation, scoring)
    print(f"{fit.shape[0]} training, {validation.shape[0]} validation, {scoring.shape[0]} held-out problems; "
          f"rules tuned in {time.perf_counter() - started:.0f}s", flush=True)
    for c in baselines:
        print(f"  {c.name:34s} " + ", ".join(f"{d:.2f} dec {100 * a:.1f}%" for d, a in zip(c.decodes, c.accuracy)))
    rows = ablation(fit, validation, scoring, AttemptTrainConfig(steps=args.steps), args.prices, args.seeds, baselines,
                    {name: FEATURE_SETS[name] for name in args.features})
    for row in rows:
        cells = "; ".join(f"seed {s['seed']}: {100 * s['accuracy']:.1f}% at {s['decodes']:.2f} "
                          f"vs {s['strongest_rule']} {100 * s['rule_accuracy']:.1f}% {100 * s['difference'][0]:+.1f} "
                          f"[{100 * s['difference'][1]:+.1f}, {100 * s['difference'][2]:+.1f}]" for s in row["seeds"])
        print(f"{row['features']:13s} price {row['price']:<6g} {cells}; seeds agree on "
              f"{100 * row['seed_agreement']:.0f}%", flush=True)
    out = {"benchmark": "attempt-ablation", "problems": {"fit": fit.shape[0], "validation": validation.shape[0],
                                                         "scored": scoring.shape[0]},
           "rules": {c.name: {"decodes": c.decodes.tolist(), "accuracy": c.accuracy.tolist()} for c in baselines},
           "ablation": rows, "seconds": time.perf_counter() - started}
    write_json(Path(args.out), out)
    print(json.dumps({"out": args.out, "seconds": round(out["seconds"], 1)}))
    return out


def crossfit(args, train, validation, started) -> dict:
    baselines = rule_baselines(validation, train)
    # the rules tuned on the training table itself (in sample: their most favourable curve), as a check that
    # the policy's edge is not the rules' tuning on fewer problems
    in_sample = rule_baselines(train, train)
    features = FEATURE_SETS[args.features[0]]
    print(f"{train.shape[0]} training problems in {args.crossfit} folds, {validation.shape[0]} validation; "
          f"features {args.features[0]} {features}", flush=True)
    rows = []
    for price in args.prices:
        scored = [crossfit_score(train, validation, AttemptTrainConfig(steps=args.steps, price=price, seed=seed,
                                                                       features=features), args.crossfit, baselines)
                  for seed in args.seeds]
        agree = seed_agreement([s.outcome for s in scored])
        print(format_curve(scored) + f"\nprice {price}: the seeds agree on {100 * agree:.0f}% of problems", flush=True)
        records = []
        for s in scored:
            name, acc, row = strongest_rule(in_sample, s.decodes)
            diff = paired_ci(s.outcome.correct.astype(float).tolist(), row.tolist())
            print(f"    seed {s.seed} against the rules tuned in sample: {name} {100 * acc:.1f}%, difference "
                  f"{100 * diff[0]:+.1f} [{100 * diff[1]:+.1f}, {100 * diff[2]:+.1f}]", flush=True)
            records.append({**s.record(), "in_sample_rule": name, "in_sample_rule_accuracy": acc,
                            "in_sample_difference": list(diff)})
        rows.append({"price": price, "seeds": records, "seed_agreement": agree})
    out = {"benchmark": "attempt-crossfit", "folds": args.crossfit, "features": args.features[0],
           "problems": {"train": train.shape[0], "validation": validation.shape[0]},
           "rules": {c.name: {"decodes": c.decodes.tolist(), "accuracy": c.accuracy.tolist()} for c in baselines},
           "rows": rows, "seconds": time.perf_counter() - started}
    write_json(Path(args.out), out)
    print(json.dumps({"out": args.out, "seconds": round(out["seconds"], 1)}))
    return out


if __name__ == "__main__":
    sys.exit(main() and 0)
