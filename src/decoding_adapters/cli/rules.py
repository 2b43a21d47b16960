"""``rules``: tune the fixed answer rules (``evaluation.rules``) on a validation sample table and
score them on another: each rule's curve of answer accuracy against mean decodes per problem.

A table directory that holds no table yet is built first (``evaluation.sample_table``: the greedy
arm and one sampled arm per ``--temperatures`` entry, ``--samples`` each, every sample ended at its
first complete answer unless ``--no-stop-at-answer``; resumable). The rules read the stopped greedy,
then the samples of ``--arm``. Writes ``curves.json`` and ``curves.png`` into ``--out``.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

from ..core.files import write_json
from ..decoding.actions import GREEDY, DecodingAction
from ..evaluation.rules import COMPUTE_LEVELS, RULES, greedy_then, tune_rules
from ..evaluation.sample_table import SampleTable, build_sample_table, pass_at_k_curve
from ..reporting.plots import method_color
from .common import add_model_arguments, add_rollout_arguments, add_task_arguments, build_lm, build_task, load_problems
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
    temperatures: tuple[float, ...] = (0.5,)
    """sampled arms beside greedy when a table is built: one per temperature"""
    samples: int = 8
    """samples per sampled arm when a table is built"""
    arm: str | None = None
    """the sampled arm the rules read after the stopped greedy (default: the table's first sampled arm)"""
    rules: tuple[str, ...] = RULES
    """rules to tune and score"""
    levels: tuple[float, ...] = COMPUTE_LEVELS
    """compute levels (mean decodes per problem) at which each rule's setting is chosen on validation"""
    stop_at_answer: bool = True
    """a built table's samples end at their first complete answer (the protocol); off: decoded to the budget"""
    hidden: bool = False
    """a built table also keeps each sample's mean hidden state"""

    def __post_init__(self) -> None:
        if self.samples < 1 or not self.temperatures or any(t <= 0 for t in self.temperatures):
            raise ValueError("--samples must be >= 1 and --temperatures positive")
        unknown = [r for r in self.rules if r not in RULES]
        if unknown:
            raise ValueError(f"unknown rules {unknown}; choose from {list(RULES)}")


def configure_parser(p: argparse.ArgumentParser) -> None:
    add_config_arguments(p, RulesOptions)
    add_model_arguments(p)
    add_task_arguments(p)
    add_rollout_arguments(p, exclude=("backend", "workers", "ray_address", "gpu_memory_utilization"))


def _tables(args, options: RulesOptions) -> tuple[SampleTable, SampleTable]:
    wanted = [(options.validation_table, "validation"), (options.table, options.split)]
    missing = [(path, split) for path, split in wanted if not (Path(path) / "header.json").is_file()
               or _unfinished(path, args)]
    if missing:
        task = build_task(args)
        problems = {split: load_problems(task, split, args.max_problems) for _, split in missing}
        lm = build_lm(args)
        arms = [GREEDY] + [DecodingAction(temperature=t) for t in options.temperatures]
        rows_per_problem = 1 + len(options.temperatures) * options.samples
        for path, split in missing:
            build_sample_table(lm, task, problems[split], arms, samples=options.samples, token_budget=args.token_budget,
                               path=path, split=split, seed=args.seed, stop_at_answer=options.stop_at_answer,
                               chunk_problems=max(1, args.batch_rows // rows_per_problem),
                               hidden=options.hidden)
    return SampleTable.load(options.validation_table), SampleTable.load(options.table)


def _unfinished(path: str, args) -> bool:
    """A table directory whose header is written but which holds fewer problems than asked."""
    if args.max_problems is None:
        return False
    return len(SampleTable.load(path).problem_ids) < args.max_problems


def run_cli(args) -> int:
    options = build_config(RulesOptions, args)
    validation, test = _tables(args, options)
    if validation.header.get("actions") != test.header.get("actions"):
        raise ValueError("the validation and test tables hold different arms")
    arms = validation.arm_names
    sampled = [name for name, a in zip(arms, validation.actions) if not a.is_greedy]
    arm = options.arm or (sampled[0] if sampled else arms[0])
    has_greedy = any(a.is_greedy for a in validation.actions)
    first = "greedy" if has_greedy and arm in sampled else None
    val_draws, test_draws = greedy_then(validation, arm, first), greedy_then(test, arm, first)
    curves = tune_rules(val_draws, test_draws, rules=options.rules, levels=options.levels)
    index = test.arm(arm)
    out = {
        "sequence": test_draws.label, "validation_problems": validation.shape[0], "test_problems": test.shape[0],
        "tables": {"validation": options.validation_table, "test": options.table},
        "stop_at_answer": test.header.get("stop_at_answer"), "rules": curves,
        "pass_at_k": {arm: pass_at_k_curve(test, index, range(1, int(test.distinct[index]) + 1))},
    }
    path = Path(options.out)
    write_json(path / "curves.json", out)
    _plot(curves, path / "curves.png", f"answer accuracy per compute ({test_draws.label}, {test.shape[0]} problems)")
    for rule, curve in curves.items():
        cells = ", ".join(f"{p['test']['decodes']:.2f} dec {100 * p['test']['accuracy']:.1f}%" for p in curve["points"])
        print(f"{rule:22s} {cells}")
    print(json.dumps({"out": str(path), "rules": len(curves), "test_problems": test.shape[0]}))
    return 0


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
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path
