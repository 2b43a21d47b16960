"""The report's extra sections, each from its own input: the token budget's truncation table, the
action selection's coverage curve, the training curves, the head-room captured, and what the
draft-gated methods kept and re-decoded."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from ..evaluation.headroom import oracle_table
from ..selection.outcomes import OutcomeTable
from . import plots
from .cells import pass_ks, signed, table_row
from .inputs import log_records
from .verdicts import compare

__all__ = ["truncation_section", "selection_section", "training_curve_section", "headroom_section", "draft_rows",
           "draft_section"]


def truncation_section(stats: Sequence[Mapping], chosen: int | None = None, max_truncated: float | None = None,
                       split: str = "validation") -> str:
    """Markdown: greedy mean length, fraction of rows stopped by the budget and (when scored) greedy
    accuracy, per token budget (``TruncationStats.to_dict()`` rows), and which budget was chosen."""
    if not stats:
        return ""
    scored = all(st.get("greedy_reward") is not None for st in stats)
    lines = [
        table_row(["token budget", "rows", "greedy mean length", "stopped by the budget (%)", "longest"]
             + (["greedy accuracy (%)"] if scored else [])),
        table_row(["---:"] * (6 if scored else 5)),
    ]
    for st in sorted(stats, key=lambda r: r["token_budget"]):
        mark = " (chosen)" if st["token_budget"] == chosen else ""
        lines.append(table_row([f"{st['token_budget']}{mark}", st["rows"], f"{st['mean_length']:.1f}",
                           f"{st['truncated_fraction'] * 100:.1f}", st["max_length"]]
                          + ([f"{st['greedy_reward'] * 100:.1f}"] if scored else [])))
    text = f"Greedy decoding on {stats[0]['rows']} {split} problems, decoded once at the largest budget."
    if chosen is not None and max_truncated is not None:
        text += (f" The budget used everywhere is the smallest whose greedy truncated fraction is at most "
                 f"{max_truncated * 100:.0f}%: **{chosen}** (chosen on {split}, never on test).")
    return text + "\n\n" + "\n".join(lines)


def selection_section(actions_json: str | Path, out_dir: str | Path) -> str:
    """Markdown: the action selection's coverage curve over the whole candidate pool (the figure
    copied next to the report), where it saturates, and the Best static strategy per pass@k, from
    select-actions' ``actions.json``; '' when there is none."""
    path = Path(actions_json)
    if not path.is_file():
        return ""
    data = json.loads(path.read_text())
    meta = data.get("selection_data", {})
    curve = data.get("coverage_curve")
    names = data.get("names", [])
    lines = [f"Candidates: {data.get('pool')} (greedy included), on {meta.get('problems')} {meta.get('split')} "
             f"problems x {meta.get('samples')} samples; K = {len(names)} selected by greedy coverage: "
             + ", ".join(f"`{n}`" for n in names) + "."]
    if curve:
        saturation = data.get("saturation", 0)
        shown = curve["coverage"][: max(saturation, len(names)) + 1]
        lines += ["", table_row(["K"] + [str(i + 1) for i in range(len(shown))]),
                  table_row(["---"] + ["---:"] * len(shown)),
                  table_row(["coverage F"] + [f"{f:.3f}" for f in shown]), ""]
        after = (f"from K = {saturation + 1} on no candidate adds coverage" if saturation < len(curve["coverage"])
                 else "it takes every candidate")
        lines.append(
            f"The whole pool covers F = {data.get('pool_coverage', 0.0):.3f}; greedy coverage reaches it at "
            f"K = {saturation}: {after}."
            if saturation else "No candidate solved any problem: the coverage curve is flat at 0."
        )
    figure = path.parent / "selection.png"
    if figure.is_file():
        target = Path(out_dir) / "selection.png"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(figure.read_bytes())
        lines = ["![coverage curve](selection.png)", ""] + lines
    best = data.get("best_per_k")
    if best:
        lines += ["", table_row(["metric", "Best (validation)", "its pass@k", "greedy's"]),
                  table_row(["---", "---", "---:", "---:"])]
        for k in best["k_values"]:
            name = best["best"][str(k)]
            i = best["k_values"].index(k)
            greedy = best["scores"].get("greedy")
            lines.append(table_row([f"pass@{k}" + (" (extrapolated)" if k in best.get("extrapolated", []) else ""),
                               f"`{name}`", f"{best['scores'][name][i] * 100:.1f}",
                               "–" if greedy is None else f"{greedy[i] * 100:.1f}"]))
    return "\n".join(lines)


def training_curve_section(out_dir: str | Path, runs: Mapping[str, Sequence[str | Path]],
                           file: str = "training_curves.png") -> str:
    """Markdown: the validation-reward curve of every training run (``{method: [log of each seed]}``),
    with a table of steps run, early stops, the kept step with its validation reward and the last one; writes
    the figure into ``out_dir``."""
    curves, lines = {}, [
        table_row(["run", "steps", "stopped early", "kept step", "its val reward", "last val reward",
              "s / step"]),
        table_row(["---", "---:", "---", "---:", "---:", "---:", "---:"]),
    ]
    for name, paths in runs.items():
        for seed, path in enumerate(paths):
            if not Path(path).is_file():
                continue
            every = [r for r in log_records(Path(path)) if "step" in r]  # step 0: the start's validation
            records = [r for r in every if r.get("step", 0) > 0 and "reward" in r]
            val = [(r["step"], r["val_reward"]) for r in records if "val_reward" in r]
            if not records:
                continue
            curves[f"{name} s{seed}"] = val
            stop = next((r["early_stop"] for r in records if "early_stop" in r), None)
            kept = [r["kept_step"] for r in every if "kept_step" in r]
            val_at = {r.get("step", 0): r["val_reward"] for r in every if "val_reward" in r}
            if stop:
                step_best, best_val = stop["best_step"], stop["best_val_reward"]
            elif kept:  # the keep-best rule's choice (step 0 included), not merely the highest reward
                step_best, best_val = kept[-1], val_at.get(kept[-1], math.nan)
            else:  # no kept step logged (the adapter ends with its last weights): the highest validation
                step_best, best_val = max(val, key=lambda v: v[1], default=(None, math.nan))
            seconds = statistics.fmean(r.get("seconds", math.nan) for r in records)
            lines.append(table_row([f"{name} s{seed}", records[-1]["step"], "yes" if stop else "no", step_best,
                               f"{best_val:.3f}", f"{val[-1][1]:.3f}" if val else "–", f"{seconds:.1f}"]))
    if not curves:
        return ""
    plots.plot_validation_curves(curves, Path(out_dir) / file)
    return (f"![validation reward during training]({file})\n\nValidation reward (policy-sampled rollouts on held-out "
            "validation problems) against the training step for every run; the adapter keeps the weights of its "
            "kept step (the best validated one by the trainer's rule; step 0 is the prior).\n\n" + "\n".join(lines))


def headroom_section(actions_json: str | Path, results: Mapping, details: Mapping | None, adapters: Sequence[str],
                     confidence: float = 0.95) -> str:
    """Markdown: how much of the measured head-room each adapter captured. The head-room is the
    per-problem oracle over the static candidates Best was chosen from minus the best single one,
    on the selection's validation outcomes (``outcomes.jsonl`` beside select-actions'
    ``actions.json``): cross-fitted where the samples allow (the choice made on half the samples,
    scored on the other half: k <= samples / 2), in-sample (biased upward) beyond. Each adapter's
    gain is its paired difference to Best on the test split; the share is gain / head-room, given
    only where the head-room's interval is above 0. '' without the outcomes, the candidates or a Best row."""
    path = Path(actions_json)
    outcomes = path.parent / "outcomes.jsonl"
    if not path.is_file() or not outcomes.is_file() or "Best" not in results:
        return ""
    table = OutcomeTable.load(outcomes)
    names = [n for n in json.loads(path.read_text()).get("best_per_k", {}).get("scores", {}) if n in table.action_names]
    problems = [pid for pid in table.problem_ids if all(table.outcomes(pid, n) for n in names)]
    cells = [[[o.reward for o in table.outcomes(pid, name)] for name in names] for pid in problems]
    samples = min((len(c) for row in cells for c in row), default=0)
    if not problems or not names or samples < 1:
        return ""
    rewards = np.array([[c[:samples] for c in row] for row in cells], dtype=float)  # [problems, actions, samples]
    ks = [k for k in pass_ks(results["Best"]) if k <= samples]
    adapters = [a for a in adapters if a in results]
    lines = [f"Head-room on {len(problems)} validation problems x {samples} samples of the {len(names)} static "
             "candidates (the selection's outcomes): the per-problem oracle (each problem under its own best "
             "candidate) minus the best single candidate, cross-fitted where k <= samples / 2. Gains are the "
             "adapters' paired differences to Best on the test split (points); the share is gain / head-room, "
             "given where the head-room's interval is above 0.",
             "", table_row(["k", "best static (validation)", "head-room (points)"]
                      + [f"{a}: gain, share" for a in adapters]),
             table_row(["---:", "---", "---:"] + ["---:"] * len(adapters))]
    for row in oracle_table(rewards, names, ks):
        if row.crossfit_headroom is not None:
            room, (low, high), kind = row.crossfit_headroom, row.crossfit_headroom_ci, "cross-fitted"
        else:
            room, (low, high), kind = row.headroom, row.headroom_ci, "in-sample"
        cells = []
        for adapter in adapters:
            c = compare(results, details, adapter, "Best", f"pass@{row.k}", confidence)
            share = f"{c['diff'] / room * 100:.0f}%" if low > 0 else "–"  # no share of a head-room within noise of 0
            cells.append(f"{signed(c['diff'] * 100, 1)}, {share}")
        lines.append(table_row([str(row.k), f"`{row.best_action}`",
                           f"{room * 100:+.1f} [{low * 100:+.1f}, {high * 100:+.1f}] {kind}"] + cells))
    return "\n".join(lines)


def draft_rows(details: Mapping | None) -> list[dict]:
    """Per draft-gated method (``eval_details.json["draft"]``) and k: the share of (seed, problem)
    pairs re-decoded and pass@k over the kept and over the re-decoded ones (None where there are
    none): ``{method, k, redecode_share, kept, redecoded, n_kept, n_redecoded}``."""
    out = []
    per_problem = (details or {}).get("per_problem", {})
    for name, info in ((details or {}).get("draft") or {}).items():
        choices = info.get("choices_by_seed")  # [seed][problem][k index]
        ks = [int(k) for k in info.get("k_values", [])]
        if not choices or not ks:
            continue
        for ki, k in enumerate(ks):
            scores = per_problem.get(name, {}).get(f"pass@{k}")  # [problem][seed]
            kept, redone = [], []
            for s, per_seed in enumerate(choices):
                for i, per_k in enumerate(per_seed):
                    if scores is None or i >= len(scores) or s >= len(scores[i]):
                        continue
                    (kept if per_k[ki] == 0 else redone).append(float(scores[i][s]))
            share = info["redecode_share"][str(k)]
            out.append({"method": name, "k": k, "redecode_share": share, "n_kept": len(kept),
                        "n_redecoded": len(redone), "kept": sum(kept) / len(kept) if kept else None,
                        "redecoded": sum(redone) / len(redone) if redone else None})
    return out


def draft_section(details: Mapping | None) -> str:
    """Markdown: what each draft-gated method did (re-decoded share) and how its kept and its
    re-decoded answers scored; '' when the evaluation has none."""
    rows = draft_rows(details)
    if not rows:
        return ""

    def pct(value):
        return "–" if value is None else f"{100 * value:.1f}"

    lines = [table_row(["Method", "k", "re-decoded", "pass@k where kept (n)", "pass@k where re-decoded (n)"]),
             table_row(["---", "---:", "---:", "---:", "---:"])]
    for r in rows:
        lines.append(table_row([r["method"], str(r["k"]), f"{100 * r['redecode_share']:.0f}%",
                           f"{pct(r['kept'])} ({r['n_kept']})", f"{pct(r['redecoded'])} ({r['n_redecoded']})"]))
    return "\n".join(lines) + (
        "\n\nA draft-gated method decodes greedily first and keeps the draft or re-decodes; the kept "
        "answers are the draft's, the re-decoded ones the chosen action's (at k > 1 with the draft among "
        "them). Counts are (seed, problem) pairs.")
