"""The re-derivation script on the committed runs: every number of the README's results table and of
the published evidence run's report (docs/reproduce-sealed2) comes back from its eval_details.json
alone, and so does every verdict of the earlier runs (the old sealed split, docs/reproduce-sealed, and
the old test split, docs/reproduce: history);
the numbers the files cannot give are the known gaps below, named; a changed number is caught."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from decoding_adapters.reporting.rederive import Rederivation, RunFiles, check_table, markdown_section, rederive

ROOT = Path(__file__).resolve().parents[2]
SEALED = ROOT / "docs" / "reproduce-sealed2"
OLD_SEALED = ROOT / "docs" / "reproduce-sealed"  # the previous published run: history
RUN = ROOT / "docs" / "reproduce"  # the earlier run on the 200-problem test split: history

SEALED_GAPS = {"Head-room captured"}  # every draft's confidence and re-decode outcome is committed there
KNOWN_GAPS = {
    # the gates' choices are committed, the draft confidence they read only for seed 0's kept trajectories
    "Draft-gated: the draft confidence its choices read",
    "Confidence threshold (max_prob_min): the draft confidence its choices read",
    # re-decode outcomes exist only where some method re-decoded
    "re-decode outcomes",
    # measured on the selection's validation outcomes, not committed
    "Head-room captured",
}


@pytest.fixture(scope="module")
def committed():
    return rederive(SEALED, ROOT / "README.md")


def test_the_committed_run_rederives(committed):
    assert not committed.mismatches, "\n".join(committed.lines(verbose=False))
    assert {g.where for g in committed.gaps} == SEALED_GAPS
    # the strongest rule at 1.5, 2.5 and 4 decodes; the policy and its best single arm there and
    # against the draft gate
    rules = [c for c in committed.checks if c.where.startswith("Fixed rules: ")]
    assert len(rules) == 11 and all(c.ok for c in rules)


@pytest.mark.parametrize("run_dir,gaps", [(RUN, KNOWN_GAPS), (OLD_SEALED, SEALED_GAPS)])
def test_the_history_runs_rederive(run_dir, gaps):
    history = rederive(run_dir)
    assert not history.mismatches, "\n".join(history.lines(verbose=False))
    assert {g.where for g in history.gaps} == gaps


def test_every_published_row_and_verdict_is_checked(committed):
    where = [c.where for c in committed.checks]
    readme_rows = [line for line in (ROOT / "README.md").read_text().split("![", 1)[1].split("\n\n## ")[0]
                   .splitlines() if line.startswith("| ") and not line.startswith(("| method", "| ---"))]
    assert len({w.split(" / ")[0] for w in where if w.startswith("README table")}) == len(readme_rows)
    report = (SEALED / "report.md").read_text()
    bullets = re.findall(r"^- \*\*", markdown_section(report, "Verdict"), flags=re.M)
    assert sum(w.endswith(": claim") or w.endswith(": identical") for w in where) == len(bullets)
    levels = re.findall(r"^- \*\*(?:≤ )?\d[\d.]* decodes / problem:", markdown_section(report, "Accuracy per compute"),
                        flags=re.M)
    assert sum(w.endswith(": leader") for w in where) == len(levels)
    targets = re.findall(r"^- \*\*(?:not )?met\*\*", markdown_section(report, "Targets"), flags=re.M)
    assert sum(w.startswith("target") and ": " in w and "vs" not in w.split(":")[0] for w in where) == len(targets)


@pytest.mark.parametrize("run_dir,where,old,new", [
    (SEALED, "README.md", "| **32.0 ± 2.7** |", "| **32.1 ± 2.7** |"),
    (SEALED, "report.md", "per training seed +1.2 [-0.3, +2.8]", "per training seed +1.3 [-0.3, +2.8]"),
    (OLD_SEALED, "report.md", "per training seed +4.5 [+2.9, +6.2]", "per training seed +4.6 [+2.9, +6.2]"),
    (RUN, "report.md", "Pass@1 +1.12 [-1.17, +3.42];", "Pass@1 +1.12 [-1.07, +3.42];"),
    (RUN, "report.md", "Pass@1 per seed -0.6 / +3.1 / +0.9: holds on 2 of 3 seeds",
     "Pass@1 per seed -0.6 / +3.1 / +0.9: holds on every seed (3 of 3)"),
    (RUN, "report.md", "**≤ 4 decodes / problem: Draft-gated** leads", "**≤ 4 decodes / problem: Best** leads"),
    (RUN, "report.md", "- **met**: Seq w/ budget not below", "- **not met**: Seq w/ budget not below"),
    (RUN, "report.md", "| Draft-gated | 1 | 34% | 75.6 (393)", "| Draft-gated | 1 | 34% | 75.9 (393)"),
])
def test_a_changed_number_is_a_mismatch(tmp_path, run_dir, where, old, new):
    run = tmp_path / "run"
    run.mkdir()
    for name in ("eval_details.json", "report.md"):
        shutil.copy(run_dir / name, run / name)
    readme = tmp_path / "README.md"
    shutil.copy(ROOT / "README.md", readme)
    path = readme if where == "README.md" else run / where
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    assert len(rederive(run, readme if run_dir == SEALED else None).mismatches) == 1


def test_the_newer_fields_are_used_where_present():
    """family, the 'answer' compute entry and per-problem answer accuracy, as the next run writes them."""
    details = {
        "config": {"k_values": [1, 4], "seeds": 2, "confidence": 0.95},
        "problems": [{"id": f"p{i}"} for i in range(4)],
        "methods": {
            "Stop at first answer": {"kind": "greedy", "role": "stop at first answer", "family": "static",
                                     "decodes_per_problem": {"1": 1.0, "4": 1.0, "answer": 1.0},
                                     "tokens_per_problem": {"1": 20.0, "4": 20.0, "answer": 20.0}},
            "Attempt policy": {"kind": "draft", "role": "attempt", "family": "learned",
                               "decodes_per_problem": {"1": 1.5, "4": 4.0, "answer": 1.52},
                               "tokens_per_problem": {"1": 30.0, "4": 80.0, "answer": 31.0}},
        },
        "per_problem": {
            "Stop at first answer": {"answer_accuracy": [[1, 1], [0, 0], [1, 1], [0, 0]]},
            "Attempt policy": {"answer_accuracy": [[1, 1], [1, 0], [1, 1], [0, 0]]},
        },
    }
    run = RunFiles(details)
    assert run.family("Attempt policy") == "learned" and run.compute("Attempt policy", "decodes", "answer") == 1.52
    # per-problem means 1, 0.5, 1, 0: 62.5, half-width 3.1824 * 0.4787 / 2 = 76.2 points, clipped to [0, 100]
    table = [["method", "answer accuracy", "decodes / problem", "tokens / problem"],
             ["**Attempt policy**", "**62.5 [0.0, 100.0]**", "1.52", "31.0"],
             ["Stop at first answer", "50.0 [0.0, 100.0]", "1", "20"]]
    out = Rederivation()
    check_table(out, run, table, "README table")
    assert len(out.checks) == 6 and not out.mismatches, out.lines()
    # the same table with a wrong answer accuracy
    table[1][1] = "65.0 [0.0, 100.0]"
    out = Rederivation()
    check_table(out, run, table, "README table")
    assert len(out.mismatches) == 1
    # without the field, the family comes from the kind and role
    del details["methods"]["Stop at first answer"]["family"]
    assert run.family("Stop at first answer") == "static"


def test_a_report_written_now_rederives(tmp_path):
    """The report code's verdicts (with the interval over seeds) read back by the script."""
    from tests.reporting.test_report import fake_evaluation

    from decoding_adapters.reporting.report import write_report

    results, details = fake_evaluation({"Seq w/ budget": 0.15, "Token w/ budget": -0.3})
    out = tmp_path / "report"
    write_report(out, results, details)
    (out / "eval_details.json").write_text(json.dumps(details))
    result = rederive(out)
    assert not result.mismatches, "\n".join(result.lines(verbose=False))
    assert any("over seeds" in c.where for c in result.checks)
    assert any(c.where.endswith(": claim") for c in result.checks)


def test_a_target_line_with_the_interval_over_seeds_rederives():
    """A target written as the pipeline writes it (difference, per-seed clause with the interval over
    seeds) is read back; a wrong 'met' is caught."""
    from decoding_adapters.reporting.rederive import check_targets
    from decoding_adapters.reporting.verdicts import compare, per_seed_differences, seed_clause

    rows_a = [[0.9, 0.6, 0.8] if i % 3 else [0.2, 0.3, 0.1] for i in range(30)]
    rows_b = [[0.5, 0.5, 0.5] if i % 2 else [0.4, 0.4, 0.4] for i in range(30)]
    details = {"config": {"k_values": [1], "seeds": 3, "confidence": 0.95},
               "problems": [{"id": f"p{i}"} for i in range(30)],
               "methods": {"Adapter": {"kind": "draft", "role": "draft-gated", "decodes_per_problem": {"1": 1.3}},
                           "Stop at first answer": {"kind": "greedy", "role": "stop at first answer"}},
               "per_problem": {"Adapter": {"pass@1": rows_a}, "Stop at first answer": {"pass@1": rows_b}}}
    results = {n: {"pass@1": {"mean": 0.5, "ci_low": 0.4, "ci_high": 0.6}} for n in details["methods"]}
    c = compare(results, details, "Adapter", "Stop at first answer", "pass@1", 0.95)
    seeds = seed_clause(per_seed_differences(details, "Adapter", "Stop at first answer", "pass@1"),
                        lambda d: d >= 0.03)
    met = c["diff"] >= 0.03 and c["low"] > 0
    line = (f"- **{'met' if met else 'not met'}**: Adapter: pass@1 at least +3 points over Stop at first answer, "
            f"interval above 0, at <= 1.5 decodes per problem — vs Stop at first answer {c['diff'] * 100:+.1f} "
            f"[{c['low'] * 100:+.1f}, {c['high'] * 100:+.1f}] ({seeds})")
    assert "over seeds" in line
    out = Rederivation()
    check_targets(out, RunFiles(details), line)
    assert len(out.checks) == 5 and not out.mismatches and not out.gaps, out.lines()
    out = Rederivation()
    check_targets(out, RunFiles(details), line.replace("**met**" if met else "**not met**",
                                                       "**not met**" if met else "**met**"))
    assert len(out.mismatches) == 1


def _report_at_unmatched_compute(tmp_path):
    """A report written now where compute differs: Seq w/ budget spends 1.5 decodes at k = 2 against
    Best's 2, so its Pass@2 is not compared and its Answer (B=2) meets Best's curve interpolated."""
    from tests.reporting.test_report import fake_evaluation

    from decoding_adapters.reporting.report import write_report

    results, details = fake_evaluation({"Seq w/ budget": 0.15, "Token w/ budget": -0.3})
    for name, method in details["methods"].items():
        per_k = {"1": 1.0, "2": 2.0, "4": 4.0} if name in ("Best", "Seq w/o budget") else {"1": 1.0, "2": 1.0, "4": 1.0}
        method["decodes_per_problem"] = {"1": 1.0, "2": 1.5, "4": 4.0} if name == "Seq w/ budget" else per_k
        method["tokens_per_problem"] = {k: 30.0 * v for k, v in method["decodes_per_problem"].items()}
    out = tmp_path / "report"
    write_report(out, results, details)
    (out / "eval_details.json").write_text(json.dumps(details))
    return out


def test_a_report_at_unmatched_compute_rederives(tmp_path):
    out = _report_at_unmatched_compute(tmp_path)
    report = (out / "report.md").read_text()
    assert "Not compared (different compute, not a verdict)" in report and "interpolated between" in report
    result = rederive(out)
    assert not result.mismatches, "\n".join(result.lines(verbose=False))
    where = [c.where for c in result.checks]
    assert any(w.endswith(": not compared") for w in where)
    levels = re.findall(r"^- \*\*[\d.]+ decodes / problem", markdown_section(report, "Accuracy per compute"),
                        flags=re.M)
    assert levels and sum(w.startswith("compute ") and w.endswith(": leader") for w in where) == len(levels)
    assert any(w.startswith("compute table") and "Answer (B=" in w for w in where)
    assert any("interpolated" in c.derived for c in result.checks)


@pytest.mark.parametrize("old,new", [
    ("Pass@1 +14.94 [+13.82, +16.06] ✔", "Pass@1 +14.95 [+13.82, +16.06] ✔"),  # a difference
    ("Pass@2 at 1.50 decodes against 2.00 decodes", "Pass@2 at 1.50 decodes against 1.50 decodes"),  # compute
    ("**Seq w/ budget beats Best** on every", "**Seq w/ budget beats Best** on almost every"),  # the claim
    ("Best interpolated between its Answer (B=1) and Answer (B=2)",
     "Best interpolated between its Answer (B=1) and Answer (B=4)"),  # what the answer was measured against
    ("next: Best at 55.9 (interpolated", "next: Best at 56.9 (interpolated"),  # a compute level
])
def test_a_changed_verdict_written_now_is_a_mismatch(tmp_path, old, new):
    out = _report_at_unmatched_compute(tmp_path)
    path = out / "report.md"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    assert len(rederive(out).mismatches) == 1


def test_draft_gaps_close_when_the_run_commits_every_confidence_and_redecode_outcome():
    from decoding_adapters.reporting.rederive import draft_gaps

    problems = [{"id": f"p{i}"} for i in range(3)]
    draft = {"k_values": [1], "choices_by_seed": [[[0], [1], [0]], [[0], [0], [0]]],
             "confidence": {p["id"]: {"max_prob_min": 0.5} for p in problems},
             "redecode_outcomes": [[[1.0], [0.0], [0.5]], [[0.0], [1.0], [1.0]]]}
    details = {"problems": problems, "config": {"seeds": 2}, "draft": {"Draft-gated": draft},
               "methods": {"Draft-gated": {"kind": "draft", "family": "learned"}}}
    out = Rederivation()
    draft_gaps(out, RunFiles(details))
    assert out.gaps == []
    draft["redecode_outcomes"][1][2] = [None]  # no method decoded a re-decode there
    del draft["confidence"]["p1"]
    out = Rederivation()
    draft_gaps(out, RunFiles(details))
    assert [g.where for g in out.gaps] == ["Draft-gated: the draft confidence its choices read", "re-decode outcomes"]
    assert "1 of 6" in out.gaps[1].reason
