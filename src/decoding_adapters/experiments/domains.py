"""The domains study (issue 15): single-domain vs mixed-domain adapters, and out-of-distribution
evaluation, on the embedded model and the two generated tasks (``arithmetic``, ``pyfunc``).

Stages (each resumable: run the same command again and finished work is reused):

1. ``actions/``: one candidate pool decoded on the validation problems of the mix (the two domains
   interleaved, equally many of each). Its outcome table serves three selections, each from that
   table's rows of its own problems: ``actions-arithmetic/``, ``actions-pyfunc/`` and
   ``actions-mix/`` (K actions by greedy coverage, and the best single action = Best).
2. ``seq-{task}-{budget|nobudget}-s{seed}/``: sequence adapters trained by offline replay of that
   table, on arithmetic, on pyfunc and on the mix (balanced per step: ``training.common``).
3. ``tok-{task}-s{seed}/``: token adapters (w/ budget) with live rollouts, on each of the three.
4. ``eval-{task}-{split}/``: each domain's own test split (Greedy, that domain's Best and Mixed,
   its single-domain adapters, the mixed-domain adapters, and the other domain's sequence adapter:
   cross-domain OOD) and each domain's ``ood`` split (held-out families: Greedy, the domain's Best
   and Mixed, its single-domain and the mixed adapters).
5. ``report.md``, ``results.json``, ``eval_details.json`` (the tables of ``domain_report``).

Adapters are labelled OOD from the task recorded in their ``adapter.json`` (``evaluation.ood``).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from ..core.files import write_json, write_text
from ..decoding.actions import ActionSet, DecodingAction, load_action_set
from ..decoding.rollouts import HFRollouts
from ..evaluation import (
    EvalConfig,
    Method,
    adapter_method,
    evaluate,
    format_table,
    greedy_method,
    mixed_method,
    ood_labels,
    static_method,
)
from ..lm.models import load_frozen_lm
from ..reporting.domains import domains_markdown
from ..selection.coverage import OutcomeTable, build_pool, evaluate_pool, select_actions, write_outputs
from ..tasks import get_task
from ..training.sequence import SequenceTrainConfig, SequenceTrainer, reward_source
from ..training.token import TokenTrainConfig, TokenTrainer

__all__ = ["DomainsConfig", "SIZES", "DOMAINS", "run_domains", "eval_key"]

DOMAINS = ("arithmetic", "pyfunc")
"""The two generated tasks; their mix is ``arithmetic+pyfunc`` (equal weights)."""


@dataclass(frozen=True)
class DomainsConfig:
    """Sizes of every stage of the domains study."""

    token_budget: int = 32
    """Max new tokens per completion everywhere (a pyfunc code block needs ~15-25)."""
    pool_subsample: int = 4
    """Candidates taken evenly from the 180-config pool (greedy is added)."""
    select_problems: int = 8
    """Validation problems per domain the candidates are run on."""
    select_samples: int = 4
    """Samples per (problem, action); also the largest parallel budget replay can serve."""
    k: int = 3
    """Size of each selected sequence-level action set."""
    seq_budgets: tuple[int, ...] = (1, 2, 4)
    """Parallel budgets B of the sequence adapters (at most select_samples)."""
    seq_steps: int = 150
    """Steps of each sequence adapter (replay: cheap)."""
    seq_prompts_per_step: int = 8
    """Prompts per sequence-level step (the mix: half from each domain)."""
    tok_steps: int = 4
    """Steps of each token adapter."""
    tok_prompts_per_step: int = 4
    """Prompts per token-level step (the mix: half from each domain)."""
    tok_group_size: int = 4
    """Rollouts per prompt (G, the group baseline)."""
    tok_train_prompts: int = 32
    """Training prompts of the token adapters (no probe filtering: it would cost rollouts)."""
    tok_lr: float = 3e-3
    """Learning rate of the token adapters."""
    tok_val_problems: int = 4
    """Validation problems of the token adapters."""
    eval_problems: int = 16
    """Problems of every evaluated split."""
    eval_k: tuple[int, ...] = (1, 2, 4)
    """k of the reported pass@k."""
    seeds: int = 1
    """Training seeds of every adapter (evaluation seeds too)."""
    batch_rows: int = 96
    """Rows decoded together."""
    threads: int = 1
    """torch CPU threads (1 is fastest on a shared, loaded machine; 0 keeps torch's default)."""

    def __post_init__(self) -> None:
        if max(self.seq_budgets) > self.select_samples:
            raise ValueError(f"seq_budgets {self.seq_budgets} exceed select_samples={self.select_samples}: "
                             "replay cannot serve more samples than the table stores")
        for name in ("pool_subsample", "select_problems", "k", "seq_steps", "tok_steps", "eval_problems", "seeds"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")


SIZES: dict[str, DomainsConfig] = {
    "tiny": DomainsConfig(
        token_budget=4,
        pool_subsample=2,
        select_problems=2,
        select_samples=2,
        k=2,
        seq_budgets=(1, 2),
        seq_steps=3,
        seq_prompts_per_step=2,
        tok_steps=1,
        tok_prompts_per_step=2,
        tok_group_size=2,
        tok_train_prompts=4,
        tok_val_problems=2,
        eval_problems=2,
        eval_k=(1, 2),
        batch_rows=16,
    ),
    "default": DomainsConfig(),
}


def eval_key(task: str, split: str) -> str:
    """``"arithmetic:test"``: the key of one evaluation in results.json and the tables."""
    return f"{task}:{split}"


def _slug(task_name: str) -> str:
    return "mix" if "+" in task_name else task_name


def _finished(directory: Path) -> bool:
    return (directory / "adapter.json").is_file()


def _log(started: float, text: str) -> None:
    print(f"[domains {(time.perf_counter() - started) / 60:5.1f} min] {text}", flush=True)


# ---- stage 1: one pool table, three selections -------------------------------------------------


def _select(lm, mix, cfg: DomainsConfig, out: Path, progress: bool) -> tuple[Path, dict[str, Path]]:
    pool = build_pool("pool", subsample=cfg.pool_subsample, add_greedy=True)
    problems = mix.load("validation")[: cfg.select_problems * len(mix.domains)]  # interleaved: balanced
    table_path = out / "actions" / "outcomes.jsonl"
    evaluate_pool(lm, mix, problems, pool, samples=cfg.select_samples, token_budget=cfg.token_budget, seed=0,
                  table_path=table_path, batch_rows=cfg.batch_rows, progress=progress)
    table = OutcomeTable.load(table_path)
    domain = {p.id: p.meta["domain"] for p in problems}
    paths = {}
    for name in (*mix.domains, mix.name):
        target = out / f"actions-{_slug(name)}"
        ids = [pid for pid in table.problem_ids if pid in domain and (name == mix.name or domain[pid] == name)]
        _, _, R = table.subset(ids, [a.name for a in pool]).to_matrix()
        meta = {"task": name, "split": "validation", "problems": len(ids), "samples": cfg.select_samples,
                "token_budget": cfg.token_budget, "seed": 0, "k": cfg.k, "pool": [a.name for a in pool]}
        write_outputs(target, pool, select_actions(R, cfg.k), meta)
        paths[name] = target / "actions.json"
    return table_path, paths


# ---- stages 2 and 3: adapters ------------------------------------------------------------------


def _train_sequence(lm, task, mix, cfg: DomainsConfig, actions: Path, table: Path, out: Path, seed: int, budget: bool):
    """A sequence adapter on ``task`` (one domain or the mix) by replay of the mix's table: the table
    is checked against the mix it was decoded for, and the trainer draws ``task``'s problems from it."""
    config = SequenceTrainConfig(
        actions=str(actions), parallel_budgets=cfg.seq_budgets, use_budget=budget, token_budget=cfg.token_budget,
        steps=cfg.seq_steps, prompts_per_step=cfg.seq_prompts_per_step, val_every=max(1, cfg.seq_steps // 10),
        checkpoint_every=max(1, cfg.seq_steps // 4), replay=str(table), seed=seed,
    )
    rewards = reward_source(config, mix, ActionSet(load_action_set(actions)), lm=lm)
    SequenceTrainer(config, lm, task, rewards, out, task_name=task.name, progress=False).train(resume=True)


def _train_token(lm, task, cfg: DomainsConfig, out: Path, seed: int, progress: bool):
    config = TokenTrainConfig(
        token_budget=cfg.token_budget, use_budget=True, features="hidden", steps=cfg.tok_steps,
        prompts_per_step=cfg.tok_prompts_per_step, group_size=cfg.tok_group_size, lr=cfg.tok_lr,
        max_train_prompts=cfg.tok_train_prompts, filter_samples=0, val_every=cfg.tok_steps,
        val_problems=cfg.tok_val_problems, checkpoint_every=max(1, cfg.tok_steps // 2), seed=seed,
    )
    rollouts = HFRollouts(lm, ActionSet(load_action_set(config.actions)), cfg.batch_rows)
    TokenTrainer(config, lm, task, rollouts, out, task_name=task.name, progress=progress).train(resume=True)


# ---- stage 4: evaluations ----------------------------------------------------------------------


def _adapter(out: Path, prefix: str, cfg: DomainsConfig, lm, name: str) -> Method:
    return adapter_method([out / f"{prefix}-s{s}" for s in range(cfg.seeds)], lm, name=name)


def _methods(out: Path, cfg: DomainsConfig, lm, task: str, split: str, mix_name: str, actions: dict) -> list[Method]:
    """Greedy, ``task``'s Best and Mixed, then the adapters evaluated on ``task``:``split``."""
    selected = json.loads(actions[task].read_text())
    methods = [greedy_method(), static_method(DecodingAction.from_dict(selected["best_single"])),
               mixed_method(load_action_set(actions[task]), "Mixed")]
    trained = [task, mix_name]
    if split == "test":  # cross-domain OOD: the other domain's sequence adapter
        trained += [d for d in DOMAINS if d != task]
    for train in trained:
        slug = _slug(train)
        for tag, role in (("nobudget", "w/o budget"), ("budget", "w/ budget")):
            if train not in (task, mix_name) and tag == "nobudget":
                continue
            methods.append(_adapter(out, f"seq-{slug}-{tag}", cfg, lm, f"Seq {role} [{slug}]"))
        if train in (task, mix_name):
            methods.append(_adapter(out, f"tok-{slug}", cfg, lm, f"Token w/ budget [{slug}]"))
    return methods


def _evaluate(lm, out: Path, cfg: DomainsConfig, task_name: str, split: str, mix_name: str, actions, model: str,
              progress: bool):
    directory = out / f"eval-{task_name}-{split}"
    if (directory / "eval_details.json").is_file():
        return json.loads((directory / "results.json").read_text()), json.loads(
            (directory / "eval_details.json").read_text())
    task = get_task(task_name)
    methods = _methods(out, cfg, lm, task_name, split, mix_name, actions)
    problems = task.load(split)[: cfg.eval_problems]
    meta = {"model": model, "task": task_name, "split": split, "num_problems": len(problems),
            "ood": ood_labels(methods, task.name, split), "best_from": f"{task_name}:validation"}
    eval_config = EvalConfig(k_values=cfg.eval_k, seeds=cfg.seeds, token_budget=cfg.token_budget,
                             keep_trajectories=8)
    evaluation = evaluate(lm, task, problems, methods, eval_config, batch_rows=cfg.batch_rows, progress=progress,
                          meta=meta)
    evaluation.write(directory)
    print(format_table(evaluation.results))
    return evaluation.results, evaluation.details


# ---- the study ---------------------------------------------------------------------------------


def run_domains(out: str | Path, cfg: DomainsConfig, *, model: str = "smollm2", progress: bool = True,
                command: str = "") -> dict:
    """Run every stage into ``out``; returns ``{"task:split": results}``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "domains_config.json", {"model": model, "command": command, **asdict(cfg)})
    if cfg.threads > 0:
        torch.set_num_threads(cfg.threads)
    started = time.perf_counter()
    _log(started, f"loading the frozen LM ({model})")
    lm = load_frozen_lm(model)
    mix = get_task("+".join(DOMAINS))
    tasks = {**{d: mix.domains[d] for d in DOMAINS}, mix.name: mix}

    _log(started, f"action selection: {cfg.pool_subsample + 1} candidates x {cfg.select_problems} problems per "
                  f"domain x {cfg.select_samples} samples")
    table, actions = _select(lm, mix, cfg, out, progress)

    _log(started, "sequence adapters (offline replay)")
    for name, task in tasks.items():
        for seed in range(cfg.seeds):
            for budget, tag in ((True, "budget"), (False, "nobudget")):
                directory = out / f"seq-{_slug(name)}-{tag}-s{seed}"
                if not _finished(directory):
                    _train_sequence(lm, task, mix, cfg, actions[name], table, directory, seed, budget)

    for name, task in tasks.items():
        _log(started, f"token adapter on {name}")
        for seed in range(cfg.seeds):
            directory = out / f"tok-{_slug(name)}-s{seed}"
            if not _finished(directory):
                _train_token(lm, task, cfg, directory, seed, progress)

    evaluations = {}
    for split in ("test", "ood"):
        for d in DOMAINS:
            _log(started, f"evaluation on {d}:{split}")
            evaluations[eval_key(d, split)] = _evaluate(lm, out, cfg, d, split, mix.name, actions, model, progress)

    _log(started, "report")
    wall = _add_wall_time(out, (time.perf_counter() - started) / 60)
    write_domains_report(out, evaluations, cfg, model=model, command=command, minutes=wall["minutes"],
                         runs=wall["runs"])
    _log(started, f"done: {out / 'report.md'}")
    return {key: results for key, (results, _) in evaluations.items()}


def _add_wall_time(out: Path, minutes: float) -> dict:
    """Add this run's minutes to ``wall_time.json`` (a resumed study is timed over all its runs)."""
    path = out / "wall_time.json"
    total = json.loads(path.read_text()) if path.is_file() else {"minutes": 0.0, "runs": 0}
    total = {"minutes": round(total["minutes"] + minutes, 2), "runs": total["runs"] + 1}
    write_json(path, total)
    return total


def write_domains_report(out: Path, evaluations: dict, cfg: DomainsConfig, *, model: str, command: str,
                         minutes: float, runs: int = 1) -> Path:
    """``report.md``, ``results.json`` (``{"task:split": results}``) and ``eval_details.json``
    (``{"task:split": details}``, trajectories dropped to keep it small) in ``out``."""
    write_json(out / "results.json", {key: results for key, (results, _) in evaluations.items()})
    write_json(out / "eval_details.json",
               {key: {k: v for k, v in details.items() if k != "trajectories"}
                for key, (_, details) in evaluations.items()})
    lines = [
        "# Mixed-domain training and out-of-distribution evaluation (issue 15)",
        "",
        "## Setup",
        "",
        f"- command: `{command}`" if command else "- command: (library call)",
        f"- model: `{model}`; tasks: {', '.join(f'`{d}`' for d in DOMAINS)} and their balanced mix "
        f"`{'+'.join(DOMAINS)}`; token budget {cfg.token_budget}",
        f"- action selection: {cfg.pool_subsample + 1} candidates (the 180-config pool subsampled, plus greedy) on "
        f"{cfg.select_problems} validation problems per domain × {cfg.select_samples} samples; K = {cfg.k} per "
        "training set (arithmetic rows, pyfunc rows, all rows); Best = the best single action on the evaluated "
        "domain's validation rows, Mixed = uniform over that domain's selected set",
        f"- sequence adapters: offline replay of that table, {cfg.seq_steps} steps × {cfg.seq_prompts_per_step} "
        f"prompts, budgets {list(cfg.seq_budgets)}, w/ and w/o budget (trained in-sample on the validation "
        "problems the table holds, as in the demo)",
        f"- token adapters (w/ budget): {cfg.tok_steps} steps × {cfg.tok_prompts_per_step} prompts × "
        f"G = {cfg.tok_group_size} rollouts, live",
        "- the mix samples each training step's prompts equally from both domains (balanced sampling)",
        f"- evaluation: {cfg.eval_problems} problems per split, k = {list(cfg.eval_k)}, "
        f"n = {max(cfg.eval_k)} samples, {cfg.seeds} evaluation seed(s) and {cfg.seeds} training seed(s) per "
        "adapter; intervals: 95% Student-t over problems; Δ: paired per-problem differences",
        f"- wall time: {minutes:.1f} min on this machine, over {runs} run(s) of the command (a re-run reuses "
        "finished stages)",
        f"- scale: sized to finish in ~20-25 min on a loaded 2-core CPU machine, so {cfg.seeds} training seed, "
        f"{cfg.eval_problems} problems per split (intervals of ±20-30 points) and {cfg.tok_steps} token-adapter steps "
        "(barely trained): read the tables as a working pipeline and a first look, not as evidence either way",
        "",
        domains_markdown(evaluations, DOMAINS),
        "## Every evaluation",
        "",
    ]
    for key, (results, details) in evaluations.items():
        labels = (details.get("config") or {}).get("ood") or {}
        lines += [f"### {key}", "", "```", format_table(results), "```", ""]
        lines += [f"- {name}: {'OOD' if lab['ood'] else 'in distribution'} (`{lab['label']}`)"
                  for name, lab in labels.items()]
        lines.append("")
    return write_text(out / "report.md", "\n".join(lines))
