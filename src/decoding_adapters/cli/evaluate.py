"""``evaluate``: pass@k of static baselines and adapters with confidence intervals (``evaluation``).

The evaluation's own settings are the ``EvalConfig`` fields (``--k`` for ``k_values``); the
options below choose the methods (adapters, baselines, the Best action) and the output.
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from ..core.stats import INTERVAL_NOTE
from ..decoding.actions import GREEDY, ActionSet, DecodingAction, load_action_set
from ..decoding.backends import check_backend_actions
from ..decoding.rollouts import HFRollouts, Rollouts
from ..evaluation import (
    EvalConfig,
    Method,
    adapter_method,
    best_per_k_method,
    best_static_method,
    best_token_action_method,
    evaluate,
    format_table,
    greedy_method,
    greedy_to_budget_method,
    load_best_per_k,
    mixed_method,
    ood_labels,
    resolve_best_action,
    select_best_action,
    sequence_mixture_of_token_actions,
    static_method,
    token_mixed_method,
)
from ..evaluation.runner import SeedCheckpoint
from ..policies.networks import add_evaluation
from ..reporting.report import evidence_lines, nothing_solved, write_report
from ..selection.best import BestStatic
from ..tasks import check_disjoint
from . import common as cli_common
from .common import add_model_arguments, add_rollout_arguments, add_task_arguments, build_lm, build_rollouts, build_task
from .config_args import add_config_arguments, build_config

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EvaluateOptions:
    """methods and output"""

    out: str
    """output directory (results.json, eval_details.json)"""
    adapter: list[str] = field(default_factory=list)
    """a trained adapter directory, [NAME=]DIR[,DIR...] (repeatable); NAME overrides the default column name;
    several comma-separated directories (the same adapter trained with different seeds) are used one per
    evaluation seed"""
    split: str = "test"
    """task split to evaluate on ('ood': the held-out families of arithmetic and pyfunc); an adapter trained on
    another task or evaluated on 'ood' is labelled out of distribution (train task -> eval task)"""
    actions: str | None = None
    """action set (preset or JSON) for Best/Mixed; default: the first sequence adapter's, else 'math'"""
    best_action: str | None = None
    """Best: index/name in --actions, DecodingAction JSON, or a JSON file with best_single; 'auto' picks the best
    of --actions and greedy at each --k on the validation split; 'none' drops Best. Default: best_per_k (else
    best_single) of --actions, else auto"""
    best_problems: int = 32
    """validation problems used to choose Best (--best-action auto) and the best token action (best-token);
    never more than --max-problems"""
    baselines: str = "greedy,best,mixed,best-token"
    """static baselines to include (comma-separated): greedy, greedy-to-budget (greedy without the stop at
    the first answer), best, mixed (per sequence over --actions; with
    token adapters also the paper's per-token Mixed over their
    actions), best-token (with token adapters: the best single token action, chosen on validation),
    token-actions (with token adapters: one static row per token action)"""
    policy_mode: str | None = None
    """how adapters pick actions: sample, argmax, or both (two rows per adapter, named '... [sample]' and
    '... [argmax]'); default: each adapter's stored policy_mode, the mode generate and serve use"""
    allow_train_overlap: bool = False
    """score adapters even on problems they were trained or selected on (refused otherwise; the report
    then states that this was given)"""
    progress: bool = True
    """progress bars"""
    report: bool = False
    """also write report.md and figures into --out"""
    force: bool = False
    """overwrite a finished evaluation in --out (without it, an existing results.json is refused)"""


def configure_parser(p: argparse.ArgumentParser) -> None:
    add_model_arguments(p)
    add_task_arguments(p, exclude=("cot_ratio",))
    add_rollout_arguments(p, exclude=("token_budget", "seed"))
    # the commands' token budget (the library's default, EvalConfig's, is decoding.actions.DEFAULT_TOKEN_BUDGET)
    add_config_arguments(p, EvalConfig, title="evaluation", flags={"k_values": ["--k"]},
                         defaults={"token_budget": cli_common.COMMAND_TOKEN_BUDGET})
    add_config_arguments(p, EvaluateOptions)


def _parse_adapter_args(values: Sequence[str]) -> list[tuple[str | None, str]]:
    out = []
    for v in values:
        name, sep, path = v.partition("=")
        out.append((name, path) if sep and not Path(v).exists() else (None, v))
    return out


def _unique_name(name: str, taken: set[str], source: str) -> str:
    if name not in taken:
        return name
    candidate = f"{name} ({Path(source).name})"
    i = 2
    while candidate in taken:
        candidate, i = f"{name} ({Path(source).name} {i})", i + 1
    return candidate


def check_adapter_dirs(specs: Sequence[str]) -> None:
    """Every --adapter directory exists and holds an adapter.json (checked before the model loads)."""
    for _, path in _parse_adapter_args(specs):
        for directory in path.split(","):
            if not Path(directory).is_dir():
                raise FileNotFoundError(f"--adapter {directory}: no such directory")
            if not (Path(directory) / "adapter.json").is_file():
                raise FileNotFoundError(
                    f"--adapter {directory} holds no adapter.json: point at a directory written by train-*"
                )


def load_adapter_methods(specs: Sequence[str], lm, policy_mode: str | None = None) -> list[Method]:
    """One method per --adapter; ``policy_mode`` 'both' gives two (sample and argmax rows)."""
    if policy_mode not in (None, "sample", "argmax", "both"):
        raise ValueError(f"--policy-mode must be sample, argmax or both, got {policy_mode!r}")
    modes = ["sample", "argmax"] if policy_mode == "both" else [policy_mode]
    methods, taken = [], set()
    for name, path in _parse_adapter_args(specs):
        dirs = path.split(",")  # DIR1,DIR2,...: one adapter per evaluation seed
        for mode in modes:
            m = adapter_method(dirs if len(dirs) > 1 else path, lm, name=name or None, policy_mode=mode)
            if policy_mode == "both":
                m.name = f"{m.name} [{m.policy_mode}]"
            m.name = _unique_name(m.name, taken, path)
            taken.add(m.name)
            methods.append(m)
    return methods


BASELINES = ("greedy", "greedy-to-budget", "best", "mixed", "best-token", "token-actions")


def _baseline_methods(args, lm, task, adapters: list[Method], cfg: EvalConfig, factory) -> list[Method]:
    wanted = {b.strip().lower() for b in args.baselines.split(",") if b.strip()}
    unknown = wanted - set(BASELINES)
    if unknown:
        raise ValueError(f"unknown baseline(s) {sorted(unknown)}: choose from {', '.join(BASELINES)}")
    actions = _base_actions(args, adapters)
    out = [greedy_method()] if "greedy" in wanted else []
    if "greedy-to-budget" in wanted:
        out.append(greedy_to_budget_method())
    if "best" in wanted:
        best = _best_method(args, lm, task, actions, cfg, factory)
        if best is not None:
            out.append(best)
    if "mixed" in wanted:
        out.append(mixed_method(actions))
    out += _token_baselines(args, lm, task, adapters, cfg, factory, wanted, actions)
    return out


def _token_baselines(args, lm, task, adapters, cfg, factory, wanted, actions) -> list[Method]:
    """The token table's static rows for the (first) token action set: per-token Mixed (the paper's
    token-level Mixed), the per-sequence mixture of the token actions (its own row, when that set
    differs from --actions), the best single token action (chosen on validation), and optionally one
    row per token action."""
    token_sets = list(dict.fromkeys(tuple(m.actions) for m in adapters if m.decodes_per_token))
    if len(token_sets) > 1:
        log.warning("token adapters use %d action sets: token baselines use the first", len(token_sets))
    if not token_sets:
        return []
    token_actions, out = list(token_sets[0]), []
    if "mixed" in wanted:
        out.append(token_mixed_method(token_actions))
        if tuple(token_actions) != tuple(actions):
            out.append(sequence_mixture_of_token_actions(token_actions))
    if "best-token" in wanted:
        best = _auto_best(args, lm, task, token_actions, cfg, factory, k_values=(1,))
        out.append(best_token_action_method(next(a for a in token_actions if a.name == best.name_for(1))))
    if "token-actions" in wanted:
        for a in token_actions:
            row = static_method(a, name=f"Token action {a.name}", role="token action")
            row.level = "token"
            out.append(row)
    return out


def _base_actions(args, adapters: list[Method]) -> list[DecodingAction]:
    if args.actions:
        return load_action_set(args.actions)
    # a sequence adapter's action set first (the static rows' table), else a token adapter's
    for uses in (lambda m: m.chooses_per_prompt, lambda m: m.decodes_per_token):
        for m in adapters:
            if uses(m):
                return list(m.actions)
    return load_action_set("math")


def _best_method(args, lm, task, actions, cfg: EvalConfig, factory) -> Method | None:
    """The Best row: one action per reported k where --actions' file chose them (best_per_k) or
    'auto' does; a single action where one is named."""
    spec = args.best_action
    if spec is not None and spec.lower() == "none":
        return None
    source = args.actions if spec is None else spec
    if source and Path(source).is_file():  # select-actions' actions.json: Best per k when it covers every --k
        per_k = load_best_per_k(source)
        if per_k is not None and set(cfg.k_values) <= set(per_k):
            return best_per_k_method({k: per_k[k] for k in cfg.k_values})
        found = resolve_best_action(source, actions)
        if found is not None:
            return static_method(found)
    if spec is not None and spec.lower() != "auto":
        best = resolve_best_action(spec, actions)
        if best is None:
            raise ValueError(f"{spec} has no best_single entry")
        return static_method(best)
    candidates = list(dict.fromkeys([*actions, GREEDY]))  # greedy is always a static candidate
    return best_static_method(_auto_best(args, lm, task, candidates, cfg, factory, cfg.k_values), candidates)


def _auto_best(args, lm, task, actions, cfg: EvalConfig, factory, k_values) -> BestStatic:
    """The best of ``actions`` at each k on the validation split (train where there is none; never
    test), every sample under the evaluation's stop."""
    split = "validation" if "validation" in getattr(task, "splits", ()) else "train"
    limit = args.best_problems if args.max_problems is None else min(args.best_problems, args.max_problems)
    problems = task.subset(task.load(split), limit, args.seed)
    log.info("choosing the best of %d actions on %d %s problems", len(actions), len(problems), split)
    best = select_best_action(lm, task, problems, actions, samples=min(4, cfg.n), k_values=k_values, config=cfg,
                              rollouts_factory=factory)
    log.info("best by k: %s", {k: best.name_for(k) for k in best.k_values})
    return best


CHECKPOINT_FILE = "eval_checkpoint.json"
"""The finished seeds' decoded rows in ``--out``: the same command after a Ctrl-C continues from them."""
NOT_COMPARED = ("out", "progress", "verbose", "report", "command")


def evaluation_checkpoint(args) -> SeedCheckpoint:
    """The seed checkpoint in ``--out`` for these options (a run with other options ignores it)."""
    options = {k: v for k, v in vars(args).items() if not k.startswith("_") and k not in NOT_COMPARED}
    return SeedCheckpoint(Path(args.out) / CHECKPOINT_FILE, options)


def run_cli(args) -> int:
    cfg = build_config(EvalConfig, args)
    if cfg.stop_at_answer and args.backend == "vllm":
        raise ValueError("the vllm backend cannot end a row at its first complete answer: pass --no-stop-at-answer "
                         "(every method then decodes to the budget) or use --backend hf")
    # pre-flight, before any model load or decoding: the output directory, disjoint splits, the problems
    cli_common.check_output_dir(args.out, ("results.json", "eval_details.json"), force=args.force)
    task = build_task(args)
    if args.split in getattr(task, "splits", ()):  # splits share no problem (by content): checked first
        check_disjoint(task)
    problems = cli_common.load_problems(task, args.split, args.max_problems, args.seed)
    check_adapter_dirs(args.adapter)
    lm = build_lm(args)

    def factory(action_set: ActionSet, per_token: bool) -> Rollouts:
        if per_token and args.backend == "vllm":  # vLLM cannot run a per-token chooser
            return HFRollouts(lm, action_set, args.batch_rows)
        return build_rollouts(args, lm, action_set)

    adapters = load_adapter_methods(args.adapter, lm, args.policy_mode)
    # every action set a static row may use, checked against the backend before any engine starts
    check_backend_actions(args.backend, [_base_actions(args, adapters)] + [m.actions for m in adapters])
    methods = _baseline_methods(args, lm, task, adapters, cfg, factory) + adapters
    meta = {"task": args.task, "split": args.split, "model": args.name_or_path, "num_problems": len(problems)}
    meta["ood"] = ood_labels(adapters, task.name, args.split)  # train task -> eval task, per adapter
    for name, label in meta["ood"].items():
        if label["ood"]:
            print(f"{name}: out of distribution ({label['label']})")
    checkpoint = evaluation_checkpoint(args)
    ev = evaluate(lm, task, problems, methods, cfg, rollouts_factory=factory, progress=args.progress, meta=meta,
                  allow_train_overlap=args.allow_train_overlap, checkpoint=checkpoint)
    if ev.details["config"].get("train_overlap"):
        log.warning("--allow-train-overlap: %s scored on problems it was trained or selected on",
                    ", ".join(ev.details["config"]["train_overlap"]))
    paths = ev.write(args.out)
    checkpoint.remove()  # the results are written: a later run with these options starts afresh
    for line in evidence_lines(ev.results, ev.details):  # first: nothing solved, or nothing told apart
        print(line.replace("**", ""))
        if nothing_solved(ev.results):
            log.warning("no method solved any problem: check --verifier and --token-budget")
    print(format_table(ev.results, cfg.metrics))
    print(INTERVAL_NOTE.replace("`", ""))
    print(f"\nwrote {paths['results']} and {paths['details']}")
    if args.report:
        print(f"report: {write_report(args.out, ev.results, ev.details)}")
    _add_evaluation_to_cards(args.adapter, args.out)
    return 0


def _add_evaluation_to_cards(adapter_specs: Sequence[str], eval_dir: str) -> None:
    """Rewrite the model card of every adapter directory scored here with this evaluation's table;
    a card that cannot be written (a read-only directory) is a warning, not a failed evaluation."""
    for _, path in _parse_adapter_args(adapter_specs):
        for adapter_dir in path.split(","):
            try:
                print(f"model card: {add_evaluation(adapter_dir, eval_dir)}")
            except (OSError, ValueError, TypeError) as err:
                log.warning("could not add the evaluation to the model card of %s: %s", adapter_dir, err)
