"""The report's extra sections for the reproduce run: truncation per budget and training curves."""

import json

from decoding_adapters.reporting.report import training_curve_section, truncation_section


def test_truncation_section_lists_every_budget_and_marks_the_choice():
    stats = [{"token_budget": b, "rows": 100, "mean_length": m, "truncated_fraction": f, "max_length": b}
             for b, m, f in ((48, 32.5, 0.30), (16, 14.6, 0.77))]
    text = truncation_section(stats, chosen=48, max_truncated=0.35)
    assert text.index("| 16 |") < text.index("| 48 (chosen) |") and "77.0" in text and "32.5" in text
    assert "**48**" in text and "35%" in text and "greedy accuracy" not in text
    assert truncation_section([]) == ""
    scored = [dict(st, greedy_reward=r) for st, r in zip(stats, (0.455, 0.41))]
    text = truncation_section(scored, chosen=48, max_truncated=0.35)
    assert "greedy accuracy (%)" in text and "| 48 (chosen) | 100 | 32.5 | 30.0 | 48 | 45.5 |" in text


def test_training_curve_section_reads_early_stops_and_writes_the_figure(tmp_path):
    log = tmp_path / "a.jsonl"
    records = [{"step": 0, "event": "filter"}] + [
        {"step": s, "reward": 0.1, "seconds": 2.0, **({"val_reward": v} if v is not None else {})}
        for s, v in ((1, None), (2, 0.4), (3, None), (4, 0.3))
    ]
    records[-1]["early_stop"] = {"best_step": 2, "best_val_reward": 0.4}
    log.write_text("\n".join(json.dumps(r) for r in records))
    text = training_curve_section(tmp_path, {"Token w/ budget": [log, tmp_path / "missing.jsonl"]})
    assert "| Token w/ budget s0 | 4 | yes | 2 | 0.400 | 0.300 | 2.0 |" in text
    assert (tmp_path / "training_curves.png").is_file()
    assert training_curve_section(tmp_path, {"x": [tmp_path / "missing.jsonl"]}) == ""
