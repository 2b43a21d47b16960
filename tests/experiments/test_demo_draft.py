"""The demo's opt-in draft stage on the tiny model: a draft-gated adapter per seed, evaluated beside
its random gate and tuned confidence threshold, with their compute."""

import json

from decoding_adapters.cli import main


def test_demo_with_the_draft_stage(tiny_model_dir, tmp_path):
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), "--size", "tiny", "--model", str(tiny_model_dir), "--no-progress",
                 "--draft-stage", "--draft-samples", "2"]) == 0
    results = json.loads((out / "eval" / "results.json").read_text())
    assert "Draft-gated" in results
    assert any(name.startswith("Random gate") for name in results)
    assert any(name.startswith("Confidence threshold") for name in results)
    details = json.loads((out / "eval" / "eval_details.json").read_text())
    assert set(details["methods"]["Draft-gated"]["decodes_per_problem"]) == set(details["draft"]["Draft-gated"][
        "decodes_per_problem"]) | {"answer"}
    study = json.loads((out / "study_config.json").read_text())
    assert study["stop_at_answer"] is True and study["eval"]["stop_at_answer"] is True
    adapter = json.loads((out / "draft-s0" / "adapter.json").read_text())
    assert adapter["stop_at_answer"] is True and adapter["training"]["stop_at_answer"] is True
    assert details["methods"]["Random gate (" + next(n for n in results if n.startswith("Random gate"))[13:]][
        "family"] == "fixed rule"
    for seed in range(study["seeds"]):
        assert json.loads((out / f"draft-s{seed}" / "adapter.json").read_text())["kind"] == "draft"
    assert (out / "draft-table-train.jsonl").is_file()
