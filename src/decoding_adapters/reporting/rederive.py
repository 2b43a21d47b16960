"""Re-derive a published run's numbers from its committed files alone.

A reader's check, not the report's own code path: it reads ``eval_details.json`` (per problem and
seed, every method's scores, compute and draft choices) and recomputes, from its per-problem values,
every number of the README's results table and of the report's verdicts (paired differences and
their intervals, the per-seed directions, the compute-level leaders, the targets, the draft-gated
table), printing each next to the published one. A number the committed files cannot give is named
as a gap, never skipped.

Every field of ``eval_details.json`` is read in one place, :class:`.run_files.RunFiles`; it uses the newer
fields where a run has them (a method's ``family``, ``per_problem[name]["answer_accuracy"]``, the
``"answer"`` entry of ``decodes_per_problem`` / ``tokens_per_problem``) and derives them otherwise.

The verdict rules follow what the files say (:attr:`RunFiles.matched_compute`). A run that records a
method's ``family`` or any per-problem answer accuracy was written under the rules of
:mod:`.verdicts` now: only the same metric at matched compute is a verdict, the rest is listed as
not compared; each compute level ranks answer accuracy only. Its verdicts and compute levels are
re-derived with the very functions the report uses (:func:`.verdicts.verdict_comparisons`,
:func:`.verdicts.verdict_head`, :func:`.compute.compute_verdicts`, ...), fed with the per-problem
values of ``eval_details.json`` and the means computed from them, never the report's or
``results.json``'s numbers. A run without those fields (the committed ``docs/reproduce``) was written
under the earlier rules: every pass@k against the baseline's pass@k, whatever the compute, and
compute levels ranking pass@k within a decode budget; those are re-derived by those rules here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from ..core.stats import paired_ci, problem_interval, problem_means, seed_interval
from ..evaluation.methods import ANSWER_ACCURACY
from .cells import answer_metric, is_rate, method_info, metric_columns
from .compute import compute_verdicts
from .rules import verdict_lines
from .run_files import RunFiles
from .verdicts import difference_text, not_compared_text, outcome_of, verdict_comparisons, verdict_head

__all__ = ["RunFiles", "Check", "Gap", "Rederivation", "rederive", "readme_table", "markdown_section"]

TOLERANCE = 1e-9


# ---- results ---------------------------------------------------------------------------------


@dataclass
class Check:
    """One published number (or claim) and what the committed files give."""

    where: str
    published: str
    derived: str

    @property
    def ok(self) -> bool:
        return self.published == self.derived


@dataclass
class Gap:
    """A published number the committed files cannot give, and why."""

    where: str
    reason: str


@dataclass
class Rederivation:
    checks: list[Check] = field(default_factory=list)
    gaps: list[Gap] = field(default_factory=list)

    @property
    def mismatches(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]

    def check(self, where: str, published: str, derived: str) -> None:
        self.checks.append(Check(where, published.strip(), derived.strip()))

    def lines(self, verbose: bool = True) -> list[str]:
        out = []
        for c in self.checks:
            if verbose or not c.ok:
                mark = "ok  " if c.ok else "DIFF"
                out.append(f"{mark} {c.where}: published {c.published!r}, derived {c.derived!r}")
        out += [f"GAP  {g.where}: {g.reason}" for g in self.gaps]
        out.append(f"{len(self.checks)} numbers checked, {len(self.mismatches)} mismatches, {len(self.gaps)} gaps")
        return out


# ---- markdown parsing -----------------------------------------------------------------------------


def markdown_section(text: str, heading: str) -> str:
    """The body of the ``## heading`` section of a markdown text ('' when absent)."""
    m = re.search(rf"^## {re.escape(heading)}\s*$(.*?)(?=^## |\Z)", text, flags=re.M | re.S)
    return m.group(1) if m else ""


def _tables(text: str) -> list[list[list[str]]]:
    """Every markdown table of ``text``: rows of cells (the separator row dropped)."""
    tables, current = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not all(re.fullmatch(r":?-+:?", c) for c in cells):
                current.append(cells)
        elif current:
            tables.append(current)
            current = []
    return tables


def readme_table(readme: str) -> list[list[str]]:
    """The README's results table: the first table after the figure near its top."""
    start = readme.find("![")
    tables = _tables(readme[start:] if start >= 0 else readme)
    if not tables:
        raise ValueError("the README has no results table")
    return tables[0]


def _plain(cell: str) -> str:
    return cell.replace("**", "").replace("−", "-").strip()


_NUMBER = r"[+-]?\d+(?:\.\d+)?"


def _decimals(text: str) -> int:
    return len(text.split(".")[1]) if "." in text else 0


def _fmt(x: float, digits: int, sign: bool = False) -> str:
    return f"{round(x, digits) + 0.0:{'+' if sign else ''}.{digits}f}"


def _resolve(label: str, names: Sequence[str]) -> str | None:
    """The method a table row or a sentence names: the exact name, else the one whose name without
    its parenthesis equals the label without its own (unique)."""
    label = _plain(label)
    if label in names:
        return label
    stem = re.sub(r"\s*\(.*\)\s*$", "", label)
    hits = [n for n in names if n == stem or re.sub(r"\s*\(.*\)\s*$", "", n) == stem]
    return hits[0] if len(hits) == 1 else None


def _names_in(text: str, names: Sequence[str]) -> list[str]:
    """Methods named in ``text``, in order of appearance (longest name first at a position)."""
    found = []
    for n in sorted(names, key=len, reverse=True):
        for m in re.finditer(re.escape(n), text):
            if not any(s <= m.start() < e for s, e, _ in found):
                found.append((m.start(), m.end(), n))
    return [n for _, _, n in sorted(found)]


def _name_at(text: str, names: Sequence[str]) -> str | None:
    """The (longest) method name ``text`` starts with."""
    hits = [n for n in names if text.startswith(n)]
    return max(hits, key=len) if hits else None


# ---- the numbers ---------------------------------------------------------------------------------


def _metric_of(header: str) -> str | None:
    h = _plain(header).lower()
    if m := re.fullmatch(r"pass@(\d+)", h):
        return f"pass@{m.group(1)}"
    if m := re.fullmatch(r"answer \(b=(\d+)\)", h):
        return answer_metric(int(m.group(1)))
    if h.startswith("answer accuracy"):
        return "answer_accuracy"
    if h.startswith("mean length"):
        return "mean_length"
    return None


def _interval_text(run: RunFiles, name: str, metric: str, mean_digits: int, published: str) -> str:
    """``name``'s ``metric`` over distinct problems printed as the published cell is (``m ± h`` or
    ``m [low, high]``), in points for scores, tokens for lengths."""
    scale = 1.0 if metric == "mean_length" else 100.0
    bounds = None if metric == "mean_length" else (0.0, 1.0)
    mean, low, high = problem_interval(run.rows(name, metric), run.confidence, bounds)
    if "±" in published:
        digits = _decimals(published.split("±")[1].strip())
        return f"{_fmt(mean * scale, mean_digits)} ± {_fmt((high - low) / 2 * scale, digits)}"
    if "[" in published:
        low_text, high_text = _fmt(low * scale, mean_digits), _fmt(high * scale, mean_digits)
        return f"{_fmt(mean * scale, mean_digits)} [{low_text}, {high_text}]"
    return _fmt(mean * scale, mean_digits)


def _compute_text(run: RunFiles, name: str, unit: str, ks: Sequence, published: str) -> str | None:
    parts = [p.strip() for p in published.split("·")]
    values = [run.compute(name, unit, k) for k in ks]
    if None in values or len(parts) != len(values):
        return None
    return " · ".join(_fmt(v, _decimals(p)) for v, p in zip(values, parts))


def check_table(out: Rederivation, run: RunFiles, table: list[list[str]], where: str) -> None:
    """Every score and compute cell of a table whose rows name methods."""
    head = table[0]
    for row in table[1:]:
        name = _resolve(row[0], run.methods)
        if name is None:
            out.gaps.append(Gap(f"{where}: row {_plain(row[0])!r}", "names no method of eval_details.json"))
            continue
        for header, cell in zip(head[1:], row[1:]):
            cell = _plain(cell)
            label = f"{where}: {name} / {_plain(header)}"
            if (metric := _metric_of(header)) is not None:
                if not run.has_metric(name, metric):
                    out.gaps.append(Gap(label, f"no per-problem {metric} committed for {name}"))
                    continue
                number = re.match(_NUMBER, cell)
                out.check(label, cell, _interval_text(run, name, metric, _decimals(number.group(0)) if number else 1,
                                                      cell))
            elif (m := re.match(r"(decodes|tokens) / problem(?: \((?:B = )?k = ([\d ·]+)\))?", _plain(header))):
                ks = [int(k) for k in m.group(2).split("·")] if m.group(2) else ["answer"]
                derived = _compute_text(run, name, m.group(1), ks, cell)
                if derived is None:
                    out.gaps.append(Gap(label, f"{m.group(1)} per problem not committed for every k of {name}"))
                else:
                    out.check(label, cell, derived)


def _paired(run: RunFiles, a: str, b: str, metric: str, metric_b: str | None = None) -> tuple[float, float, float]:
    """(diff, low, high) of ``a`` minus ``b`` over distinct problems, clipped to [-1, 1]."""
    diff, low, high = paired_ci(problem_means(run.rows(a, metric)), problem_means(run.rows(b, metric_b or metric)),
                                run.confidence)
    return diff, max(low, -1.0), min(high, 1.0)


def _per_seed(run: RunFiles, a: str, b: str, metric: str) -> list[float]:
    """``a`` minus ``b`` per evaluation seed (a row scored once stands for every seed)."""
    rows_a, rows_b = run.rows(a, metric), run.rows(b, metric)

    def at(row, s):
        return row[s] if s < len(row) else row[-1]

    return [sum(at(x, s) - at(y, s) for x, y in zip(rows_a, rows_b)) / len(rows_a) for s in range(run.seeds)]


def _outcome(diff: float, low: float, high: float) -> str:
    if low > 0:
        return "better"
    if high < 0:
        return "worse"
    return "ahead" if diff > 0 else "behind" if diff < 0 else "tie"


def _holds_text(count: int, n: int) -> str:
    return f"on every seed ({count} of {n})" if count == n else f"on {count} of {n} seeds"


_LABEL = r"Pass@\d+|Answer \(B=\d+\)|Answer accuracy|Answer"
_DIFF = re.compile(rf"({_LABEL}) ({_NUMBER}) \[({_NUMBER}), ({_NUMBER})\]( ✔| ✘)?")
_SEEDS = re.compile(rf"({_LABEL}) per seed ([^:(]+?)(?: \(over seeds ([^)]*)\))?: holds "
                    r"(on every seed \(\d+ of \d+\)|on \d+ of \d+ seeds)")


def _metric_key(label: str) -> str:
    """The metric a printed label names: ``Pass@k``, ``Answer (B=k)``, ``Answer`` / ``answer accuracy``."""
    if m := re.fullmatch(r"Answer \(B=(\d+)\)", label):
        return answer_metric(int(m.group(1)))
    return ANSWER_ACCURACY if label.lower().startswith("answer") else label.lower()


def _seed_checks(out: Rederivation, run: RunFiles, where: str, a: str, b: str, text: str, holds) -> None:
    """The per-seed differences, their interval over seeds where printed, and the holds count."""
    for m in _SEEDS.finditer(text):
        metric = _metric_key(m.group(1))
        diffs = _per_seed(run, a, b, metric)
        label = f"{where}: {m.group(1)} per seed"
        out.check(label, m.group(2), " / ".join(_fmt(d * 100, 1, True) for d in diffs))
        if m.group(3):
            mean, low, high = seed_interval(diffs, run.confidence)
            out.check(f"{label}, over seeds", m.group(3),
                      f"{_fmt(mean * 100, 1, True)} [{_fmt(low * 100, 1, True)}, {_fmt(high * 100, 1, True)}]")
        overall = _paired(run, a, b, metric)[0]
        count = sum(1 for d in diffs if holds(d, overall))
        out.check(f"{label}, holds", m.group(4), _holds_text(count, len(diffs)))


def _direction(d: float, overall: float) -> bool:
    return d > 0 if overall > 0 else d < 0 if overall < 0 else abs(d) < 1e-12


def check_verdicts(out: Rederivation, run: RunFiles, section: str) -> None:
    """The report's Verdict section: every adapter-against-baseline paragraph."""
    names = run.methods
    for block in re.split(r"\n(?=- \*\*)", section):
        if not block.startswith("- **"):
            continue
        head = block[4:].split("**")[0]
        a = _name_at(head, names)
        rest = head[len(a):] if a else ""
        verb = re.match(r" (beats|does not beat|is identical to|is not compared with) ", rest)
        b = _name_at(rest[verb.end():], names) if verb else None
        if not a or not b:
            out.gaps.append(Gap(f"verdict {head!r}", "names no pair of methods of eval_details.json"))
            continue
        where = f"verdict {a} vs {b}"
        if verb.group(1) == "is identical to":
            worst = max(abs(d) for k in run.k_values for d in _per_seed(run, a, b, f"pass@{k}"))
            out.check(f"{where}: identical", "every difference 0", "every difference 0" if worst < TOLERANCE
                      else f"differs by {worst:.4f}")
            continue
        if run.matched_compute:
            _check_matched_verdict(out, run, where, a, b, block)
            continue
        outcomes = []
        for m in _DIFF.finditer(block):
            metric = _metric_key(m.group(1))
            diff, low, high = _paired(run, a, b, metric)
            outcome = _outcome(diff, low, high)
            outcomes.append(outcome)
            mark = {"better": " ✔", "worse": " ✘"}.get(outcome, "")
            out.check(f"{where}: {m.group(1)}", m.group(0),
                      f"{m.group(1)} {_fmt(diff * 100, 2, True)} [{_fmt(low * 100, 2, True)}, "
                      f"{_fmt(high * 100, 2, True)}]{mark}")
        better, worse, n = outcomes.count("better"), outcomes.count("worse"), len(outcomes)
        if n and better == n:
            claim = "beats on every pass@k"
        elif better:
            claim = f"beats on {better} of {n}"
        elif worse:
            claim = f"significantly worse on {worse} of {n}"
        else:
            claim = "no significant difference"
        published = ("beats on every pass@k" if "on every pass@k, and every difference is significant" in block
                     else f"beats on {m.group(1)} of {m.group(2)}" if (m := re.search(r"beats .+ on (\d+) of (\d+) "
                                                                                     r"pass@k metrics\*\*", block))
                     else f"significantly worse on {m.group(1)} of {m.group(2)}"
                     if (m := re.search(r"significantly worse on (\d+) of (\d+)", block))
                     else "no significant difference")
        out.check(f"{where}: claim", published, claim)
        _seed_checks(out, run, where, a, b, block, lambda d, overall: _direction(d, overall))


def _check_matched_verdict(out: Rederivation, run: RunFiles, where: str, a: str, b: str, block: str) -> None:
    """One verdict under the matched-compute rules (module docstring): its first sentence, each
    difference with what it was measured against, the comparisons left out for their compute, and
    the per-seed clauses, each re-made from the per-problem values by the report's own functions."""
    results = run.rate_results()
    info = method_info(results, run.details)
    metrics = [m for m in metric_columns(results) if is_rate(m)]
    found = verdict_comparisons(results, run.details, a, b, metrics, run.confidence)
    comps = {m: c for m, c in found.items() if c["matched"]}
    across = {m: c for m, c in found.items() if not c["matched"]}
    head = block[2:].split("\n")[0]
    out.check(f"{where}: claim", head, verdict_head(a, b, [outcome_of(c) for c in comps.values()]))
    line = re.search(r"^  Difference in points \([^)]*\): (.*)\.$", block, flags=re.M)
    published = {}
    for item in (line.group(1).split("; ") if line else []):
        label = re.match(_LABEL, item)
        published[_metric_key(label.group(0)) if label else item] = item
    for metric in dict.fromkeys([*comps, *published]):
        label = f"{where}: {metric}"
        if metric not in comps:
            out.check(label, published[metric], "not a comparison at matched compute")
        else:
            out.check(label, published.get(metric, "absent"), difference_text(info, b, metric, comps[metric]))
    line = re.search(r"^  Not compared \(different compute, not a verdict\): (.*)\.$", block, flags=re.M)
    if line or across:
        out.check(f"{where}: not compared", line.group(1) if line else "absent",
                  not_compared_text(across) if across else "absent")
    _seed_checks(out, run, where, a, b, block, lambda d, overall: _direction(d, overall))


_LEADS = re.compile(
    rf"- \*\*≤ ({_NUMBER}) decodes / problem: (.+?)\*\* leads with ({_NUMBER}) \((Pass@\d+), ({_NUMBER}) decodes, "
    rf"({_NUMBER}) tokens per problem\)(?:; next: (.+?) \((Pass@\d+), ({_NUMBER}) decodes, ({_NUMBER}) tokens\) at "
    rf"({_NUMBER}); difference ({_NUMBER}) \[({_NUMBER}), ({_NUMBER})\])?")


def _points(run: RunFiles) -> list[dict]:
    """Every (method, pass@k) with its mean and compute."""
    points = []
    for i, name in enumerate(run.methods):
        for k in run.k_values:
            metric = f"pass@{k}"
            decodes, tokens = run.compute(name, "decodes", k), run.compute(name, "tokens", k)
            if decodes is None or tokens is None or not run.has_metric(name, metric):
                continue
            mean = sum(problem_means(run.rows(name, metric))) / run.problems
            points.append({"method": name, "metric": metric, "mean": mean, "decodes": decodes, "tokens": tokens,
                           "order": i})
    return points


def check_compute_levels(out: Rederivation, run: RunFiles, section: str) -> None:
    """'Who wins at each compute level': the leader and the next method within each compute, their
    scores and compute, and the paired difference."""
    if run.matched_compute:
        _check_matched_levels(out, run, section)
        return
    points = _points(run)
    for m in _LEADS.finditer(section):
        level = float(m.group(1))
        best: dict[str, dict] = {}
        for p in sorted((p for p in points if p["decodes"] <= level + 1e-6),
                        key=lambda p: (-p["mean"], p["decodes"], p["tokens"])):
            best.setdefault(p["method"], p)
        ranked = sorted(best.values(), key=lambda p: (-p["mean"], p["decodes"], p["tokens"], p["order"]))
        where = f"compute ≤ {m.group(1)} decodes"

        def describe(p):
            return (f"{p['method']} {p['metric'].replace('pass', 'Pass')} {_fmt(p['mean'] * 100, 1)} "
                    f"{p['decodes']:.2f} decodes {p['tokens']:.1f} tokens")

        out.check(f"{where}: leader", f"{m.group(2)} {m.group(4)} {m.group(3)} {m.group(5)} decodes {m.group(6)} "
                                      "tokens", describe(ranked[0]))
        if m.group(7) and len(ranked) > 1:
            second = ranked[1]
            out.check(f"{where}: next", f"{m.group(7)} {m.group(8)} {m.group(11)} {m.group(9)} decodes "
                                        f"{m.group(10)} tokens", describe(second))
            diff, low, high = _paired(run, ranked[0]["method"], second["method"], ranked[0]["metric"],
                                      second["metric"])
            out.check(f"{where}: difference", f"{m.group(12)} [{m.group(13)}, {m.group(14)}]",
                      f"{_fmt(diff * 100, 2, True)} [{_fmt(low * 100, 2, True)}, {_fmt(high * 100, 2, True)}]")


def _check_matched_levels(out: Rederivation, run: RunFiles, section: str) -> None:
    """Each compute level under the matched-compute rules (answer accuracy only, every method at the
    level's compute), re-made whole by the report's own :func:`.compute.compute_verdicts` from the
    per-problem values and compared line by line."""
    derived = {}
    for line in compute_verdicts(run.rate_results(), run.details, run.confidence):
        derived[line.split("**")[1].split(":")[0]] = line
    published = {m.group(1): m.group(0) for m in re.finditer(r"^- \*\*([\d.]+ decodes / problem):.*$", section,
                                                             flags=re.M)}
    for level in dict.fromkeys([*published, *derived]):
        out.check(f"compute {level}: leader", published.get(level, "absent"), derived.get(level, "absent"))


_TARGET_SEGMENT = re.compile(
    rf"(?:vs (?P<base>.+?)|(?P<metric>pass@\d+|answer accuracy)|(?P<label>.+?)) (?P<d>{_NUMBER}) "
    rf"\[(?P<l>{_NUMBER}), (?P<h>{_NUMBER})\] \((?P<seeds>per seed .*)\)$")


def _target_holds(claim: str):
    """A target's criterion on one seed's difference, from its wording."""
    if m := re.search(r"at least \+(\d+(?:\.\d+)?) points", claim):
        bar = float(m.group(1)) / 100
        return lambda d, overall: d >= bar - TOLERANCE
    if "not below" in claim:
        return lambda d, overall: d >= -TOLERANCE
    if " above " in claim:
        return lambda d, overall: d > TOLERANCE
    if " below " in claim:
        return lambda d, overall: d < -TOLERANCE
    return None


def _target_met(claim: str, diff: float, low: float, high: float) -> bool | None:
    """Whether one difference meets a target, from its wording (None: the wording gives no rule)."""
    if m := re.search(r"at least \+(\d+(?:\.\d+)?) points", claim):
        return diff >= float(m.group(1)) / 100 - TOLERANCE and ("interval above 0" not in claim or low > 0)
    if "not below" in claim:
        return not high < 0
    if " above " in claim:
        return low > 0 if "interval above 0" in claim else diff > 0
    if " below " in claim:
        return diff < 0
    return None


def check_targets(out: Rederivation, run: RunFiles, section: str) -> None:
    """The report's Targets: each difference, its per-seed values and the count that meets the
    target's own criterion."""
    names = run.methods
    for line in section.splitlines():
        m = re.match(r"- \*\*(met|not met)\*\*: (.*)", line)
        if not m or " — " not in m.group(2):
            continue
        claim, evidence = m.group(2).split(" — ", 1)
        named = _names_in(claim, names)
        metrics = re.findall(r"pass@\d+|answer accuracy", claim)
        if not named:
            out.gaps.append(Gap(f"target {claim[:60]!r}", "names no method of eval_details.json"))
            continue
        subject, holds, met = named[0], _target_holds(claim), []
        for part in evidence.split("; "):
            seg = _TARGET_SEGMENT.match(part.strip())
            if seg is None:
                out.gaps.append(Gap(f"target {claim[:60]!r}", f"cannot read {part.strip()[:50]!r}"))
                continue
            base = _resolve(seg.group("base"), names) if seg.group("base") else (named[1] if len(named) > 1 else None)
            metric = seg.group("metric") or (metrics[-1] if metrics else None)
            if base is None or metric is None:
                out.gaps.append(Gap(f"target {claim[:60]!r}", f"cannot tell what {seg.group(0)[:40]!r} compares"))
                continue
            metric = _metric_key(metric)
            where = f"target {subject} vs {base} {metric}"
            diff, low, high = _paired(run, subject, base, metric)
            out.check(where, f"{seg.group('d')} [{seg.group('l')}, {seg.group('h')}]",
                      f"{_fmt(diff * 100, 1, True)} [{_fmt(low * 100, 1, True)}, {_fmt(high * 100, 1, True)}]")
            met.append(_target_met(claim, diff, low, high))
            label = "Answer accuracy" if metric == "answer_accuracy" else metric.replace("pass", "Pass")
            seeds = label + " " + seg.group("seeds")
            if holds is None:
                out.gaps.append(Gap(where, "the target's wording gives no per-seed criterion to count"))
                continue
            _seed_checks(out, run, where, subject, base, seeds, holds)
        bound = re.search(r"at <= (\d+(?:\.\d+)?) decodes per problem", claim)
        if bound and metrics:
            decodes = run.compute(subject, "decodes", metrics[-1].split("@")[1] if "@" in metrics[-1] else "answer")
            met.append(decodes is not None and decodes <= float(bound.group(1)) + TOLERANCE)
        if None in met or not met:
            out.gaps.append(Gap(f"target {claim[:60]!r}", "its wording gives no criterion to judge met / not met"))
        else:
            out.check(f"target {subject}: {claim[:60]}", m.group(1), "met" if all(met) else "not met")


def check_draft_table(out: Rederivation, run: RunFiles, section: str) -> None:
    """The draft-gated table: the re-decoded share and the score where kept and where re-decoded,
    from the committed choices and per-problem scores."""
    for row in (_tables(section) or [[]])[0][1:]:
        name = _resolve(row[0], run.draft_methods)
        if name is None:
            continue
        k = int(row[1])
        ks, choices = run.draft_choices(name)
        column = ks.index(k)
        rows = run.rows(name, f"pass@{k}")
        kept, redone = [], []
        for s, per_problem in enumerate(choices):
            for i, per_k in enumerate(per_problem):
                value = rows[i][s] if s < len(rows[i]) else rows[i][-1]
                (kept if per_k[column] == 0 else redone).append(value)
        cells = len(kept) + len(redone)

        def part(values):
            return f"{_fmt(100 * sum(values) / len(values), 1)} ({len(values)})" if values else "–"

        out.check(f"draft table {name} k={k}", " | ".join(row[2:5]),
                  f"{round(100 * len(redone) / cells):.0f}% | {part(kept)} | {part(redone)}")


def draft_gaps(out: Rederivation, run: RunFiles) -> None:
    """What a reader needs to audit the draft-gated comparisons and the files do not hold."""
    for name in run.draft_methods:
        if run.family(name) == "control":  # the random gate reads seeded uniforms, not the draft
            continue
        have = run.confidence_problems(name)
        if len(have) < run.problems:
            out.gaps.append(Gap(f"{name}: the draft confidence its choices read",
                                f"committed for {len(have)} of {run.problems} problems: its choices are committed, "
                                "the confidence behind them is not, so a choice cannot be re-made from the files"))
    if run.draft_methods:
        recorded = [run.details["draft"][n].get("redecode_outcomes") for n in run.draft_methods]
        if any(recorded):  # every re-decode outcome the evaluation decoded, per seed, problem and action
            missing = sum(1 for s in range(run.seeds) for i in range(run.problems)
                          if not any(r[s][i] and any(v is not None for v in r[s][i]) for r in recorded if r))
        else:
            # a re-decode's own pass@1 is committed only where some method re-decoded at the first k (a
            # larger k mixes it with the draft's outcome)
            choices = [run.draft_choices(n)[1] for n in run.draft_methods]
            missing = sum(1 for s in range(run.seeds) for i in range(run.problems)
                          if not any(c[s][i][0] for c in choices if s < len(c)))
        if missing:
            out.gaps.append(Gap("re-decode outcomes", f"{missing} of {run.seeds * run.problems} (seed, problem) "
                                "cells have no committed re-decode outcome at the first k (no method re-decoded "
                                "there): a gate at another re-decode share cannot be re-scored from the files"))


def check_rules_section(out: Rederivation, run: RunFiles, section: str) -> None:
    """The fixed-rules section's verdicts (the strongest rule at each compute level with its interval
    against the runner-up, each learned curve's per-seed, pooled and across-seed differences there and
    against the draft-gated adapter), recomputed from the committed per-problem values with the
    section's own functions: each line must be in the published section, word for word."""
    if not section.strip():
        return
    published = {line.strip() for line in section.splitlines() if line.startswith("- ")}
    for group in verdict_lines(run.details, run.confidence):
        for line in group:
            label = line[2:60]
            out.check(f"Fixed rules: {label}", line if line in published else "(not in the report)", line)


def rederive(folder: Path | str, readme: Path | str | None = None) -> Rederivation:
    """Re-derive the README's results table (``readme``, if given) and every verdict of
    ``folder/report.md`` from ``folder/eval_details.json`` alone."""
    folder = Path(folder)
    run, out = RunFiles.load(folder), Rederivation()
    if readme is not None:
        check_table(out, run, readme_table(Path(readme).read_text()), "README table")
    report = (folder / "report.md").read_text()
    check_verdicts(out, run, markdown_section(report, "Verdict"))
    compute = markdown_section(report, "Accuracy per compute")
    for table in _tables(compute)[:1]:
        check_table(out, run, table, "compute table")
    check_compute_levels(out, run, compute)
    check_targets(out, run, markdown_section(report, "Targets"))
    check_draft_table(out, run, markdown_section(report, "Draft-gated methods"))
    check_rules_section(out, run, markdown_section(report, "Fixed rules"))
    draft_gaps(out, run)
    if markdown_section(report, "Head-room captured"):
        out.gaps.append(Gap("Head-room captured", "the head-room is measured on the selection's validation "
                            "outcomes (outcomes.jsonl), which are not committed"))
    return out
