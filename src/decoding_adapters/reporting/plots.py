"""Figures for the report: matplotlib (Agg, no pyplot state) and word clouds.

Every function takes plain Python data (lists and dicts as found in ``eval_details.json`` and the
training logs), writes one file and returns its path. Actions keep one colour everywhere
(:func:`.colors.action_color`, by action index); methods keep one colour per figure
(:func:`.colors.method_color`). The colours and the HTML action trace (``trace_html``) are
re-exported here, so the report finds every figure in one namespace.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Mapping, Sequence

import matplotlib

matplotlib.use("Agg")  # before anything imports pyplot; we only use Figure objects below

import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from .colors import ACTION_COLORS, action_color, method_color  # noqa: E402
from .trace_html import action_trace_html  # noqa: E402

__all__ = [
    "ACTION_COLORS",
    "action_color",
    "method_color",
    "plot_pass_at_k",
    "plot_pass_vs_compute",
    "plot_answer_vs_compute",
    "plot_training",
    "plot_validation_curves",
    "plot_entropy_modulation",
    "plot_lengths",
    "plot_sequence_choices",
    "plot_wordclouds",
    "action_trace_html",
]

_STYLE = {
    "font.size": 11,
    "axes.titlesize": 13,
    "axes.titleweight": "bold",
    "axes.labelsize": 11,
    "legend.fontsize": 9.5,
    "xtick.labelsize": 10,
    "ytick.labelsize": 10,
    "axes.spines.top": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
}


def _figure(width: float, height: float) -> Figure:
    return Figure(figsize=(width, height), layout="constrained")


def _save(fig: Figure, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def _styled(fn):
    def wrapper(*args, **kwargs):
        with matplotlib.rc_context(_STYLE):
            return fn(*args, **kwargs)

    wrapper.__name__, wrapper.__doc__ = fn.__name__, fn.__doc__
    return wrapper


def _no_data(ax, text: str = "no data") -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=12, color="#777777")
    ax.set_xticks([])
    ax.set_yticks([])
    ax.grid(False)


# ---- pass@k -----------------------------------------------------------------------------------------


@_styled
def plot_pass_at_k(
    results: Mapping[str, Mapping],
    path,
    methods: Sequence[str] | None = None,
    title: str = "Pass@k by method",
    confidence: float = 0.95,
    static: Sequence[str] = (),
) -> Path:
    """Pass@k (%) against k for each method, with confidence-interval error bars (methods are
    nudged sideways so bars do not hide each other); ``static`` methods are drawn dashed."""
    methods = list(methods or results)
    fig = _figure(8.0, 4.8)
    ax = fig.add_subplot()
    markers = "osD^v<>ph*"
    all_k: set[int] = set()
    for i, name in enumerate(methods):
        ks = sorted(int(m.split("@")[1]) for m in results[name] if m.startswith("pass@"))
        if not ks:
            continue
        all_k.update(ks)
        entries = [results[name][f"pass@{k}"] for k in ks]
        mean = np.array([e["mean"] for e in entries]) * 100
        low = np.array([e["mean"] if e.get("ci_low") is None else e["ci_low"] for e in entries]) * 100
        high = np.array([e["mean"] if e.get("ci_high") is None else e["ci_high"] for e in entries]) * 100
        x = np.array(ks, dtype=float) * 2 ** (0.06 * (i - (len(methods) - 1) / 2))
        ax.errorbar(
            x,
            mean,
            yerr=[np.clip(mean - low, 0, None), np.clip(high - mean, 0, None)],
            label=name,
            color=method_color(i),
            marker=markers[i % 10],
            capsize=3,
            linewidth=1.8,
            markersize=6,
            linestyle="--" if name in static else "-",
        )
    if all_k:
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(all_k), [str(k) for k in sorted(all_k)])
        ax.minorticks_off()
    ax.set_ylim(max(ax.get_ylim()[0], -2), min(ax.get_ylim()[1], 102))
    ax.set_xlabel("k (parallel samples)")
    ax.set_ylabel("pass@k (%)")
    ax.set_title(title)
    ax.legend(
        title=f"bars: {confidence:.0%} CI" + (", dashed: static" if static else ""),
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        frameon=False,
    )
    return _save(fig, path)


@_styled
def plot_pass_vs_compute(
    points: Sequence[Mapping],
    path,
    title: str = "Accuracy per compute",
    confidence: float = 0.95,
    static: Sequence[str] = (),
    tokens: bool = False,
    ylabel: str = "pass@k (%)",
    point_label: str = "k=",
) -> Path:
    """Pass@k (%) against the compute it costs per problem, one line per method through its k
    values, with confidence-interval error bars: ``points`` are dicts ``{method, k, mean, low,
    high, decodes, tokens}`` (pass@k as fractions; ``decodes`` / ``tokens`` per problem at that
    k; k None: a method's single point, unlabelled). x is decodes per problem (log2), or generated
    tokens per problem with ``tokens``. A method's first point is labelled with k once
    (``point_label``); ``static`` methods are drawn dashed."""
    def line_of(p):  # one line per method, or per ``line`` (a rule's settings drawn as one curve)
        return p.get("line") or p["method"]

    methods = list(dict.fromkeys(line_of(p) for p in points))
    fig = _figure(8.4, 5.0)
    ax = fig.add_subplot()
    if not points:
        _no_data(ax)
        return _save(fig, path)
    markers = "osD^v<>ph*"
    key = "tokens" if tokens else "decodes"
    for i, name in enumerate(methods):
        own = []  # points with the same compute and value (greedy at every k) drawn once, labelled with every k
        for p in sorted((p for p in points if line_of(p) == name), key=lambda p: (p[key], p["k"] or 0)):
            if own and math.isclose(own[-1][key], p[key]) and math.isclose(own[-1]["mean"], p["mean"]):
                own[-1] = {**own[-1], "ks": own[-1]["ks"] + [p["k"]]}
            else:
                own.append({**p, "ks": [p["k"]]})
        x = np.array([p[key] for p in own], dtype=float) * 2 ** (0.03 * (i - (len(methods) - 1) / 2))
        mean = np.array([p["mean"] for p in own]) * 100
        low = np.array([p["mean"] if p.get("low") is None else p["low"] for p in own]) * 100
        high = np.array([p["mean"] if p.get("high") is None else p["high"] for p in own]) * 100
        ax.errorbar(x, mean, yerr=[np.clip(mean - low, 0, None), np.clip(high - mean, 0, None)], label=name,
                    color=method_color(i), marker=markers[i % 10], capsize=3, linewidth=1.6, markersize=6,
                    linestyle="--" if name in static else "-")
        for xi, yi, p in zip(x, mean, own):
            ks = [k for k in p["ks"] if k is not None]
            if ks:
                ax.annotate(point_label + ",".join(map(str, ks)), (xi, yi), textcoords="offset points",
                            xytext=(4, -11), fontsize=7.5, color=method_color(i))
    ax.set_xscale("log", base=2)
    if not tokens:  # decodes: ticks at the powers of two the points span, written as numbers
        top = max(p[key] for p in points)
        ticks = [2.0**e for e in range(0, max(1, math.ceil(math.log2(max(top, 1.0)))) + 1)]
        ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
        ax.minorticks_off()
    ax.set_ylim(max(ax.get_ylim()[0], -2), min(ax.get_ylim()[1], 102))
    ax.set_xlabel("generated tokens per problem" if tokens else "decodes per problem (generated sequences)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(title=f"bars: {confidence:.0%} CI" + (", dashed: static" if static else ""), loc="upper left",
              bbox_to_anchor=(1.01, 1.0), frameon=False)
    return _save(fig, path)


def plot_answer_vs_compute(points: Sequence[Mapping], path, confidence: float = 0.95,
                           static: Sequence[str] = ()) -> Path:
    """The figure a report leads with: the accuracy of the one answer each method returns (no
    verifier) against its mean decodes per problem, a curve per method through its B (a point for
    a method with one setting); ``points`` as :func:`plot_pass_vs_compute`'s, ``k`` being B."""
    return plot_pass_vs_compute(points, path, title="Answer accuracy per compute", confidence=confidence,
                                static=static, ylabel="answer accuracy (%)", point_label="B=")


# ---- training curves --------------------------------------------------------------------------------


def _moving_average(x: np.ndarray, window: int) -> np.ndarray:
    if window <= 1 or len(x) < window:
        return x
    kernel = np.ones(window) / window
    padded = np.concatenate([np.full(window - 1, x[0]), x])
    return np.convolve(padded, kernel, mode="valid")


@_styled
def plot_training(records: Sequence[Mapping], action_names: Sequence[str], path, title: str = "Training") -> Path:
    """Stacked action probabilities over training steps (left axis) with validation reward and
    smoothed training reward (right axis), as the paper's action-distribution figures. When the log
    splits the probabilities by prompt type (``action_probs_cot`` / ``action_probs_nocot``), three
    panels show CoT, non-CoT and all prompts."""
    rows = [r for r in records if isinstance(r.get("action_probs"), (list, tuple)) and r.get("step") is not None]
    variants = [("action_probs", "")]
    if any(isinstance(r.get("action_probs_cot"), list) for r in rows):
        variants = [
            ("action_probs_cot", "CoT prompts"),
            ("action_probs_nocot", "non-CoT prompts"),
            ("action_probs", "all prompts"),
        ]
    fig = _figure(8.5 if len(variants) == 1 else 16, 4.8)
    axes = fig.subplots(1, len(variants), squeeze=False)[0]
    k = max((len(r["action_probs"]) for r in rows), default=0)
    names = list(action_names)[:k] + [f"action {i}" for i in range(len(action_names), k)]
    handles = []
    for ax, (key, label) in zip(axes, variants):
        sub = [r for r in rows if isinstance(r.get(key), (list, tuple))]
        if not sub:
            _no_data(ax, "no action probabilities in this log")
            continue
        _stack_probs(ax, sub, key, names)
        ax2 = ax.twinx()
        ax2.grid(False)
        handles = _reward_lines(ax2, rows)
        ax2.set_ylabel("reward")
        if label:
            ax.set_title(label)
    h1, l1 = axes[-1].get_legend_handles_labels()
    if h1:
        axes[-1].legend(
            h1[::-1] + [h for h, _ in handles],
            l1[::-1] + [lab for _, lab in handles],
            loc="upper left",
            bbox_to_anchor=(1.12, 1.0),
            frameon=False,
            title="actions / reward",
        )
    fig.suptitle(title, fontsize=13, fontweight="bold")
    return _save(fig, path)


def _stack_probs(ax, rows, key: str, names: Sequence[str]) -> None:
    steps = np.array([float(r["step"]) for r in rows])
    k = len(names)
    probs = np.array([list(r[key])[:k] + [0.0] * (k - len(r[key])) for r in rows], dtype=float)
    ax.stackplot(steps, probs.T, labels=names, colors=[action_color(i) for i in range(k)], alpha=0.8, linewidth=0)
    ax.set_ylim(0, 1)
    ax.set_xlim(steps.min(), steps.max() if steps.max() > steps.min() else steps.min() + 1)
    ax.set_xlabel("training step")
    ax.set_ylabel("action probability (mean over batch)")


def _reward_lines(ax, rows) -> list[tuple]:
    handles = []
    rewards = np.array([_num(r.get("reward")) for r in rows])
    steps = np.array([float(r["step"]) for r in rows])
    ok = np.isfinite(rewards)
    if ok.any():
        smooth = _moving_average(rewards[ok], max(1, int(ok.sum()) // 20))
        (h,) = ax.plot(steps[ok], smooth, color="#333333", linestyle=":", linewidth=1.5)
        handles.append((h, "train reward (smoothed)"))
    val = [(float(r["step"]), _num(r.get("val_reward"))) for r in rows if "val_reward" in r]
    val = [(s, v) for s, v in val if math.isfinite(v)]
    if val:
        (h,) = ax.plot(*zip(*val), color="black", marker="o", linewidth=2.2, markersize=5)
        handles.append((h, "validation reward"))
    values = [v for _, v in val] + list(rewards[ok])
    if values:
        lo, hi = min(values), max(values)
        pad = max(0.05, 0.1 * (hi - lo))
        ax.set_ylim(max(0.0, lo - pad) if lo >= 0 else lo - pad, hi + pad)
    return handles


def _num(x) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan


# ---- entropy modulation -----------------------------------------------------------------------------


def _tokens_by_action(trajectories: Sequence[Mapping]) -> tuple[np.ndarray, np.ndarray]:
    ent = [e for t in trajectories for e in t.get("entropy", [])]
    act = [a for t in trajectories for a in t.get("actions", [])]
    n = min(len(ent), len(act))
    return np.asarray(ent[:n], dtype=float), np.asarray(act[:n], dtype=int)


@_styled
def plot_entropy_modulation(
    static_trajectories: Sequence[Mapping],
    adapter_trajectories: Sequence[Mapping],
    action_names: Sequence[str],
    path,
    static_label: str = "static",
    adapter_label: str = "token adapter",
    static_action_names: Sequence[str] | None = None,
) -> Path:
    """Three panels: (a) base-distribution entropy of generated tokens, static vs adapter; (b) that
    entropy split by the action taken (adapter, and static too when it shares the action set);
    (c) which action the adapter takes in each entropy quintile."""
    s_ent, s_act = _tokens_by_action(static_trajectories)
    a_ent, a_act = _tokens_by_action(adapter_trajectories)
    fig = _figure(15, 4.6)
    axes = fig.subplots(1, 3, width_ratios=[1, 1.3, 1])
    _entropy_histograms(axes[0], s_ent, a_ent, static_label, adapter_label)
    same_set = static_action_names is not None and list(static_action_names) == list(action_names)
    _entropy_by_action(
        axes[1], action_names, a_ent, a_act, adapter_label, s_ent, s_act if same_set else None, static_label
    )
    _action_share_by_entropy(axes[2], action_names, a_ent, a_act, adapter_label)
    fig.suptitle(f"Entropy modulation: {adapter_label} vs {static_label}", fontsize=14, fontweight="bold")
    return _save(fig, path)


def _entropy_histograms(ax, s_ent, a_ent, static_label, adapter_label) -> None:
    if not len(s_ent) and not len(a_ent):
        return _no_data(ax, "no tokens")
    top = max(float(np.max(s_ent)) if len(s_ent) else 0.0, float(np.max(a_ent)) if len(a_ent) else 0.0, 1e-3)
    bins = np.linspace(0, top, 31)
    for values, label, color in ((s_ent, static_label, "#555555"), (a_ent, adapter_label, "#d62728")):
        if len(values):
            ax.hist(
                values,
                bins=bins,
                density=True,
                histtype="step",
                linewidth=2,
                color=color,
                label=f"{label} (n={len(values)}, mean {values.mean():.2f})",
            )
    ax.set_xlabel("entropy of the LM's next-token distribution (nats)")
    ax.set_ylabel("density")
    ax.set_title("(a) token entropy")
    ax.legend(frameon=False, loc="upper left", bbox_to_anchor=(0.0, -0.16))


def _entropy_by_action(ax, names, a_ent, a_act, adapter_label, s_ent, s_act, static_label) -> None:
    from matplotlib.patches import Patch

    if not len(a_ent):
        return _no_data(ax, "no adapter tokens")
    paired = s_act is not None and len(s_ent) > 0
    width = 0.38 if paired else 0.6
    for i in range(len(names)):
        groups = [(a_ent[a_act == i], i + (width / 2 if paired else 0), action_color(i), 0.8)]
        if paired:
            groups.append((s_ent[s_act == i], i - width / 2, "#aaaaaa", 0.6))
        for values, pos, color, alpha in groups:
            _box(ax, values, pos, width * 0.9, color, alpha)
    reference = not paired and len(s_ent) > 0
    if reference:
        _box(ax, s_ent, -1, 0.6, "#aaaaaa", 0.6)
    share = [float((a_act == i).mean()) for i in range(len(names))]
    ticks = ([-1] if reference else []) + list(range(len(names)))
    labels = ([f"{static_label}\n(all tokens)"] if reference else []) + [
        f"{_short(n)}\n{p:.0%} of tokens" for n, p in zip(names, share)
    ]
    ax.set_xticks(ticks, labels, fontsize=9)
    ax.set_xlim(min(ticks) - 0.6, len(names) - 0.4)
    ax.set_ylabel("token entropy (nats)")
    ax.set_xlabel(f"action taken (share of {adapter_label}'s tokens)")
    ax.set_title("(b) entropy by action taken")
    handles = [
        Patch(facecolor=action_color(0), alpha=0.8, label=f"{adapter_label} (colour = action)"),
        Patch(facecolor="#aaaaaa", alpha=0.6, label=static_label),
    ]
    ax.legend(handles=handles, frameon=False, loc="upper left", bbox_to_anchor=(0.0, -0.22), ncols=2)


def _box(ax, values, pos, width, color, alpha) -> None:
    if len(values):
        bp = ax.boxplot(
            values, positions=[pos], widths=width, patch_artist=True, showfliers=False, medianprops={"color": "black"}
        )
        bp["boxes"][0].set(facecolor=color, alpha=alpha)


def _action_share_by_entropy(ax, names, a_ent, a_act, adapter_label) -> None:
    if len(a_ent) < 2:
        return _no_data(ax, "too few adapter tokens")
    edges = np.unique(np.quantile(a_ent, np.linspace(0, 1, 6)))
    if len(edges) < 2:
        edges = np.array([a_ent.min(), a_ent.min() + 1e-6])
    bin_of = np.clip(np.searchsorted(edges, a_ent, side="right") - 1, 0, len(edges) - 2)
    nb = len(edges) - 1
    shares = np.zeros((len(names), nb))
    for b in range(nb):
        sel = a_act[bin_of == b]
        if len(sel):
            shares[:, b] = np.bincount(sel, minlength=len(names))[: len(names)] / len(sel)
    x = np.arange(nb)
    bottom = np.zeros(nb)
    for i, name in enumerate(names):
        ax.bar(x, shares[i], bottom=bottom, color=action_color(i), label=_short(name), width=0.8)
        bottom += shares[i]
    ax.set_xticks(x, [f"{edges[b]:.2f}–{edges[b + 1]:.2f}" for b in range(nb)], rotation=25)
    ax.set_xlabel("entropy bin (quantiles of adapter tokens, nats)")
    ax.set_ylabel("share of tokens")
    ax.set_ylim(0, 1)
    ax.set_title(f"(c) {adapter_label}: action by entropy")
    ax.legend(frameon=False, fontsize=8.5, loc="upper left", bbox_to_anchor=(1.0, 1.0))


def _short(name: str, width: int = 18) -> str:
    return name if len(name) <= width else name.replace(",", ",\n", 1)


# ---- generation lengths -----------------------------------------------------------------------------


@_styled
def plot_lengths(
    groups: Sequence[tuple[str, Mapping[str, Sequence[int]]]], path, title: str = "Generation length distributions"
) -> Path:
    """One panel per group (e.g. sequence level, token level), overlaying each method's histogram of
    generation lengths (tokens), with dashed lines at the means."""
    groups = [(t, {k: v for k, v in g.items() if len(v)}) for t, g in groups]
    groups = [(t, g) for t, g in groups if g] or [("", {})]
    fig = _figure(6.5 * len(groups), 4.4)
    axes = np.atleast_1d(fig.subplots(1, len(groups), squeeze=False)[0])
    for ax, (panel, data) in zip(axes, groups):
        if not data:
            _no_data(ax)
            continue
        top = max(max(v) for v in data.values())
        bins = np.linspace(0, top + 1, min(40, top + 2))
        for i, (name, values) in enumerate(data.items()):
            values = np.asarray(values, dtype=float)
            color = method_color(i)
            ax.hist(
                values,
                bins=bins,
                density=True,
                histtype="step",
                linewidth=2,
                color=color,
                label=f"{name} (mean {values.mean():.1f}, n={len(values)})",
            )
            ax.axvline(values.mean(), color=color, linestyle="--", linewidth=1.2)
        ax.set_xlabel("generated tokens")
        ax.set_ylabel("density")
        ax.set_title(panel)
        ax.legend(frameon=False)
    fig.suptitle(title, fontsize=14, fontweight="bold")
    return _save(fig, path)


# ---- sequence-adapter choices -----------------------------------------------------------------------


@_styled
def plot_sequence_choices(
    choices: Mapping[str, Mapping],
    action_names: Mapping[str, Sequence[str]],
    path,
    title: str = "Actions chosen by the sequence-level adapters",
) -> Path:
    """For each sequence adapter, the share of problems given each action at each budget k."""
    names = list(choices)
    fig = _figure(max(5.0, 4.6 * len(names)) + 1.5, 4.2)
    axes = np.atleast_1d(fig.subplots(1, max(len(names), 1), squeeze=False)[0])
    for ax, name in zip(axes, names):
        ks, rows = choices[name]["k_values"], choices[name]["actions"]
        acts = action_names.get(name, [])
        k_actions = max(len(acts), 1 + max((a for r in rows for a in r), default=0))
        counts = np.zeros((k_actions, len(ks)))
        for r in rows:
            for ki, a in enumerate(r):
                counts[a, ki] += 1
        shares = counts / max(len(rows), 1)
        bottom = np.zeros(len(ks))
        x = np.arange(len(ks))
        for a in range(k_actions):
            label = acts[a] if a < len(acts) else f"action {a}"
            ax.bar(x, shares[a], bottom=bottom, color=action_color(a), label=label, width=0.7)
            bottom += shares[a]
        ax.set_xticks(x, [f"B={k}" for k in ks])
        ax.set_ylim(0, 1)
        ax.set_xlabel("parallel budget given to the policy")
        ax.set_ylabel("share of problems")
        ax.set_title(name)
    if names:
        axes[-1].legend(frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0), title="action")
    else:
        _no_data(axes[0])
    fig.suptitle(title, fontsize=14, fontweight="bold")
    return _save(fig, path)


# ---- word clouds ------------------------------------------------------------------------------------


def _token_frequencies(trajectories: Sequence[Mapping], k: int) -> list[Counter]:
    freqs = [Counter() for _ in range(k)]
    for t in trajectories:
        for tok, a in zip(t.get("tokens", []), t.get("actions", [])):
            word = str(tok).strip()
            if word and 0 <= a < k and not (word.startswith("<") and word.endswith(">") and len(word) > 2):
                freqs[a][word] += 1
    return freqs


@_styled
def plot_wordclouds(
    trajectories: Sequence[Mapping],
    action_names: Sequence[str],
    path,
    title: str = "Tokens by action",
    max_words: int = 50,
) -> Path:
    """One word cloud per action of the tokens generated under it (whitespace-only and special
    tokens dropped; size = frequency). Actions with no tokens get an empty panel that says so."""
    from wordcloud import WordCloud

    k = len(action_names)
    freqs = _token_frequencies(trajectories, k)
    cols = min(k, 3) or 1
    rows = max(1, math.ceil(k / cols))
    fig = _figure(4.6 * cols, 3.3 * rows)
    axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False).ravel())
    for i, ax in enumerate(axes):
        if i >= k:
            ax.set_axis_off()
            continue
        total = sum(freqs[i].values())
        ax.set_title(f"{action_names[i]}  ({total} tokens)", color=action_color(i), fontsize=11)
        if not freqs[i]:
            _no_data(ax, "no tokens under this action")
            continue
        color = action_color(i)
        cloud = WordCloud(
            width=400,
            height=250,
            background_color="white",
            max_words=max_words,
            prefer_horizontal=0.95,
            color_func=lambda *a, c=color, **kw: c,
            random_state=0,
            min_font_size=8,
        )
        ax.imshow(cloud.generate_from_frequencies(dict(freqs[i])).to_array(), interpolation="bilinear")
        ax.set_axis_off()
    fig.suptitle(title, fontsize=14, fontweight="bold")
    return _save(fig, path)


# ---- validation curves of several runs ------------------------------------------------------------


@_styled
def plot_validation_curves(curves: Mapping[str, Sequence[tuple[float, float]]], path) -> Path:
    """Validation reward against training step, one line per run (``{run: [(step, reward)]}``)."""
    fig = _figure(7.5, 4.2)
    ax = fig.add_subplot()
    if not any(curves.values()):
        _no_data(ax)
    for i, (name, points) in enumerate(curves.items()):
        if points:
            steps, values = zip(*points)
            ax.plot(steps, values, "o-", color=method_color(i), label=name, markersize=3)
    ax.set_xlabel("training step")
    ax.set_ylabel("validation reward")
    ax.set_title("Validation reward during training")
    if any(curves.values()):
        ax.legend(loc="best", fontsize=8, ncol=2)
    return _save(fig, path)
