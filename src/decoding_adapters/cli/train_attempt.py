"""``train-attempt``: train the attempt policy (``training.attempt``) on stored sample tables and
print its accuracy-per-compute curve against the fixed rules (``evaluation.attempt``).

The training and validation tables (``evaluation.sample_table``: the stopped greedy and
``--samples`` samples per ``--temperatures`` entry, with the same table settings and defaults as
``rules``, so each reads the other's tables) are built where missing, resumably, beside the
outputs unless named. A table named with ``--table`` / ``--val-table`` that already holds problems
is read as it is, never extended, unless ``--extend-tables``. One policy is trained per
(``--prices`` entry, seed in 0..``--seeds`` - 1) on the training problems less the held-out share
(``--holdout``), keep-best on the validation table; the fixed rules are tuned on the validation
table; both are scored on the held-out training problems (with ``--holdout 0``: on the validation
table, where both chose: in sample). Writes each adapter under
``OUT/policies/price-<p>-seed-<s>/`` (with the task's options: ``generate`` and ``serve`` rebuild
its prompt, verifier and stop) and ``OUT/curve.json``. The run holds the lock of ``OUT`` and of
each table it builds.
"""

from __future__ import annotations

import argparse
import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path

from ..core.files import lock_output_dir, write_json
from ..evaluation.attempt import format_curve, price_curve, rule_baselines, seed_agreement, thin_table_warning
from ..evaluation.decoder_choice import decoder_ablation, format_decoder_ablation
from ..evaluation.sample_table import SampleTable, build_sample_table
from ..policies.fixed_rules import RULES
from ..tasks import task_record
from ..training.attempt import AttemptTrainConfig
from .common import (
    TableOptions,
    add_model_arguments,
    add_rollout_arguments,
    add_task_arguments,
    build_lm,
    build_task,
    check_output_dir,
    check_table_backend,
    load_problems,
    table_engine,
)
from .config_args import add_config_arguments, build_config

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class TrainAttemptOptions:
    """attempt policy: tables, prices and the curve"""

    out: str
    """output directory (policies/, curve.json, tables/)"""
    table: str | None = None
    """training sample table directory (built when empty, else read as it is; default OUT/tables/train)"""
    val_table: str | None = None
    """validation sample table directory (built when empty, else read as it is; default OUT/tables/validation)"""
    extend_tables: bool = False
    """decode more problems into a --table / --val-table that holds fewer than asked (else it is only read)"""
    train_problems: int = 400
    """training problems when its table is built (a file's drawn with --seed; the last --holdout share scored)"""
    val_problems: int = 400
    """validation problems when the validation table is built (keep-best and the rules' settings are chosen there)"""
    holdout: float = 0.25
    """share of the training table (its last problems) held out to score the policies and the rules on"""
    prices: tuple[float, ...] = (0.01, 0.03, 0.1)
    """reward lost per decode: one policy per price traces the accuracy-per-compute curve"""
    seeds: int = 1
    """training seeds 0..seeds-1: one policy per price and seed"""
    rules: tuple[str, ...] = RULES
    """fixed rules the curve is compared with"""
    resume: bool = False
    """continue the policies already under OUT/policies (finished ones are kept)"""
    decoder_ablation: bool = False
    """also train each policy restricted to each single sampled arm and set it against the one best on validation, at
    matched compute (needs two or more sampled arms: --decoders)"""

    def __post_init__(self) -> None:
        if not 0 <= self.holdout < 1:
            raise ValueError("--holdout must be in [0, 1)")
        if not self.prices or self.seeds < 1 or min(self.train_problems, self.val_problems) < 1:
            raise ValueError("give at least one price and seed, and >= 1 training and validation problem")
        unknown = [r for r in self.rules if r not in RULES]
        if unknown:
            raise ValueError(f"unknown rules {unknown}; choose from {list(RULES)}")

    def wanted(self) -> list[tuple[str, str, int, bool]]:
        """``(path, split, problems, given)`` of the training and the validation table."""
        out = Path(self.out)
        return [(self.table or str(out / "tables" / "train"), "train", self.train_problems, self.table is not None),
                (self.val_table or str(out / "tables" / "validation"), "validation", self.val_problems,
                 self.val_table is not None)]


def configure_parser(p: argparse.ArgumentParser) -> None:
    add_config_arguments(p, TrainAttemptOptions)
    add_config_arguments(p, TableOptions)
    add_config_arguments(p, AttemptTrainConfig, title="attempt policy training", exclude=("price", "seed"))
    add_model_arguments(p)
    add_task_arguments(p, exclude=("max_problems", "cot_ratio"))  # the tables' sizes: --train-problems, --val-problems
    add_rollout_arguments(p)


def _held(path: str) -> int:
    """Problems a table directory holds (0: none yet)."""
    return len(SampleTable.load(path).problem_ids) if (Path(path) / "header.json").is_file() else 0


def _tables(args, options: TrainAttemptOptions, tables: TableOptions) -> tuple[SampleTable, SampleTable]:
    missing = []
    for path, split, n, given in options.wanted():
        held = _held(path)
        if held >= n:
            continue
        if held and given and not options.extend_tables:  # a table passed in is read, not extended
            log.info("%s holds %d problems (fewer than the %d asked): read as it is; --extend-tables decodes the rest",
                     path, held, n)
            continue
        missing.append((path, split, n))
    if missing:
        check_table_backend(args)
        for path, _, _ in missing:  # a table being built is this run's alone
            lock_output_dir(path, "--table" if path == options.table else "--val-table")
        task = build_task(args)
        problems = {split: load_problems(task, split, n, args.seed) for _, split, n in missing}
        lm = build_lm(args)
        engine = table_engine(args, lm, task, tables.arms)
        try:
            for path, split, _ in missing:
                build_sample_table(lm, task, problems[split], tables.arms, samples=tables.samples,
                                   token_budget=args.token_budget, path=path, split=split, seed=args.seed,
                                   stop_at_answer=tables.stop_at_answer, hidden=tables.hidden, engine=engine,
                                   checkpoints=tables.checkpoints,
                                   chunk_problems=max(1, args.batch_rows // tables.rows_per_problem),
                                   on_chunk=lambda done, total, s=split: print(f"{s} table: {done}/{total} problems"))
        finally:
            engine.close()
    (train_path, *_), (val_path, *_) = options.wanted()
    return SampleTable.load(train_path), SampleTable.load(val_path)


def interrupted_note(args) -> str:
    """What an interrupted run keeps (``cli.main`` prints it after Ctrl-C): the tables' decoded
    chunks and the policies' checkpoints, and how to continue."""
    options = build_config(TrainAttemptOptions, args)
    kept = [f"the {split} table's chunks of {_held(path)} problem(s) ({path})" for path, split, _, _ in options.wanted()
            if _held(path)]
    policies = Path(options.out) / "policies"
    trained = sorted(p.name for p in policies.iterdir() if (p / "checkpoint.pt").is_file()) if policies.is_dir() else []
    if trained:
        kept.append(f"the checkpoints of {len(trained)} policies ({policies})")
    if not kept:
        return "nothing saved yet: the same command starts over"
    # a table given with --table / --val-table is only extended when asked
    unfinished = [("--table " if split == "train" else "--val-table ") + path
                  for path, split, n, given in options.wanted() if given and 0 < _held(path) < n]
    how = "the same command continues" + (" with --resume" if trained else "")
    if unfinished:
        how += f" (add --extend-tables to finish {' and '.join(unfinished)})"
    return f"kept {'; '.join(kept)}: {how}"


def _task(args, train: SampleTable) -> tuple[str, dict | None]:
    """The task the adapters record (its name and ``task_record`` options, which rebuild its prompt,
    verifier and stop in ``generate`` and ``serve``): the command's task where the tables were
    decoded on it, else the table's task name alone, with a warning."""
    recorded = train.header.get("task", "")
    task = build_task(args)
    if not recorded or recorded == task.name:
        return task.name, task_record(task)
    log.warning("the tables were decoded on task %r, not --task %s: the adapters record the task's name only; give "
                "--task %s and its options (--data, --verifier, --instruction, ...) so that generate and serve rebuild "
                "its prompt and verifier", recorded, task.name, recorded)
    return recorded, None


def run_cli(args) -> int:
    options = build_config(TrainAttemptOptions, args)
    tables = build_config(TableOptions, args)
    config = build_config(AttemptTrainConfig, args)
    check_output_dir(options.out)  # pre-flight, and the run lock: before any table is decoded
    train, validation = _tables(args, options, tables)
    if train.header.get("actions") != validation.header.get("actions"):
        raise ValueError("the training and validation tables hold different arms")
    if options.decoder_ablation and sum(not a.is_greedy for a in train.actions) < 2:
        raise ValueError(f"--decoder-ablation needs two or more sampled arms; the tables hold {train.arm_names} "
                         "(give --decoders)")
    task, task_options = _task(args, train)
    held = int(round(options.holdout * train.shape[0]))
    fit = train.subset(range(train.shape[0] - held)) if held else train
    scoring = train.subset(range(train.shape[0] - held, train.shape[0])) if held else validation
    where = ("held-out training problems" if held
             else "validation problems (in sample: the rules and keep-best chose there)")
    baselines = rule_baselines(validation, scoring, options.rules)
    warning = thin_table_warning(fit, baselines, "more --train-problems or --samples give it more")
    if warning:
        log.warning(warning)
    model = train.header.get("model", {}).get("name_or_path", "")
    scored = price_curve(fit, validation, scoring, config, options.prices, range(options.seeds), baselines,
                         Path(options.out) / "policies", resume=options.resume, base_model=model,
                         task=task, task_options=task_options)
    trained = {k: v for k, v in asdict(config).items() if k not in ("price", "seed")}  # one policy per price, seed
    out = {"scored_on": where, "problems": {"fit": fit.shape[0], "validation": validation.shape[0],
                                            "scored": scoring.shape[0]},
           "config": {**trained, "prices": list(options.prices), "seeds": list(range(options.seeds))},
           "policies": [s.record() for s in scored],
           "rules": {c.name: [{"decodes": float(d), "accuracy": float(a), "setting": st}
                              for d, a, st in zip(c.decodes, c.accuracy, c.settings)] for c in baselines}}
    if warning:
        out["warning"] = warning
    if options.seeds > 1:  # how often the seeds' policies make the same decisions, per price
        out["seed_agreement"] = {str(price): seed_agreement([s.outcome for s in scored if s.price == price])
                                 for price in options.prices}
    if options.decoder_ablation:
        out["ablations"] = [decoder_ablation(fit, validation, scoring, config, scored, baselines)]
    write_json(Path(options.out) / "curve.json", out)
    print(f"scored on {scoring.shape[0]} {where}")
    for c in baselines:
        cells = ", ".join(f"{d:.2f} dec {100 * a:.1f}%" for d, a in zip(c.decodes, c.accuracy))
        print(f"{c.name:34s} {cells}")
    print(format_curve(scored))
    if options.decoder_ablation:
        print(format_decoder_ablation(out["ablations"][0]))
    for price, share in out.get("seed_agreement", {}).items():
        print(f"price {price}: the seeds' policies make the same decisions on {100 * share:.0f}% of problems")
    print(json.dumps({"out": options.out, "policies": len(scored)}))
    return 0
