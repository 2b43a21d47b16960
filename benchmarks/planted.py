"""Planted benchmark: can the trainers find a known optimum? The worlds (a synthetic LM, task and
rollout engine behind the trainers' own interfaces, whose optimum is known) live in
``decoding_adapters.training.planted``, which describes them; this script runs them for every seed
and prints the figures.

    PYTHONPATH=src .venv/bin/python benchmarks/planted.py              # 3 seeds, both levels
    PYTHONPATH=src .venv/bin/python benchmarks/planted.py --blind      # the control that must fail
    PYTHONPATH=src .venv/bin/python benchmarks/planted.py --null       # no signal: does it stay put?
    PYTHONPATH=src .venv/bin/python benchmarks/planted.py --weak       # a signal as weak as the real one
    PYTHONPATH=src .venv/bin/python benchmarks/planted.py --draft      # the draft world (training/planted.py)
    PYTHONPATH=src .venv/bin/python benchmarks/planted.py --attempt    # the attempt world (its section below)

Ends with one JSON line: ``token_recovered`` and ``sequence_recovered`` (one fraction per seed).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

from decoding_adapters.evaluation.attempt import run_planted_attempt
from decoding_adapters.training.planted import PlantedTask, run_draft, run_sequence, run_token, weak_signal_auc


def main_draft(seeds) -> dict:
    """The draft world for each seed, with the draft's confidence and with the prompt embedding."""
    torch.set_num_threads(1)
    out = {"benchmark": "planted-draft", "draft_recovered": [], "prompt_recovered": []}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in seeds:
            for features, key in (("confidence", "draft_recovered"), ("prompt", "prompt_recovered")):
                r = run_draft(seed, Path(tmp) / f"draft-{features}-{seed}", features)
                out[key].append(round(r["recovered"], 4))
                print(f"draft world seed {seed}, {features}: recovered {r['recovered']:+.3f} values "
                      f"{json.dumps({k: round(v, 3) for k, v in r['values'].items()})} {r['seconds']:.1f}s", flush=True)
    print(json.dumps(out))
    return out


# ---- the attempt world -------------------------------------------------------------------------------
#
# The attempt policy (``policies.attempt``, trained by ``training.attempt``) on the planted attempt
# world (``evaluation.attempt.planted_attempt_table``): two problem types, one where voting over
# samples finds the answer and one where the sampler falls into a trap greedy avoids. Only a hidden
# direction tells the types apart, and only the votes find the answer on the first: the oracle (it
# knows the type) beats every fixed rule by 15-20 points at 2-5 decodes. Printed per seed and
# price: the policy's share of the oracle's margin over the strongest fixed rule at its own compute
# (target >= 0.8), the same for the policy fed no hidden state (the control), and every fixed
# rule's and the policy's share of the oracle's margin over the stopped greedy alone.


def main_attempt(seeds, prices=(0.01, 0.03)) -> dict:
    torch.set_num_threads(1)
    out = {"benchmark": "planted-attempt", "recovered": {}, "no_hidden_recovered": {}}
    for price in prices:
        for seed in seeds:
            started = time.perf_counter()
            r = run_planted_attempt(seed, price)
            blind = run_planted_attempt(seed, price, features=("confidence", "agreement"))
            out["recovered"].setdefault(str(price), []).append(round(r["recovered"], 4))
            out["no_hidden_recovered"].setdefault(str(price), []).append(round(blind["recovered"], 4))
            d, lo, hi = r["difference"]
            print(f"attempt world seed {seed} price {price}: {100 * r['accuracy']:.1f}% at {r['decodes']:.2f} decodes; "
                  f"oracle {100 * r['oracle']:.1f}%, strongest rule {r['strongest_rule']} "
                  f"{100 * r['rule_accuracy']:.1f}% ({100 * d:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}]); "
                  f"recovered {r['recovered']:+.3f}; without the hidden state {blind['recovered']:+.3f} "
                  f"({100 * blind['accuracy']:.1f}% at {blind['decodes']:.2f}); {time.perf_counter() - started:.1f}s",
                  flush=True)
            shares = ", ".join(f"{k} {v:+.2f}" for k, v in sorted(r["rule_shares"].items(), key=lambda kv: -kv[1]))
            print(f"    share of the oracle's margin over greedy at {r['decodes']:.2f} decodes: {shares}", flush=True)
    print(json.dumps(out))
    return out


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--blind", action="store_true", help="zero every observation (the control that must fail)")
    parser.add_argument("--null", action="store_true",
                        help="token level: forks are plain steps (greedy is optimal); recovered = gain over it")
    parser.add_argument("--weak", action="store_true",
                        help="token level: a fork shows in the hidden vector only as weakly as the real signal "
                        "(AUC about 0.75); also reports the share of the best observation policy's margin")
    parser.add_argument("--no-prior", action="store_true", help="start from a random policy, not the best static")
    parser.add_argument("--token", default="{}", help="JSON overrides of TokenTrainConfig")
    parser.add_argument("--sequence", default="{}", help="JSON overrides of SequenceTrainConfig")
    parser.add_argument("--draft", action="store_true",
                        help="only the draft world: the draft-gated trainer fed the draft's confidence, and fed the "
                        "prompt embedding (the control)")
    parser.add_argument("--attempt", action="store_true",
                        help="only the attempt world: the attempt policy against every fixed rule at its compute")
    args = parser.parse_args(argv)
    if args.attempt:
        return main_attempt(args.seeds)
    if args.draft:
        return main_draft(args.seeds)
    torch.set_num_threads(1)
    token_over, seq_over = json.loads(args.token), json.loads(args.sequence)
    results = {"token": [], "sequence": []}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            r = run_token(seed, Path(tmp) / f"token{seed}", args.blind, not args.no_prior, args.null, args.weak,
                          **token_over)
            results["token"].append(r)
            attainable = f", of the attainable {r['recovered_of_attainable']:+.3f}" if args.weak else ""
            print(f"token    seed {seed}: recovered {r['recovered']:+.3f}{attainable} (mode {r['mode']}; sample "
                  f"{r['recovered_sample']:+.3f}, argmax {r['recovered_argmax']:+.3f}) "
                  f"values {json.dumps({k: round(v, 3) for k, v in r['values'].items()})} {r['seconds']:.1f}s",
                  flush=True)
            if args.weak:
                continue  # the weak world is a token-level one
            r = run_sequence(seed, Path(tmp) / f"seq{seed}", args.blind, not args.no_prior, **seq_over)
            results["sequence"].append(r)
            print(f"sequence seed {seed}: recovered {r['recovered']:+.3f} "
                  f"values {json.dumps({k: round(v, 3) for k, v in r['values'].items()})} {r['seconds']:.1f}s",
                  flush=True)
    summary = {
        "benchmark": "planted",
        "blind": args.blind,
        "prior": not args.no_prior,
        "null": args.null,
        "weak": args.weak,
        "token_recovered": [round(r["recovered"], 4) for r in results["token"]],
        "sequence_recovered": [round(r["recovered"], 4) for r in results["sequence"]],
        "token_overrides": token_over,
        "sequence_overrides": seq_over,
    }
    if args.weak:
        summary["weak_signal_auc"] = round(weak_signal_auc(PlantedTask().load("test")), 3)
        summary["token_recovered_of_attainable"] = [round(r["recovered_of_attainable"], 4) for r in results["token"]]
    print(json.dumps(summary))
    return summary


if __name__ == "__main__":
    sys.exit(main() and 0)
