"""The domains study: single-domain vs mixed-domain adapters, and out-of-distribution
evaluation, on the embedded model and the two generated tasks (``arithmetic``, ``pyfunc``).

Stages (each resumable: run the same command again and finished work is reused):

A script over the pipeline's stages (``experiments.pipeline``):

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
5. ``report.md``, ``results.json``, ``eval_details.json`` (the tables of ``reporting.domains``).

Adapters are labelled OOD from the task recorded in their ``adapter.json`` (``evaluation.ood``).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import torch

from ..core.files import write_json, write_text
from ..decoding.actions import load_action_set
from ..evaluation import (
    EvalConfig,
    Method,
    format_table,
    greedy_method,
    mixed_method,
    ood_labels,
)
from ..lm.models import DEFAULT_DEVICE, ModelSpec, load_frozen_lm
from ..reporting.domains import domains_markdown
from ..tasks import get_task
from ..training.sequence import SequenceTrainConfig
from ..training.token import TokenTrainConfig
from . import pipeline
from .study_config import BudgetConfig, SelectionConfig, StudyConfig

__all__ = ["SIZES", "DOMAINS", "run_domains", "eval_key", "write_domains_report"]

DOMAINS = ("arithmetic", "pyfunc")
"""The two generated tasks; their mix is ``arithmetic+pyfunc`` (equal weights)."""

DEFAULT = StudyConfig(
    token_budget=32,  # a pyfunc code block needs ~15-25
    budget=BudgetConfig(candidates=()),
    selection=SelectionConfig(pool_subsample=4, problems=8, samples=4, k=3),
    sequence_rewards="replay",  # cheap: 150 steps
    sequence=SequenceTrainConfig(parallel_budgets=(1, 2, 4), steps=150, prompts_per_step=8, val_every=15,
                                 checkpoint_every=37),
    # no probe filtering of the token adapters' training prompts: it would cost rollouts
    token=TokenTrainConfig(steps=4, prompts_per_step=4, group_size=4, max_train_prompts=32, filter_samples=0,
                           val_every=4, val_problems=4, checkpoint_every=2),
    eval=EvalConfig(k_values=(1, 2, 4), keep_trajectories=8),
    eval_problems=16,
    seeds=1,
    batch_rows=96,
    threads=1,
)

SIZES: dict[str, StudyConfig] = {
    "tiny": StudyConfig(
        token_budget=4,
        budget=BudgetConfig(candidates=()),
        selection=SelectionConfig(pool_subsample=2, problems=2, samples=2, k=2),
        sequence_rewards="replay",
        sequence=SequenceTrainConfig(parallel_budgets=(1, 2), steps=3, prompts_per_step=2, val_every=1,
                                     checkpoint_every=1),
        token=TokenTrainConfig(steps=1, prompts_per_step=2, group_size=2, max_train_prompts=4,
                               filter_samples=0, val_every=1, val_problems=2, checkpoint_every=1),
        eval=EvalConfig(k_values=(1, 2), keep_trajectories=8),
        eval_problems=2,
        seeds=1,
        batch_rows=16,
        threads=1,
    ),
    "default": DEFAULT,
}
"""The ``domains`` command's sizes (``selection.problems`` counts per domain; the mix samples each
training step's prompts equally from both domains)."""


def eval_key(task: str, split: str) -> str:
    """``"arithmetic:test"``: the key of one evaluation in results.json and the tables."""
    return f"{task}:{split}"


def _slug(task_name: str) -> str:
    return "mix" if "+" in task_name else task_name


def _select(lm, mix, cfg: StudyConfig, out: Path, progress: bool) -> tuple[Path, dict[str, Path]]:
    """One pool table over the mix's validation problems, three selections from its rows."""
    pool = pipeline.candidate_pool(cfg)
    problems = mix.load("validation")[: cfg.selection.problems * len(mix.domains)]  # interleaved: balanced
    table_path = out / "actions" / "outcomes.jsonl"
    table = pipeline.decode_candidates(lm, mix, problems, pool, cfg, table_path, progress)
    domain = {p.id: p.meta["domain"] for p in problems}
    paths = {}
    for name in (*mix.domains, mix.name):
        target = out / f"actions-{_slug(name)}"
        ids = [pid for pid in table.problem_ids if pid in domain and (name == mix.name or domain[pid] == name)]
        subset, meta = table.subset(ids, [a.name for a in pool]), pipeline.selection_meta(cfg, name, len(ids), pool)
        pipeline.write_selection(target, pool, subset, cfg.selection.k, meta, cfg.eval.k_values)
        paths[name] = target / "actions.json"
    return table_path, paths


def _methods(out: Path, cfg: StudyConfig, lm, task: str, split: str, mix_name: str, actions: dict) -> list[Method]:
    """Greedy, ``task``'s Best and Mixed, then the adapters evaluated on ``task``:``split``."""
    methods = [greedy_method(), pipeline.best_method(actions[task], cfg.eval.k_values),
               mixed_method(load_action_set(actions[task]), "Mixed")]
    trained = [task, mix_name]
    if split == "test":  # cross-domain OOD: the other domain's sequence adapter
        trained += [d for d in DOMAINS if d != task]
    for train in trained:
        slug = _slug(train)
        for tag, role in (("nobudget", "w/o budget"), ("budget", "w/ budget")):
            if train not in (task, mix_name) and tag == "nobudget":
                continue
            methods.append(pipeline.adapter_runs(out, f"seq-{slug}-{tag}", cfg, lm, f"Seq {role} [{slug}]"))
        if train in (task, mix_name):
            methods.append(pipeline.adapter_runs(out, f"tok-{slug}", cfg, lm, f"Token w/ budget [{slug}]"))
    return methods


def _evaluate(lm, out: Path, cfg: StudyConfig, task_name: str, split: str, mix_name: str, actions, model: str,
              progress: bool):
    directory = out / f"eval-{task_name}-{split}"
    if (directory / "eval_details.json").is_file():  # a finished evaluation is read back
        return json.loads((directory / "results.json").read_text()), json.loads(
            (directory / "eval_details.json").read_text())
    task = get_task(task_name)
    methods = _methods(out, cfg, lm, task_name, split, mix_name, actions)
    problems = task.load(split)[: cfg.eval_problems]
    meta = {"model": model, "task": task_name, "split": split, "num_problems": len(problems),
            "ood": ood_labels(methods, task.name, split), "best_from": f"{task_name}:validation"}
    evaluation = pipeline.evaluate_methods(lm, task, problems, methods, cfg, directory, meta=meta, progress=progress)
    print(format_table(evaluation.results))
    return evaluation.results, evaluation.details


def run_domains(out: str | Path, cfg: StudyConfig, *, model: str = "smollm2", progress: bool = True,
                command: str = "", device: str = DEFAULT_DEVICE) -> dict:
    """Run every stage into ``out``; returns ``{"task:split": results}``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "study_config.json", {"model": model, "command": command, **asdict(cfg)})
    if cfg.threads > 0:
        torch.set_num_threads(cfg.threads)
    clock = pipeline.StageClock("domains", out / "stage_minutes.json")
    clock.begin("load", "loading the frozen LM", model)
    lm = load_frozen_lm(ModelSpec(name_or_path=model, device=device))
    mix = get_task("+".join(DOMAINS))
    tasks = {**{d: mix.domains[d] for d in DOMAINS}, mix.name: mix}
    clock.end()

    sel = cfg.selection
    clock.begin("select", "action selection", f"{sel.pool_subsample + 1} candidates x {sel.problems} problems per "
                                              f"domain x {sel.samples} samples")
    table, actions = _select(lm, mix, cfg, out, progress)
    clock.end()

    clock.begin("sequence", "sequence adapters (offline replay)")
    for name, task in tasks.items():
        for seed in range(cfg.seeds):
            for budget, tag in ((True, "budget"), (False, "nobudget")):
                pipeline.train_sequence(lm, task, cfg, actions[name], table, out / f"seq-{_slug(name)}-{tag}-s{seed}",
                                        seed, budget, table_task=mix)
    clock.end()

    clock.begin("token", "token adapters", f"on {', '.join(tasks)}")
    for name, task in tasks.items():
        for seed in range(cfg.seeds):
            pipeline.train_token(lm, task, cfg, out / f"tok-{_slug(name)}-s{seed}", seed, progress=progress)
    clock.end()

    clock.begin("evaluate", "evaluation", "each domain's test and ood splits")
    evaluations = {}
    for split in ("test", "ood"):
        for d in DOMAINS:
            evaluations[eval_key(d, split)] = _evaluate(lm, out, cfg, d, split, mix.name, actions, model, progress)
    clock.end()

    clock.begin("report", "report")
    write_domains_report(out, evaluations, cfg, model=model, command=command,
                         minutes=sum(clock.total_minutes().values()), runs=clock.runs())
    clock.end()
    print(f"[domains {clock.elapsed():5.1f} min] done: {out / 'report.md'}", flush=True)
    return {key: results for key, (results, _) in evaluations.items()}


def write_domains_report(out: Path, evaluations: dict, cfg: StudyConfig, *, model: str, command: str,
                         minutes: float, runs: int = 1) -> Path:
    """``report.md``, ``results.json`` (``{"task:split": results}``) and ``eval_details.json``
    (``{"task:split": details}``, trajectories dropped to keep it small) in ``out``."""
    write_json(out / "results.json", {key: results for key, (results, _) in evaluations.items()})
    write_json(out / "eval_details.json",
               {key: {k: v for k, v in details.items() if k != "trajectories"}
                for key, (_, details) in evaluations.items()})
    sel, seq, tok = cfg.selection, cfg.sequence, cfg.token
    lines = [
        "# Mixed-domain training and out-of-distribution evaluation",
        "",
        "## Setup",
        "",
        f"- command: `{command}`" if command else "- command: (library call)",
        f"- model: `{model}`; tasks: {', '.join(f'`{d}`' for d in DOMAINS)} and their balanced mix "
        f"`{'+'.join(DOMAINS)}`; token budget {cfg.token_budget}",
        f"- action selection: {sel.pool_subsample + 1} candidates (the 180-config pool subsampled, plus greedy) on "
        f"{sel.problems} validation problems per domain × {sel.samples} samples; K = {sel.k} per "
        "training set (arithmetic rows, pyfunc rows, all rows); Best = the best single action on the evaluated "
        "domain's validation rows, Mixed = uniform over that domain's selected set",
        f"- sequence adapters: offline replay of that table, {seq.steps} steps × {seq.prompts_per_step} "
        f"prompts, budgets {list(seq.parallel_budgets)}, w/ and w/o budget (trained in-sample on the validation "
        "problems the table holds, as in the demo)",
        f"- token adapters (w/ budget): {tok.steps} steps × {tok.prompts_per_step} prompts × G = {tok.group_size} "
        "rollouts, live",
        "- the mix samples each training step's prompts equally from both domains (balanced sampling)",
        f"- evaluation: {cfg.eval_problems} problems per split, k = {list(cfg.eval.k_values)}, "
        f"n = {cfg.eval.n} samples, {cfg.seeds} evaluation seed(s) and {cfg.seeds} training seed(s) per "
        "adapter; intervals: 95% Student-t over problems; Δ: paired per-problem differences",
        f"- wall time: {minutes:.1f} min on this machine, over {runs} run(s) of the command (a re-run reuses "
        "finished stages)",
        f"- scale: sized to finish in ~20-25 min on a loaded 2-core CPU machine, so {cfg.seeds} training seed, "
        f"{cfg.eval_problems} problems per split (intervals of ±20-30 points) and {tok.steps} token-adapter steps "
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
