"""What a report says first: that nothing was solved, or that at its size the evidence cannot tell
the methods apart; one legend for the two ways an interval is printed; headers that do not repeat."""

from decoding_adapters.core.stats import INTERVAL_NOTE
from decoding_adapters.experiments import planning, presets, probe, report_sections
from decoding_adapters.reporting.cells import header as _header
from decoding_adapters.reporting.report import evidence_lines, write_report


def _entry(mean, half):
    return {"mean": mean, "ci_low": max(0.0, mean - half), "ci_high": min(1.0, mean + half)}


def _details(per_problem: dict[str, list[float]]) -> dict:
    n = len(next(iter(per_problem.values())))
    return {"problems": [f"p{i}" for i in range(n)], "config": {"confidence": 0.95},
            "per_problem": {name: {"pass@1": [[v] for v in values]} for name, values in per_problem.items()}}


def test_nothing_solved_comes_first_and_judges_no_target(tmp_path):
    results = {name: {"pass@1": _entry(0.0, 0.0), "pass@2": _entry(0.0, 0.0), "mean_length": {"mean": 4.0}}
               for name in ("Greedy", "Best", "Token w/ budget")}
    report = write_report(tmp_path, results, None).read_text()
    first = report.split("## Setup")[0]
    assert "Nothing was solved" in first and "--verifier math" in first
    assert report_sections.target_lines(results, None) == [
        "- **not judged**: nothing was solved, so no target can be met or missed at this size"]


def test_a_small_run_says_it_cannot_separate_the_methods():
    results = {"Greedy": {"pass@1": _entry(0.5, 0.45)}, "Best": {"pass@1": _entry(0.375, 0.4)}}
    details = _details({"Greedy": [1, 0, 1, 0, 1, 0, 1, 0], "Best": [1, 0, 0, 0, 1, 0, 1, 0]})
    [line] = evidence_lines(results, details)
    assert "At 8 problems the evidence cannot separate the methods" in line and "±45 points" in line
    # a large, clear difference is evidence: nothing to warn about
    many = _details({"Greedy": [0.0] * 40, "Best": [1.0] * 40})
    clear = {"Greedy": {"pass@1": _entry(0.0, 0.0)}, "Best": {"pass@1": _entry(1.0, 0.0)}}
    assert evidence_lines(clear, many) == []


def test_headers_do_not_repeat_the_label_and_the_legend_explains_both_forms(tmp_path):
    assert _header("Best token action", "Best token action (greedy)") == "Best token action (greedy)"
    assert _header("Greedy", "Greedy") == "Greedy"
    assert _header("Seq adapter", "Seq w/ budget") == "Seq adapter (Seq w/ budget)"
    results = {"Greedy": {"pass@1": _entry(0.25, 0.3)}, "Best": {"pass@1": _entry(0.5, 0.2)}}
    report = write_report(tmp_path, results, None).read_text()
    assert "[0.00, 55.00]" in report and "50.00 ± 20.00" in report and INTERVAL_NOTE in report


def test_the_time_fit_cuts_steps_seeds_and_samples_before_problems():
    seen_problem_cut = False
    for _steps, problems, _seeds, _samples in planning.FIT_LADDER:
        if problems < 1.0:
            seen_problem_cut = True
        else:
            assert not seen_problem_cut
    first_problem_cut = next(r for r in planning.FIT_LADDER if r[1] < 1.0)
    assert first_problem_cut[0] == min(r[0] for r in planning.FIT_LADDER) and first_problem_cut[2] < 1.0
    assert first_problem_cut[3] < 1.0
    slow = probe.REFERENCE_PROBE_TOKENS_PER_SECOND * 0.24  # the busy machine that cut problems to 8
    fitted, _ = planning.fit_to_minutes(presets.SIZES["default"], slow, 15)
    assert fitted.seeds == 1 and "seeds 3 -> 1" in planning.fit_note(presets.SIZES["default"], fitted, 15, slow)
