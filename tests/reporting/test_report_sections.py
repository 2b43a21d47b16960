"""The report's extra sections for the reproduce run: truncation per budget, training curves and
the head-room captured."""

import json

from decoding_adapters.reporting.report import headroom_section, training_curve_section, truncation_section


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


def test_training_curve_section_shows_the_kept_step_not_the_highest_validation(tmp_path):
    # step 8 validated highest but the trainer's rule (a paired margin, no budget lost) kept step 0
    log = tmp_path / "b.jsonl"
    records = [{"step": 0, "val_reward": 0.5, "kept_step": 0}] + [
        {"step": s, "reward": 0.1, "seconds": 1.0, **({"val_reward": v, "kept_step": 0} if v is not None else {})}
        for s, v in ((4, None), (8, 0.6), (12, None), (16, 0.45))
    ]
    log.write_text("\n".join(json.dumps(r) for r in records))
    text = training_curve_section(tmp_path, {"Seq w/ budget": [log]})
    assert "| Seq w/ budget s0 | 16 | no | 0 | 0.500 | 0.450 | 1.0 |" in text


def test_headroom_section_gives_each_adapter_its_share_of_the_oracle_gain(tmp_path):
    # two candidates, each always right on its own half of 20 problems and always wrong on the
    # other: Best scores 0.5, the per-problem oracle 1.0, so the head-room is 50 points at every k
    lines = [json.dumps({"problem": f"p{i}", "action": name, "sample": s, "reward": float((i < 10) == (name == "a")),
                         "length": 5}) for i in range(20) for name in ("a", "b", "not-a-candidate") for s in range(4)]
    (tmp_path / "outcomes.jsonl").write_text("\n".join(lines) + "\n")
    actions = tmp_path / "actions.json"
    actions.write_text(json.dumps({"best_per_k": {"scores": {"a": [0.5, 0.5], "b": [0.5, 0.5]}}}))
    results = {name: {f"pass@{k}": {"mean": mean} for k in (1, 2, 8)}
               for name, mean in (("Best", 0.5), ("Seq w/ budget", 0.75))}
    text = headroom_section(actions, results, None, ["Seq w/ budget", "Token w/ budget"])
    rows = [line for line in text.splitlines() if line.startswith("| 1 ") or line.startswith("| 2 ")]
    assert len(rows) == 2 and "8 |" not in text  # pass@8 needs more than the 4 stored samples
    for row in rows:
        assert "+50.0" in row and "cross-fitted" in row and "+25.0, 50%" in row
    assert "Token w/ budget" not in text  # not evaluated, not shown
    assert headroom_section(tmp_path / "missing.json", results, None, ["Seq w/ budget"]) == ""
