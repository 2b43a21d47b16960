"""Does the attempt trainer find a gain from choosing the decoder where one is planted, and how much
could choosing gain on a real table? The control behind the decoder-choice ablation's verdict.

Planted (``evaluation.decoder_choice.planted_decoder_table``): greedy and three sampled arms; each
problem is of one of three types, and a sample of the type's own arm is right with ``--right-own``
(others ``--right-other``), so every arm is as good as another on average and only a policy that
reads the type (from greedy's hidden state) and draws its arm gains. Training 400 problems,
validation 400, test 1,000, ``--samples`` per arm. The study's attempt policy (confidence + hidden,
300 steps, keep-best on validation) is trained at each price and seed, and the same policy
restricted to each single arm (``decoder_ablation``, the best arm chosen on validation); the
head-room is the oracle that draws each problem's own arm against the best single arm, both voting
over the stopped greedy and k samples (``choice_headroom``), read at the full policy's compute.
Printed per (seed, price): the full policy's gain over its best single arm at matched compute with
its paired 95% interval, the head-room there and the share of it captured.

With ``--tables DIR`` (a study's ``rules/`` folder, or any folder holding ``validation/``), also the
head-room on that real validation table: the best single arm chosen and scored on it, the oracle arm
of each problem chosen on the samples its vote does not read (cross-fitted).

    PYTHONPATH=src .venv/bin/python benchmarks/decoder_choice_planted.py [--tables runs/reproduce-sealed2/rules]
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from decoding_adapters.evaluation.attempt import rule_baselines, train_and_score
from decoding_adapters.evaluation.decoder_choice import choice_headroom, decoder_ablation, planted_decoder_table
from decoding_adapters.evaluation.sample_table import SampleTable
from decoding_adapters.training.attempt import AttemptTrainConfig


def _headroom_at(rows: list[dict], decodes: float) -> float:
    """The oracle's lead over the best single arm, linearly between the compute levels around ``decodes``."""
    xs = [r["decodes"] for r in rows]
    ys = [r["oracle"] - r["single"] for r in rows]
    return float(np.interp(decodes, xs, ys))


def planted(args) -> dict:
    tables = [planted_decoder_table(n, seed, samples=args.samples, right_own=args.right_own,
                                    right_other=args.right_other) for n, seed in ((400, 0), (400, 1), (1000, 2))]
    (train, _), (validation, _), (test, types) = tables
    baselines = rule_baselines(validation, test, ("self_consistency",))
    config = AttemptTrainConfig(features=("confidence", "hidden"), steps=args.steps, val_every=25)
    full = [train_and_score(train, validation, test, replace(config, price=price, seed=seed), baselines)
            for price in args.prices for seed in args.seeds]
    ablation = decoder_ablation(train, validation, test, config, full, baselines)
    headroom = choice_headroom(validation, test, range(1, args.samples), types)
    rows = []
    for row in ablation["rows"]:
        room = _headroom_at(headroom, row["policy"]["decodes"])
        gain = row["difference"][0]
        rows.append({**row, "headroom": room, "share": gain / room if room > 0 else float("nan")})
        print(f"seed {row['seed']} price {row['price']:<5g}: choosing {row['policy']['accuracy'] * 100:.1f}% at "
              f"{row['policy']['decodes']:.2f} decodes; best single arm ({row['best_arm']}) "
              f"{row['single_arm']['accuracy'] * 100:.1f}%; gain {gain * 100:+.1f} "
              f"[{row['difference'][1] * 100:+.1f}, {row['difference'][2] * 100:+.1f}]; head-room there "
              f"{room * 100:+.1f}; share captured {rows[-1]['share']:.0%}", flush=True)
    return {"headroom": headroom, "rows": rows}


def real(tables: Path, samples: int) -> list[dict]:
    validation = SampleTable.load(tables / "validation")
    extra = range(1, min(samples, validation.shape[2]) // 2 + 1)  # leave as many samples to choose the oracle's arm
    rows = choice_headroom(validation, validation, extra)
    for r in rows:
        d = r["difference"]
        print(f"real validation table ({validation.shape[0]} problems): {r['decodes']} decodes, best single arm "
              f"{r['best_single_arm']} {r['single'] * 100:.1f}%, cross-fitted oracle arm {r['oracle'] * 100:.1f}%, "
              f"head-room {d[0] * 100:+.1f} [{d[1] * 100:+.1f}, {d[2] * 100:+.1f}]", flush=True)
    return rows


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=4, help="samples per sampled arm in the planted tables")
    parser.add_argument("--right-own", type=float, default=0.6)
    parser.add_argument("--right-other", type=float, default=0.15)
    parser.add_argument("--prices", type=float, nargs="+", default=[0.05, 0.01])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=300, help="training steps per policy (the study's)")
    parser.add_argument("--tables", type=Path, help="a study's rules/ folder: the head-room on its validation table")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    start = time.time()
    result = {"planted": planted(args)}
    if args.tables:
        result["real"] = real(args.tables, 8)
    result["minutes"] = (time.time() - start) / 60
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    shares = [r["share"] for r in result["planted"]["rows"]]
    print(json.dumps({"minutes": round(result["minutes"], 1), "shares": shares}))
    return result


if __name__ == "__main__":
    main()
