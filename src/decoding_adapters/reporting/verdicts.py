"""The report's verdicts: paired per-problem differences of each adapter to its baselines, in plain
sentences with their intervals and per-seed directions; the opening warning when nothing was solved
or the evidence cannot separate the methods; the strategy behind the Best row.

A verdict compares like with like only: the same metric at matched compute. pass@k is compared
with the baseline's pass@k where the two spend the same decodes per problem (within
:data:`COMPUTE_MATCH`); the answer accuracy (the one answer a method returns, no verifier) with
the baseline's at the same compute: its point within :data:`COMPUTE_MATCH`, or its curve (answer
accuracy against decodes per problem over B) interpolated at this method's compute. A comparison
across compute is named as such and is not a verdict."""

from __future__ import annotations

import math
import statistics
from typing import Mapping, Sequence

from ..core.stats import paired_ci, problem_means, seed_interval
from ..decoding.protocol import stored_stop
from ..evaluation.methods import ANSWER_ACCURACY, FIXED_ACTION, GREEDY_ROWS
from ..policies.kinds import ONE_PER_PROMPT
from .cells import (
    adapters_at,
    answer_ks,
    answer_metric,
    family_of,
    first_method,
    is_rate,
    is_static,
    kind_of,
    method_info,
    metric_columns,
    metric_label,
    pass_ks,
    signed,
    token_mixed,
)

__all__ = [
    "COMPUTE_MATCH",
    "NOTHING_SOLVED",
    "per_problem_means",
    "compare",
    "decodes_of",
    "answer_curve",
    "matched_compare",
    "paired_difference",
    "answer_at",
    "outcome_of",
    "per_seed_differences",
    "seed_clause",
    "verdicts",
    "verdict_comparisons",
    "verdict_head",
    "difference_text",
    "not_compared_text",
    "nothing_solved",
    "evidence_lines",
    "strongest_static",
    "identical_by_construction",
    "best_line",
]


TO_BUDGET = "greedy to the budget"
"""The role of the one control without the protocol's stop: it measures what the stop gains and is
never a baseline an adapter is judged against."""

COMPUTE_MATCH = 0.05
"""Two methods spend matched compute when their mean decodes per problem differ by at most this
share of the larger."""


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
        return paired_difference(a, b, metric, confidence)
    ra, rb = results[adapter][metric], results[baseline][metric]
    separated = 0
    if None not in (ra.get("ci_low"), ra.get("ci_high"), rb.get("ci_low"), rb.get("ci_high")):
        separated = 1 if ra["ci_low"] > rb["ci_high"] else -1 if ra["ci_high"] < rb["ci_low"] else 0
    return {"diff": ra["mean"] - rb["mean"], "low": math.nan, "high": math.nan, "paired": False, "separated": separated}


def paired_difference(a: Sequence[float], b: Sequence[float], metric: str, confidence: float) -> dict:
    diff, low, high = paired_ci(a, b, confidence)
    if is_rate(metric):  # a difference of probabilities lies in [-1, 1]
        low, high = max(low, -1.0), min(high, 1.0)
    return {"diff": diff, "low": low, "high": high, "paired": True, "separated": 0}


def _metric_k(metric: str) -> str:
    """The compute key of a metric: its k, or 'answer' for a method's own answer."""
    return metric.split("@")[1] if "@" in metric else "answer"


def decodes_of(details: Mapping | None, name: str, metric: str) -> float | None:
    """Mean decodes per problem behind ``metric`` of ``name`` (``eval_details.json``
    ``methods[name]["decodes_per_problem"]``; pass@k and the answer at B = k cost the same k
    samples); None where not measured."""
    decodes = (details or {}).get("methods", {}).get(name, {}).get("decodes_per_problem") or {}
    value = decodes.get(_metric_k(metric))
    return None if value is None else float(value)


def answer_curve(details: Mapping | None, name: str) -> list[tuple[float, str]]:
    """A method's answer accuracy against its compute: ``(decodes per problem, metric)`` for every
    B it was scored at (``answer_accuracy@k``), or its one ``answer_accuracy`` point, by decodes."""
    per_problem = (details or {}).get("per_problem", {}).get(name, {})
    points = [(decodes_of(details, name, m), m) for m in [answer_metric(k) for k in answer_ks(per_problem)]]
    if not points and ANSWER_ACCURACY in per_problem:
        points = [(decodes_of(details, name, ANSWER_ACCURACY), ANSWER_ACCURACY)]
    return sorted((d, m) for d, m in points if d is not None)


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= COMPUTE_MATCH * max(abs(a), abs(b), 1e-12)


def matched_compare(results: Mapping, details: Mapping | None, name: str, baseline: str, metric: str,
                    confidence: float) -> dict:
    """``name`` minus ``baseline`` on ``metric`` at matched compute (module docstring): the
    comparison (:func:`compare`'s keys) with ``matched`` (True, or False where the two cannot be
    compared at this compute: then no difference is given), ``how`` (the baseline's point it used)
    and ``decodes`` (``name``'s, ``baseline``'s)."""
    mine = decodes_of(details, name, metric)
    if mine is None and decodes_of(details, baseline, metric) is None and results.get(baseline, {}).get(metric):
        # compute not measured on either side (results written before it was): the same metric at the same k
        return {**compare(results, details, name, baseline, metric, confidence), "matched": True, "how": "",
                "decodes": (None, None)}
    if metric.startswith("pass@"):
        theirs = decodes_of(details, baseline, metric)
        if mine is None or theirs is None or not _close(mine, theirs):
            return {"matched": False, "how": "", "decodes": (mine, theirs)}
        return {**compare(results, details, name, baseline, metric, confidence), "matched": True, "how": "",
                "decodes": (mine, theirs)}
    a = per_problem_means(details, name, metric)
    at = answer_at(details, baseline, mine) if mine is not None else None
    if not a or at is None or len(at[0]) != len(a):
        spent = sorted({d for d, _ in answer_curve(details, baseline)})
        return {"matched": False, "how": "", "decodes": (mine, spent[0] if len(spent) == 1 else None),
                "span": (spent[0], spent[-1]) if len(spent) > 1 else None}
    b, d, m = at
    how = "" if m == metric else m if m.startswith("interpolated") else f"its {metric_label(m)}"
    return {**paired_difference(a, b, metric, confidence), "matched": True, "how": how, "decodes": (mine, d)}


def answer_at(details: Mapping | None, name: str, decodes: float) -> tuple[list[float], float, str] | None:
    """``name``'s per-problem answer accuracy at ``decodes`` per problem: its own point within
    :data:`COMPUTE_MATCH` (the nearest), or its curve interpolated between the two points around
    ``decodes``; ``(values, its decodes, what was used)``, None where its curve does not reach."""
    curve = answer_curve(details, name)
    near = [(abs(d - decodes), d, m) for d, m in curve if _close(d, decodes)]
    if near:
        _, d, m = min(near)
        values = per_problem_means(details, name, m)
        return (values, d, m) if values else None
    below = [(d, m) for d, m in curve if d < decodes]
    above = [(d, m) for d, m in curve if d > decodes]
    if not below or not above:
        return None
    (d1, m1), (d2, m2) = below[-1], above[0]
    w = (decodes - d1) / (d2 - d1)
    v1, v2 = per_problem_means(details, name, m1), per_problem_means(details, name, m2)
    if not v1 or not v2 or len(v1) != len(v2):
        return None
    return ([(1 - w) * x + w * y for x, y in zip(v1, v2)], decodes,
            f"interpolated between its {metric_label(m1)} and {metric_label(m2)}")


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
    text = f"{metric_label(metric)} {signed(c['diff'] * 100)}"
    if not math.isnan(c["low"]):
        text += f" [{signed(c['low'] * 100)}, {signed(c['high'] * 100)}]"
    return text + {"better": " ✔", "worse": " ✘"}.get(outcome_of(c), "")


def verdicts(results: Mapping, details: Mapping | None = None, confidence: float | None = None) -> list[str]:
    """One markdown paragraph per adapter and baseline: how it compares on every pass@k and on the
    accuracy of its answer, each at matched compute (module docstring), with the difference on each
    seed. Sequence adapters: vs Best. Token adapters: vs Greedy and vs the per-token Mixed (the
    paper's token table), and vs the best single token action (chosen on validation) where it was
    evaluated. Draft-gated adapters: vs the strongest static method at the first pass@k, Greedy
    (what keeping every draft scores), Best and the fixed rules (random gate, confidence threshold)."""
    info = method_info(results, details)
    confidence = confidence or (details or {}).get("config", {}).get("confidence", 0.95)
    metrics = [m for m in metric_columns(results) if is_rate(m)]
    out = []
    for group in ("sequence", "token", "draft"):
        baselines = _baselines_for(info, group, results)
        for name in adapters_at(info, group):
            if family_of(info[name]) != "learned":  # a fixed rule is compared against, not judged
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
    told from Greedy (no paired interval at the first or last k, at matched compute, excludes 0),
    with the widest interval."""
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
            c = matched_compare(results, details, name, "Greedy", metric, confidence)
            separated |= c["matched"] and outcome_of(c) in ("better", "worse")
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


def strongest_static(results: Mapping, details: Mapping | None, metric: str) -> str | None:
    """The static method (no learned policy) with the highest ``metric`` on the evaluated split: the
    bar a learned method must clear (ties: the first listed)."""
    info = method_info(results, details)
    statics = [n for n, i in info.items() if is_static(i) and i.get("role") != TO_BUDGET and results[n].get(metric)]
    return max(statics, key=lambda n: results[n][metric]["mean"], default=None)


def _baselines_for(info, group, results: Mapping | None = None) -> list[str]:
    """Every adapter: Best (the strongest static baseline: the best static strategy at each k).
    Token adapters also: Greedy, the token-level Mixed and the best token action, those evaluated;
    any static method when none was. Draft-gated adapters: the strongest static method at the first
    pass@k, Greedy (what keeping every draft scores), Best (whose answer curve over B is the
    comparison at the draft's compute) and the fixed rules."""
    statics = [n for n, i in info.items() if is_static(i) and i.get("role") != TO_BUDGET]
    best = first_method(info, role="best")
    if group == "draft":
        first = metric_columns(results)[0] if results else None
        strongest = strongest_static(results, {"methods": info}, first) if first else None
        rules = [n for n, i in info.items() if family_of(i) == "fixed rule"]
        named = [strongest, first_method(info, role="greedy"), best, *rules]
        return list(dict.fromkeys(n for n in named if n))
    if group == "sequence":
        first = best or (statics[0] if statics else None)
        return [first] if first else []
    mixed = token_mixed(info)
    greedy, best_token = first_method(info, role="greedy"), first_method(info, role="best token action")
    named = [n for n in (best, greedy, mixed, best_token) if n]
    return list(dict.fromkeys(named)) or statics[:1]


def _fixed_action(details: Mapping | None, name: str, problem: int, k: int) -> tuple[str, bool] | None:
    """The one fixed action ``name`` decodes ``problem`` with for pass@k (and whether its rows stop
    at the first answer: rows to the budget are other generations), when its samples are the
    evaluation's shared fixed-action rows (greedy, a static action or Best, an argmax sequence
    adapter's choice for B = k); None when they are not (Mixed, token adapters, sampled choices)."""
    method = (details or {}).get("methods", {}).get(name, {})
    kind = kind_of(method)
    read = _FIXED_ACTION_OF.get(kind.decoding) if kind is not None else None
    if read is None:
        return None
    action = read(details, name, method, problem, k)
    # rows that end at the first answer and rows to the budget are different generations
    stop = stored_stop(method if "stop_at_answer" in method else (details or {}).get("config", {}))
    return None if action is None else (action, stop)


def _static_action(details: Mapping, name: str, method: Mapping, problem: int, k: int) -> str | None:
    """A greedy or static method's action at pass@k (its one action, or its k's)."""
    actions, per_k = method.get("actions") or [], method.get("k_actions")
    return per_k.get(str(k)) if per_k else actions[0] if len(actions) == 1 else None


def _chosen_action(details: Mapping, name: str, method: Mapping, problem: int, k: int) -> str | None:
    """A sequence adapter's choice for ``problem`` at B = k, when it is argmax and every seed's
    adapter picks the same action (details without per-seed choices: one seed only)."""
    actions = method.get("actions") or []
    choices = details.get("sequence_choices", {}).get(name)
    if not (choices and method.get("policy_mode", "argmax") == "argmax" and k in choices["k_values"]):
        return None
    seeds = details.get("config", {}).get("seeds", 1)
    by_seed = choices.get("actions_by_seed") or ([choices["actions"]] if seeds == 1 else [])
    column = choices["k_values"].index(k)
    picks = {actions[per_problem[problem][column]] for per_problem in by_seed if problem < len(per_problem)}
    return picks.pop() if len(picks) == 1 and by_seed else None


_FIXED_ACTION_OF = {GREEDY_ROWS: _static_action, FIXED_ACTION: _static_action, ONE_PER_PROMPT: _chosen_action}
"""How the fixed action of a method's rows is read, per way of decoding (the others have none)."""


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
            used.add(action[0])
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
    return (f"{best} is the static strategy (every candidate and greedy) with the highest validation pass@k, "
            "chosen for each k: " + ", ".join(f"{metric_label(m)} `{_k_action(info, best, m)}`" for m in metrics)
            + ".")


def verdict_comparisons(results: Mapping, details: Mapping | None, name: str, baseline: str,
                        metrics: Sequence[str], confidence: float) -> dict[str, dict]:
    """Every comparison a verdict of ``name`` against ``baseline`` considers: ``{metric:
    matched_compare result}`` for each of ``metrics`` ``name`` has (a pass@k only where the baseline
    has it too; the answer accuracy against the baseline's answer curve), matched or not."""
    theirs = results.get(baseline, {})
    return {m: matched_compare(results, details, name, baseline, m, confidence)
            for m in metrics if results[name].get(m) and (theirs.get(m) or not m.startswith("pass@"))}


def verdict_head(name: str, baseline: str, outcomes: Sequence[str]) -> str:
    """A verdict's first sentence from the :func:`outcome_of` of each comparison at matched compute
    (none: the two are not compared)."""
    better, worse, n = outcomes.count("better"), outcomes.count("worse"), len(outcomes)
    ahead = outcomes.count("ahead")
    what = "comparison at matched compute" if n == 1 else "comparisons at matched compute"
    if not n:
        return (f"**{name} is not compared with {baseline}**: they spend different compute at every metric "
                "(no verdict across compute).")
    if better == n:
        return (f"**{name} beats {baseline}** on every comparison at matched compute ({n}), and every difference is "
                "significant.")
    if better:
        return f"**{name} beats {baseline} on {better} of {n} {what}** (significant); not on the others."
    if worse:
        return f"**{name} does not beat {baseline}**: it is significantly worse on {worse} of {n} {what}."
    if ahead:
        return (f"**{name} does not beat {baseline}**: it is ahead on {ahead} of {n} {what}, "
                "but no difference is significant.")
    return (f"**{name} does not beat {baseline}**: it is level or behind on every comparison at matched compute, "
            "none significantly.")


def _adapter_verdict(results, details, name, baseline, metrics, confidence) -> str:
    same = identical_by_construction(details, name, baseline, metrics)
    if same:
        return (f"- **{name} is identical to {baseline} by construction**: it decodes every problem with "
                f"{baseline}'s action ({', '.join(f'`{a}`' for a in same)}), so both are scored on the same "
                "completions and every difference is 0.")
    info = method_info(results, details)
    found = verdict_comparisons(results, details, name, baseline, metrics, confidence)
    comps = {m: c for m, c in found.items() if c["matched"]}
    across = {m: c for m, c in found.items() if not c["matched"]}
    head = verdict_head(name, baseline, [outcome_of(c) for c in comps.values()])
    paired = all(c["paired"] for c in comps.values())
    unit = (
        f"paired {confidence:.0%} CI over problems"
        if paired
        else "no per-problem values: significant only where the two methods' intervals do not overlap"
    )

    texts = [difference_text(info, baseline, m, c) for m, c in comps.items()]
    seeds = []
    for m in dict.fromkeys([k for k in (_first_pass(comps), _first_answer(comps)) if k]):
        clause = seed_clause(per_seed_differences(details, name, baseline, m), _same_direction(comps[m]["diff"]),
                             confidence)
        if clause and not comps[m]["how"]:  # per seed only where both sides are the methods' own points
            seeds.append(f"{metric_label(m)} {clause}")
    seed_text = ("\n  Across seeds (the direction of the difference): " + "; ".join(seeds) + ".") if seeds else ""
    body = (f"\n  Difference in points ({unit}): " + "; ".join(texts) + ".") if texts else ""
    if across:
        body += "\n  Not compared (different compute, not a verdict): " + not_compared_text(across) + "."
    return f"- {head}" + body + seed_text


def difference_text(info: Mapping, baseline: str, metric: str, c: Mapping) -> str:
    """One difference of a verdict with what it was measured against: 'Pass@2 +1.25 [-0.40, +2.90]
    (vs `T=0.3`, 2.00 decodes)' (``c`` a :func:`matched_compare` result)."""
    extra = [f"vs `{a}`"] if (a := _k_action(info, baseline, metric)) else []
    if c["how"]:
        extra.append(f"{baseline} {c['how']}")
    if c["decodes"][0] is not None:
        extra.append(f"{c['decodes'][0]:.2f} decodes")
    return _diff_text(metric, c) + (f" ({', '.join(extra)})" if extra else "")


def not_compared_text(across: Mapping[str, Mapping]) -> str:
    """The comparisons a verdict leaves out because the compute differs ({metric: unmatched
    :func:`matched_compare` result}): 'Pass@4 at 3.60 decodes against 1.33 decodes; ...'."""
    return "; ".join(f"{metric_label(m)} at {_decodes_text(c['decodes'][0])} against {_against(c)}"
                     for m, c in across.items())


def _against(c: Mapping) -> str:
    """What the baseline spends where it could not be matched: its decodes, or the span of its answer curve."""
    if c.get("span"):
        return f"answers at {c['span'][0]:.2f}–{c['span'][1]:.2f} decodes"
    return _decodes_text(c["decodes"][1])


def _decodes_text(value: float | None) -> str:
    return "unknown decodes" if value is None else f"{value:.2f} decodes"


def _first_pass(comps) -> str | None:
    return next((m for m in comps if m.startswith("pass@")), None)


def _first_answer(comps) -> str | None:
    return next((m for m in comps if m.startswith(ANSWER_ACCURACY)), None)
