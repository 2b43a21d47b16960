"""The report's verdicts: paired per-problem differences of each adapter to its baselines, in plain
sentences with their intervals and per-seed directions; the opening warning when nothing was solved
or the evidence cannot separate the methods; the strategy behind the Best row."""

from __future__ import annotations

import math
import statistics
from typing import Mapping, Sequence

from ..core.stats import paired_ci, problem_means, seed_interval
from .cells import (
    adapters_at,
    first_method,
    method_info,
    metric_columns,
    metric_label,
    pass_ks,
    signed,
    token_mixed,
)

__all__ = [
    "STATIC_KINDS",
    "DRAFT_CONTROLS",
    "NOTHING_SOLVED",
    "per_problem_means",
    "compare",
    "outcome_of",
    "per_seed_differences",
    "seed_clause",
    "verdicts",
    "nothing_solved",
    "evidence_lines",
    "strongest_static",
    "identical_by_construction",
    "best_line",
]


STATIC_KINDS = ("greedy", "static", "mixed")


DRAFT_CONTROLS = ("random gate", "confidence threshold")
"""The draft-gated adapter's controls (kind ``draft``): compared against, not verdicts of their own."""


def per_problem_means(details, name, metric) -> list[float] | None:
    """Each problem's ``metric`` averaged over seeds and samples (the one reduction every interval
    over problems uses); None without per-problem values."""
    rows = (details or {}).get("per_problem", {}).get(name, {}).get(metric)
    return problem_means(rows) if rows else None


def compare(results, details, adapter: str, baseline: str, metric: str, confidence: float) -> dict:
    """Adapter minus baseline on ``metric``: a paired interval over problems when per-problem values
    exist; otherwise only the difference of means, judged by whether the two methods' intervals overlap."""
    a, b = per_problem_means(details, adapter, metric), per_problem_means(details, baseline, metric)
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


def seed_clause(diffs: Sequence[float] | None, holds, confidence: float = 0.95) -> str:
    """'per seed +1.0 / -0.5 / +2.0 (over seeds +0.8 [-2.1, +3.7]): holds on 2 of 3 seeds' (points),
    where ``holds(d)`` says whether one seed's difference meets the claim and the bracket is the
    Student-t interval of the mean over seeds (the training-seed variance the interval over problems
    leaves out); '' without per-seed values."""
    if not diffs:
        return ""
    count = sum(1 for d in diffs if holds(d))
    where = f"on every seed ({count} of {len(diffs)})" if count == len(diffs) else f"on {count} of {len(diffs)} seeds"
    mean, low, high = seed_interval(diffs, confidence)
    spread = f" (over seeds {signed(mean * 100, 1)} [{signed(low * 100, 1)}, {signed(high * 100, 1)}])" \
        if len(diffs) > 1 else ""
    return "per seed " + " / ".join(signed(d * 100, 1) for d in diffs) + spread + f": holds {where}"


def _same_direction(overall: float):
    """A seed holds a verdict when its difference has the overall difference's sign (0 for a tie)."""
    return lambda d: (d > 0) if overall > 0 else (d < 0) if overall < 0 else abs(d) < 1e-12


def outcome_of(c: Mapping) -> str:
    """'better' / 'worse' when the interval of the difference excludes 0 (unpaired: when the two
    intervals do not overlap), else 'ahead' / 'behind' / 'tie'."""
    if (not math.isnan(c["low"]) and c["low"] > 0) or c.get("separated") == 1:
        return "better"
    if (not math.isnan(c["high"]) and c["high"] < 0) or c.get("separated") == -1:
        return "worse"
    return "ahead" if c["diff"] > 0 else "behind" if c["diff"] < 0 else "tie"


def _diff_text(metric: str, c: Mapping) -> str:
    text = f"{metric.replace('pass@', 'Pass@')} {signed(c['diff'] * 100)}"
    if not math.isnan(c["low"]):
        text += f" [{signed(c['low'] * 100)}, {signed(c['high'] * 100)}]"
    return text + {"better": " ✔", "worse": " ✘"}.get(outcome_of(c), "")


def verdicts(results: Mapping, details: Mapping | None = None, confidence: float | None = None) -> list[str]:
    """One markdown paragraph per adapter and baseline: how it compares on every pass@k, with the
    difference on each seed. Sequence adapters: vs Best. Token adapters: vs Greedy and vs the
    per-token Mixed (the paper's token table), and vs the best single token action (chosen on
    validation) where it was evaluated. Draft-gated adapters: vs the strongest static method at the
    first pass@k, Stop at first answer, and their controls (random gate, confidence threshold)."""
    info = method_info(results, details)
    confidence = confidence or (details or {}).get("config", {}).get("confidence", 0.95)
    metrics = [m for m in metric_columns(results) if m.startswith("pass@")]
    out = []
    for level in ("sequence", "token", "draft"):
        baselines = _baselines_for(info, level, results)
        for name in adapters_at(info, level):
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
    metrics = [m for m in metric_columns(results) if m.startswith("pass@")]
    if not metrics or "Greedy" not in results:
        return []
    separated = False
    for name in results:
        for metric in {metrics[0], metrics[-1]}:
            if name == "Greedy" or not results[name].get(metric) or not results["Greedy"].get(metric):
                continue
            c = compare(results, details, name, "Greedy", metric, confidence)
            separated |= outcome_of(c) in ("better", "worse")
    if separated:
        return []
    halves = [(e["ci_high"] - e["ci_low"]) / 2 * 100 for r in results.values()
              if (e := r.get(metrics[0])) and e.get("ci_low") is not None and e.get("ci_high") is not None]
    problems = len((details or {}).get("problems") or [])
    size = f"{problems} problems" if problems else "this size"
    width = f" (intervals up to ±{max(halves):.0f} points at {metrics[0]})" if halves else ""
    return [f"**At {size} the evidence cannot separate the methods**{width}: no method differs from Greedy "
            f"by a paired interval that excludes 0 at {metrics[0]} or {metrics[-1]}. Read the table as a run of "
            "the pipeline, not as a ranking; more problems (`--max-problems`, or `reproduce`) narrow it."]


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
    best = first_method(info, role="best")
    if level == "draft":
        first = metric_columns(results)[0] if results else None
        strongest = strongest_static(results, {"methods": info}, first) if first else None
        controls = [n for n, i in info.items() if i["kind"] == "draft" and i["role"] in DRAFT_CONTROLS]
        named = [strongest, first_method(info, role="stop at first answer"), *controls]
        return list(dict.fromkeys(n for n in named if n))
    if level == "sequence":
        first = best or (statics[0] if statics else None)
        return [first] if first else []
    mixed = token_mixed(info)
    greedy, best_token = first_method(info, role="greedy"), first_method(info, role="best token action")
    named = [n for n in (best, greedy, mixed, best_token) if n]
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
    ks = pass_ks(metrics)
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
    best = first_method(info, role="best")
    if not best:
        return ""
    metrics = [m for m in metric_columns(results) if m.startswith("pass@")]
    k_actions = info[best].get("k_actions")
    if not k_actions:
        actions = info[best].get("actions") or []
        return f"{best} is one static strategy at every k: `{actions[0]}`." if actions else ""
    pool = "every candidate, greedy and greedy stopped at its first answer" if info[best].get("stop_candidate") \
        else "every candidate and greedy"
    return (f"{best} is the static strategy ({pool}) with the highest validation pass@k, "
            "chosen for each k: " + ", ".join(f"{metric_label(m)} `{_k_action(info, best, m)}`" for m in metrics)
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
    outcomes = [outcome_of(c) for c in comps.values()]
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
        clause = seed_clause(per_seed_differences(details, name, baseline, m), _same_direction(comps[m]["diff"]),
                             confidence) if m in comps else ""
        if clause:
            seeds.append(f"{metric_label(m)} {clause}")
    seed_text = ("\n  Across seeds (the direction of the difference): " + "; ".join(seeds) + ".") if seeds else ""
    return f"- {head}\n  Difference in points ({unit}): " + "; ".join(texts) + "." + seed_text
