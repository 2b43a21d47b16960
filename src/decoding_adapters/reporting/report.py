"""Write a report directory from an evaluation: ``report.md``, ``results.json`` and figures.

Inputs are the files ``evaluate`` writes (``results.json``, ``eval_details.json``; see
``decoding_adapters.evaluation``) and, optionally, training logs (JSONL, one record per step:
``{"step", "reward", "entropy", "action_probs": [K floats], "val_reward"?}``; other lines are
ignored). The report holds:

- tables shaped like the paper's: static sampling (Best, Mixed) vs the sequence-level adapters
  (w/o budget, w/ budget) with Δ vs Best in points; static (Greedy, Mixed) vs the
  token-level adapters (w/o budget, w/ budget, entropy-only) with Δ vs Greedy; values are mean ±
  CI half-width, pass@k in percent;
- first, the accuracy of the one answer each method returns (no verifier) against its mean
  decodes per problem, a curve per method;
- a plain verdict per adapter, from paired per-problem differences at matched compute: whether it
  beats the baseline, by how much, and whether the interval of the difference excludes zero;
- figures: pass@k curves, action probabilities and validation reward over training, entropy
  modulation, generation lengths, sequence-adapter choices, word clouds by action, and an HTML
  action trace of token-adapter generations.

Nothing in the text is fixed in advance: every claim is computed from the numbers.

This module assembles ``report.md`` and picks the figures; the parts live beside it, by what they
write: ``inputs`` (the files read), ``cells`` (method roles, table cells), ``tables``, ``verdicts``,
``compute`` (accuracy per compute, evaluation cost) and ``sections`` (truncation, selection,
training curves, head-room, draft-gated). Their public names are importable from here too.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Mapping, Sequence

from ..core.files import write_json, write_text
from ..core.stats import INTERVAL_NOTE
from . import plots
from .cells import adapters_at, first_method, is_static, method_info
from .compute import answer_points, compute_points, compute_section, compute_table, compute_verdicts, cost_table
from .inputs import load_evaluation, load_training_log, log_action_names
from .sections import (
    draft_rows,
    draft_section,
    headroom_section,
    selection_section,
    training_curve_section,
    truncation_section,
)
from .tables import all_methods_table, paper_interval_table, seed_table, sequence_table, token_table
from .verdicts import (
    best_line,
    compare,
    evidence_lines,
    identical_by_construction,
    nothing_solved,
    per_seed_differences,
    seed_clause,
    strongest_static,
    verdicts,
)

__all__ = [
    "headroom_section",
    "load_evaluation",
    "load_training_log",
    "method_info",
    "sequence_table",
    "token_table",
    "all_methods_table",
    "verdicts",
    "identical_by_construction",
    "seed_table",
    "per_seed_differences",
    "seed_clause",
    "strongest_static",
    "ood_lines",
    "paper_interval_table",
    "write_report",
    "truncation_section",
    "training_curve_section",
    "best_line",
    "cost_table",
    "selection_section",
    "compute_points",
    "answer_points",
    "compute_table",
    "compute_verdicts",
    "compute_section",
    "compare",
    "evidence_lines",
    "nothing_solved",
    "draft_rows",
    "draft_section",
]


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_") or "x"


def _action_names(info, name) -> list[str]:
    return list(info.get(name, {}).get("actions", []))


LEAD_FIGURE = "answer_vs_compute.png"
"""The figure a report leads with: answer accuracy against mean decodes per problem."""


def _figures(out: Path, results, details, info, training_logs, action_names) -> list[tuple[str, str, str]]:
    """Make every figure the data allows; returns (heading, file name, caption) triples."""
    static = [n for n, i in info.items() if is_static(i)]
    confidence = (details or {}).get("config", {}).get("confidence", 0.95)
    figs = []
    answers = answer_points(results, details)
    if answers:  # the lead: what a user gets (no verifier) against what it costs
        figs.append((
            "Answer accuracy per compute",
            plots.plot_answer_vs_compute(answers, out / "answer_vs_compute.png", static=static,
                                         confidence=confidence).name,
            "Accuracy of the one answer each method returns without a verifier (B = 1: its sample; B > 1: a "
            "majority vote over its B samples; a draft-gated method: the draft where kept) against its mean decodes "
            "per problem (log scale), a curve per method through its B (a point for a method with one setting), "
            "with confidence-interval bars; static baselines dashed. Left of and above another: a better answer "
            "for less compute.",
        ))
    figs += [
        (
            "Pass@k",
            plots.plot_pass_at_k(results, out / "pass_at_k.png", static=static, confidence=confidence).name,
            "Pass@k (%) against the number of parallel samples k, with confidence-interval bars; "
            "static baselines dashed.",
        )
    ]
    points = compute_points(results, details)
    if points:
        figs.append((
            "Accuracy per compute",
            plots.plot_pass_vs_compute(points, out / "pass_vs_compute.png", static=static,
                                       confidence=confidence).name,
            "Pass@k (%) of every method against the decodes per problem its k answers cost (log scale), with "
            "confidence-interval bars; each line runs through a method's k values; static baselines dashed. "
            "A method left of and above another wins at lower compute.",
        ))
    figs += _training_figures(out, training_logs or {}, action_names)
    if details:
        figs += _detail_figures(out, results, details, info)
    return figs


def _training_figures(out: Path, training_logs: Mapping[str, str | Path], action_names) -> list[tuple[str, str, str]]:
    figs = []
    for name, path in training_logs.items():
        records = load_training_log(path)
        given = action_names.get(name) if isinstance(action_names, Mapping) else action_names
        names = log_action_names(Path(path), records, given)
        file = plots.plot_training(
            records,
            names,
            out / f"training_{_slug(name)}.png",
            title=f"Action distribution and reward during training: {name}",
        )
        n_val = sum(1 for r in records if "val_reward" in r)
        figs.append(
            (
                f"Training: {name}",
                file.name,
                f"Mean action probabilities (stacked, left axis) over {len(records)} logged steps, with the validation "
                f"reward ({n_val} evaluations) and the smoothed training reward (right axis); split into CoT / "
                f"non-CoT / all prompts when the log records both.",
            )
        )
    return figs


def _static_reference(info, level: str) -> str | None:
    if level == "token":
        return (
            first_method(info, role="mixed", level="token")
            or first_method(info, role="mixed")
            or first_method(info, role="greedy")
            or first_method(info, role="best")
        )
    return first_method(info, role="best") or first_method(info, role="mixed") or first_method(info, role="greedy")


def _detail_figures(out: Path, results, details, info) -> list[tuple[str, str, str]]:
    figs = []
    trajs = details.get("trajectories", {})
    lengths = details.get("lengths", {})
    groups = []
    for level, title in (("sequence", "Sequence level"), ("token", "Token level")):
        adapters = adapters_at(info, level)
        if adapters:
            greedy = first_method(info, role="greedy") if level == "token" else None
            ref = [n for n in (greedy, _static_reference(info, level)) if n]
            groups.append((title, {n: lengths.get(n, []) for n in dict.fromkeys(ref + adapters)}))
    if not groups:
        groups = [("All methods", {n: lengths.get(n, []) for n in results})]
    figs.append(
        (
            "Generation lengths",
            plots.plot_lengths(groups, out / "lengths.png").name,
            "Distribution of generation lengths (tokens) of a static reference and the adapters; "
            "dashed lines mark means.",
        )
    )
    choices = details.get("sequence_choices", {})
    if choices:
        file = plots.plot_sequence_choices(
            choices, {n: _action_names(info, n) for n in choices}, out / "sequence_choices.png"
        )
        figs.append(
            (
                "Sequence-level choices",
                file.name,
                "Share of test problems for which each sequence adapter picks each action, at each parallel budget B.",
            )
        )
    for name in adapters_at(info, "token"):
        figs += _token_figures(out, details, info, name, trajs)
    return figs


def _token_figures(out: Path, details, info, name: str, trajs) -> list[tuple[str, str, str]]:
    figs, names, slug = [], _action_names(info, name), _slug(name)
    if not names:
        names = [
            f"action {i}" for i in range(1 + max((a for t in trajs.get(name, []) for a in t["actions"]), default=0))
        ]
    ref = _static_reference(info, "token")
    if ref:
        file = plots.plot_entropy_modulation(
            trajs.get(ref, []),
            trajs.get(name, []),
            names,
            out / f"entropy_{slug}.png",
            static_label=ref,
            adapter_label=name,
            static_action_names=_action_names(info, ref),
        )
        figs.append(
            (
                f"Entropy modulation: {name}",
                file.name,
                f"Entropy of the frozen LM's next-token distribution at the tokens generated by {ref} and by {name}: "
                "(a) overall, (b) by the action taken, (c) the adapter's action mix per entropy quintile.",
            )
        )
    file = plots.plot_wordclouds(
        trajs.get(name, []), names, out / f"wordcloud_{slug}.png", title=f"Tokens by action: {name}"
    )
    figs.append(
        (f"Word clouds: {name}", file.name, "Most frequent tokens generated under each action (size = frequency).")
    )
    html_file = _trace(out, details, name, names, trajs.get(name, []), slug)
    figs.append((f"Action trace: {name}", html_file.name, "HTML page: example generations coloured by action."))
    return figs


def _pick_examples(trajectories: list[dict], count: int = 3) -> list[dict]:
    """Prefer correct generations with many action switches among non-deterministic tokens."""

    def switches(t):
        acts = [a for a, p in zip(t["actions"], t.get("max_prob", [])) if p <= 0.95]
        return sum(x != y for x, y in zip(acts, acts[1:]))

    return sorted(
        trajectories, key=lambda t: (t.get("correct", 0) >= 0.5, switches(t), t.get("length", 0)), reverse=True
    )[:count]


def _trace(out: Path, details, name, names, trajectories, slug) -> Path:
    prompts = {p["id"]: p.get("question", "") for p in details.get("problems", [])}
    examples = [(f"Example {i + 1}", t) for i, t in enumerate(_pick_examples(trajectories))]
    intro = (
        f"Generations of {name}. Each token is coloured by the decoding action the adapter chose for it; tokens where "
        f"the frozen LM's top probability exceeds 0.95 are black, since the action barely changes them. "
        f"Hover over a token for its action, entropy and max-probability."
    )
    return plots.action_trace_html(
        examples, names, out / f"action_trace_{slug}.html", title=f"Action trace: {name}", intro=intro, prompts=prompts
    )


def _setup_lines(results, details) -> list[str]:
    cfg = (details or {}).get("config", {})
    if not cfg:
        return [f"Methods: {', '.join(results)}."]
    items = [
        ("task", cfg.get("task")),
        ("split", cfg.get("split")),
        ("model", cfg.get("model")),
        ("problems", len((details or {}).get("problems", [])) or cfg.get("num_problems")),
        ("seeds", cfg.get("seeds")),
        ("samples per problem and seed (n)", cfg.get("n")),
        ("token budget", cfg.get("token_budget")),
        ("CoT ratio", cfg.get("cot_ratio")),
    ]
    lines = [f"- {k}: `{v}`" for k, v in items if v is not None]
    lines += ood_lines(cfg.get("ood"))
    overlap = cfg.get("train_overlap") or {}
    if cfg.get("allow_train_overlap"):
        scored = "; ".join(f"{name} on {n} problem(s)" for name, n in overlap.items()) or "none was"
        lines.append(
            "- **--allow-train-overlap was given**: adapters could be scored on problems they were trained or "
            f"selected on ({scored}); such numbers are in-sample."
        )
    conf = cfg.get("confidence", 0.95)
    lines.append(
        f"- uncertainty: mean ± half-width of a {conf:.0%} Student-t interval over problems (each problem's value "
        "averaged over seeds); pass@k uses the unbiased estimator on n samples. Verdicts use paired per-problem "
        "differences. Pass@k values are percentages."
    )
    return lines


def ood_lines(labels: Mapping | None) -> list[str]:
    """Setup lines naming each adapter's training task and whether this evaluation is OOD for it
    (``eval_details.json`` ``config.ood``, see ``evaluation.ood``)."""
    lines = []
    for name, label in (labels or {}).items():
        kind = {True: "**OOD**", False: "in distribution", None: "training task unknown"}[label.get("ood")]
        lines.append(f"- {name}: {kind} (`{label.get('label')}`)")
    return lines


def write_report(
    out_dir: str | Path,
    results: Mapping,
    details: Mapping | None = None,
    training_logs: Mapping[str, str | Path] | None = None,
    action_names: Sequence[str] | Mapping[str, Sequence[str]] | None = None,
    *,
    title: str = "Decoding adapters: evaluation report",
    sections: Sequence[tuple[str, str]] = (),
) -> Path:
    """Write ``report.md``, ``results.json`` and the figures into ``out_dir``; returns report.md's path.

    Args:
        results: ``{method: {metric: {mean, ci_low, ci_high}}}`` (results.json).
        details: eval_details.json (figures and paired verdicts need it; tables do not).
        training_logs: ``{name: path to a JSONL training log}``.
        action_names: names of the actions in the training logs: one list for all, or by log name;
            default: from ``adapter.json`` next to each log.
        sections: extra ``(heading, markdown)`` sections placed before the figures (e.g.
            :func:`truncation_section`, :func:`training_curve_section`).
    """
    if not results:
        raise ValueError("no results to report")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "results.json", dict(results))
    info = method_info(results, details)
    figs = _figures(out, results, details, info, training_logs, action_names or {})
    text = _markdown(title, results, details, figs, sections)
    return write_text(out / "report.md", text)


def _markdown(title, results, details, figs, sections=()) -> str:
    evidence = evidence_lines(results, details)
    parts = [f"# {title}", "", *[f"> {line}\n" for line in evidence], "## Setup", "", *_setup_lines(results, details),
             ""]
    lead = [f for f in figs if f[1] == LEAD_FIGURE]
    for heading, file, caption in lead:  # what a user gets for what it costs, first
        parts += [f"## {heading}", "", f"![{heading}]({file})", "", caption, ""]
    figs = [f for f in figs if f not in lead]
    parts += _verdict_lines(results, details)
    parts += _static_comparison_lines(results, details)
    parts += ["## All methods", "", all_methods_table(results, details), "", INTERVAL_NOTE, ""]
    parts += _paper_interval_lines(results)
    optional = [("Across-seed spread", seed_table(results, details)),
                ("Accuracy per compute", compute_section(results, details)),
                ("Draft-gated methods", draft_section(details)), ("Evaluation cost", cost_table(details)),
                *sections]
    for heading, body in optional:  # each section only where the run has something to show
        if body:
            parts += [f"## {heading}", "", body, ""]
    parts += ["## Figures", ""]
    for heading, file, caption in figs:
        parts += [f"### {heading}", ""]
        parts += [
            f"[{file}]({file}): {caption}" if file.endswith(".html") else f"![{heading}]({file})\n\n{caption}",
            "",
        ]
    return "\n".join(parts)


def _verdict_lines(results, details) -> list[str]:
    """The verdict section: how comparisons are made, the Best line and each verdict (none without one)."""
    verdict = verdicts(results, details)
    if not verdict:
        return []
    return [
        "## Verdict",
        "",
        "Every adapter is compared with Best, the strongest static baseline; token-level adapters also with "
        "Greedy, with the per-token Mixed (a uniform draw over the token actions at every token) and with the "
        "best single token action (chosen on validation). Each compares like with like: the same metric at "
        "matched compute (pass@k where both spend the same decodes per problem, within 5%; the answer's "
        "accuracy against the baseline's answer at the same compute, its curve interpolated where needed); a "
        "comparison across compute is listed as such, not judged. Differences are adapter minus baseline in "
        "points, with the interval of the paired per-problem difference; ✔ / ✘ mark intervals that exclude "
        "zero (significantly better / worse).",
        "",
        *([best_line(results, details), ""] if best_line(results, details) else []),
        *verdict,
        "",
    ]


def _static_comparison_lines(results, details) -> list[str]:
    """The sequence-level and token-level tables against static sampling, where the run has them."""
    seq, tok = sequence_table(results, details), token_table(results, details)
    parts = []
    if seq:
        parts += [
            "## Static sampling vs sequence-level adapter",
            "",
            seq,
            "",
            "Δ is the adapter minus Best, in points (percentage points for pass@k); the verdicts say which "
            "differences are significant. "
            "Bold: the highest pass@k in the row. " + best_line(results, details),
            "",
        ]
    if tok:
        parts += [
            "## Static sampling vs token-level adapter",
            "",
            tok,
            "",
            "Δ is the adapter minus Greedy (the paper's primary static baseline for the token level).",
            "",
        ]
    return parts


def _paper_interval_lines(results) -> list[str]:
    """The paper-style interval table (for comparison with the paper's tables only), where there is one."""
    paper = paper_interval_table(results)
    if not paper:
        return []
    return [
        "## Paper-style intervals",
        "",
        paper,
        "",
        "± is the paper's interval: a normal-approximation binomial 95% interval, z·sqrt(p(1-p)/N), with N the "
        "distinct problems (Outcomes): a problem's seeds and samples are averaged first, as for the Student-t "
        "intervals above, so a problem scored once per seed is not counted as several. Use it only to compare "
        "with the paper's tables (verdicts use paired per-problem differences).",
        "",
    ]
