"""``train-attempt``: train the attempt policy (``training.attempt``) on stored sample tables and
print its accuracy-per-compute curve against the fixed rules (``evaluation.attempt``).

The training and validation tables (``evaluation.sample_table``: the stopped greedy and
``--samples`` samples per ``--temperatures`` entry) are built where missing, resumably, beside the
outputs unless named. One policy is trained per (``--prices`` entry, seed in 0..``--seeds`` - 1) on the
training problems less the held-out share (``--holdout``), keep-best on the validation table;
the fixed rules are tuned on the validation table; both are scored on the held-out training
problems (with ``--holdout 0``: on the validation table, where both chose: in sample). Writes each
adapter under ``OUT/policies/price-<p>-seed-<s>/`` and ``OUT/curve.json``.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from ..core.files import write_json
from ..decoding.actions import GREEDY, DecodingAction
from ..evaluation.attempt import format_curve, price_curve, rule_baselines, seed_agreement
from ..evaluation.sample_table import SampleTable, build_sample_table
from ..policies.fixed_rules import RULES
from ..training.attempt import AttemptTrainConfig
from .common import add_model_arguments, add_rollout_arguments, add_task_arguments, build_lm, build_task, load_problems
from .config_args import add_config_arguments, build_config


@dataclass(frozen=True)
class TrainAttemptOptions:
    """attempt policy: tables, prices and the curve"""

    out: str
    """output directory (policies/, curve.json; the tables under tables/ unless named)"""
    table: str | None = None
    """training sample table directory (built from the train split when it holds none; default OUT/tables/train)"""
    val_table: str | None = None
    """validation sample table directory (built when it holds none; default OUT/tables/validation)"""
    train_problems: int = 400
    """training problems when the training table is built (from a file drawn at random with --seed; the last
    --holdout share of them is scored on)"""
    val_problems: int = 400
    """validation problems when the validation table is built (keep-best and the rules' settings are chosen there)"""
    temperatures: tuple[float, ...] = (0.5,)
    """sampled arms beside greedy when a table is built: one per temperature"""
    samples: int = 8
    """samples per sampled arm when a table is built"""
    hidden: bool = True
    """a built table keeps each sample's mean hidden state (the hidden feature set reads it)"""
    holdout: float = 0.25
    """share of the training table's problems (its last ones) held out to score the policies and the rules on"""
    prices: tuple[float, ...] = (0.01, 0.03, 0.1)
    """reward lost per decode: one policy per price traces the accuracy-per-compute curve"""
    seeds: int = 1
    """training seeds 0..seeds-1: one policy per price and seed"""
    rules: tuple[str, ...] = RULES
    """fixed rules the curve is compared with"""
    resume: bool = False
    """continue the policies already under OUT/policies (finished ones are kept)"""

    def __post_init__(self) -> None:
        if not 0 <= self.holdout < 1:
            raise ValueError("--holdout must be in [0, 1)")
        if self.samples < 1 or not self.temperatures or any(t <= 0 for t in self.temperatures):
            raise ValueError("--samples must be >= 1 and --temperatures positive")
        if not self.prices or self.seeds < 1 or min(self.train_problems, self.val_problems) < 1:
            raise ValueError("give at least one price and seed, and >= 1 training and validation problem")
        unknown = [r for r in self.rules if r not in RULES]
        if unknown:
            raise ValueError(f"unknown rules {unknown}; choose from {list(RULES)}")


def configure_parser(p: argparse.ArgumentParser) -> None:
    add_config_arguments(p, TrainAttemptOptions)
    add_config_arguments(p, AttemptTrainConfig, title="attempt policy training", exclude=("price", "seed"))
    add_model_arguments(p)
    add_task_arguments(p)
    add_rollout_arguments(p, exclude=("backend", "workers", "ray_address", "gpu_memory_utilization"))


def _tables(args, options: TrainAttemptOptions) -> tuple[SampleTable, SampleTable]:
    out = Path(options.out)
    wanted = [(options.table or str(out / "tables" / "train"), "train", options.train_problems),
              (options.val_table or str(out / "tables" / "validation"), "validation", options.val_problems)]
    missing = [(path, split, n) for path, split, n in wanted
               if not (Path(path) / "header.json").is_file() or len(SampleTable.load(path).problem_ids) < n]
    if missing:
        task = build_task(args)
        problems = {split: load_problems(task, split, n, args.seed) for _, split, n in missing}
        lm = build_lm(args)
        arms = [GREEDY] + [DecodingAction(temperature=t) for t in options.temperatures]
        rows_per_problem = 1 + len(options.temperatures) * options.samples
        for path, split, _ in missing:
            build_sample_table(lm, task, problems[split], arms, samples=options.samples, token_budget=args.token_budget,
                               path=path, split=split, seed=args.seed, chunk_problems=max(1, args.batch_rows //
                                                                                           rows_per_problem),
                               hidden=options.hidden,
                               on_chunk=lambda done, total, s=split: print(f"{s} table: {done}/{total} problems"))
    return SampleTable.load(wanted[0][0]), SampleTable.load(wanted[1][0])


def run_cli(args) -> int:
    options = build_config(TrainAttemptOptions, args)
    config = build_config(AttemptTrainConfig, args)
    train, validation = _tables(args, options)
    if train.header.get("actions") != validation.header.get("actions"):
        raise ValueError("the training and validation tables hold different arms")
    held = int(round(options.holdout * train.shape[0]))
    fit = train.subset(range(train.shape[0] - held)) if held else train
    scoring = train.subset(range(train.shape[0] - held, train.shape[0])) if held else validation
    where = ("held-out training problems" if held
             else "validation problems (in sample: the rules and keep-best chose there)")
    baselines = rule_baselines(validation, scoring, options.rules)
    model = train.header.get("model", {}).get("name_or_path", "")
    scored = price_curve(fit, validation, scoring, config, options.prices, range(options.seeds), baselines,
                         Path(options.out) / "policies", resume=options.resume, base_model=model,
                         task=train.header.get("task", ""))
    out = {"scored_on": where, "problems": {"fit": fit.shape[0], "validation": validation.shape[0],
                                            "scored": scoring.shape[0]},
           "config": asdict(config), "policies": [s.record() for s in scored],
           "rules": {c.name: [{"decodes": float(d), "accuracy": float(a), "setting": st}
                              for d, a, st in zip(c.decodes, c.accuracy, c.settings)] for c in baselines}}
    if options.seeds > 1:  # how often the seeds' policies make the same decisions, per price
        out["seed_agreement"] = {str(price): seed_agreement([s.outcome for s in scored if s.price == price])
                                 for price in options.prices}
    write_json(Path(options.out) / "curve.json", out)
    print(f"scored on {scoring.shape[0]} {where}")
    for c in baselines:
        cells = ", ".join(f"{d:.2f} dec {100 * a:.1f}%" for d, a in zip(c.decodes, c.accuracy))
        print(f"{c.name:34s} {cells}")
    print(format_curve(scored))
    for price, share in out.get("seed_agreement", {}).items():
        print(f"price {price}: the seeds' policies make the same decisions on {100 * share:.0f}% of problems")
    print(json.dumps({"out": options.out, "policies": len(scored)}))
    return 0
