"""Tokens per problem at equal answer accuracy, with and without cutting attempts short.

Two parts, side by side in one run:

1. **Room on a stored table** (``--short-table``, default the committed rules table of the default
   task): how long its attempts are and how many reach each checkpoint of ``--every`` tokens; an
   attempt that ends before the first checkpoint cannot be cut.
2. **A configuration with long attempts**: the arithmetic task with a worked-solution instruction
   (``--system-prompt``), decoded to EOS or ``--token-budget`` (no stop at the first answer), greedy
   then ``--samples`` samples at ``--temperature``; sample tables with checkpoints every ``--every``
   tokens for ``--train`` training, ``--validation`` validation and ``--test`` test problems (built
   under ``--tables``, resumable). The prefix verifier is fitted on the training table; for each
   decider (self-consistency over greedy and every sample; an attempt policy per ``--prices``
   entry, trained on the training table, keep-best on validation) its thresholds are tuned on
   validation for the fewest tokens at the decider's own validation accuracy (within
   ``--tolerance``), then the decider with and without cutting is scored on the test table:
   accuracy, decodes and tokens per problem, the paired difference in accuracy and the share of
   tokens saved.

    PYTHONPATH=src .venv/bin/python benchmarks/abandon_tokens.py --tables runs/abandon-tables

Prints its figures and a final JSON line.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from decoding_adapters.core.stats import paired_ci
from decoding_adapters.decoding.actions import GREEDY, DecodingAction
from decoding_adapters.evaluation.abandon import replay
from decoding_adapters.evaluation.sample_table import SampleTable, build_sample_table
from decoding_adapters.lm.models import DEFAULT_MODEL, ModelSpec, load_frozen_lm
from decoding_adapters.policies.attempt import AttemptInputs
from decoding_adapters.policies.fixed_rules import vote
from decoding_adapters.tasks import get_task
from decoding_adapters.training.abandon import train_prefix_verifier, tune_thresholds
from decoding_adapters.training.attempt import AttemptTrainConfig, AttemptTrainer, policy_config_from_table

DOCS = Path(__file__).resolve().parents[1] / "docs"
INSTRUCTION = "Solve the problem step by step, explaining each step in words. End with: The answer is N."


def room(table: SampleTable, every: int) -> dict:
    """Attempt lengths of a table's distinct samples and the share still running at each checkpoint."""
    distinct = np.asarray(table.distinct)
    slot = np.arange(table.shape[2])[None, :] < distinct[:, None]
    lengths = table.tokens[:, slot].reshape(-1).astype(float)
    marks = list(range(every, int(table.header["token_budget"]), every))
    return {"token_budget": int(table.header["token_budget"]), "attempts": int(lengths.size),
            "mean_tokens": float(lengths.mean()), "median_tokens": float(np.median(lengths)),
            "p90_tokens": float(np.quantile(lengths, 0.9)),
            "running_after": {str(t): float((lengths > t).mean()) for t in marks}}


def build_tables(args) -> dict[str, SampleTable]:
    lm = load_frozen_lm(ModelSpec(args.model))
    task = get_task("arithmetic", system_prompt=args.system_prompt, validation_size=max(100, args.validation))
    arms = [GREEDY, DecodingAction(temperature=args.temperature)]
    sizes = {"train": ("train", args.train), "validation": ("validation", args.validation)}
    if not args.test_from_train:
        sizes["test"] = ("test", args.test)
    tables = {}
    for name, (split, n) in sizes.items():
        started = time.perf_counter()
        tables[name] = build_sample_table(lm, task, task.load(split)[:n], arms, samples=args.samples,
                                          token_budget=args.token_budget, path=Path(args.tables) / name, split=split,
                                          stop_at_answer=False, hidden=True, checkpoints=args.every,
                                          chunk_problems=args.chunk, progress=False)
        print(f"table {name}: {n} problems in {time.perf_counter() - started:.0f} s", flush=True)
    if args.test_from_train:  # the training table's last problems held out: never fitted on
        p = tables["train"].shape[0]
        if not 0 < args.test_from_train < p:
            raise ValueError(f"--test-from-train must be between 1 and {p - 1}")
        tables["test"] = tables["train"].subset(range(p - args.test_from_train, p))
        tables["train"] = tables["train"].subset(range(p - args.test_from_train))
        print(f"test: the last {args.test_from_train} of the {p} training problems, held out", flush=True)
    return tables


def score(outcome) -> tuple[float, float]:
    return float(outcome.correct.mean()), float(outcome.tokens.mean())


def majority(table: SampleTable) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Self-consistency over the stopped greedy and every sample (a cut attempt casts no vote):
    per problem whether the answer is right, the tokens spent and the decodes made."""
    greedy = table.arm("greedy")
    sampled = [a for a in range(table.shape[1]) if a != greedy]
    answers = np.concatenate([table.answers[:, greedy, :1]] + [table.answers[:, a] for a in sampled], axis=1)
    tokens = table.tokens[:, greedy, 0] + sum(table.tokens[:, a].sum(1) for a in sampled)
    chosen = vote(answers)
    right = np.concatenate([table.answer_correct(), np.zeros((len(chosen), 1), bool)], axis=1)
    correct = right[np.arange(len(chosen)), np.where(chosen >= 0, chosen, right.shape[1] - 1)]
    return correct, tokens.astype(float), np.full(len(chosen), answers.shape[1], float)


def compare(name: str, run, rule, validation: SampleTable, test: SampleTable, tolerance: float) -> dict:
    """``run(table) -> (correct [P], tokens [P], decodes [P])``: thresholds tuned on validation for
    it, then it with and without cutting on the test table."""
    def evaluate(table):
        correct, tokens, _ = run(table)
        return float(correct.mean()), float(tokens.mean())

    tuned = tune_thresholds(rule, validation, evaluate, tolerance=tolerance)
    c0, t0, d0 = run(test)
    c1, t1, d1 = run(tuned.rule.apply(test))
    diff = paired_ci(c1.astype(float).tolist(), c0.astype(float).tolist())
    return {"decider": name, "thresholds": list(tuned.rule.thresholds),
            "validation": {"accuracy": tuned.reference_accuracy, "tokens": tuned.reference_tokens,
                           "accuracy_with_abandon": tuned.accuracy, "tokens_with_abandon": tuned.tokens},
            "test": {"accuracy": float(c0.mean()), "decodes": float(d0.mean()), "tokens": float(t0.mean()),
                     "accuracy_with_abandon": float(c1.mean()), "decodes_with_abandon": float(d1.mean()),
                     "tokens_with_abandon": float(t1.mean()),
                     "tokens_saved": 1 - float(t1.mean()) / max(float(t0.mean()), 1e-9),
                     "accuracy_difference": list(diff),
                     "samples_cut": float((tuned.rule.cuts(test) >= 0).mean())}}


def policy_run(tables: dict[str, SampleTable], price: float, args):
    """An attempt policy trained on the training table (keep-best on validation), as a ``run``."""
    train, validation = tables["train"], tables["validation"]
    config = AttemptTrainConfig(price=price, steps=args.steps, seed=args.seed, val_every=25)
    with tempfile.TemporaryDirectory() as tmp:
        trainer = AttemptTrainer(config, policy_config_from_table(train, config), AttemptInputs.from_table(train),
                                 AttemptInputs.from_table(validation), tmp, actions=train.header["actions"])
        trainer.train()

    def run(table):
        outcome, _ = replay(trainer.policy, table)
        return outcome.correct, outcome.tokens.astype(float), outcome.attempts.astype(float)

    return run


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--tables", required=True, help="directory of the long-attempt tables (built where missing)")
    p.add_argument("--short-table", default=str(DOCS / "rules" / "tables" / "validation"))
    p.add_argument("--system-prompt", default=INSTRUCTION, help="the worked-solution instruction")
    p.add_argument("--token-budget", type=int, default=96)
    p.add_argument("--every", type=int, default=16, help="tokens between checkpoints")
    p.add_argument("--samples", type=int, default=3)
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--train", type=int, default=40)
    p.add_argument("--validation", type=int, default=30)
    p.add_argument("--test", type=int, default=30)
    p.add_argument("--test-from-train", type=int, default=0,
                   help="score on the training table's last this many problems, held out from every fit, instead of "
                        "decoding a test table")
    p.add_argument("--chunk", type=int, default=10, help="problems per decoded chunk")
    p.add_argument("--prices", type=float, nargs="+", default=[0.01, 0.05])
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tolerance", type=float, default=0.005, help="accuracy the cut may lose on validation")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)

    short = room(SampleTable.load(args.short_table), args.every) if Path(args.short_table).is_dir() else None
    if short:
        print(f"default task ({args.short_table}): attempts of {short['mean_tokens']:.1f} tokens on average "
              f"(median {short['median_tokens']:.0f}, 90% {short['p90_tokens']:.0f}, budget {short['token_budget']}); "
              f"running after {args.every}, {2 * args.every} tokens: "
              + ", ".join(f"{100 * v:.0f}%" for v in list(short["running_after"].values())[:2]), flush=True)
    tables = build_tables(args)
    long = room(tables["test"], args.every)
    print(f"long attempts (test table): {long['mean_tokens']:.1f} tokens on average (median "
          f"{long['median_tokens']:.0f}, budget {long['token_budget']})", flush=True)
    rule = train_prefix_verifier(tables["train"])
    runs = [("self-consistency over greedy and every sample", majority)]
    runs += [(f"attempt policy (price {price:g})", policy_run(tables, price, args)) for price in args.prices]
    rows = []
    for name, run in runs:
        r = compare(name, run, rule, tables["validation"], tables["test"], args.tolerance)
        t = r["test"]
        d, lo, hi = t["accuracy_difference"]
        print(f"{name}: without abandoning {100 * t['accuracy']:.1f}% at {t['decodes']:.2f} decodes, "
              f"{t['tokens']:.1f} tokens; with {100 * t['accuracy_with_abandon']:.1f}% at "
              f"{t['decodes_with_abandon']:.2f} decodes, {t['tokens_with_abandon']:.1f} tokens "
              f"({100 * t['tokens_saved']:+.1f}% tokens saved); accuracy difference {100 * d:+.1f} "
              f"[{100 * lo:+.1f}, {100 * hi:+.1f}]; validation {100 * r['validation']['accuracy']:.1f}% -> "
              f"{100 * r['validation']['accuracy_with_abandon']:.1f}%, {r['validation']['tokens']:.1f} -> "
              f"{r['validation']['tokens_with_abandon']:.1f} tokens", flush=True)
        rows.append(r)
    print(json.dumps({"short_table": short, "long_table": long, "settings": {
        k: v for k, v in vars(args).items() if k not in ("short_table",)}, "deciders": rows}))


if __name__ == "__main__":
    main()
