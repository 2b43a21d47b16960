"""The main job: select an action set, train sequence- and token-level adapters (3 seeds each),
evaluate them against static baselines with confidence intervals, and write a report.

Stages (each resumable: run the same command again after a kill and finished work is reused):

1. ``actions/``: evaluate a pool of candidate actions on validation problems and pick K by greedy
   coverage (``select-actions``).
2. ``seq-*/``: sequence adapters w/ and w/o budget, trained by **offline replay** of the stage-1
   outcome table (the table's stored samples stand in for live rollouts; B <= samples stored).
3. ``tok-*/``: token adapters w/ budget, w/o budget and entropy-only, trained with live rollouts
   on filtered training prompts (``train-token``).
4. ``eval/``: Greedy, Best, Mixed and every adapter on the test split, same problems and seeds.
5. ``report/``: report.md, results.json, figures.

Sizes are scaled for 2 CPU cores (``--size default`` takes about 15 minutes there); ``--size
full`` is the longer run behind the README's evidence, ``--size tiny`` is for tests.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from .actions import PRESETS, ActionSet, DecodingAction, load_action_set
from .evaluation import EvalConfig, adapter_method, evaluate, format_table, greedy_method, mixed_method, static_method
from .io import write_json, write_text
from .models import load_frozen_lm
from .report import write_report
from .rollouts import HFRollouts
from .selection import build_pool, evaluate_pool, select_actions, write_outputs
from .tasks import get_task
from .training.sequence import SequenceTrainConfig, SequenceTrainer, reward_source
from .training.token import TokenTrainConfig, TokenTrainer

log = logging.getLogger(__name__)

__all__ = ["DemoConfig", "SIZES", "run_demo"]


@dataclass(frozen=True)
class DemoConfig:
    """Sizes of every stage of the demo."""

    token_budget: int = 16
    """Max new tokens per completion everywhere (arithmetic answers are short)."""
    pool_subsample: int = 8
    """Candidates taken evenly from the 180-config pool (greedy is added)."""
    select_problems: int = 32
    """Validation problems the candidates are run on."""
    select_samples: int = 4
    """Samples per (problem, action); also the largest parallel budget replay can serve."""
    k: int = 4
    """Size of the selected sequence-level action set."""
    seq_budgets: tuple[int, ...] = (1, 2, 4)
    """Parallel budgets B of the sequence adapters (at most select_samples: replay serves them)."""
    seq_steps: int = 200
    """Steps of each sequence adapter."""
    seq_prompts_per_step: int = 16
    """Prompts per sequence-level step."""
    tok_steps: int = 8
    """Steps of each token adapter."""
    tok_prompts_per_step: int = 8
    """Prompts per token-level step."""
    tok_group_size: int = 4
    """Rollouts per prompt (G, the group baseline)."""
    tok_train_prompts: int = 48
    """Training prompts probed for the token adapters."""
    tok_lr: float = 3e-3
    """Learning rate of the token adapters."""
    tok_filter_samples: int = 4
    """Probe rollouts per training prompt for filtering (0: keep every prompt)."""
    tok_val_problems: int = 16
    """Validation problems of the token adapters."""
    eval_problems: int = 32
    """Test problems of the evaluation."""
    eval_k: tuple[int, ...] = (1, 2, 4)
    """k of the reported pass@k."""
    seeds: int = 3
    """Training seeds of every adapter, and evaluation seeds."""
    batch_rows: int = 128
    """Rows decoded together: on a CPU, bigger batches give more tokens per second."""


SIZES: dict[str, DemoConfig] = {
    "tiny": DemoConfig(
        token_budget=4,
        pool_subsample=3,
        select_problems=4,
        select_samples=2,
        k=2,
        seq_budgets=(1, 2),
        seq_steps=3,
        seq_prompts_per_step=2,
        tok_steps=2,
        tok_prompts_per_step=2,
        tok_group_size=2,
        tok_train_prompts=4,
        tok_filter_samples=0,
        tok_val_problems=4,
        eval_problems=3,
        eval_k=(1, 2),
        seeds=2,
        batch_rows=16,
    ),
    "default": DemoConfig(),
    "full": DemoConfig(
        token_budget=24,
        pool_subsample=23,
        select_problems=96,
        select_samples=8,
        k=6,
        seq_budgets=(1, 2, 4, 8),
        seq_steps=400,
        tok_steps=40,
        tok_prompts_per_step=8,
        tok_group_size=8,
        tok_train_prompts=256,
        tok_val_problems=64,
        eval_problems=100,
        eval_k=(1, 2, 4, 8),
    ),
}

TOKEN_VARIANTS = {  # directory suffix -> (use_budget, features)
    "budget": (True, "hidden"),
    "nobudget": (False, "hidden"),
    "entropy": (True, "entropy"),
}


class _Stages:
    """Prints where the run is, how long it has taken and a rough time left."""

    def __init__(self, weights: dict[str, float]):
        self.weights, self.done, self.started = weights, 0.0, time.perf_counter()

    def begin(self, key: str, label: str, detail: str = "") -> None:
        """Announce stage ``key`` (one of the weights' keys)."""
        elapsed = time.perf_counter() - self.started
        total = sum(self.weights.values())
        eta = "" if self.done == 0 else f", ~{elapsed / self.done * (total - self.done) / 60:.1f} min left"
        print(f"[demo {elapsed / 60:5.1f} min{eta}] {label}{': ' + detail if detail else ''}", flush=True)
        self.current = key

    def end(self) -> None:
        self.done += self.weights[self.current]


def _select(lm, task, cfg: DemoConfig, out: Path, progress: bool):
    pool = build_pool("pool", subsample=cfg.pool_subsample, add_greedy=True)
    problems = task.load("validation")[: cfg.select_problems]
    table = evaluate_pool(
        lm,
        task,
        problems,
        pool,
        samples=cfg.select_samples,
        token_budget=cfg.token_budget,
        seed=0,
        table_path=out / "outcomes.jsonl",
        batch_rows=cfg.batch_rows,
        progress=progress,
    )
    _, _, R = table.to_matrix()
    selection = select_actions(R, cfg.k)
    meta = {
        "task": task.name,
        "split": "validation",
        "problems": len(problems),
        "samples": cfg.select_samples,
        "token_budget": cfg.token_budget,
        "seed": 0,
        "k": cfg.k,
        "pool": [a.name for a in pool],
    }
    print(write_outputs(out, pool, selection, meta))
    return out / "actions.json", out / "outcomes.jsonl"


def _train_sequence(
    lm, task, cfg: DemoConfig, actions_path: Path, table_path: Path, out: Path, seed: int, use_budget: bool
):
    config = SequenceTrainConfig(
        actions=str(actions_path),
        parallel_budgets=cfg.seq_budgets,
        use_budget=use_budget,
        token_budget=cfg.token_budget,
        steps=cfg.seq_steps,
        prompts_per_step=cfg.seq_prompts_per_step,
        val_every=max(1, cfg.seq_steps // 10),
        checkpoint_every=max(1, cfg.seq_steps // 4),
        replay=str(table_path),
        seed=seed,
    )
    rewards = reward_source(config, task, ActionSet(load_action_set(actions_path)))  # offline replay
    trainer = SequenceTrainer(config, lm, task, rewards, out, task_name=task.name, progress=False)
    trainer.train(resume=True)


def _token_config(cfg: DemoConfig, seed: int, use_budget: bool, features: str):
    return TokenTrainConfig(
        token_budget=cfg.token_budget,
        use_budget=use_budget,
        features=features,
        steps=cfg.tok_steps,
        prompts_per_step=cfg.tok_prompts_per_step,
        group_size=cfg.tok_group_size,
        lr=cfg.tok_lr,
        max_train_prompts=cfg.tok_train_prompts,
        filter_samples=cfg.tok_filter_samples,
        val_every=cfg.tok_steps,
        val_problems=cfg.tok_val_problems,
        checkpoint_every=max(1, cfg.tok_steps // 4),
        seed=seed,
    )


def _filtered_prompts(lm, task, cfg: DemoConfig, out: Path, progress: bool):
    """Probe the training prompts once for all token runs (pass rate 0 or 1 dropped); cached."""
    cache = out / "token-prompts.json"
    by_id = {p.id: p for p in task.load("train")}
    if cache.is_file():
        return [by_id[i] for i in json.loads(cache.read_text())["kept"]]
    config = _token_config(cfg, 0, True, "hidden")
    rollouts = HFRollouts(lm, ActionSet(load_action_set(config.actions)), cfg.batch_rows)
    trainer = TokenTrainer(config, lm, task, rollouts, out / "probe", progress=progress)
    summary = trainer.prepare()
    write_json(cache, {**summary, "kept": [p.id for p in trainer.train_problems]})
    return trainer.train_problems


def _train_token(
    lm, task, cfg: DemoConfig, problems, out: Path, seed: int, use_budget: bool, features: str, progress: bool
):
    config = _token_config(cfg, seed, use_budget, features)
    rollouts = HFRollouts(lm, ActionSet(load_action_set(config.actions)), cfg.batch_rows)
    TokenTrainer(
        config, lm, task, rollouts, out, task_name=task.name, progress=progress, train_problems=problems
    ).train(resume=True)


def _finished(directory: Path) -> bool:
    return (directory / "adapter.json").is_file()


def run_demo(out: str | Path, cfg: DemoConfig, *, model: str = "smollm2", progress: bool = True) -> dict:
    """Run every stage into ``out`` and return the evaluation results."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "demo_config.json", {"model": model, **asdict(cfg)})
    stages = _Stages({"load": 1, "select": 3, "sequence": 1, "token": 5, "evaluate": 6, "report": 0.5})
    stages.begin("load", "loading the frozen LM", model)
    lm = load_frozen_lm(model)
    task = get_task("arithmetic")
    stages.end()

    stages.begin(
        "select",
        "action selection",
        f"{cfg.pool_subsample + 1} candidates x {cfg.select_problems} problems x {cfg.select_samples} samples",
    )
    actions_path, table_path = _select(lm, task, cfg, out / "actions", progress)
    stages.end()

    seeds = range(cfg.seeds)
    stages.begin(
        "sequence",
        "sequence adapters (offline replay)",
        f"w/ and w/o budget x {cfg.seeds} seeds x {cfg.seq_steps} steps",
    )
    for seed in seeds:
        for use_budget, tag in ((True, "budget"), (False, "nobudget")):
            directory = out / f"seq-{tag}-s{seed}"
            if not _finished(directory):
                _train_sequence(lm, task, cfg, actions_path, table_path, directory, seed, use_budget)
    stages.end()

    stages.begin(
        "token", "token adapters", f"{len(TOKEN_VARIANTS)} variants x {cfg.seeds} seeds x {cfg.tok_steps} steps"
    )
    problems = _filtered_prompts(lm, task, cfg, out, progress)
    for seed in seeds:
        for tag, (use_budget, features) in TOKEN_VARIANTS.items():
            directory = out / f"tok-{tag}-s{seed}"
            if not _finished(directory):
                _train_token(lm, task, cfg, problems, directory, seed, use_budget, features, progress)
    stages.end()

    stages.begin(
        "evaluate",
        "evaluation",
        f"{cfg.eval_problems} test problems x {cfg.seeds} seeds, pass@{','.join(map(str, cfg.eval_k))}",
    )
    selected = json.loads(actions_path.read_text())
    best = DecodingAction.from_dict(selected["best_single"])
    methods = [
        greedy_method(),
        static_method(best),
        mixed_method(load_action_set(actions_path), "Mixed"),
        mixed_method(PRESETS["math-token"], "Mixed (token actions)", level="token"),
    ]
    names = {
        "seq-budget": "Seq w/ budget",
        "seq-nobudget": "Seq w/o budget",
        "tok-budget": "Token w/ budget",
        "tok-nobudget": "Token w/o budget",
        "tok-entropy": "Token entropy-only",
    }
    for prefix, name in names.items():
        methods.append(adapter_method([out / f"{prefix}-s{s}" for s in seeds], lm, name=name))
    eval_config = EvalConfig(k_values=cfg.eval_k, seeds=cfg.seeds, token_budget=cfg.token_budget)
    evaluation = evaluate(
        lm,
        task,
        task.load("test")[: cfg.eval_problems],
        methods,
        eval_config,
        batch_rows=cfg.batch_rows,
        progress=progress,
        meta={"model": model, "task": task.name},
    )
    evaluation.write(out / "eval")
    stages.end()

    stages.begin("report", "report")
    logs = {name: out / f"{prefix}-s0" / "train_log.jsonl" for prefix, name in names.items()}
    report_path = write_report(out / "report", evaluation.results, evaluation.details, logs)
    stages.end()
    elapsed = (time.perf_counter() - stages.started) / 60
    print(format_table(evaluation.results))
    print(f"\ndemo finished in {elapsed:.1f} min; report: {report_path}")
    write_text(out / "demo_time.json", json.dumps({"minutes": round(elapsed, 2)}))
    return evaluation.results
