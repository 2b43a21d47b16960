"""What choosing the decoder is worth: the attempt policy over several sampled arms against the same
policy restricted to its best single sampled arm, at matched compute, per training seed.

Runs ``train-attempt`` with ``--decoders`` (the sampled arms: the first ``--decoders-count`` sampled
actions of a coverage selection's ``actions.json``, by default the one committed for the default
model and task, ``docs/reproduce/actions.json``) and ``--decoder-ablation``: sample tables of the
stopped greedy and ``--samples`` samples per arm on ``--train-problems`` training and
``--val-problems`` validation problems (built where missing, resumable), one policy per price and
seed on the training problems less the held-out quarter, keep-best on validation, and for each
seed one policy per (sampled arm, price) restricted to greedy and that arm; the best arm is chosen
on validation, its policies' curve read at each full policy's mean decodes; both scored on the
held-out training problems with a paired 95% interval over problems. Prints the rows and a final
JSON line; the command's outputs stay under ``--out``.

    PYTHONPATH=src .venv/bin/python benchmarks/attempt_decoders.py --out runs/attempt-decoders
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from decoding_adapters.cli import main as cli

ROOT = Path(__file__).resolve().parents[1]


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/attempt-decoders", help="train-attempt's output directory")
    parser.add_argument("--selection", default=str(ROOT / "docs" / "reproduce" / "actions.json"),
                        help="the coverage selection whose sampled actions are the arms")
    parser.add_argument("--decoders-count", type=int, default=3, help="sampled arms taken from the selection")
    parser.add_argument("--samples", type=int, default=4, help="samples per sampled arm and problem")
    parser.add_argument("--train-problems", type=int, default=120)
    parser.add_argument("--val-problems", type=int, default=100)
    parser.add_argument("--token-budget", type=int, default=48)
    parser.add_argument("--prices", default="0.01,0.03,0.1")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--features", default="confidence,hidden")
    parser.add_argument("--model", default=None, help="the LM (default: the CLI's, SmolLM2)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (1: a shared, loaded machine)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    command = ["train-attempt", "--out", args.out, "--decoders", args.selection, "--decoder-count",
               str(args.decoders_count), "--samples", str(args.samples), "--train-problems", str(args.train_problems),
               "--val-problems", str(args.val_problems), "--token-budget", str(args.token_budget), "--prices",
               args.prices, "--seeds", str(args.seeds), "--features", args.features, "--decoder-ablation", "--resume"]
    if args.model:
        command += ["--model", args.model]
    print("decoding-adapters " + " ".join(command), flush=True)
    if cli(command) != 0:
        raise SystemExit("train-attempt failed")
    curve = json.loads((Path(args.out) / "curve.json").read_text())
    (ablation,) = curve["ablations"]
    rows = ablation["rows"]
    summary = {"arms": ablation["arms"], "samples": args.samples, "problems": curve["problems"],
               "difference_points": [[r["seed"], r["price"], round(100 * r["difference"][0], 2),
                                      round(100 * r["difference"][1], 2), round(100 * r["difference"][2], 2),
                                      round(r["policy"]["decodes"], 2), r["best_arm"]] for r in rows],
               "minutes": round((time.perf_counter() - started) / 60, 1)}
    print(json.dumps(summary))
    return summary


if __name__ == "__main__":
    main()
