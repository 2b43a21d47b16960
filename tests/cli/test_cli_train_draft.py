"""train-draft end to end through the CLI on the tiny model and a tiny budget: it builds the
both-arms tables it is pointed at (resumable) and writes a draft-gated adapter."""

import json

from decoding_adapters.cli import main
from decoding_adapters.policies.networks import load_adapter


def test_train_draft_cli_builds_its_tables_and_trains(tiny_model_dir, tmp_path):
    out = tmp_path / "draft"
    args = ["train-draft", "--force", "--model", str(tiny_model_dir), "--task", "arithmetic", "--token-budget", "4",
            "--out", str(out), "--val-every", "2", "--val-problems", "3", "--checkpoint-every", "1",
            "--max-train-prompts", "4", "--steps", "2", "--prompts-per-step", "2", "--parallel-budgets", "1,2",
            "--actions", "math-token", "--table-samples", "1", "--features", "mean",
            "--table", str(tmp_path / "train.jsonl"), "--val-table", str(tmp_path / "val.jsonl")]
    assert main(args) == 0
    _, cfg = load_adapter(out)
    assert cfg.kind == "draft" and cfg.draft["features"] == "mean" and len(cfg.actions) == 3  # math-token less greedy
    assert len((tmp_path / "train.jsonl").read_text().splitlines()) == 1 + 4
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == [0, 1, 2] and "val_reward" in log[-1]
    assert (out / "README.md").read_text().count("draft-gated") >= 1
