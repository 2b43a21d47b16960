"""The ``select-actions`` outputs: ``actions.json`` (loadable by ``load_action_set``), the
``selection.md`` table of the greedy coverage picks against top-K by mean and the Best static
strategy per pass@k, and the ``selection.png`` coverage figure."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from ..core.files import write_json, write_text
from ..decoding.actions import GREEDY, DecodingAction
from ..selection.best import BestStatic, best_static
from ..selection.coverage import TIE_TOLERANCE, Selection

__all__ = ["write_outputs", "selection_markdown", "saturation_text", "best_lines", "plot_selection"]


def _best_of(pool: Sequence[DecodingAction], selection: Selection, meta: dict) -> BestStatic:
    """The selection's Best; without per-sample outcomes, pass@1 alone from the mean rewards."""
    if selection.best is not None:
        return selection.best
    return best_static({1: selection.mean_reward}, [a.name for a in pool], samples=int(meta.get("samples", 1)),
                       problems=int(meta.get("problems", 1)))


def write_outputs(out: Path, pool: Sequence[DecodingAction], selection: Selection, meta: dict) -> str:
    """Write ``actions.json``, ``selection.md`` and ``selection.png``; return the markdown.

    ``actions.json`` holds the selected set, ``best_single`` (the Best strategy at the smallest k,
    pass@1) and ``best_per_k`` (``BestStatic.to_dict()`` plus ``actions``: the chosen actions as
    dicts), the coverage curve over the whole pool and its saturation point."""
    best_static_ = _best_of(pool, selection, meta)
    by_name = {a.name: a for a in pool}
    best = [a.name for a in pool].index(best_static_.name_for(best_static_.k_values[0]))
    best_per_k = {**best_static_.to_dict(),
                  "actions": {n: by_name[n].to_dict() for n in dict.fromkeys(best_static_.to_dict()["best"].values())}}
    write_json(
        out / "actions.json",
        {
            "actions": [pool[j].to_dict() for j in selection.order],
            "names": [pool[j].name for j in selection.order],
            "method": "greedy-coverage",
            "coverage": selection.coverage,
            "pool": len(pool),
            "task": meta["task"],
            "best_single": pool[best].to_dict(),
            "best_single_name": pool[best].name,
            "best_single_mean_reward": selection.mean_reward[best],
            "top_k_by_mean": {
                "names": [pool[j].name for j in selection.top_k_order],
                "coverage": selection.top_k_coverage,
            },
            "pool_coverage": selection.pool_coverage,
            "coverage_curve": {"names": [pool[j].name for j in selection.full_order],
                               "coverage": selection.full_coverage},
            "saturation": selection.saturation,
            "best_per_k": best_per_k,
            "selection_data": meta,
        },
    )
    markdown = selection_markdown(pool, selection, meta, best_static_)
    write_text(out / "selection.md", markdown)
    plot_selection(out / "selection.png", selection, meta)
    return markdown


def selection_markdown(pool: Sequence[DecodingAction], sel: Selection, meta: dict,
                       best: BestStatic | None = None) -> str:
    lines = [
        f"# Action selection: {meta['task']} ({meta['split']})",
        "",
        f"{meta['problems']} problems x {len(pool)} candidate actions x {meta['samples']} samples, "
        f"token budget {meta['token_budget']}, seed {meta['seed']}. R[x, s] = mean reward over the samples; "
        "F(S) = mean over problems of max over s in S of R[x, s] (best-of-S accuracy).",
        "",
        "| K | greedy F | top-K F | action added (greedy) | its mean reward |",
        "|---:|---:|---:|---|---:|",
    ]
    for i, j in enumerate(sel.order):
        lines.append(
            f"| {i + 1} | {sel.coverage[i]:.3f} | {sel.top_k_coverage[i]:.3f} | `{pool[j].name}` "
            f"| {sel.mean_reward[j]:.3f} |"
        )
    best = best or _best_of(pool, sel, meta)
    stalled = [i + 1 for i in range(1, len(sel.order)) if sel.coverage[i] <= sel.coverage[i - 1] + TIE_TOLERANCE]
    if sel.pool_coverage == 0:
        lines += [
            "",
            "**No candidate solved any problem**: the selection is arbitrary (pool order). "
            "Raise the token budget, the samples or the number of problems.",
        ]
    elif stalled:
        lines += [
            "",
            f"At K = {', '.join(map(str, stalled))} no candidate added coverage; "
            "those picks follow pool order (ties go to the lowest index).",
        ]
    lines += [
        "",
        f"Whole pool ({len(pool)} actions): F = {sel.pool_coverage:.3f}; " + saturation_text(sel),
        "",
        *best_lines(best),
        "",
    ]
    return "\n".join(lines)


def saturation_text(sel: Selection) -> str:
    """One sentence: where greedy coverage over the whole pool saturates."""
    if sel.pool_coverage <= 0:
        return "no candidate solved any problem, so the coverage curve is flat at 0."
    s = sel.saturation
    after = (f"from K = {s + 1} on, no candidate adds coverage" if s < len(sel.full_order)
             else "it takes every candidate")
    return f"greedy coverage reaches it at K = {s} of {len(sel.full_order)}: {after}."


def best_lines(best: BestStatic) -> list[str]:
    """Markdown: the Best static strategy at each pass@k with its validation score (and greedy's)."""
    greedy = GREEDY.name if GREEDY.name in best.names else None
    lines = [
        f"Best static strategy per metric (every candidate, greedy included; {best.problems} validation problems, "
        f"{best.samples} samples per cell):",
        "",
        "| metric | Best | its validation pass@k | greedy's |",
        "|---|---|---:|---:|",
    ]
    for k in best.k_values:
        mark = " (extrapolated)" if best.extrapolated(k) else ""
        greedy_score = f"{best.score_for(k, greedy):.3f}" if greedy else "–"
        lines.append(f"| pass@{k}{mark} | `{best.name_for(k)}` | {best.score_for(k):.3f} | {greedy_score} |")
    if any(best.extrapolated(k) for k in best.k_values):
        lines += ["", f"pass@k above {best.samples} samples is extrapolated as 1 - (1 - c/n)^k, never below the "
                  "measured pass@n: exact for greedy, biased low for a sampler."]
    return lines


def plot_selection(path: Path, sel: Selection, meta: dict) -> None:
    """Best-of-K accuracy vs K for greedy coverage and top-K by mean (the appendix's figure)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ks = list(range(1, len(sel.order) + 1))
    full = list(range(1, len(sel.full_order) + 1))
    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    ax.plot(full, sel.full_coverage, "-", color="C0", alpha=0.35, label="greedy coverage, whole pool")
    ax.plot(ks, sel.coverage, "o-", color="C0", label="greedy coverage (ours)")
    ax.plot(ks, sel.top_k_coverage, "s--", color="C1", label="top-K by mean reward")
    ax.axhline(sel.pool_coverage, color="gray", linestyle=":", label="whole pool")
    if sel.saturation:
        ax.axvline(sel.saturation, color="C2", linestyle=":", label=f"saturates at K = {sel.saturation}")
    ax.set_xlabel("number of selected actions K")
    ax.set_ylabel("best-of-K accuracy F(S)")
    ax.set_title(f"Action selection on {meta['task']} ({meta['split']}, {meta['problems']} problems)")
    shown = min(len(full), max(len(ks), sel.saturation) + 2)  # the curve is flat after saturation
    ax.set_xlim(0.5, shown + 0.5)
    if shown <= 24:
        ax.set_xticks(range(1, shown + 1))
    ax.grid(alpha=0.3)
    ax.legend(loc="best")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
