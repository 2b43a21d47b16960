"""Write a report directory from an evaluation: ``report.md``, ``results.json`` and figures.

Inputs are the files ``evaluate`` writes (``results.json``, ``eval_details.json``; see
``decoding_adapters.evaluation``) and, optionally, training logs (JSONL, one record per step:
``{"step", "reward", "entropy", "action_probs": [K floats], "val_reward"?}``; other lines are
ignored). The report holds:

- tables shaped like the paper's: static sampling (Best, Mixed) vs the sequence-level adapters
  (w/o budget, w/ budget) with Δ vs Best in points; static (Greedy, Mixed) vs the
  token-level adapters (w/o budget, w/ budget, entropy-only) with Δ vs Greedy; values are mean ±
  CI half-width, pass@k in percent;
- a plain verdict per adapter, from paired per-problem differences: whether it beats the baseline,
  by how much, and whether the interval of the difference excludes zero;
- figures: pass@k curves, action probabilities and validation reward over training, entropy
  modulation, generation lengths, sequence-adapter choices, word clouds by action, and an HTML
  action trace of token-adapter generations.

Nothing in the text is fixed in advance: every claim is computed from the numbers.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from ..core.files import write_json, write_text
from ..core.stats import INTERVAL_NOTE, format_interval, paired_ci
from ..decoding.actions import DecodingAction
from ..evaluation.headroom import oracle_table
from ..selection.coverage import OutcomeTable
from . import plots

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
    "compute_table",
    "compute_verdicts",
    "compute_section",
]


ROLE_ORDER = {"w/o budget": 0, "w/ budget": 1, "entropy-only": 2}


# ---- inputs ---------------------------------------------------------------------------------------


def load_evaluation(eval_dir: str | Path) -> tuple[dict, dict | None]:
    """``(results, details)`` from an ``evaluate`` output directory (details None if absent)."""
    eval_dir = Path(eval_dir)
    path = eval_dir / "results.json"
    if not path.is_file():
        raise FileNotFoundError(f"{eval_dir} holds no results.json: point --eval at a directory written by `evaluate`")
    details_path = eval_dir / "eval_details.json"
    details = json.loads(details_path.read_text()) if details_path.is_file() else None
    return json.loads(path.read_text()), details


def load_training_log(path: str | Path) -> list[dict]:
    """Records of a training log that carry ``action_probs``, in file order (torn lines skipped)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"training log not found: {path}")
    return [rec for rec in _log_records(path) if isinstance(rec.get("action_probs"), list) and "step" in rec]


def _log_records(path: Path) -> list[dict]:
    """The JSON objects of a JSONL log, in file order (torn or non-object lines skipped)."""
    out = []
    for line in path.read_text().splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


def _log_action_names(path: Path, records: list[dict], given) -> list[str]:
    """Action names for a log: given explicitly, else from adapter.json next to the log."""
    if given:
        return list(given)
    adapter = path.parent / "adapter.json"
    if adapter.is_file():
        try:
            return [DecodingAction.from_dict(a).name for a in json.loads(adapter.read_text())["actions"]]
        except (KeyError, ValueError, TypeError):
            pass
    k = max((len(r["action_probs"]) for r in records), default=0)
    return [f"action {i}" for i in range(k)]


# ---- which method is which ------------------------------------------------------------------------


def _infer(name: str) -> dict:
    low = name.lower()
    if low.startswith("stop at first"):
        return {"kind": "greedy", "role": "stop at first answer", "level": "static"}
    if low.startswith("greedy"):
        return {"kind": "greedy", "role": "greedy", "level": "static"}
    if low.startswith("best token action"):
        return {"kind": "static", "role": "best token action", "level": "token"}
    if low.startswith("best"):
        return {"kind": "static", "role": "best", "level": "static"}
    if low.startswith("mixed per sequence"):
        return {"kind": "mixed", "role": "mixed per sequence", "level": "token"}
    if low.startswith("mixed"):
        return {"kind": "mixed", "role": "mixed", "level": "token" if "token" in low else "static"}
    level = "token" if "token" in low or "tok" in low else "sequence"
    role = "entropy-only" if "entropy" in low else "w/o budget" if "w/o" in low or "without" in low else "w/ budget"
    return {"kind": level, "role": role, "level": level}


def method_info(results: Mapping, details: Mapping | None) -> dict[str, dict]:
    """``{method: {kind, role, level, actions}}`` from details, or guessed from the names."""
    known = (details or {}).get("methods", {})
    return {name: {**_infer(name), "actions": [], **known.get(name, {})} for name in results}


def _first(info, **match) -> str | None:
    for name, i in info.items():
        if all(i.get(k) == v for k, v in match.items()):
            return name
    return None


def _adapters(info, level: str) -> list[str]:
    names = [n for n, i in info.items() if i["kind"] == level]
    return sorted(names, key=lambda n: (ROLE_ORDER.get(info[n]["role"], 9), list(info).index(n)))


def _column_labels(names: Sequence[str], info) -> list[str]:
    roles = [info[n]["role"] for n in names]
    return [roles[i] if roles.count(roles[i]) == 1 and roles[i] else n for i, n in enumerate(names)]


# ---- formatting -----------------------------------------------------------------------------------


def _scale(metric: str) -> float:
    return 100.0 if metric.startswith("pass@") else 1.0


def _fmt_entry(entry: Mapping | None, metric: str, bold: bool = False) -> str:
    if not entry:
        return "–"
    sc = _scale(metric)
    low, high = entry.get("ci_low"), entry.get("ci_high")
    text = format_interval(entry["mean"] * sc, None if low is None else low * sc, None if high is None else high * sc)
    return f"**{text}**" if bold else text


def _fmt_delta(value: float, base: float, metric: str) -> str:
    """The absolute difference (points for pass@k). No relative gain: on a small base it reads as a
    large effect (+100% for 12.5 -> 25.0) whether or not the verdict finds the difference significant."""
    diff = (value - base) * _scale(metric)
    if not metric.startswith("pass@"):
        return _signed(diff, 1)
    arrow = "▲" if round(diff, 2) > 0 else "▼" if round(diff, 2) < 0 else "="
    return f"{arrow} {_signed(diff)}"


def _metric_label(metric: str) -> str:
    return metric.replace("pass@", "Pass@") if metric.startswith("pass@") else "Mean length (tokens)"


def _metrics(results: Mapping) -> list[str]:
    first = next(iter(results.values()), {})
    return [f"pass@{k}" for k in _pass_ks(first)] + [m for m in first if not m.startswith("pass@")]


def _pass_ks(metrics) -> list[int]:
    """The k of every ``pass@k`` among ``metrics``, ascending."""
    return sorted(int(m.split("@")[1]) for m in metrics if m.startswith("pass@"))


def _best_of(results, names, metric) -> set[str]:
    """The columns with the highest mean (pass@k only: a longer generation is not better)."""
    cands = [n for n in names if results.get(n, {}).get(metric)]
    if not metric.startswith("pass@") or not cands:
        return set()
    top = max(results[n][metric]["mean"] for n in cands)
    return {n for n in cands if results[n][metric]["mean"] >= top - 1e-12}


def _setting(details: Mapping | None) -> str:
    ratio = (details or {}).get("config", {}).get("cot_ratio")
    if ratio is None:
        return ""
    return "w/o CoT" if ratio == 0 else "CoT" if ratio == 1 else f"mix CoT ({ratio:g})"


# ---- tables ---------------------------------------------------------------------------------------


def sequence_table(results: Mapping, details: Mapping | None = None) -> str:
    """Paper-style markdown table: Best / Mixed vs sequence-level adapters, Δ vs Best. '' if no adapter."""
    info = method_info(results, details)
    adapters = _adapters(info, "sequence")
    if not adapters:
        return ""
    best = _first(info, role="best") or _first(info, role="greedy")
    mixed = _first(info, role="mixed", level="static") or _first(info, role="mixed")
    static = [n for n in (best, mixed) if n]
    cols = static + adapters
    labels = [f"{'Best' if n == best and info[n]['role'] == 'best' else _column_labels([n], info)[0].capitalize()}"
              for n in static] + _column_labels(adapters, info)
    head = ["Metric", "Setting"] + [_header(lab, n) for lab, n in zip(labels, cols)]
    lines = [_row(head), _row(["---", "---"] + ["---:"] * len(cols))]
    for metric in _metrics(results):
        top = _best_of(results, cols, metric)
        lines.append(_row([_metric_label(metric), _setting(details)] +
                          [_fmt_entry(results[n].get(metric), metric, n in top) for n in cols]))
        if best and results[best].get(metric):
            base = results[best][metric]["mean"]
            lines.append(_row(["", f"Δ vs {best}"] + [""] * len(static) +
                              [_fmt_delta(results[n][metric]["mean"], base, metric) if results[n].get(metric) else ""
                               for n in adapters]))
    return "\n".join(lines)


def _token_mixed(info) -> str | None:
    """The token table's Mixed: the per-token mixture (``per_token`` in eval_details), else a mixture
    of the token level, else any Mixed (for results that carry no ``per_token``)."""
    return (
        _first(info, role="mixed", level="token", per_token=True)
        or _first(info, role="mixed", level="token")
        or _first(info, role="mixed")
    )


def _token_statics(info) -> list[str]:
    """The token table's static columns: Greedy, per-token Mixed, best token action, the per-sequence
    mixture of the token actions, then any single token-action rows."""
    named = [
        _first(info, role="greedy"),
        _token_mixed(info),
        _first(info, role="best token action"),
        _first(info, role="mixed per sequence"),
    ]
    rows = [n for n, i in info.items() if i.get("role") == "token action"]
    return list(dict.fromkeys(n for n in named + rows if n))


_TOKEN_LABELS = {
    "greedy": "Greedy",
    "mixed": "Mixed (per token)",
    "best token action": "Best token action",
    "mixed per sequence": "Mixed (per sequence)",
}


def token_table(results: Mapping, details: Mapping | None = None) -> str:
    """Paper-style markdown table: Greedy / per-token Mixed / best token action vs token-level adapters,
    each adapter with a Δ vs Greedy column."""
    info = method_info(results, details)
    adapters = _adapters(info, "token")
    if not adapters:
        return ""
    greedy = _first(info, role="greedy")
    base = greedy or _first(info, role="best")
    static = _token_statics(info)
    head = ["Metric", "Setting"]
    for n in static:
        label = _TOKEN_LABELS.get(info[n]["role"], n)
        if info[n]["role"] == "mixed" and (info[n].get("level") != "token" or info[n].get("per_token") is False):
            label = "Mixed (per sequence)" if info[n].get("per_token") is False else "Mixed"
        head.append(_header(label, n))
    for lab, n in zip(_column_labels(adapters, info), adapters):
        head += [_header(lab, n), "Δ" if base else ""]
    lines = [_row(head), _row(["---", "---"] + ["---:"] * (len(head) - 2))]
    for metric in _metrics(results):
        top = _best_of(results, static + adapters, metric)
        cells = [_metric_label(metric), _setting(details)] + [_fmt_entry(results[n].get(metric), metric, n in top)
                                                               for n in static]
        for n in adapters:
            cells.append(_fmt_entry(results[n].get(metric), metric, n in top))
            ok = base and results[n].get(metric) and results[base].get(metric)
            cells.append(_fmt_delta(results[n][metric]["mean"], results[base][metric]["mean"], metric) if ok else "")
        lines.append(_row(cells))
    return "\n".join(lines)


def all_methods_table(results: Mapping, details: Mapping | None = None) -> str:
    """Every method (rows) by every metric (columns)."""
    metrics = _metrics(results)
    info = method_info(results, details)
    lines = [
        _row(["Method", "Kind"] + [_metric_label(m) for m in metrics]),
        _row(["---", "---"] + ["---:"] * len(metrics)),
    ]
    tops = {m: _best_of(results, list(results), m) for m in metrics}
    for name, res in results.items():
        kind = info[name]["kind"] + (f" ({info[name]['role']})" if info[name]["kind"] in ("sequence", "token") else "")
        lines.append(_row([name, kind] + [_fmt_entry(res.get(m), m, name in tops[m]) for m in metrics]))
    return "\n".join(lines)


def paper_interval_table(results: Mapping) -> str:
    """Every method by pass@k as ``mean ± h`` with h the paper-style half-width (normal-approximation
    binomial over all (problem, run) outcomes, ``binomial_halfwidth`` in results.json); '' when the
    results carry none."""
    metrics = [m for m in _metrics(results) if m.startswith("pass@")]
    if not any("binomial_halfwidth" in (res.get(m) or {}) for res in results.values() for m in metrics):
        return ""
    lines = [_row(["Method"] + [_metric_label(m) for m in metrics] + ["Outcomes"]),
             _row(["---"] + ["---:"] * (len(metrics) + 1))]
    for name, res in results.items():
        cells = [name]
        for m in metrics:
            e = res.get(m) or {}
            h = e.get("binomial_halfwidth")
            cells.append("–" if h is None else f"{e['mean'] * 100:.2f} ± {h * 100:.2f}")
        outcomes = next((res[m].get("outcomes") for m in metrics if res.get(m)), None)
        lines.append(_row(cells + ["–" if outcomes is None else str(outcomes)]))
    return "\n".join(lines)


def _header(label: str, name: str) -> str:
    """A column header: the short label, and the method's own name where it says more (plain Markdown)."""
    return name if name.startswith(label) else f"{label} ({name})"


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"


def seed_table(results: Mapping, details: Mapping | None) -> str:
    """Across-seed spread: the mean over problems computed separately for each seed."""
    summary = (details or {}).get("summary", {})
    metrics = [m for m in _metrics(results) if m.startswith("pass@")]
    metrics = metrics[:1] + metrics[-1:] if len(metrics) > 1 else metrics
    seeds = max((len(s.get("seed_means", ())) for per in summary.values() for s in per.values()
                 if isinstance(s, Mapping)), default=0)
    if not metrics or seeds < 2:  # one seed has no spread to show
        return ""
    lines = [
        _row(["Method"] + [f"{_metric_label(m)}: per seed (sd)" for m in metrics]),
        _row(["---"] + ["---"] * len(metrics)),
    ]
    for name in results:
        cells = [name]
        for m in metrics:
            s = summary.get(name, {}).get(m)
            cells.append(
                "–"
                if not s
                else " / ".join(f"{v * 100:.1f}" for v in s["seed_means"]) + f" (sd {s['seed_std'] * 100:.2f})"
            )
        lines.append(_row(cells))
    return "\n".join(lines)


# ---- verdicts -------------------------------------------------------------------------------------


def _per_problem_means(details, name, metric) -> list[float] | None:
    rows = (details or {}).get("per_problem", {}).get(name, {}).get(metric)
    return [statistics.fmean(r) for r in rows] if rows else None


def compare(results, details, adapter: str, baseline: str, metric: str, confidence: float) -> dict:
    """Adapter minus baseline on ``metric``: a paired interval over problems when per-problem values
    exist; otherwise only the difference of means, judged by whether the two methods' intervals overlap."""
    a, b = _per_problem_means(details, adapter, metric), _per_problem_means(details, baseline, metric)
    if a and b and len(a) == len(b):
        diff, low, high = paired_ci(a, b, confidence)
        if metric.startswith("pass@"):  # a difference of probabilities lies in [-1, 1]
            low, high = max(low, -1.0), min(high, 1.0)
        return {"diff": diff, "low": low, "high": high, "paired": True, "separated": 0}
    ra, rb = results[adapter][metric], results[baseline][metric]
    separated = 0
    if None not in (ra.get("ci_low"), ra.get("ci_high"), rb.get("ci_low"), rb.get("ci_high")):
        separated = 1 if ra["ci_low"] > rb["ci_high"] else -1 if ra["ci_high"] < rb["ci_low"] else 0
    return {"diff": ra["mean"] - rb["mean"], "low": math.nan, "high": math.nan, "paired": False, "separated": separated}


def per_seed_differences(details: Mapping | None, a: str, b: str, metric: str) -> list[float] | None:
    """``a`` minus ``b`` on ``metric`` for each evaluation seed: the mean over problems of one seed's
    scores (``per_problem`` rows are ``[problem][seed]``; a method scored once, like Greedy, has the
    same score for every seed). None without per-problem values, or with fewer than two seeds."""
    per_problem = (details or {}).get("per_problem", {})
    rows_a, rows_b = per_problem.get(a, {}).get(metric), per_problem.get(b, {}).get(metric)
    if not rows_a or not rows_b or len(rows_a) != len(rows_b):
        return None
    seeds = max(len(r) for r in rows_a + rows_b)
    if seeds < 2:
        return None

    def at(row, s):  # a row shorter than the seed count is one score for every seed
        return row[s] if s < len(row) else row[-1]

    return [statistics.fmean(at(ra, s) - at(rb, s) for ra, rb in zip(rows_a, rows_b)) for s in range(seeds)]


def seed_clause(diffs: Sequence[float] | None, holds) -> str:
    """'per seed +1.0 / -0.5 / +2.0: holds on 2 of 3 seeds' (points), where ``holds(d)`` says whether
    one seed's difference meets the claim; '' without per-seed values."""
    if not diffs:
        return ""
    count = sum(1 for d in diffs if holds(d))
    where = f"on every seed ({count} of {len(diffs)})" if count == len(diffs) else f"on {count} of {len(diffs)} seeds"
    return "per seed " + " / ".join(_signed(d * 100, 1) for d in diffs) + f": holds {where}"


def _same_direction(overall: float):
    """A seed holds a verdict when its difference has the overall difference's sign (0 for a tie)."""
    return lambda d: (d > 0) if overall > 0 else (d < 0) if overall < 0 else abs(d) < 1e-12


def _outcome(c: Mapping) -> str:
    """'better' / 'worse' when the interval of the difference excludes 0 (unpaired: when the two
    intervals do not overlap), else 'ahead' / 'behind' / 'tie'."""
    if (not math.isnan(c["low"]) and c["low"] > 0) or c.get("separated") == 1:
        return "better"
    if (not math.isnan(c["high"]) and c["high"] < 0) or c.get("separated") == -1:
        return "worse"
    return "ahead" if c["diff"] > 0 else "behind" if c["diff"] < 0 else "tie"


def _signed(x: float, digits: int = 2) -> str:
    """``+1.23`` / ``-1.23``, and ``+0.00`` rather than ``-0.00``."""
    return f"{round(x, digits) + 0.0:+.{digits}f}"


def _diff_text(metric: str, c: Mapping) -> str:
    text = f"{metric.replace('pass@', 'Pass@')} {_signed(c['diff'] * 100)}"
    if not math.isnan(c["low"]):
        text += f" [{_signed(c['low'] * 100)}, {_signed(c['high'] * 100)}]"
    return text + {"better": " ✔", "worse": " ✘"}.get(_outcome(c), "")


def verdicts(results: Mapping, details: Mapping | None = None, confidence: float | None = None) -> list[str]:
    """One markdown paragraph per adapter and baseline: how it compares on every pass@k, with the
    difference on each seed. Sequence adapters: vs Best. Token adapters: vs Greedy and vs the
    per-token Mixed (the paper's token table), and vs the best single token action (chosen on
    validation) where it was evaluated. Draft-gated adapters: vs the strongest static method at the
    first pass@k, Stop at first answer, and their controls (random gate, confidence threshold)."""
    info = method_info(results, details)
    confidence = confidence or (details or {}).get("config", {}).get("confidence", 0.95)
    metrics = [m for m in _metrics(results) if m.startswith("pass@")]
    out = []
    for level in ("sequence", "token", "draft"):
        baselines = _baselines_for(info, level, results)
        for name in _adapters(info, level):
            if level == "draft" and info[name]["role"] in DRAFT_CONTROLS:
                continue
            if not baselines:
                out.append(f"- **{name}**: no static baseline was evaluated, so no comparison is made.")
                continue
            out += [_adapter_verdict(results, details, name, b, metrics, confidence) for b in baselines]
    return out


NOTHING_SOLVED = ("**Nothing was solved**: every method scores 0 at every k, so the tables cannot rank the "
                  "methods and no verdict or target below is evidence. Check the verifier (for free-text answers "
                  "`--verifier math` or `numeric`) and the token budget (`--token-budget`).")


def nothing_solved(results: Mapping) -> bool:
    """True when every method's every pass@k is 0."""
    means = [entry["mean"] for metrics in results.values() for m, entry in metrics.items()
             if m.startswith("pass@") and entry]
    return bool(means) and max(means) == 0


def evidence_lines(results: Mapping, details: Mapping | None = None, confidence: float = 0.95) -> list[str]:
    """What the report must say first: that nothing was solved, or that at this size no method can be
    told from Greedy (no paired interval at the first or last k excludes 0), with the widest interval."""
    if nothing_solved(results):
        return [NOTHING_SOLVED]
    metrics = [m for m in _metrics(results) if m.startswith("pass@")]
    if not metrics or "Greedy" not in results:
        return []
    separated = False
    for name in results:
        for metric in {metrics[0], metrics[-1]}:
            if name == "Greedy" or not results[name].get(metric) or not results["Greedy"].get(metric):
                continue
            c = compare(results, details, name, "Greedy", metric, confidence)
            separated |= _outcome(c) in ("better", "worse")
    if separated:
        return []
    halves = [(e["ci_high"] - e["ci_low"]) / 2 * 100 for r in results.values()
              if (e := r.get(metrics[0])) and e.get("ci_low") is not None and e.get("ci_high") is not None]
    problems = len((details or {}).get("problems") or [])
    size = f"{problems} problems" if problems else "this size"
    width = f" (intervals up to ±{max(halves):.0f} points at {metrics[0]})" if halves else ""
    at = " or ".join(dict.fromkeys((metrics[0], metrics[-1])))  # one metric (--k 1) is named once
    return [f"**At {size} the evidence cannot separate the methods**{width}: no method differs from Greedy "
            f"by a paired interval that excludes 0 at {at}. Read the table as a run of "
            "the pipeline, not as a ranking; more problems (`--max-problems`, or `reproduce`) narrow it."]


STATIC_KINDS = ("greedy", "static", "mixed")
DRAFT_CONTROLS = ("random gate", "confidence threshold")
"""The draft-gated adapter's controls (kind ``draft``): compared against, not verdicts of their own."""


def strongest_static(results: Mapping, details: Mapping | None, metric: str) -> str | None:
    """The static method (no learned policy) with the highest ``metric`` on the evaluated split: the
    bar a learned method must clear (ties: the first listed)."""
    info = method_info(results, details)
    statics = [n for n, i in info.items() if i["kind"] in STATIC_KINDS and results[n].get(metric)]
    return max(statics, key=lambda n: results[n][metric]["mean"], default=None)


def _baselines_for(info, level, results: Mapping | None = None) -> list[str]:
    """Every adapter: Best (the strongest static baseline: the best static strategy at each k).
    Token adapters also: Greedy, the token-level Mixed and the best token action, those evaluated;
    any static method when none was. Draft-gated adapters: the strongest static method at the first
    pass@k, Stop at first answer (what keeping every draft scores) and the controls."""
    statics = [n for n, i in info.items() if i["kind"] in STATIC_KINDS]
    best = _first(info, role="best")
    if level == "draft":
        first = _metrics(results)[0] if results else None
        strongest = strongest_static(results, {"methods": info}, first) if first else None
        controls = [n for n, i in info.items() if i["kind"] == "draft" and i["role"] in DRAFT_CONTROLS]
        named = [strongest, _first(info, role="stop at first answer"), *controls]
        return list(dict.fromkeys(n for n in named if n))
    if level == "sequence":
        first = best or (statics[0] if statics else None)
        return [first] if first else []
    mixed = _token_mixed(info)
    named = [n for n in (best, _first(info, role="greedy"), mixed, _first(info, role="best token action")) if n]
    return list(dict.fromkeys(named)) or statics[:1]


def _fixed_action(details: Mapping | None, name: str, problem: int, k: int) -> str | None:
    """The one fixed action ``name`` decodes ``problem`` with for pass@k, when its samples are the
    evaluation's shared fixed-action rows (greedy, a static action or Best, an argmax sequence
    adapter's choice for B = k); None when they are not (Mixed, token adapters, sampled choices)."""
    method = (details or {}).get("methods", {}).get(name, {})
    actions = method.get("actions") or []
    if method.get("kind") in ("greedy", "static"):
        per_k = method.get("k_actions")
        return per_k.get(str(k)) if per_k else actions[0] if len(actions) == 1 else None
    choices = details.get("sequence_choices", {}).get(name) if method.get("kind") == "sequence" else None
    if choices and method.get("policy_mode", "argmax") == "argmax" and k in choices["k_values"]:
        # every seed's adapter must pick the same action (details without per-seed choices: one seed only)
        seeds = details.get("config", {}).get("seeds", 1)
        by_seed = choices.get("actions_by_seed") or ([choices["actions"]] if seeds == 1 else [])
        column = choices["k_values"].index(k)
        picks = {actions[per_problem[problem][column]] for per_problem in by_seed if problem < len(per_problem)}
        return picks.pop() if len(picks) == 1 and by_seed else None
    return None


def identical_by_construction(details: Mapping | None, a: str, b: str, metrics: Sequence[str]) -> list[str]:
    """The actions, when ``a`` and ``b`` decode every problem with the same fixed action at every
    pass@k in ``metrics`` (so both are scored on the very same completions); [] otherwise."""
    problems = len((details or {}).get("problems", []))
    ks = _pass_ks(metrics)
    used = set()
    for i in range(problems):
        for k in ks:
            action = _fixed_action(details, a, i, k)
            if action is None or action != _fixed_action(details, b, i, k):
                return []
            used.add(action)
    return sorted(used) if problems and ks else []


def _k_action(info, name: str, metric: str) -> str | None:
    """The action whose samples give ``metric`` for a per-k static row (the Best row), else None."""
    k_actions = info.get(name, {}).get("k_actions")
    return k_actions.get(metric.split("@")[1]) if k_actions and metric.startswith("pass@") else None


def best_line(results: Mapping, details: Mapping | None = None) -> str:
    """One sentence naming the strategy behind the Best row at each pass@k ('' without a Best row)."""
    info = method_info(results, details)
    best = _first(info, role="best")
    if not best:
        return ""
    metrics = [m for m in _metrics(results) if m.startswith("pass@")]
    k_actions = info[best].get("k_actions")
    if not k_actions:
        actions = info[best].get("actions") or []
        return f"{best} is one static strategy at every k: `{actions[0]}`." if actions else ""
    pool = "every candidate, greedy and greedy stopped at its first answer" if info[best].get("stop_candidate") \
        else "every candidate and greedy"
    return (f"{best} is the static strategy ({pool}) with the highest validation pass@k, "
            "chosen for each k: " + ", ".join(f"{_metric_label(m)} `{_k_action(info, best, m)}`" for m in metrics)
            + ".")


def _adapter_verdict(results, details, name, baseline, metrics, confidence) -> str:
    same = identical_by_construction(details, name, baseline, metrics)
    if same:
        return (f"- **{name} is identical to {baseline} by construction**: it decodes every problem with "
                f"{baseline}'s action ({', '.join(f'`{a}`' for a in same)}), so both are scored on the same "
                "completions and every difference is 0.")
    comps = {
        m: compare(results, details, name, baseline, m, confidence)
        for m in metrics
        if results[name].get(m) and results[baseline].get(m)
    }
    info = method_info(results, details)
    outcomes = [_outcome(c) for c in comps.values()]
    better, worse, n = outcomes.count("better"), outcomes.count("worse"), len(outcomes)
    ahead = outcomes.count("ahead")
    if n and better == n:
        head = f"**{name} beats {baseline}** on every pass@k, and every difference is significant."
    elif better:
        head = f"**{name} beats {baseline} on {better} of {n} pass@k metrics** (significant); not on the others."
    elif worse:
        head = f"**{name} does not beat {baseline}**: it is significantly worse on {worse} of {n} pass@k metrics."
    elif ahead:
        head = (
            f"**{name} does not beat {baseline}**: it is ahead on {ahead} of {n} pass@k metrics, "
            "but no difference is significant."
        )
    else:
        head = f"**{name} does not beat {baseline}**: it is level or behind on every pass@k, none significantly."
    paired = all(c["paired"] for c in comps.values())
    unit = (
        f"paired {confidence:.0%} CI over problems"
        if paired
        else "no per-problem values: significant only where the two methods' intervals do not overlap"
    )
    texts = [_diff_text(m, c) + (f" (vs `{a}`)" if (a := _k_action(info, baseline, m)) else "")
             for m, c in comps.items()]
    seeds = []
    for m in dict.fromkeys([metrics[0], metrics[-1]] if metrics else []):
        clause = seed_clause(per_seed_differences(details, name, baseline, m), _same_direction(comps[m]["diff"])) \
            if m in comps else ""
        if clause:
            seeds.append(f"{_metric_label(m)} {clause}")
    seed_text = ("\n  Across seeds (the direction of the difference): " + "; ".join(seeds) + ".") if seeds else ""
    return f"- {head}\n  Difference in points ({unit}): " + "; ".join(texts) + "." + seed_text


# ---- figures --------------------------------------------------------------------------------------


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_") or "x"


def _action_names(info, name) -> list[str]:
    return list(info.get(name, {}).get("actions", []))


def _figures(out: Path, results, details, info, training_logs, action_names) -> list[tuple[str, str, str]]:
    """Make every figure the data allows; returns (heading, file name, caption) triples."""
    static = [n for n, i in info.items() if i["kind"] in ("greedy", "static", "mixed")]
    confidence = (details or {}).get("config", {}).get("confidence", 0.95)
    figs = [
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
        names = _log_action_names(Path(path), records, given)
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
            _first(info, role="mixed", level="token")
            or _first(info, role="mixed")
            or _first(info, role="greedy")
            or _first(info, role="best")
        )
    return _first(info, role="best") or _first(info, role="mixed") or _first(info, role="greedy")


def _detail_figures(out: Path, results, details, info) -> list[tuple[str, str, str]]:
    figs = []
    trajs = details.get("trajectories", {})
    lengths = details.get("lengths", {})
    groups = []
    for level, title in (("sequence", "Sequence level"), ("token", "Token level")):
        adapters = _adapters(info, level)
        if adapters:
            ref = [
                n
                for n in (_first(info, role="greedy") if level == "token" else None, _static_reference(info, level))
                if n
            ]
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
    for name in _adapters(info, "token"):
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


# ---- the report -----------------------------------------------------------------------------------


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


def truncation_section(stats: Sequence[Mapping], chosen: int | None = None, max_truncated: float | None = None,
                       split: str = "validation") -> str:
    """Markdown: greedy mean length, fraction of rows stopped by the budget and (when scored) greedy
    accuracy, per token budget (``TruncationStats.to_dict()`` rows), and which budget was chosen."""
    if not stats:
        return ""
    scored = all(st.get("greedy_reward") is not None for st in stats)
    lines = [
        _row(["token budget", "rows", "greedy mean length", "stopped by the budget (%)", "longest"]
             + (["greedy accuracy (%)"] if scored else [])),
        _row(["---:"] * (6 if scored else 5)),
    ]
    for st in sorted(stats, key=lambda r: r["token_budget"]):
        mark = " (chosen)" if st["token_budget"] == chosen else ""
        lines.append(_row([f"{st['token_budget']}{mark}", st["rows"], f"{st['mean_length']:.1f}",
                           f"{st['truncated_fraction'] * 100:.1f}", st["max_length"]]
                          + ([f"{st['greedy_reward'] * 100:.1f}"] if scored else [])))
    text = f"Greedy decoding on {stats[0]['rows']} {split} problems, decoded once at the largest budget."
    if chosen is not None and max_truncated is not None:
        text += (f" The budget used everywhere is the smallest whose greedy truncated fraction is at most "
                 f"{max_truncated * 100:.0f}%: **{chosen}** (chosen on {split}, never on test).")
    return text + "\n\n" + "\n".join(lines)


# ---- accuracy per compute ---------------------------------------------------------------------------

COMPUTE_TOLERANCE = 1e-6
"""Decodes per problem within this of each other count as equal compute."""


def compute_points(results: Mapping, details: Mapping | None) -> list[dict]:
    """One point per (method, pass@k) whose compute was measured (``eval_details.json``
    ``methods[name]["decodes_per_problem"]`` / ``["tokens_per_problem"]``): ``{method, k, metric,
    mean, low, high, decodes, tokens}``; [] for an evaluation that did not measure it."""
    known = (details or {}).get("methods", {})
    points = []
    for name, res in results.items():
        decodes, tokens = known.get(name, {}).get("decodes_per_problem"), known.get(name, {}).get("tokens_per_problem")
        if not decodes or not tokens:
            continue
        for k in _pass_ks(res):
            entry = res.get(f"pass@{k}")
            if entry and str(k) in decodes and str(k) in tokens:
                points.append({"method": name, "k": k, "metric": f"pass@{k}", "mean": entry["mean"],
                               "low": entry.get("ci_low"), "high": entry.get("ci_high"),
                               "decodes": float(decodes[str(k)]), "tokens": float(tokens[str(k)])})
    return points


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

    lines = [_row(["Method", "k", "re-decoded", "pass@k where kept (n)", "pass@k where re-decoded (n)"]),
             _row(["---", "---:", "---:", "---:", "---:"])]
    for r in rows:
        lines.append(_row([r["method"], str(r["k"]), f"{100 * r['redecode_share']:.0f}%",
                           f"{pct(r['kept'])} ({r['n_kept']})", f"{pct(r['redecoded'])} ({r['n_redecoded']})"]))
    return "\n".join(lines) + (
        "\n\nA draft-gated method decodes greedily first and keeps the draft or re-decodes; the kept "
        "answers are the draft's, the re-decoded ones the chosen action's (at k > 1 with the draft among "
        "them). Counts are (seed, problem) pairs.")


def _compute_cell(values: Sequence[float], digits: int) -> str:
    return " · ".join(f"{v:.{digits}f}" for v in values)


def compute_table(results: Mapping, details: Mapping | None) -> str:
    """Markdown: every method's pass@k next to what it costs per problem at each k (decodes and
    generated tokens; ``k=1 · 2 · ...``); '' when compute was not measured."""
    points = compute_points(results, details)
    if not points:
        return ""
    ks = sorted({p["k"] for p in points})
    label = " · ".join(map(str, ks))
    lines = [_row(["Method"] + [_metric_label(f"pass@{k}") for k in ks]
                  + [f"decodes / problem (k = {label})", f"tokens / problem (k = {label})"]),
             _row(["---"] + ["---:"] * (len(ks) + 2))]
    for name in dict.fromkeys(p["method"] for p in points):
        own = {p["k"]: p for p in points if p["method"] == name}
        cells = [_fmt_entry(results[name].get(f"pass@{k}"), f"pass@{k}") if k in own else "–" for k in ks]
        decodes = _compute_cell([own[k]["decodes"] for k in ks if k in own], 2)
        tokens = _compute_cell([own[k]["tokens"] for k in ks if k in own], 1)
        lines.append(_row([name] + cells + [decodes, tokens]))
    return "\n".join(lines)


def _point_label(p: Mapping) -> str:
    return f"{p['method']} ({_metric_label(p['metric'])}, {p['decodes']:.2f} decodes, {p['tokens']:.1f} tokens)"


def compute_verdicts(results: Mapping, details: Mapping | None, confidence: float | None = None) -> list[str]:
    """One line per compute level: which method wins when every method may spend at most that
    many decodes per problem (its pass@k at the largest k it can afford), and by how much it leads
    the best other method within the same compute (paired interval over problems; a tie is said).
    Levels are the distinct decodes per problem of the evaluated points, ascending."""
    points = compute_points(results, details)
    if not points:
        return []
    confidence = confidence or (details or {}).get("config", {}).get("confidence", 0.95)
    levels = sorted({round(p["decodes"], 6) for p in points})
    order = {name: i for i, name in enumerate(results)}
    out = []
    for level in levels:
        affordable = [p for p in points if p["decodes"] <= level + COMPUTE_TOLERANCE]
        # per method, its best point within the budget (ties: the cheaper one)
        best_per_method: dict[str, dict] = {}
        for p in sorted(affordable, key=lambda p: (-p["mean"], p["decodes"], p["tokens"])):
            best_per_method.setdefault(p["method"], p)
        ranked = sorted(best_per_method.values(), key=lambda p: (-p["mean"], p["decodes"], p["tokens"],
                                                                 order.get(p["method"], 0)))
        winner = ranked[0]
        line = f"- **≤ {level:g} decodes / problem: {winner['method']}** leads with " \
               f"{winner['mean'] * 100:.1f} ({_metric_label(winner['metric'])}, {winner['decodes']:.2f} decodes, " \
               f"{winner['tokens']:.1f} tokens per problem)"
        if len(ranked) == 1:
            out.append(line + "; no other method fits this compute.")
            continue
        second = ranked[1]
        a = _per_problem_means(details, winner["method"], winner["metric"])
        b = _per_problem_means(details, second["method"], second["metric"])
        text = f"; next: {_point_label(second)} at {second['mean'] * 100:.1f}"
        if a and b and len(a) == len(b):
            diff, low, high = paired_ci(a, b, confidence)
            low, high = max(low, -1.0), min(high, 1.0)
            c = {"diff": diff, "low": low, "high": high, "separated": 0}
            verdict = {"better": "a significant lead", "worse": "significantly behind"}.get(
                _outcome(c), "no significant difference")
            text += (f"; difference {_signed(diff * 100)} [{_signed(low * 100)}, {_signed(high * 100)}] "
                     f"(paired {confidence:.0%} CI): {verdict}.")
        else:
            text += "."
        out.append(line + text)
    return out


def compute_section(results: Mapping, details: Mapping | None) -> str:
    """Markdown for the accuracy-per-compute view (table and verdicts); '' when not measured."""
    table = compute_table(results, details)
    if not table:
        return ""
    return ("What each method spends per problem for its answers: a *decode* is one generated sequence for one "
            "problem (a method that drafts and then re-decodes counts both), *tokens* are the generated tokens "
            "summed over the problem's decodes (EOS included, padding and forced tokens excluded). pass@k's k "
            "answers cost k samples; a deterministic row (greedy) is decoded once, so it costs one decode at every "
            "k.\n\n" + table + "\n\nWho wins at each compute level: every method at its best pass@k within that many "
            "decodes per problem (equal or lower compute). pass@k with k > 1 counts a problem solved when any of its "
            "k answers is right, which a user only gets with a verifier to pick it.\n\n"
            + "\n".join(compute_verdicts(results, details)))


def cost_table(details: Mapping | None) -> str:
    """Markdown: what each method cost to evaluate (``eval_details.json`` ``cost``); '' without it."""
    cost = (details or {}).get("cost")
    if not cost:
        return ""
    lines = [_row(["Method", "rows decoded", "tokens", "seconds (alone)", "seconds (share)"]),
             _row(["---", "---:", "---:", "---:", "---:"])]
    for name, c in cost["methods"].items():
        lines.append(_row([name, c["rows"], c["tokens"], f"{c['seconds_alone']:.1f}", f"{c['seconds_share']:.1f}"]))
    lines.append(_row(["**all (decoded once)**", cost["decoded_rows"], cost["decoded_tokens"],
                       f"{cost['decode_seconds']:.1f}", f"{cost['decode_seconds']:.1f}"]))
    return ("Rows each method's numbers come from that were decoded (a row shared by several methods, or a "
            "deterministic row standing for every sample and seed, is decoded once), their generated tokens and "
            "decode seconds: *alone* counts shared rows in full (the method evaluated by itself), *share* splits "
            f"them among the methods that use them. Evaluation wall time: {cost['wall_seconds']:.1f} s.\n\n"
            + "\n".join(lines))


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
        lines += ["", _row(["K"] + [str(i + 1) for i in range(len(shown))]),
                  _row(["---"] + ["---:"] * len(shown)),
                  _row(["coverage F"] + [f"{f:.3f}" for f in shown]), ""]
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
        lines += ["", _row(["metric", "Best (validation)", "its pass@k", "greedy's"]),
                  _row(["---", "---", "---:", "---:"])]
        for k in best["k_values"]:
            name = best["best"][str(k)]
            i = best["k_values"].index(k)
            greedy = best["scores"].get("greedy")
            lines.append(_row([f"pass@{k}" + (" (extrapolated)" if k in best.get("extrapolated", []) else ""),
                               f"`{name}`", f"{best['scores'][name][i] * 100:.1f}",
                               "–" if greedy is None else f"{greedy[i] * 100:.1f}"]))
    return "\n".join(lines)


def training_curve_section(out_dir: str | Path, runs: Mapping[str, Sequence[str | Path]],
                           file: str = "training_curves.png") -> str:
    """Markdown: the validation-reward curve of every training run (``{method: [log of each seed]}``),
    with a table of steps run, early stops, the kept step with its validation reward and the last one; writes
    the figure into ``out_dir``."""
    curves, lines = {}, [
        _row(["run", "steps", "stopped early", "kept step", "its val reward", "last val reward",
              "s / step"]),
        _row(["---", "---:", "---", "---:", "---:", "---:", "---:"]),
    ]
    for name, paths in runs.items():
        for seed, path in enumerate(paths):
            if not Path(path).is_file():
                continue
            every = [r for r in _log_records(Path(path)) if "step" in r]  # step 0: the start's validation
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
            lines.append(_row([f"{name} s{seed}", records[-1]["step"], "yes" if stop else "no", step_best,
                               f"{best_val:.3f}", f"{val[-1][1]:.3f}" if val else "–", f"{seconds:.1f}"]))
    if not curves:
        return ""
    plots.plot_validation_curves(curves, Path(out_dir) / file)
    return (f"![validation reward during training]({file})\n\nValidation reward (policy-sampled rollouts on held-out "
            "validation problems) against the training step for every run; the adapter keeps the weights of its "
            "kept step (the best validated one by the trainer's rule; step 0 is the prior).\n\n" + "\n".join(lines))


def _markdown(title, results, details, figs, sections=()) -> str:
    evidence = evidence_lines(results, details)
    parts = [f"# {title}", "", *[f"> {line}\n" for line in evidence], "## Setup", "", *_setup_lines(results, details),
             ""]
    verdict = verdicts(results, details)
    if verdict:
        parts += [
            "## Verdict",
            "",
            "Every adapter is compared with Best, the strongest static baseline; token-level adapters also with "
            "Greedy, with the per-token Mixed (a uniform draw over the token actions at every token) and with the "
            "best single token action (chosen on validation). Differences are adapter minus baseline in points, "
            "with the interval of the paired per-problem difference; ✔ / ✘ mark intervals that exclude zero "
            "(significantly better / worse).",
            "",
            *([best_line(results, details), ""] if best_line(results, details) else []),
            *verdict,
            "",
        ]
    seq, tok = sequence_table(results, details), token_table(results, details)
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
    parts += ["## All methods", "", all_methods_table(results, details), "", INTERVAL_NOTE, ""]
    paper = paper_interval_table(results)
    if paper:
        parts += [
            "## Paper-style intervals",
            "",
            paper,
            "",
            "± is the paper's interval: a normal-approximation binomial 95% interval over all (problem, run) "
            "outcomes, z·sqrt(p(1-p)/N). It ignores problem-to-problem variation, so it is narrower than the "
            "Student-t intervals above; use it only to compare with the paper's tables (verdicts use paired "
            "per-problem differences).",
            "",
        ]
    seeds = seed_table(results, details)
    if seeds:
        parts += ["## Across-seed spread", "", seeds, ""]
    per_compute = compute_section(results, details)
    if per_compute:
        parts += ["## Accuracy per compute", "", per_compute, ""]
    gated = draft_section(details)
    if gated:
        parts += ["## Draft-gated methods", "", gated, ""]
    cost = cost_table(details)
    if cost:
        parts += ["## Evaluation cost", "", cost, ""]
    for heading, body in sections:
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
    ks = [k for k in _pass_ks(results["Best"]) if k <= samples]
    adapters = [a for a in adapters if a in results]
    lines = [f"Head-room on {len(problems)} validation problems x {samples} samples of the {len(names)} static "
             "candidates (the selection's outcomes): the per-problem oracle (each problem under its own best "
             "candidate) minus the best single candidate, cross-fitted where k <= samples / 2. Gains are the "
             "adapters' paired differences to Best on the test split (points); the share is gain / head-room, "
             "given where the head-room's interval is above 0.",
             "", _row(["k", "best static (validation)", "head-room (points)"]
                      + [f"{a}: gain, share" for a in adapters]),
             _row(["---:", "---", "---:"] + ["---:"] * len(adapters))]
    for row in oracle_table(rewards, names, ks):
        if row.crossfit_headroom is not None:
            room, (low, high), kind = row.crossfit_headroom, row.crossfit_headroom_ci, "cross-fitted"
        else:
            room, (low, high), kind = row.headroom, row.headroom_ci, "in-sample"
        cells = []
        for adapter in adapters:
            c = compare(results, details, adapter, "Best", f"pass@{row.k}", confidence)
            share = f"{c['diff'] / room * 100:.0f}%" if low > 0 else "–"  # no share of a head-room within noise of 0
            cells.append(f"{_signed(c['diff'] * 100, 1)}, {share}")
        lines.append(_row([str(row.k), f"`{row.best_action}`",
                           f"{room * 100:+.1f} [{low * 100:+.1f}, {high * 100:+.1f}] {kind}"] + cells))
    return "\n".join(lines)

