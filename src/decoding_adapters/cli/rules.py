"""``rules``: tune the fixed answer rules (``evaluation.rules``) on a validation sample table and
score them on another: each rule's curve of answer accuracy against mean decodes per problem.

A table directory that holds no table yet is built first (``evaluation.sample_table``: the greedy
arm and one sampled arm per ``--temperatures`` entry, ``--samples`` each, every sample ended at its
first complete answer unless ``--no-stop-at-answer``; resumable). The rules read the stopped greedy,
then the samples of ``--arm``. Writes ``curves.json`` and ``curves.png`` into ``--out``.

``--adapter-out DIR`` also writes a tuned rule as an adapter with no weights (kind ``rule``, usable
with ``generate`` / ``serve`` / ``Adapter.from_pretrained``): ``--adapter-rule`` (default: the rule
most accurate on validation within ``--adapter-level`` mean decodes) at the setting tuned for that
level, over the stopped greedy and ``--arm``; ReASC and CGES carry the calibration fitted on the
validation table.

A finished ``--out`` (``curves.json``) is refused unless ``--force``; the run holds the lock of
``--out`` and of each table it builds.

``--verifier-dir DIR`` (a verifier from ``train-verifier``) also tunes and scores every rule's variant that
reads it in place of its confidence (``policies.fixed_rules.VERIFIER_RULES``), beside the plain rules;
``curves.json`` marks them ``"reads_verifier": true`` and holds the verifier's ranking quality on both
tables. They are scored from tables only: ``--adapter-out`` writes plain rules.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

from ..core.files import atomic_write, lock_output_dir, write_json
from ..decoding.protocol import STOP_AT_ANSWER
from ..evaluation.rules import COMPUTE_LEVELS, fit_calibrations, greedy_then, tune_rules
from ..evaluation.sample_table import SampleTable, build_sample_table, pass_at_k_curve, unfinished
from ..evaluation.verifier import ranking_quality, table_scores
from ..policies.fixed_rules import RULES, VERIFIER_RULES, reads_verifier
from ..policies.kind_rule import save_rule_adapter
from ..policies.verifier import load_verifier
from ..reporting.plots import method_color
from ..tasks import task_record
from .common import (
    TableOptions,
    add_model_arguments,
    add_rollout_arguments,
    add_task_arguments,
    build_lm,
    build_task,
    check_adapter_out,
    check_output_dir,
    check_table_backend,
    load_problems,
    table_engine,
)
from .config_args import add_config_arguments, build_config


@dataclass(frozen=True)
class RulesOptions:
    """fixed answer rules"""

    table: str
    """sample table directory the rules are scored on (built from --split when it holds none)"""
    validation_table: str
    """sample table directory each rule's settings are tuned on (built from the validation split when it holds none)"""
    out: str
    """output directory (curves.json, curves.png)"""
    split: str = "test"
    """split --table is built from"""
    arm: str | None = None
    """the sampled arm the rules read after the stopped greedy (default: the table's first sampled arm)"""
    rules: tuple[str, ...] = RULES
    """rules to tune and score"""
    levels: tuple[float, ...] = COMPUTE_LEVELS
    """compute levels (mean decodes per problem) at which each rule's setting is chosen on validation"""
    force: bool = False
    """overwrite the curves already in --out (and the files in --adapter-out)"""
    adapter_out: str | None = None
    """also write the tuned rule at --adapter-level as an adapter directory here (kind rule, no weights)"""
    adapter_rule: str | None = None
    """the rule --adapter-out writes (default: the most accurate on validation at --adapter-level)"""
    adapter_level: float = 1.5
    """the compute level (mean decodes per problem on validation) whose tuned setting --adapter-out writes"""
    verifier_dir: str | None = None
    """a learned verifier's directory (train-verifier): also tune every rule's variant that reads it"""

    def __post_init__(self) -> None:
        unknown = [r for r in self.rules if r not in RULES]
        if unknown:
            raise ValueError(f"unknown rules {unknown}; choose from {list(RULES)}")
        if self.adapter_rule is not None and reads_verifier(self.adapter_rule):
            raise ValueError("--adapter-out writes plain rules; a rule that reads the verifier is scored from tables")


RESULTS = ("curves.json", "curves.png")
"""What a finished run leaves in --out (a rerun into it needs --force)."""


def configure_parser(p: argparse.ArgumentParser) -> None:
    add_config_arguments(p, RulesOptions)
    add_config_arguments(p, TableOptions)
    add_model_arguments(p)
    add_task_arguments(p)
    add_rollout_arguments(p)


def _tables(args, options: RulesOptions, tables: TableOptions) -> tuple[SampleTable, SampleTable]:
    wanted = [(options.validation_table, "validation"), (options.table, options.split)]
    missing = [(path, split) for path, split in wanted if not (Path(path) / "header.json").is_file()
               or _unfinished(path, args)]
    if missing:
        check_table_backend(args)
        for path, _ in missing:  # a table being built is this run's alone
            lock_output_dir(path, "--table" if path == options.table else "--validation-table")
        task = build_task(args)
        problems = {split: load_problems(task, split, args.max_problems, args.seed) for _, split in missing}
        lm = build_lm(args)
        engine = table_engine(args, lm, task, tables.arms)
        try:
            for path, split in missing:
                build_sample_table(lm, task, problems[split], tables.arms, samples=tables.samples,
                                   token_budget=args.token_budget, path=path, split=split, seed=args.seed,
                                   stop_at_answer=tables.stop_at_answer, hidden=tables.hidden, engine=engine,
                                   checkpoints=tables.checkpoints,
                                   chunk_problems=max(1, args.batch_rows // tables.rows_per_problem))
        finally:
            engine.close()
    return SampleTable.load(options.validation_table), SampleTable.load(options.table)


def _unfinished(path: str, args) -> bool:
    """A table directory whose header is written but which holds fewer problems than asked: than
    its own plan (a build killed part-way) or than --max-problems."""
    if unfinished(path):
        return True
    if args.max_problems is None:
        return False
    return len(SampleTable.load(path).problem_ids) < args.max_problems


def run_cli(args) -> int:
    options = build_config(RulesOptions, args)
    tables = build_config(TableOptions, args)
    # pre-flight: --out (and --adapter-out) writable, not holding a finished run, and this run's alone
    check_output_dir(options.out, RESULTS, force=options.force)
    if options.adapter_out:
        check_adapter_out(options.adapter_out, options.force, "--adapter-out")
    validation, test = _tables(args, options, tables)
    if validation.header.get("actions") != test.header.get("actions"):
        raise ValueError("the validation and test tables hold different arms")
    arms = validation.arm_names
    sampled = [name for name, a in zip(arms, validation.actions) if not a.is_greedy]
    arm = options.arm or (sampled[0] if sampled else arms[0])
    has_greedy = any(a.is_greedy for a in validation.actions)
    first = "greedy" if has_greedy and arm in sampled else None
    val_draws, test_draws = greedy_then(validation, arm, first), greedy_then(test, arm, first)
    curves = tune_rules(val_draws, test_draws, rules=options.rules, levels=options.levels)
    verified = _verifier_curves(options, validation, test, arm, first) if options.verifier_dir else {}
    index = test.arm(arm)
    out = {
        "sequence": test_draws.label, "validation_problems": validation.shape[0], "test_problems": test.shape[0],
        "tables": {"validation": options.validation_table, "test": options.table},
        "stop_at_answer": test.header.get("stop_at_answer"), "rules": curves,
        "pass_at_k": {arm: pass_at_k_curve(test, index, range(1, int(test.distinct[index]) + 1))},
        **({"verifier": verified["verifier"]} if verified else {}),
    }
    curves.update(verified.get("rules", {}))
    path = Path(options.out)
    _plot(curves, path / "curves.png", f"answer accuracy per compute ({test_draws.label}, {test.shape[0]} problems)")
    write_json(path / "curves.json", out)  # last: it marks a finished run
    for rule, curve in curves.items():
        cells = ", ".join(f"{p['test']['decodes']:.2f} dec {100 * p['test']['accuracy']:.1f}%" for p in curve["points"])
        print(f"{rule:22s} {cells}")
    if options.adapter_out:
        written = _write_rule_adapter(args, options, curves, val_draws, validation, arm, first)
        print(f"rule adapter: {written['rule']} {written['settings']} -> {options.adapter_out}")
    print(json.dumps({"out": str(path), "rules": len(curves), "test_problems": test.shape[0]}))
    return 0


def _verifier_curves(options: RulesOptions, validation: SampleTable, test: SampleTable, arm: str,
                     first: str | None) -> dict:
    """Every verifier rule tuned on the validation table's draws with the verifier's column, scored on
    the test table's; each curve marked ``reads_verifier``; the verifier's quality on both tables."""
    verifier, _ = load_verifier(options.verifier_dir)
    scores = {"validation": table_scores(verifier, validation), "test": table_scores(verifier, test)}
    val_draws = greedy_then(validation, arm, first, verifier=scores["validation"])
    test_draws = greedy_then(test, arm, first, verifier=scores["test"])
    curves = tune_rules(val_draws, test_draws, rules=VERIFIER_RULES, levels=options.levels)
    return {"rules": {rule: {**curve, "reads_verifier": True} for rule, curve in curves.items()},
            "verifier": {"path": options.verifier_dir, "quality": {
                "validation": ranking_quality(scores["validation"], validation),
                "test": ranking_quality(scores["test"], test)}}}


def _write_rule_adapter(args, options: RulesOptions, curves: dict, val_draws, validation: SampleTable, arm: str,
                        first: str | None) -> dict:
    """The tuned rule at ``--adapter-level`` as a ``rule`` adapter (module docstring)."""
    level = options.adapter_level

    def point(rule: str) -> dict | None:
        fits = [p for p in curves[rule]["points"] if p["level"] <= level + 1e-9]
        return fits[-1] if fits else None  # the setting tuned for the highest level within it

    if options.adapter_rule is not None and options.adapter_rule not in curves:
        raise ValueError(f"--adapter-rule {options.adapter_rule} was not tuned: add it to --rules")
    plain = [r for r in curves if not reads_verifier(r) and point(r) is not None]
    rules = [options.adapter_rule] if options.adapter_rule else plain
    if not rules or point(rules[0]) is None:
        raise ValueError(f"no tuned setting spends at most {level} mean decodes: raise --adapter-level")
    rule = max(rules, key=lambda r: point(r)["validation"]["accuracy"])  # ties: report order
    settings = dict(point(rule)["setting"])
    settings.pop("rule")
    calibration = None
    if "feature" in settings:
        calibration = fit_calibrations(val_draws)[settings["feature"]]
    index = validation.arm(arm)
    actions = ([validation.actions[validation.arm(first)].to_dict()] if first is not None else [])
    actions.append(validation.actions[index].to_dict())
    task = build_task(args)
    save_rule_adapter(options.adapter_out, rule, settings, actions, first_arm=0, arm=len(actions) - 1,
                      calibration=calibration, task=task.name, task_options=task_record(task),
                      token_budget=validation.header.get("token_budget"),
                      stop_at_answer=bool(validation.header.get("stop_at_answer", STOP_AT_ANSWER)),
                      base_model=getattr(args, "name_or_path", None) or "",
                      training={"tuned_on": options.validation_table, "level": level,
                                "validation": point(rule)["validation"]})
    return {"rule": rule, "settings": settings}


def _plot(curves: dict, path: Path, title: str) -> Path:
    """Answer accuracy (%) on the test table against mean decodes per problem, one line per rule."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8.4, 5.0), layout="constrained")
    ax = fig.add_subplot()
    markers = "osD^v<>ph*"
    for i, (rule, curve) in enumerate(curves.items()):
        points = sorted(curve["points"], key=lambda p: p["test"]["decodes"])
        if not points:
            continue
        ax.plot([p["test"]["decodes"] for p in points], [100 * p["test"]["accuracy"] for p in points], label=rule,
                color=method_color(i), marker=markers[i % len(markers)], linewidth=1.6, markersize=5)
    ax.set_xlabel("mean decodes per problem")
    ax.set_ylabel("answer accuracy (%)")
    ax.set_title(title, fontsize=11)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    # atomic, and a failed write (a full disk) is one line naming the file
    return atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=110, format="png"))
