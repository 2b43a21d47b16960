"""The study report's own sections, written from a finished run: the targets (each checked on paired
per-problem differences), what the token runs trained on, and the cost (minutes per stage against
the plan, training throughput). The generic sections live in ``reporting``."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

from ..reporting.report import compare, nothing_solved, per_seed_differences, seed_clause, strongest_static
from . import pipeline
from .presets import ADAPTER_NAMES, TOKEN_MIXED
from .study_config import StudyConfig

__all__ = ["TOKEN_TARGET_GAIN", "DRAFT_TARGET_GAIN", "DRAFT_TARGET_DECODES", "target_lines", "token_data_section",
           "cost_section"]


def _metric_at(results: dict, metric: str) -> str:
    ks = sorted(int(m.split("@")[1]) for m in next(iter(results.values())) if m.startswith("pass@"))
    return {"first": f"pass@{ks[0]}", "last": f"pass@{ks[-1]}"}[metric]


TOKEN_TARGET_GAIN = 0.03
"""Token w/ budget's target: this much pass@1 over Greedy and over the per-token Mixed."""
DRAFT_TARGET_GAIN, DRAFT_TARGET_DECODES = 0.05, 1.5
"""The draft-gated adapter's target: this much pass@1 over the strongest static method, at no more
than this many decodes per problem."""

Diff = Callable[[str | None, str | None, str], "dict | None"]
"""(method a, method b, metric) -> the paired comparison of a minus b with its per-seed differences
(None when either is missing)."""
Check = tuple[str, list[tuple[str, dict, Callable[[float], bool]]], bool]
"""(target, [(label, comparison, per-seed bar)], met)."""


def _not_below(c: dict) -> bool:
    return (c["high"] if not math.isnan(c["high"]) else c["diff"]) >= 0


def _above(gain: float) -> Callable[[float], bool]:
    return lambda d: d >= gain and d > 0


def _token_checks(diff: Diff, p1: str) -> list[Check]:
    """Token w/ budget over Greedy and per-token Mixed; entropy-only below it."""
    checks = []
    tok = "Token w/ budget"
    gaps = [(f"vs {b}", diff(tok, b, p1)) for b in ("Greedy", TOKEN_MIXED)]
    if all(c for _, c in gaps):
        met = all(c["diff"] >= TOKEN_TARGET_GAIN and c["low"] > 0 for _, c in gaps)
        checks.append((f"{tok}: {p1} at least +{TOKEN_TARGET_GAIN * 100:g} points over Greedy and over per-token "
                       "Mixed, interval above 0", [(label, c, _above(TOKEN_TARGET_GAIN)) for label, c in gaps], met))
    c = diff("Token entropy-only", tok, p1)
    if c:
        checks.append((f"Token entropy-only below {tok} at {p1}", [("entropy-only minus full", c, lambda d: d < 0)],
                       c["diff"] < 0))
    return checks


def _draft_checks(diff: Diff, details: dict | None, p1: str, strongest: str) -> list[Check]:
    """The draft-gated adapter over the strongest static method, within its decodes per problem."""
    draft = "Draft-gated"
    c = diff(draft, strongest, p1)
    if not c:
        return []
    decodes = (details or {}).get("methods", {}).get(draft, {}).get("decodes_per_problem", {}).get(p1.split("@")[1])
    cheap = decodes is not None and decodes <= DRAFT_TARGET_DECODES
    spent = "" if decodes is None else f", {decodes:.2f} decodes per problem"
    return [(f"{draft}: {p1} at least +{DRAFT_TARGET_GAIN * 100:g} points over the strongest static "
             f"method ({strongest} on this split), interval above 0, at <= {DRAFT_TARGET_DECODES:g} decodes "
             f"per problem{spent}; a target across compute, not a verdict",
             [(f"vs {strongest}", c, _above(DRAFT_TARGET_GAIN))],
             c["diff"] >= DRAFT_TARGET_GAIN and c["low"] > 0 and cheap)]


def _sequence_checks(diff: Diff, p1: str, pmax: str, strongest: str, strongest_max: str) -> list[Check]:
    """Seq w/ budget against the strongest static method at the first and last k, and against Seq w/o budget."""
    checks = []
    seq = "Seq w/ budget"
    c = diff(seq, strongest, p1)
    if c:
        checks.append((f"{seq} not below the strongest static method at {p1} ({strongest}; interval not entirely "
                       "below 0)", [(f"vs {strongest}", c, lambda d: d >= 0)], _not_below(c)))
    c = diff(seq, strongest_max, pmax)
    if c and pmax != p1:
        checks.append((f"{seq} above the strongest static method at {pmax} ({strongest_max}), interval above 0",
                       [(f"vs {strongest_max}", c, _above(0.0))], c["low"] > 0))
    cs = [(m, diff(seq, "Seq w/o budget", m)) for m in dict.fromkeys((p1, pmax))]
    if all(c for _, c in cs):
        checks.append((f"{seq} not below Seq w/o budget (no interval entirely below 0)",
                       [(m, c, lambda d: d >= 0) for m, c in cs], all(_not_below(c) for _, c in cs)))
    return checks


def _comparison_text(c: dict, holds: Callable[[float], bool]) -> str:
    interval = "" if math.isnan(c["low"]) else f" [{c['low'] * 100:+.1f}, {c['high'] * 100:+.1f}]"
    seeds = seed_clause(c["seeds"], holds)
    return f"{c['diff'] * 100:+.1f}{interval}" + (f" ({seeds})" if seeds else "")


def target_lines(results: dict, details: dict | None, confidence: float = 0.95) -> list[str]:
    """The study's targets, each checked on paired per-problem differences: a markdown bullet per
    target saying whether it is met, with the difference and its interval in points, and on how many
    evaluation seeds the per-seed difference meets the target's bar."""
    if not results:
        return []
    if nothing_solved(results):
        return ["- **not judged**: nothing was solved, so no target can be met or missed at this size"]
    p1, pmax = _metric_at(results, "first"), _metric_at(results, "last")

    def diff(a: str | None, b: str | None, metric: str) -> dict | None:
        if a not in results or b not in results or metric not in results[a] or metric not in results[b]:
            return None
        c = compare(results, details, a, b, metric, confidence)
        return {**c, "seeds": per_seed_differences(details, a, b, metric)}

    strongest = strongest_static(results, details, p1)
    strongest_max = strongest_static(results, details, pmax)
    checks = [*_token_checks(diff, p1), *_draft_checks(diff, details, p1, strongest),
              *_sequence_checks(diff, p1, pmax, strongest, strongest_max)]
    lines = []
    for target, comps, met in checks:
        compared = "; ".join(f"{label} {_comparison_text(c, holds)}" for label, c, holds in comps)
        lines.append(f"- {'**met**' if met else '**not met**'}: {target} — {compared}")
    return lines
def token_data_section(prompts_file: Path, cfg: StudyConfig) -> str:
    """What the token runs trained and validated on: the prompt filter's counts (``token-prompts.json``)."""
    if not prompts_file.is_file():
        return ""
    r = json.loads(prompts_file.read_text())
    tok = cfg.token
    kept = r.get("kept_count", len(r.get("kept", [])))
    if "dropped_all_fail" not in r:
        return f"Training prompts: {kept} (no filter)."
    return (f"The prompt filter judged training prompts with the policy every token run starts from "
            f"({r.get('judged_by', 'start policy')}, {tok.filter_samples} samples each): it kept **{kept}** of "
            f"{r['train_prompts']} probed ({r['dropped_all_fail']} always failed, {r['dropped_all_pass']} always "
            f"passed; {r.get('wanted', '?')} wanted). Each run saw {r.get('distinct_prompts_per_run', '?')} distinct "
            f"training prompts ({tok.steps} steps x {tok.prompts_per_step}, epoch by epoch). Validation: "
            f"{r.get('val_problems', tok.val_problems)} problems x {tok.val_samples} samples per policy mode, the same "
            f"rows and seeds at every validation; a later step is kept only when its paired gain over step 0 "
            f"exceeds {tok.min_improvement_se:g} standard errors.")


def cost_section(clock: pipeline.StageClock, out: Path, cfg: StudyConfig, note: str = "") -> str:
    """Minutes per stage (measured against planned), what the time fit cut (``note``) and the
    training throughput figures."""
    lines = [note, ""] if note else []
    lines += ["| stage | planned (min) | spent (min, all runs) |", "| --- | ---: | ---: |"]
    spent = clock.total_minutes()
    for key, planned in clock.plan.items():
        measured = spent.get(key)
        lines.append(f"| {key} | {planned:.1f} | {'–' if measured is None else f'{measured:.1f}'} |")
    planned = sum(v for k, v in clock.plan.items() if k != "report")
    measured = sum(v for k, v in spent.items() if k != "report")
    lines.append(f"| **total** (without the report) | {planned:.1f} | {measured:.1f} |")
    text = "\n".join(lines) + "\n\nThe report stage's own time is not included (it is being written)."
    if planned > 0 and measured > 0:
        ratio = measured / planned
        text += (f" The run took **{ratio:.2f} x its plan** ({'within' if abs(ratio - 1) <= 0.10 else 'outside'} "
                 "10% of it); the plan is scaled to this machine by the decode probe at the run's first start.")
    rows = []
    for prefix in ("seq-budget", "tok-budget"):
        log_path = out / f"{prefix}-s0" / "train_log.jsonl"
        if not log_path.is_file():
            continue
        records = [json.loads(line) for line in log_path.read_text().splitlines() if line.strip()]
        steps = [r for r in records if r.get("step", 0) > 0 and "seconds" in r]
        if not steps:
            continue
        seconds = sum(r["seconds"] for r in steps) / len(steps)
        if prefix.startswith("tok"):
            rows_per_step = cfg.token.prompts_per_step * cfg.token.group_size
            length = sum(r.get("mean_length", 0.0) for r in steps) / len(steps)
            tokens = f"{rows_per_step * length:.0f}"
        else:
            budgets = cfg.sequence.parallel_budgets
            rows_per_step = cfg.sequence.prompts_per_step * sum(budgets) / len(budgets)
            tokens = "–"
        rows.append(f"| {ADAPTER_NAMES[prefix]} (seed 0) | {len(steps)} | {rows_per_step:.0f} | {tokens} | "
                    f"{seconds:.1f} | {60 / seconds:.1f} |")
    if rows:
        text += ("\n\n| training run | steps | rollouts / step | tokens / step | s / step | steps / min |\n"
                 "| --- | ---: | ---: | ---: | ---: | ---: |\n" + "\n".join(rows))
    return text


