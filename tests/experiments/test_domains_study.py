"""The domains study and OOD labelling end to end through the CLI, on the tiny random model."""

from __future__ import annotations

import json

from decoding_adapters.cli import main
from decoding_adapters.policies.networks import load_adapter


def test_evaluate_labels_an_adapter_out_of_distribution(tiny_model_dir, tmp_path, capsys):
    adapter = tmp_path / "seq-mix"
    assert main(["train-sequence", "--force", "--model", str(tiny_model_dir), "--task", "arithmetic+pyfunc",
                 "--token-budget", "4",
                 "--out", str(adapter), "--steps", "2", "--prompts-per-step", "2", "--parallel-budgets", "1,2",
                 "--val-every", "2", "--val-problems", "2", "--max-train-prompts", "4", "--actions", "math-token"]) == 0
    assert load_adapter(adapter)[1].task == "arithmetic+pyfunc"
    common = ["evaluate", "--model", str(tiny_model_dir), "--adapter", str(adapter), "--k", "1", "--seeds", "1",
              "--token-budget", "4", "--max-problems", "2", "--baselines", "greedy", "--no-progress", "--report"]
    capsys.readouterr()
    assert main([*common, "--task", "arithmetic", "--split", "ood", "--out", str(tmp_path / "ood")]) == 0
    assert "out of distribution (arithmetic+pyfunc -> arithmetic:ood)" in capsys.readouterr().out
    labels = json.loads((tmp_path / "ood" / "eval_details.json").read_text())["config"]["ood"]
    assert list(labels.values()) == [{"train_task": "arithmetic+pyfunc", "eval": "arithmetic:ood", "ood": True,
                                      "label": "arithmetic+pyfunc -> arithmetic:ood"}]
    assert "**OOD** (`arithmetic+pyfunc -> arithmetic:ood`)" in (tmp_path / "ood" / "report.md").read_text()
    assert main([*common, "--task", "pyfunc", "--out", str(tmp_path / "in")]) == 0
    labels = json.loads((tmp_path / "in" / "eval_details.json").read_text())["config"]["ood"]
    assert [v["ood"] for v in labels.values()] == [False]


def test_domains_study_tiny_end_to_end_and_resume(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "domains"
    args = ["domains", "--size", "tiny", "--model", str(tiny_model_dir), "--out", str(out), "--no-progress"]
    assert main(args) == 0
    results = json.loads((out / "results.json").read_text())
    assert set(results) == {"arithmetic:test", "pyfunc:test", "arithmetic:ood", "pyfunc:ood"}
    details = json.loads((out / "eval_details.json").read_text())
    labels = details["pyfunc:test"]["config"]["ood"]
    assert labels["Seq w/ budget [arithmetic]"]["ood"] is True  # cross-domain
    assert labels["Seq w/ budget [mix]"]["ood"] is False and labels["Seq w/ budget [pyfunc]"]["ood"] is False
    assert all(v["ood"] for v in details["arithmetic:ood"]["config"]["ood"].values())
    for name, task in (("seq-mix-budget-s0", "arithmetic+pyfunc"), ("tok-pyfunc-s0", "pyfunc")):
        assert load_adapter(out / name)[1].task == task
    report = (out / "report.md").read_text()
    for heading in ("## Mixed-domain training", "## Out-of-distribution evaluation", "## Does the paper's pattern"):
        assert heading in report
    assert f"decoding-adapters domains --out {out} --size tiny --model {tiny_model_dir}`" in report
    # the same command again reuses every stage (a finished evaluation is read back, not redone)
    stamp = (out / "eval-pyfunc-ood" / "eval_details.json").stat().st_mtime_ns
    assert main(args) == 0
    assert (out / "eval-pyfunc-ood" / "eval_details.json").stat().st_mtime_ns == stamp
    assert json.loads((out / "stage_minutes.json").read_text())["runs"] == 2
